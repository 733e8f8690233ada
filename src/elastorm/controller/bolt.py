"""The controller bolt: the one Storm task through which every controller decision runs.

Generic: it learns its keyed operators and their emitters from the topology conf,
``elastorm.operators`` = ``{keyed operator: [components that emit to it]}``, so
no topology needs a controller subclass. It translates only: reports from the
keyed tasks (``elastorm_reports``) and requests from the request board in;
commands on ``elastorm`` out. What to do is decided by the
:class:`~elastorm.controller.loop.ControllerLoop` (checkpoint allocation,
adaptation, recovery through :func:`~elastorm.controller.recovery.plan_recovery`)
and, for operator requests, by the operator's ``MigrationController`` rules.
"""

from __future__ import annotations

import json
import logging
import time

from streamparse import Bolt

from elastorm.config import TopologyConfig
from elastorm.controller.loop import ControllerLoop
from elastorm.controller.runtime import ControllerRuntime, make_loop
from elastorm.core.actions import (
    CheckpointStored,
    MigrationDone,
    Send,
    TaskStarted,
    decode_report,
)
from elastorm.core.control import MigrationController, MigrationRefused
from elastorm.core.messages import PeerDown
from elastorm.storm.elastic import (
    MESSAGE_STREAM,
    REPORTS,
    _Sending,
    initial_routing,
    operators_of,
    tasks_of,
)
from elastorm.zk.requests import RequestBoard

log = logging.getLogger(__name__)


class MigrationControllerBolt(_Sending, Bolt):
    """The controller of the keyed operators: one task, global grouping on reports.

    On every tick it reads new requests under the request board in the topology's
    own ZooKeeper, orders them, and writes each request's state back (started,
    done, refused). A request it cannot reach ZooKeeper for waits for the next
    tick; processing never depends on ZooKeeper being up.

    A keyed task that restarted empty is recovered by the loop
    (:meth:`ControllerLoop.recover`: ``plan_recovery`` decides, the operator's
    ``MigrationController`` carries it out). Its
    :class:`~elastorm.controller.runtime.ControllerRuntime` loads an earlier
    controller's decisions before any of this, persists every decision before the
    commands acting on it are sent, and, with ``elastorm.controller.adapt`` or a
    ``strategy`` set, runs the loop's rounds on the keyed tasks' heartbeats.
    """

    outputs = [MESSAGE_STREAM]

    def initialize(self, conf, context):
        self._senders(context)
        config = TopologyConfig.from_conf(conf)
        operators = operators_of(config)
        self.operators = tuple(operators)
        self.operator_tasks = {op: tasks_of(context, op) for op in self.operators}
        self.controls = {
            op: MigrationController(
                num_key_groups=config.key_groups,
                tasks=tasks,
                emitters=tasks_of(context, operators[op]),
                routing=initial_routing(config, op, tasks),
            )
            for op, tasks in self.operator_tasks.items()
        }
        self.operator_of = {t: op for op, ts in self.operator_tasks.items() for t in ts}
        self.boards = {op: RequestBoard.from_storm_conf(conf, operator=op) for op in self.operators}
        self.active: dict[tuple[str, int], str] = {}  # (operator, key group) -> request
        self.migration_timeout = config.migration_timeout_secs
        self.loop: ControllerLoop = make_loop(config, self.controls, self.operator_tasks)
        self.runtime = (
            ControllerRuntime.start(conf, self.loop) if self.loop.settings.active else None
        )

    @property
    def control(self) -> MigrationController:
        """The controller of the (first) keyed operator."""
        return self.controls[self.operators[0]]

    def process(self, tup):
        if tup.stream != REPORTS:
            return
        report = decode_report(json.loads(tup.values[0]))
        op = self.operator_of.get(tup.task, self.operators[0])
        control = self.controls[op]
        if isinstance(report, MigrationDone):
            if self.loop.on_migration_done(op, report, time.time()):
                name = self.active.pop((op, report.key_group), None)
                if name is not None:
                    self.boards[op].finish(name)
        elif isinstance(report, CheckpointStored):
            control.on_checkpoint_stored(tup.task, report)
        elif isinstance(report, TaskStarted):
            if report.restarted:
                self.restarted.append((op, report.task))
                self.recover_restarted()
        else:
            log.warning("controller: task %s reports %s", tup.task, report)

    def recover_restarted(self) -> None:
        """Recover the restarted tasks reported so far, once decisions are loaded."""
        if not self.runtime.ready(time.time()):
            log.warning(
                "controller: %d restarted tasks wait for earlier decisions", len(self.restarted)
            )
            return
        while self.restarted:
            self.recover(*self.restarted.pop(0))

    def recover(self, op: str, dead: int) -> None:
        """Task ``dead`` came back empty: carry out the loop's recovery plan."""
        control = self.controls[op]
        recovery = self.loop.recover(op, dead, time.time())
        plan, crash = recovery.plan, recovery.crash
        log.warning(
            "task %s restarted empty: restoring key groups %s (%d checkpoints re-placed)",
            dead,
            crash.restored,
            len(plan.checkpoint_moves),
        )
        if plan.unrecoverable:
            log.error(
                "controller: no checkpoint of %s survived task %s: their state is lost",
                [str(kg) for kg in plan.unrecoverable],
                dead,
            )
        downs = [
            Send(to_task=task, message=PeerDown(key_group=0, task=dead))
            for task in control.tasks
            if task != dead
        ]
        for send in self.runtime.order([*crash.sends, *downs]):
            self.send(send)
        for g in crash.restored:
            name = self.active.pop((op, g), None)
            if name is not None:
                self.boards[op].refuse(name, f"task {dead} died; key group {g} restored instead")

    def process_tick(self, tup):
        now = time.time()
        ready = self.runtime.ready(now)
        if ready and self.restarted:
            self.recover_restarted()
        for op, board in self.boards.items():
            board.retry_unwritten()
            if ready:
                self.carry_out_requests(op, board)
            self.report_overdue(op, now)
        for send in self.runtime.tick(time.time()):
            self.send(send)
        for op, board in self.boards.items():
            board.publish_status(self.controls[op])

    def carry_out_requests(self, op: str, board: RequestBoard) -> None:
        """Order the board's pending requests of ``op`` (``elastorm migrate``)."""
        control = self.controls[op]
        for name, request in board.pending():
            g = request.key_group
            target = control.holders.get(g, -1) if request.target == "holder" else request.target
            try:
                used, sends = control.migrate(g, int(target), request.protocol, now=time.time())
            except MigrationRefused as exc:
                board.refuse(name, str(exc))
                continue
            for send in self.runtime.order(sends):
                self.send(send)
            self.active[(op, g)] = name
            board.start(
                name,
                protocol_used=used,
                epoch=control.epoch,
                source=control.moving[g].source,
                target=int(target),
            )

    def report_overdue(self, op: str, now: float) -> None:
        """Migrations and restores past ``elastorm.migration_timeout_secs``: logged, their
        request marked ``stuck`` with what they wait for, and published in the status."""
        for overdue in self.controls[op].overdue(now, self.migration_timeout):
            detail = overdue.describe()
            log.error("controller: %s/%s", op, detail)
            name = self.active.get((op, overdue.key_group))
            if name is not None:
                self.boards[op].stuck(name, detail)
