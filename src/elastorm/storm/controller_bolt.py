"""The controller bolt: the one Storm task through which every controller decision runs.

Generic: it learns its keyed operators and their emitters from the topology conf,
``elastorm.operators`` = ``{keyed operator: [components that emit to it]}``, so
no topology needs a controller subclass. It translates only: reports from the
keyed tasks (``elastorm_reports``) and requests from the request board in;
commands on ``elastorm`` out. What to do is decided by the
:class:`~elastorm.controller.loop.ControllerLoop` (checkpoint allocation,
adaptation, recovery through :func:`~elastorm.controller.recovery.plan_recovery`,
and operator requests through :meth:`~elastorm.controller.loop.ControllerLoop.request`);
a request's state changes through its table (``elastorm.controller.requests``).

With ``elastorm.controller.standbys`` the component has more tasks: the one whose
store leads acts, the others stand by (``elastorm.controller.standby``) until its
ZooKeeper session ends, then one of them takes over.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

from streamparse import Bolt

from elastorm.config import ConfigError, TopologyConfig
from elastorm.controller.failures import FailureDetector
from elastorm.controller.loop import ControllerLoop, Placement
from elastorm.controller.model import ControllerModelError
from elastorm.controller.replication import operators_to_tell
from elastorm.controller.requests import MigrationRequest, RequestEvent, after_leader_lost
from elastorm.controller.standby import (
    Leadership,
    Restarted,
    TookOver,
    WorkerId,
    restarted_to_recover,
    shared_worker,
)
from elastorm.core.actions import (
    CheckpointStored,
    EmitterRestarted,
    HolderLost,
    MigrationDone,
    Send,
    TaskStarted,
    TuplesStalled,
    decode_report,
)
from elastorm.core.control import MigrationController
from elastorm.core.messages import CheckpointId, Migrate, PeerDown, UpstreamRecovery
from elastorm.durable.store import StoreError
from elastorm.storm.controller_runtime import (
    ControllerRuntime,
    Refusal,
    log_changed,
    log_move,
    make_loop,
)
from elastorm.storm.elastic import (
    REPORTS,
    initial_routing,
    operators_of,
    recording_start,
    task_zones,
    tasks_of,
)
from elastorm.storm.liveness import LivenessServer
from elastorm.storm.savepoint import durable_savepoint, durable_view, first_epoch
from elastorm.storm.watchdog import Watchdog, exit_hung
from elastorm.storm.wire import CheckedEncoding
from elastorm.zk.client import client_keyring
from elastorm.zk.commands import CommandOutbox
from elastorm.zk.requests import (
    ZK_ERRORS,
    RequestBoard,
    ever_started,
    write_fence,
    write_liveness,
)
from elastorm.zk.scaling import NodeWatch
from elastorm.zk.view import TaskJoined, TaskLeft

log = logging.getLogger(__name__)

DETECT_EVERY = 0.1  # s between looks at the watcher's events
GRACE_MARGIN = 1.0  # s beyond a session timeout before leaves count, after (re)connecting


class MigrationControllerBolt(CheckedEncoding, Bolt):
    """The controller of the keyed operators: one leading task (and its standbys), all
    grouping on reports.

    On every tick it reads new requests under the request board in the topology's
    own ZooKeeper, orders them, and writes each request's state back (started,
    done, refused). A request it cannot reach ZooKeeper for waits for the next
    tick; processing never depends on ZooKeeper being up.

    A keyed task that restarted empty is recovered by the loop
    (:meth:`ControllerLoop.recover`: ``plan_recovery`` decides, the operator's
    ``MigrationController`` carries it out). Its
    :class:`~elastorm.storm.controller_runtime.ControllerRuntime` loads an earlier
    controller's decisions before any of this, persists every decision before the
    commands acting on it are sent, and, with ``elastorm.controller.adapt`` or a
    ``strategy`` set, runs the loop's rounds on the keyed tasks' heartbeats.

    Nothing of this runs while the task stands by (:meth:`leads` is false): it only
    watches the keyed tasks' znodes and notes their restarts, to act on once it leads.
    Nor when the topology's model is inconsistent (a :class:`Refusal`: one ERROR line,
    the reason in ZooKeeper), where raising would only crash-loop its worker.
    """

    outputs: list = []  # commands go through ZooKeeper (send), reports come in

    def initialize(self, conf, context):
        with recording_start(conf, context):
            self._initialize(conf, context)

    def _initialize(self, conf, context):
        self._task = int(context["taskid"])
        self.config = config = TopologyConfig.from_conf(conf)
        operators = operators_of(config)
        self.operators = tuple(operators)
        self.operator_tasks = {op: tasks_of(context, op) for op in self.operators}
        self.refusal: Refusal | None = None
        try:
            Placement.by_index(self.operator_tasks)  # its rules first: controls need them
            epoch = first_epoch(durable_savepoint(conf, config))
            self.controls = {
                op: MigrationController(
                    num_key_groups=config.key_groups,
                    tasks=tasks,
                    emitters=tasks_of(context, operators[op]),
                    routing=initial_routing(config, op, tasks, epoch=epoch),
                    zones=task_zones(config, tasks),
                )
                for op, tasks in self.operator_tasks.items()
            }
            self.loop: ControllerLoop = make_loop(config, self.controls, self.operator_tasks)
        except (ControllerModelError, ConfigError) as exc:  # the same after every restart
            self.refusal = Refusal(conf, str(exc))
            return
        self.operator_of = {t: op for op, ts in self.operator_tasks.items() for t in ts}
        self.migration_timeout = config.migration_timeout_secs
        self.runtime = ControllerRuntime.start(conf, self.loop, context["componentid"], self._task)
        self.commands = CommandOutbox(self.runtime.client, self.runtime.layout, self._task)
        self.commands.start()
        self.boards = {
            op: RequestBoard(self.runtime.client, self.runtime.layout, op) for op in self.operators
        }
        # Operators whose requests a dead leader may have left in flight: looked at once
        # this task leads (see close_orphans), before any new request is ordered; those
        # it may have ordered wait in ``adopted`` for their end in the heartbeats.
        self.orphans: set[str] = set()
        self.adopted: dict[str, dict[str, MigrationRequest]] = {}
        self.took_at = 0.0
        # Scale-out / scale-in: the node set and the elastic scheduler's binding.
        self.nodes = NodeWatch(self.runtime.client, self.runtime.layout)
        self.nodes.start(time.time)
        self.join_settle = config.controller.join_settle_secs
        self.rescale_limit = config.controller.max_concurrent_migrations
        # Restarted tasks to recover once decisions are loaded (a plan made on the
        # start-up routing would restore the wrong groups); those reported before this
        # task led are in seen_restarts until it does.
        self.restarted: list[Restarted] = []
        self.detector = FailureDetector(
            grace=config.zookeeper_session_secs + GRACE_MARGIN,
            answer_secs=config.zookeeper_session_secs,
            liveness=config.controller.liveness_connections,
        )
        self.recover_lost = config.controller.recover_lost
        # Read (listed) when keyed tasks are lost: which of their groups it has a copy of.
        self.durable_view = durable_view(conf, config)
        # Operators this controller told their outputs are tentative (None: it told
        # nothing yet), and when it last told every keyed task.
        self.tentative: frozenset[str] | None = None
        self._tentative_told_at = -math.inf
        # The detector's thread and the bolt's own calls share the controllers.
        self._lock = threading.RLock()
        self.drops: deque[tuple[int, int]] = deque()  # liveness connections closed
        self.conf = conf
        self.liveness: LivenessServer | None = None  # taken once this task leads
        self.leadership = Leadership()
        self.seen_restarts: list[Restarted] = []  # while standing by
        self.workers = int(conf.get("topology.workers") or 1)
        self.placement_checked = False
        self.absent_checked = False  # tasks gone before this task watched: suspected once
        threading.Thread(target=self._watch_failures, name="elastorm-failures", daemon=True).start()
        self.watchdog: Watchdog | None = None
        if config.controller.watchdog_secs > 0:
            limit = config.controller.watchdog_secs
            self.watchdog = Watchdog(limit, exit_hung("controller", Path.cwd(), limit))
            self.watchdog.start()

    def send(self, action: Send) -> None:
        """Post a command to its task's mailbox (``elastorm.zk.commands``): never on a
        Storm stream, where an emit to a task in backpressure would stop this bolt's
        input until that task drained."""
        self.commands.post(action.to_task, action.message)

    @property
    def control(self) -> MigrationController:
        """The controller of the (first) keyed operator."""
        return self.controls[self.operators[0]]

    def _watch_failures(self) -> None:
        """Look for lost tasks every ``DETECT_EVERY`` s (Storm's ticks are whole seconds)."""
        while True:
            time.sleep(DETECT_EVERY)
            try:
                with self._lock:
                    self.detect_failures(time.time())
            except Exception:
                log.exception("controller: failure detection step failed")

    def leads(self, now: float) -> bool:
        """Whether this task leads and has loaded the decisions: only then does it act.
        The first time it does, it takes over (:meth:`take_over`); while another task
        leads, it checks once that they do not share a worker."""
        loaded = self.runtime.ready(now)
        standby = not loaded and self.runtime.standing_by()
        took = self.leadership.observe(standby=standby, loaded=loaded, now=now)
        if took is not None:
            self.take_over(took)
        elif standby and not self.placement_checked:
            self.check_placement()
        return loaded

    def take_over(self, took: TookOver) -> None:
        """Start acting, as a restarted controller would (the decisions are loaded):
        take the liveness connections and recover the restarted tasks the dead leader
        left unhandled. The tasks that died meanwhile are declared by the detector,
        which watched their znodes all along, once each has had the grace to connect
        here (``FailureDetector.lead``)."""
        if took.standby_since is not None:
            log.warning(
                "controller task %d: leading now, after standing by for %.1f s",
                self._task,
                took.at - took.standby_since,
            )
        self.orphans = set(self.operators)
        self.adopted = {}
        self.took_at = took.at
        self.detector.lead(took.at)
        if self.config.controller.liveness_connections and self.liveness is None:
            self.liveness = self._listen(self.conf)
            self.detector.liveness = self.liveness is not None
        for r in restarted_to_recover(self.seen_restarts, self.runtime.routing_epochs()):
            log.warning(
                "controller: task %s of %s restarted unhandled; recovering it", r.task, r.operator
            )
            self.restarted.append(r)
        self.seen_restarts.clear()

    def check_placement(self) -> None:
        """Log loudly if this standby runs in its leader's worker (Storm placed them so):
        a kill of that worker then leaves no controller until Storm restarts it."""
        leader = self.runtime.leader()
        if leader is None:
            return
        self.placement_checked = True
        me = WorkerId(host=socket.gethostname(), worker_pid=os.getppid())
        theirs = WorkerId(host=leader.host, worker_pid=leader.worker) if leader.worker else None
        problem = shared_worker(me, theirs, self.workers)
        if problem:
            log.error("controller task %d: %s", self._task, problem)
        else:
            log.info("controller task %d: standing by for %s", self._task, leader.controller)

    def _listen(self, conf) -> LivenessServer | None:
        """Take the keyed tasks' liveness connections (``elastorm.storm.liveness``) on this
        worker's host, and publish where; ``None`` (logged) if that fails: detection then
        waits for the ZooKeeper session timeout."""
        host = str(conf.get("storm.local.hostname") or socket.gethostname())
        try:
            server = LivenessServer(
                host,
                on_drop=self._dropped,
                fenced=self._fenced,
                keyring=client_keyring(self.runtime.client),
            )
            write_liveness(self.runtime.client, self.runtime.layout, server.address)
        except (OSError, *ZK_ERRORS) as exc:
            log.error("controller: no liveness connections (%r); detection by session only", exc)
            return None
        log.info("controller: liveness connections at %s", server.address)
        return server.start()

    def _dropped(self, task: int, incarnation: int) -> None:
        self.drops.append((task, incarnation))  # the server's thread: just record

    def _fenced(self, task: int, incarnation: int) -> bool:
        with self._lock:
            return self.detector.declared_as(task, incarnation)

    def detect_failures(self, now: float) -> None:
        """Feed the watcher's joins and leaves and the closed liveness connections to the
        detector; recover what it declares lost, every operator's lost tasks in one plan
        (restores run in parallel)."""
        ready = self.leads(now)
        self.detector.observe(now, connected=self.runtime.client.connected)
        for event in self.runtime.watcher.poll_events():
            if isinstance(event, TaskLeft) and event.operator in self.controls:
                log.warning("controller: task %s of %s is gone", event.task_id, event.operator)
                self.detector.left(event.task_id, event.operator, event.incarnation)
            elif isinstance(event, TaskJoined):
                self.detector.joined(event.task_id, event.incarnation)
        live = self.runtime.watcher.incarnations()
        if self.liveness is not None:
            for task, (incarnation, at) in self.liveness.heard().items():
                self.detector.heard(task, incarnation, at)
        while self.drops:
            task, incarnation = self.drops.popleft()
            op = self.operator_of.get(task)
            reconnected = self.liveness is not None and self.liveness.connected(task, incarnation)
            if op is None or reconnected or live.get(task, incarnation) != incarnation:
                continue  # not keyed, a blip, or an older incarnation's connection
            log.warning("controller: task %s of %s closed its liveness connection", task, op)
            self.detector.closed(task, op, incarnation)
        if not ready:
            return
        if not self.absent_checked and self.runtime.watcher.synced():
            self.absent_checked = True
            if self.runtime.resumed:  # not a first start: its tasks may still be starting
                self.suspect_absent(live)
        due = self.detector.due(now, connected=self.runtime.client.connected, live=live)
        for op, lost in due.items():
            for d in lost:
                log.error(
                    "controller: task %s of %s (zxid %s) declared lost: %s",
                    d.task,
                    op,
                    d.incarnation,
                    d.reason.value,
                )
            if not self.recover_lost:
                self.loop.declare_lost([d.task for d in lost])  # no work until restarted
                log.error(
                    "controller: tasks %s of %s lost; waiting for Storm to restart them",
                    [d.task for d in lost],
                    op,
                )
                continue
            for d in lost:
                self.fence(op, d.task, d.incarnation)
            self.recover(op, [d.task for d in lost], rejoined=False)

    def suspect_absent(self, live: Mapping[int, int]) -> None:
        """Once, at the first look after taking over from a predecessor (its decisions
        resumed) with the task znodes read: every keyed task with no znode died before
        this controller watched (a standby that started late never saw it leave), so it
        is suspected (``FailureDetector.absent``) and declared after the grace unless a
        znode of it appears. Not on a topology's first start, where a slow task simply
        has not registered yet (a chaos run declared one so at cc09e88), nor, after a
        take-over, a task that never counted a start: its worker is still being
        launched (join lose-1-ctl at 58535de: two tasks were still starting 57 s after
        the submission, on 2 cores, when the leader was killed, and were declared lost
        5 s later as they came up)."""
        for task, op in sorted(self.operator_of.items()):
            if task not in live:
                try:
                    if not ever_started(self.runtime.client, self.runtime.layout, op, task):
                        log.info(
                            "controller: task %s of %s has not started yet (no znode, no "
                            "start counted): not suspected",
                            task,
                            op,
                        )
                        continue
                except ZK_ERRORS as exc:  # cannot tell: suspect it, as before
                    log.warning("controller: task %s's starts unreadable (%r)", task, exc)
                log.warning(
                    "controller: task %s of %s has no znode as this controller takes over",
                    task,
                    op,
                )
                self.detector.absent(task, op)

    def fence(self, op: str, task: int, incarnation: int) -> None:
        """Fence ``task``'s lost ``incarnation``: if that process is only cut off, it
        finds itself fenced when it reaches ZooKeeper again and stops
        (``KeyedOperator.stop_if_fenced``); a newer process is not touched."""
        try:
            write_fence(self.runtime.client, self.runtime.layout, op, task, incarnation)
        except ZK_ERRORS as exc:
            log.error("controller: could not fence task %s (%r)", task, exc)

    def process(self, tup):
        if self.refusal is not None:
            return
        with self._lock:
            self.process_report(tup)
        if self.watchdog is not None:
            self.watchdog.beat()

    def process_report(self, tup):
        if tup.stream != REPORTS:
            return
        report = decode_report(json.loads(tup.values[0]))
        op = self.operator_of.get(tup.task, self.operators[0])
        control = self.controls[op]
        if not self.leads(time.time()):
            if isinstance(report, TaskStarted) and report.restarted:
                self.seen_restarts.append(
                    Restarted(operator=op, task=report.task, stale_through=report.stale_through)
                )
            return
        if isinstance(report, MigrationDone):
            ended = self.loop.on_migration_done(op, report, time.time())
            if ended is not None and ended.request is not None:
                self.boards[op].apply(ended.request, RequestEvent.FINISH, pause=ended.pause)
        elif isinstance(report, CheckpointStored):
            control.on_checkpoint_stored(tup.task, report)
        elif isinstance(report, TaskStarted):
            self.nodes.task_started(report.task, time.time())
            if report.restarted:
                self.restarted.append(
                    Restarted(operator=op, task=report.task, stale_through=report.stale_through)
                )
                self.recover_restarted()
        elif isinstance(report, EmitterRestarted):
            self.redrive(op, report)
        elif isinstance(report, HolderLost):
            sends = control.on_holder_lost(
                tup.task, report.key_group, report.holder, down=self.loop.down
            )
            if sends:
                log.warning(
                    "controller: task %s forgot holder %s of %s/%s (its copies died with "
                    "it): named again",
                    tup.task, report.holder, op, report.key_group,
                )  # fmt: skip
            for send in self.runtime.order(sends):
                self.send(send)
        elif isinstance(report, TuplesStalled):
            log.error(
                "controller: task %s, key group %s: %d tuples of %s stalled %.0f s behind "
                "sequence %d",
                tup.task,
                report.key_group,
                report.parked,
                report.source,
                report.seconds,
                report.awaited,
            )
        else:
            log.warning("controller: task %s reports %s", tup.task, report)

    def redrive(self, op: str, report: EmitterRestarted) -> None:
        """An emitter of ``op`` restarted: order again the restores its earlier life never
        answered, and note the epoch it read (a move every emitter restarted during is
        stood in for at the next tick past the retry time; ``MigrationController.redrive``;
        every task of ``op`` reports the same restart, and only the first finds any)."""
        sends = self.controls[op].redrive(time.time(), epoch=report.epoch, emitter=report.task)
        why = f"emitter task {report.task} restarted knowing epoch {report.epoch}"
        self.send_redriven(op, sends, why)

    def send_redriven(self, op: str, sends: list[Send], why: str) -> None:
        """Log and send what ``redrive`` sends again: restores ordered again, moves'
        commands repeated, stand-ins for moves no emitter will answer."""
        if not sends:
            return
        groups: dict[str, set[int]] = {}
        for send in sends:
            message = send.message
            if isinstance(message, Migrate):
                what = (
                    "restores ordered again"
                    if message.protocol.restores
                    else "move commands sent again"
                )
            else:
                what = "moves stood in for"
            groups.setdefault(what, set()).add(message.key_group)
        for what, gs in sorted(groups.items()):
            log.warning("controller: %s: %s of %s key groups %s", why, what, op, sorted(gs))
        for send in self.runtime.order(sends):
            self.send(send)

    def recover_restarted(self) -> None:
        """Recover the restarted tasks reported so far, once decisions are loaded."""
        if not self.runtime.ready(time.time()):
            log.warning(
                "controller: %d restarted tasks wait for earlier decisions", len(self.restarted)
            )
            return
        while self.restarted:
            r = self.restarted.pop(0)
            self.recover(r.operator, [r.task], rejoined=True, stale_through=r.stale_through)
            self.detector.forget(r.task)  # its new incarnation is usable again

    def recover(
        self, op: str, dead: list[int], *, rejoined: bool, stale_through: int | None = None
    ) -> None:
        """The ``dead`` tasks lost their state (declared lost, or restarted empty, having
        read routing epoch ``stale_through`` at their start): carry out the loop's
        recovery plan."""
        control = self.controls[op]
        durable = self.durable_copies(op, dead, stale_through)
        recovery = self.loop.recover(
            op,
            dead,
            time.time(),
            rejoined=rejoined,
            durable=durable,
            stale_through=stale_through,
        )
        plan, crash = recovery.plan, recovery.crash
        log.warning(
            "tasks %s %s: restoring key groups %s (%d promoted on their active replicas; "
            "%d checkpoints re-placed)",
            dead,
            "restarted empty" if rejoined else "lost",
            crash.restored,
            len(crash.promoted),
            len(plan.checkpoint_moves),
        )
        uri = self.durable_view.store.uri if self.durable_view is not None else None
        for m in plan.durable_restores:
            log.warning(
                "controller: durable restore of %s from %s at checkpoint %s on %s (its owner "
                "and every holder are gone; upstream replays from the copy's positions)",
                m.key_group,
                uri,
                durable.get(m.key_group.index) or "(none listed: the newest it has, else empty)",
                m.target,
            )
        if plan.waiting:
            log.warning(
                "controller: every task of %s is down: key groups %s wait for one to "
                "restart, then come back from their durable copies (%s)",
                op,
                [str(kg) for kg in plan.waiting],
                uri,
            )
        if plan.lost:
            log.error(
                "controller: no copy of %s survived tasks %s, in memory or in the durable "
                "store (%s): their state is lost",
                [str(kg) for kg in plan.lost],
                dead,
                uri or "off",
            )
        # The survivors hear of the death first: a restarted task is also a new holder
        # (``SetHolder`` in ``crash.sends``), and a ``PeerDown`` read after it would clear
        # that holder again, leaving its groups with no copy (chained lose-1, session 28).
        downs = [
            Send(to_task=task, message=PeerDown(key_group=0, task=d))
            for d in dead
            for task in control.tasks
            if task not in dead
        ]
        for send in self.runtime.order([*downs, *crash.sends]):
            self.send(send)
        for name, why in recovery.refused:
            self.boards[op].apply(name, RequestEvent.REFUSE, detail=why)

    def durable_copies(
        self, op: str, dead: list[int], stale_through: int | None = None
    ) -> dict[int, CheckpointId | None]:
        """With the durable tier on, every key group the ``dead`` tasks owned or were
        moving, each with its newest set's checkpoint in the store (one ``list`` per
        group), or ``None``: no set listed (none written yet, or the store does not
        answer). Each can come back from the store: upstream buffers are trimmed no
        further than a group's durable copy (``KeyGroupMachine._trim``), so a group
        with no set has lost no tuple; its target starts empty and upstream replays
        all of it. Empty with the tier off."""
        if self.durable_view is None:
            return {}
        control = self.controls[op]
        groups = {g for d in dead for g in control.lost_key_groups(d, stale_through)}
        try:
            sets = self.durable_view.newest_sets(op, groups)
        except StoreError as exc:
            log.error(
                "controller: the durable store %s does not answer (%s): key groups %s of %s "
                "with no copy in memory are restored from it once it does",
                self.durable_view.store.uri,
                exc,
                sorted(groups),
                op,
            )
            sets = {}
        return {g: sets.get(g) for g in sorted(groups)}

    def process_tick(self, tup):
        if self.refusal is not None:  # a controller that cannot run only says why
            self.refusal.publish()
            return
        with self._lock:
            self.tick(time.time())
        if self.watchdog is not None:
            self.watchdog.beat()

    def tick(self, now: float) -> None:
        """Requests, overdue migrations, the loop's round, the published status; nothing
        until this task leads."""
        if not self.leads(now):
            return
        if self.restarted:
            self.recover_restarted()
        for op, board in self.boards.items():
            board.retry_unwritten()
            if op in self.orphans:
                self.close_orphans(op, board)
            if op not in self.orphans:
                self.settle_adopted(op, board, now)
                self.carry_out_requests(op, board)
            self.report_overdue(op, now)
            retry = self.config.restore_retry_secs
            sends = self.controls[op].redrive(now, waited=retry)
            self.send_redriven(op, sends, f"not complete {retry:.0f} s after their commands")
        self.rescale(now)
        for send in self.runtime.tick(time.time()):
            self.send(send)
        self.mark_tentative(now)
        for op, board in self.boards.items():
            board.publish_status(
                self.controls[op], lost=self.detector.declared, ended=self.loop.ended[op]
            )

    def mark_tentative(self, now: float) -> None:
        """Tell the tasks of each keyed operator whose tentativeness changed (state
        upstream of it began or ended restoring) with ``UpstreamRecovery``; all of them
        once this controller leads, and again every ``TENTATIVE_REFRESH_SECS``
        (:func:`operators_to_tell`)."""
        tentative = self.loop.tentative_operators()
        told = self.tentative
        ops, refresh = operators_to_tell(
            tentative, told, self._tentative_told_at, now, self.operator_tasks
        )
        if refresh:
            self._tentative_told_at = now
        self.tentative = tentative
        sends = [
            Send(to_task=t, message=UpstreamRecovery(key_group=0, recovering=op in tentative))
            for op in ops
            for t in self.operator_tasks.get(op, ())
        ]
        if told is None:  # what a leader before this one told them is not known
            log.info("controller: told every keyed task whose outputs are tentative: %s",
                     sorted(tentative))  # fmt: skip
        for state, changed in (("tentative", tentative - (told or frozenset())),
                               ("final", (told or frozenset()) - tentative)):  # fmt: skip
            if changed:
                log.warning("controller: outputs of %s are %s", sorted(changed), state)
        for send in self.runtime.order(sends):
            self.send(send)

    def rescale(self, now: float) -> None:
        """A round of scale-out / scale-in when the scheduler binds the topology's logical
        nodes (``ControllerLoop.rescale`` decides); drained nodes are released."""
        tasks = self.loop.placement.tasks
        state = self.nodes.state(
            now, self.join_settle, lambda node: [t[node] for t in tasks.values() if node in t]
        )
        records = list(self.runtime.watcher.live().values())
        if state is None or not records:
            return
        rnd = self.loop.rescale(records, state, now, limit=self.rescale_limit)
        for kg, node in rnd.step.holders:
            log.info("controller: rescale: checkpoint of %s to %s", kg, node)
        for m in rnd.started:
            log_move(m)
        log_changed(rnd.changed)
        for send in self.runtime.order(list(rnd.sends)):
            self.send(send)
        self.nodes.publish(
            self.loop.joining, rnd.step.pending, self.loop.scale_hint, draining=state.draining
        )
        for node in rnd.step.released:
            try:
                self.nodes.release(node)
            except ZK_ERRORS as exc:
                log.warning("controller: release of %s not written yet (%s)", node, exc)

    def close_orphans(self, op: str, board: RequestBoard) -> None:
        """Once this task leads: re-drive each request of ``op`` that a dead leader left
        ``started`` or ``stuck`` before its order reached ZooKeeper, and adopt the rest
        (:meth:`settle_adopted`); tried again next tick while ZooKeeper is away."""
        found = board.in_flight()
        if found is None:
            return
        epoch = self.runtime.routing_epochs().get(op, -1)
        adopted = self.adopted.setdefault(op, {})
        for name, request in found:
            if after_leader_lost(request, epoch, expired=False) is RequestEvent.REDRIVE:
                detail = (
                    f"its controller died before the order reached ZooKeeper (routing epoch "
                    f"{epoch} < {request.epoch}); ordered again"
                )
                log.warning("controller: request %s: %s", name, detail)
                board.apply(name, RequestEvent.REDRIVE, detail=detail)
            else:
                adopted[name] = request
        self.orphans.discard(op)

    def settle_adopted(self, op: str, board: RequestBoard, now: float) -> None:
        """Close each request a dead leader ordered: done once the tasks' heartbeats show
        its end (``after_leader_lost``), abandoned if they have not within
        ``migration_timeout_secs`` of this task's takeover."""
        adopted = self.adopted.get(op)
        if not adopted:
            return
        epoch = self.runtime.routing_epochs().get(op, -1)
        records = self.runtime.watcher.live()
        tasks = self.operator_tasks[op]
        expired = now - self.took_at >= self.migration_timeout
        for name, request in list(adopted.items()):
            since = request.times.get("started", 0.0)
            claims = {
                t: request.key_group in records[t].heartbeat.key_groups
                for t in tasks
                if t in records and records[t].time > since
            }
            event = after_leader_lost(request, epoch, claims=claims, expired=expired)
            if event is None:
                continue
            if event is RequestEvent.FINISH:
                detail = (
                    f"its controller died after ordering it (epoch {request.epoch}); its end "
                    f"seen in the heartbeats: task {request.target} owns key group "
                    f"{request.key_group}, task {request.source} no longer does"
                )
            else:
                detail = (
                    f"its controller died after ordering it (epoch {request.epoch}); its end "
                    f"not seen in the heartbeats {now - self.took_at:.0f} s after the takeover "
                    f"(key group {request.key_group} is routed to task "
                    f"{self.controls[op].owner(request.key_group)})"
                )
            log.warning("controller: request %s: %s", name, detail)
            board.apply(name, event, detail=detail)
            del adopted[name]

    def carry_out_requests(self, op: str, board: RequestBoard) -> None:
        """Hand the board's pending requests of ``op`` (``elastorm migrate``, the
        dashboard's form) to the loop; send what it orders and write the outcome."""
        for name, request in board.pending():
            outcome = self.loop.request(name, request, time.time(), lost=self.detector.declared)
            if outcome.waiting:  # still pending: asked again next round, within defer_secs
                board.hold(name, request)
                continue
            ordered = outcome.ordered
            if ordered is None:
                board.apply(name, RequestEvent.REFUSE, detail=outcome.refused)
                continue
            choice = ordered.choice
            if choice.changed:
                log.warning(
                    "controller: request %s: %s asked, %s used: %s",
                    name,
                    request.protocol.value,
                    choice.protocol.value,
                    choice.reason,
                )
            for send in self.runtime.order(list(ordered.sends)):
                self.send(send)
            board.apply(
                name,
                RequestEvent.START,
                protocol_used=choice.protocol,
                epoch=ordered.epoch,
                source=ordered.source,
                target=ordered.target,
                detail=choice.reason if choice.changed else "",
            )

    def report_overdue(self, op: str, now: float) -> None:
        """Migrations and restores past ``elastorm.migration_timeout_secs``: logged, their
        request marked ``stuck`` with what they wait for, and published in the status."""
        for overdue, name in self.loop.overdue(op, now, self.migration_timeout):
            detail = overdue.describe()
            log.error("controller: %s/%s", op, detail)
            if name is not None:
                self.boards[op].apply(name, RequestEvent.OVERDUE, detail=detail)
