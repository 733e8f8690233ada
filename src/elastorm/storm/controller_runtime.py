"""The controller loop's I/O, for the Storm controller bolt.

:class:`elastorm.controller.loop.ControllerLoop` decides; this adapter feeds it the live
tasks' heartbeats (a ``ClusterWatcher``), persists what it decided (routing
tables, checkpoint allocation) through a ``ControllerStore`` so a restarted
controller resumes from them, and writes its metrics to the log and to
``controller-metrics.json`` in ``elastorm.output_dir``. Nothing here blocks on
ZooKeeper: the watcher and the store run on their own threads; while ZooKeeper
is away the loop keeps deciding on the last records it saw and the store holds
the decisions until it is back.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient

from elastorm.config import TopologyConfig
from elastorm.controller.allocation import AllocationSpec, allocation_score, correlated_allocation
from elastorm.controller.loop import (
    ControllerLoop,
    Placement,
    Round,
    prior_from_artifact,
)
from elastorm.controller.model import Allocation, ClusterView, ControllerModelError, KeyGroupId
from elastorm.core.actions import Send
from elastorm.core.control import MigrationController
from elastorm.files import write_json_atomic
from elastorm.zk.client import make_client, write_znode
from elastorm.zk.codec import LeaderInfo, Submission, submission_fields
from elastorm.zk.layout import ZnodeLayout, zk_settings
from elastorm.zk.requests import ZK_ERRORS, controller_start, publish_refusal
from elastorm.zk.store import ControllerStore, Decisions, StoreError, StoreStatus
from elastorm.zk.watcher import ClusterWatcher

log = logging.getLogger(__name__)

METRICS_FILE = "controller-metrics.json"
LOAD_TIMEOUT = 5.0  # s to wait for earlier decisions at start
FLUSH_WAIT = 0.5  # s a tick waits for its decisions to reach ZooKeeper before sending


def resume(
    controls: Mapping[str, MigrationController],
    decisions: Decisions,
    placement: Placement,
    holding: Callable[[int, int], bool] = lambda task, group: False,
) -> list[str]:
    """Take over routing tables, holders and active replicas a previous controller
    persisted.

    A routing table is taken only if newer than the start-up one (a fresh topology
    has none); the next command's epoch follows the highest one the predecessor
    issued (a replica's start or drop bumps it past the table's: an emitter that saw
    it ignores any command at or below it, so a restore issued below it would never
    start); the holders whenever an allocation was persisted (an allocation
    does not bump the routing epoch); the replicas likewise, each its group's holder
    (so the emitters, which keep feeding them, and this controller agree; without
    them a restarted controller would migrate replicated groups and never promote
    their replicas); and where each group's newest checkpoint was, for the copies
    ``holding(task, group)`` confirms (the live tasks' heartbeats), so a group whose
    owner dies next is restored from it instead of being reported lost. Returns the
    operators resumed.
    """
    resumed = []
    for op, control in controls.items():
        table = decisions.routing.get(op)
        took = False
        if table is not None and table.epoch > control.epoch:
            control.routing = table
            control.epoch = table.epoch
            took = True
        control.epoch = max(control.epoch, decisions.issued.get(op, control.epoch))
        took = control.resume_copies(decisions.copies.get(op, {}), holding) > 0 or took
        if decisions.checkpoints is not None:
            for g in range(control.num_key_groups):
                nodes = decisions.checkpoints.holders(KeyGroupId(op, g))
                if nodes:
                    task = placement.task_on(op, nodes[0])
                    if task != control.owner(g) and control.holders[g] != task:
                        control.holders[g] = task
                        took = True
        if decisions.replicas is not None:
            for g in range(control.num_key_groups):
                nodes = decisions.replicas.holders(KeyGroupId(op, g))
                task = placement.task_on(op, nodes[0]) if nodes else None
                if task is not None and task != control.owner(g):
                    took = took or control.replicas.get(g) != task
                    control.replicas[g] = control.holders[g] = task
        if took:
            resumed.append(op)
    return resumed


def make_loop(
    config: TopologyConfig,
    controls: Mapping[str, MigrationController],
    operator_tasks: Mapping[str, Sequence[int]],
) -> ControllerLoop:
    """The controller's loop for ``controls``, with the options of ``config``: one
    node per task index, the offline correlation artifact
    (``elastorm.controller.correlation_artifact``) as prior."""
    options = config.controller
    prior, weight = None, 0.0
    if options.correlation_artifact:
        prior = _load_prior(options.correlation_artifact, controls)
        weight = options.window if options.prior_weight is None else options.prior_weight
    return ControllerLoop(
        controls=controls,
        placement=Placement.by_index(operator_tasks),
        config=config,
        started_at=time.time(),
        prior=prior,
        prior_weight=weight,
    )


def holders_allocation(controls: Mapping[str, MigrationController], placement: Placement):
    """The controllers' holders as an ``Allocation`` over nodes."""
    return Allocation(
        {
            KeyGroupId(op, g): (placement.node_of(c.holders[g]),)
            for op, c in controls.items()
            for g in range(c.num_key_groups)
        }
    )


def log_move(m) -> None:
    """One line in the controller's log for a migration it started."""
    log.info(
        "controller: %s %s %s -> %s by %s",
        m.reason.value,
        m.key_group,
        m.source,
        m.target,
        m.protocol.value,
    )


def log_changed(changed) -> None:
    """One warning per move whose protocol is not the one wanted, with the reason
    (``choose_protocol``'s): a fallback to direct is never silent."""
    for m, why in changed:
        log.warning(
            "controller: %s of %s runs %s: %s", m.reason.value, m.key_group, m.protocol.value, why
        )


class Refusal:
    """A controller that cannot run its topology (a ``ControllerModelError`` at start, e.g.
    a keyed operator with one task, from a jar older than the raise to two at submit).

    It says why once, as one ERROR line, and in ZooKeeper (``controller/refused``, which
    ``elastorm migrate`` prints), then decides nothing: raising would fail the worker,
    and Storm would restart it into the same error, silently, forever.
    """

    def __init__(self, conf: Mapping[str, Any], reason: str) -> None:
        self.reason = reason
        self.layout = ZnodeLayout(str(conf["topology.name"]))
        self.client = make_client(zk_settings(conf))
        self.client.start_async()
        self.published = False
        log.error("controller: cannot run topology %s: %s", self.layout.topology, reason)

    def publish(self) -> None:
        """Write the reason to ZooKeeper once it answers (called on every tick until then)."""
        if self.published or not self.client.connected:
            return
        try:
            publish_refusal(self.client, self.layout, self.reason)
            self.published = True
        except ZK_ERRORS as exc:
            log.debug("controller: refusal not published yet (%r)", exc)


def log_submission(topology: str, submission: Submission) -> None:
    """The controller's one line when its submission set an earlier one's state aside
    (a new submission under an old name starts clean; never silently)."""
    aside = submission.set_aside
    if aside is None:
        return
    log.warning(
        "controller: submission %s of %s starts clean: the state of the earlier "
        "submission %s (%d key groups, %d znodes) was set aside under %s; "
        "`elastorm forget --topology %s` deletes it",
        submission.storm_id,
        topology,
        aside.storm_id,
        aside.key_groups,
        aside.znodes,
        aside.path,
        topology,
    )


class ControllerRuntime:
    """The controller's ZooKeeper side, for every elastic topology: one client shared
    by the watcher, the store and the request boards; earlier decisions loaded before
    anything is decided; every decision persisted before the commands acting on it
    go out; and, when the loop is active, a round every ``round_secs``."""

    def __init__(
        self,
        *,
        loop: ControllerLoop,
        client: KazooClient,
        layout: ZnodeLayout,
        watcher: ClusterWatcher,
        store: ControllerStore,
        round_secs: float,
        metrics_path: str | None,
        submission: Submission,
    ) -> None:
        self.loop = loop
        self.client = client
        self.layout = layout
        self.watcher = watcher
        self.store = store
        self.round_secs = round_secs
        self.metrics_path = metrics_path
        self.submission = submission
        self._last_round = -float("inf")
        self.loaded = False
        self.resumed = False  # whether an earlier controller led (it persisted decisions)
        self.rounds = 0
        self.history: list[dict[str, Any]] = []
        self.holder_moves: list[dict[str, Any]] = []
        self.ordered: list[dict[str, Any]] = []
        self._view: ClusterView | None = None  # the last round's, for the allocation score
        self._figures_at = -float("inf")
        self._figures: bytes | None = None  # as last published
        # Commands whose decisions are not yet durable: sent only once ZooKeeper has
        # them, so a controller killed in between cannot have acted on decisions its
        # successor never sees (write-ahead, not write-behind, for what is acted on).
        self.outbox: list[Send] = []

    @classmethod
    def start(
        cls, conf: Mapping[str, Any], loop: ControllerLoop, component: str, task: int
    ) -> ControllerRuntime:
        """Claim the topology's znodes for this submission (``controller_start``: a new
        submission under an old name sets the earlier one's aside, a restart resumes),
        connect, and start the watcher and the store for ``loop`` (the topology in
        ``conf``); waits at most ``LOAD_TIMEOUT`` s for earlier decisions. The store's
        controller id is the Storm task's, the same after a restart, so a restarted
        controller takes over its predecessor's lead at once (fenced by the term)."""
        config = TopologyConfig.from_conf(conf)
        layout = ZnodeLayout(str(conf["topology.name"]))
        # First, and blocking like a keyed task's start: nothing of this controller may
        # read or write a znode before the name is claimed for this submission.
        submission = controller_start(conf, component, task)
        zk = zk_settings(conf)
        client = make_client(zk)
        client.start_async()
        watcher = ClusterWatcher(layout=layout, client=client, settings=zk)
        watcher.start()
        store = ControllerStore(
            layout=layout, controller_id=f"controller-{task}", client=client, settings=zk
        )
        store.start()
        try:
            store.load(timeout=LOAD_TIMEOUT)
        except StoreError as exc:
            if store.status() is StoreStatus.STANDBY:
                log.warning("controller task %d: standing by (%s)", task, exc)
            else:
                log.error("controller: earlier decisions not loaded yet (%s); waiting", exc)
        out = config.output_dir
        log.info(
            "controller: strategy=%s adapt=%s nodes=%s warmup=%.0fs",
            loop.options.strategy,
            loop.options.adapt,
            loop.placement.nodes,
            loop.options.warmup_secs,
        )
        return cls(
            loop=loop,
            client=client,
            layout=layout,
            watcher=watcher,
            store=store,
            round_secs=config.controller.round_secs,
            metrics_path=os.path.join(out, METRICS_FILE) if out else None,
            submission=submission,
        )

    def ready(self, now: float) -> bool:
        """Whether earlier decisions are loaded (tried again if not) and this controller
        was not deposed since: until then, and after, it decides nothing (a deposed
        leader, back after a standby took over, must not fence or command anyone)."""
        if self.loaded and self.store.status() is StoreStatus.CONFLICT:
            self._release()  # drops the commands still held, loudly
            return False
        return self.loaded or self._load(now)

    def standing_by(self) -> bool:
        """Whether another controller task leads (this one only watches)."""
        return self.store.status() is StoreStatus.STANDBY

    def leader(self) -> LeaderInfo | None:
        """The other controller task that leads, as last seen while standing by."""
        return self.store.leader()

    def routing_epochs(self) -> dict[str, int]:
        """Per operator, the epoch of its routing table in the loaded decisions."""
        return {op: table.epoch for op, table in self.store.decisions().routing.items()}

    def tick(self, now: float) -> list[Send]:
        """A round if the loop is active and one is due; returns the commands to send
        now: those of this and earlier decisions whose records ZooKeeper holds."""
        if not self.ready(now):
            return []
        if self.loop.options.active and now - self._last_round >= self.round_secs:
            self._last_round = now
            records = list(self.watcher.live().values())
            if records:
                rnd = self.loop.round(records, now)
                self.rounds += 1
                self._log(rnd)
                self._record(rnd, now)
                self.outbox.extend(rnd.sends)
        self._persist()
        self.publish_figures(now)
        return self._release()

    def order(self, sends: list[Send]) -> list[Send]:
        """Commands of a decision taken outside a round (a request, a recovery): persisted
        first, then released with :meth:`_release`."""
        self._persist()
        self.outbox.extend(sends)
        return self._release()

    def _release(self) -> list[Send]:
        """The held commands, once the store has written every decision (waits at most
        ``FLUSH_WAIT``); none while ZooKeeper lags; dropped if this controller was deposed."""
        if not self.outbox:
            return []
        if self.store.status() is StoreStatus.CONFLICT:
            log.error(
                "controller: deposed by another controller; dropping %d commands",
                len(self.outbox),
            )
            self.outbox.clear()
            return []
        if self.store.pending() and not self.store.flush(FLUSH_WAIT):
            log.warning(
                "controller: holding %d commands until ZooKeeper has the decisions behind "
                "them (%d writes pending)",
                len(self.outbox),
                self.store.pending(),
            )
            return []
        out, self.outbox = self.outbox, []
        return out

    def _load(self, now: float) -> bool:
        """Take over what an earlier controller decided, once the store has read it.

        Until then this controller decides nothing: a restarted controller that
        acted on the start-up routing would order migrations from the wrong owners.
        A predecessor that had allocated checkpoints was past its warm-up: this one
        carries on from its allocation without warming up again.
        """
        status = self.store.status()
        if status is StoreStatus.CONFLICT:
            log.error("controller: another controller leads; this one decides nothing")
            return False
        if status is not StoreStatus.ONLINE:
            return False
        log_submission(self.layout.topology, self.submission)
        decisions = self.store.decisions()
        held = {t: set(r.heartbeat.checkpoints) for t, r in self.watcher.live().items()}
        resumed = resume(
            self.loop.controls,
            decisions,
            self.loop.placement,
            holding=lambda task, group: group in held.get(task, ()),
        )
        # A predecessor led if it persisted anything, even decisions equal to the
        # start-up ones (no move yet): tasks may have died unseen before this one
        # watched (chaos join/zk-stop, session 31: the leader's node killed before any
        # move, its successor never suspected the dead task, nothing was restored).
        self.resumed = bool(resumed or decisions.routing) or decisions.checkpoints is not None
        if resumed:
            log.warning("controller: resumed routing and holders of %s", resumed)
        if decisions.checkpoints is not None:
            self.loop.resume_warm(holders_allocation(self.loop.controls, self.loop.placement), now)
            log.warning("controller: the topology was warm before the restart; no warm-up")
        self.loaded = True
        return True

    def _log(self, rnd: Round) -> None:
        if rnd.allocated:
            log.info(
                "controller: %s allocation, %d checkpoints moved",
                self.loop.options.strategy,
                len(rnd.holders_moved),
            )
        for m in rnd.moves:
            log_move(m)
        log_changed(rnd.changed)
        for m, why in rnd.refused:
            log.info("controller: move of %s refused: %s", m.key_group, why)

    def _persist(self) -> None:
        try:
            for op, control in self.loop.controls.items():
                self.store.set_routing(
                    op, control.routing, issued=control.epoch, copies=control.newest_copies()
                )
            self.store.set_checkpoints(holders_allocation(self.loop.controls, self.loop.placement))
            replicas = self.loop.replicas()
            self.store.set_replicas(Allocation({kg: (n,) for kg, n in replicas.items()}))
        except StoreError as exc:  # not loaded yet, or deposed: decisions stay in memory
            log.debug("controller: decisions not persisted yet (%s)", exc)

    def _record(self, rnd: Round, now: float) -> None:
        view = rnd.view
        self.history.append(
            {
                "t": now,
                "cpu": {n.node_id: n.cpu for n in view.nodes},
                "queue": {n.node_id: n.queue_length for n in view.nodes},
                "overloaded": [
                    n.node_id
                    for n in view.nodes
                    if n.queue_length >= self.loop.thresholds.queue_high
                    and (n.cpu or 0.0) >= self.loop.thresholds.cpu_high
                ],
            }
        )
        for m in rnd.moves:
            self.ordered.append(
                {
                    "t": now,
                    "key_group": str(m.key_group),
                    "source": m.source,
                    "target": m.target,
                    "protocol": m.protocol.value,
                    "reason": m.reason.value,
                }
            )
        for kg, old, new in rnd.holders_moved:
            self.holder_moves.append({"t": now, "key_group": str(kg), "from": old, "to": new})
        self._view = rnd.view
        if self.metrics_path is not None:
            write_json_atomic(self.metrics_path, self.metrics_record())

    def metrics_record(self) -> dict[str, Any]:
        """Everything the controller measured, as ``controller-metrics.json`` holds it
        (the allocation scored against the view of the last round, if any)."""
        snap = self.loop.metrics()
        return {
            "strategy": self.loop.options.strategy,
            "rounds": self.rounds,
            "allocated_at": self.loop.allocated_at,
            "started_at": self.loop.started_at,
            "orders": self.ordered,
            "finished": [
                {
                    "key_group": str(r.move.key_group),
                    "completion": r.completion,
                    "pause": r.pause,
                }
                for r in self.loop.records
            ],
            "ordered_assisted_share": self.loop.ordered_share(),
            "assisted_share": snap.assisted_share if snap else None,
            "usable_share_now": snap.usable_share if snap else None,
            "usable_samples": self.loop.usable_samples,
            "accumulated_latency": snap.accumulated_latency if snap else 0.0,
            "holders": {
                str(kg): list(nodes)
                for kg, nodes in holders_allocation(self.loop.controls, self.loop.placement).entries
            },
            "holder_moves": self.holder_moves,
            "routing": {
                op: {
                    "epoch": c.routing.epoch,
                    "owners": list(c.routing.owners),
                    "nodes": [self.loop.placement.node_of(t) for t in c.routing.owners],
                }
                for op, c in self.loop.controls.items()
            },
            "history": self.history[-600:],
            "store": self.store.status().value,
            "allocation": allocation_summary(self.loop, self._view),
            "replication": self.loop.replication_status().to_json(),
            "recoveries": self.loop.recoveries[-100:],
            "submission": submission_fields(self.submission),
        }

    def publish_figures(self, now: float) -> None:
        """Every ``FIGURES_EVERY_SECS``, what the dashboard shows of the controller's
        figures (:func:`dashboard_figures`) to ``controller/figures`` when it changed:
        the dashboard reads ZooKeeper, never the controller's machine's files."""
        if now - self._figures_at < FIGURES_EVERY_SECS or not self.client.connected:
            return
        self._figures_at = now
        encoded = json.dumps(dashboard_figures(self.metrics_record())).encode()
        if encoded == self._figures:
            return
        try:
            write_znode(self.client, self.layout.figures, encoded)
            self._figures = encoded
        except ZK_ERRORS as exc:
            log.warning(
                "controller: figures not published (%s); next in %.0f s", exc, FIGURES_EVERY_SECS
            )


FIGURES_EVERY_SECS = 5.0
"""How often the leading controller publishes its figures for the dashboard (a
correlation matrix of 100 key groups is about 70 kB of JSON)."""
FIGURE_KEYS = (
    "strategy",
    "rounds",
    "assisted_share",
    "ordered_assisted_share",
    "usable_share_now",
    "allocation",
)


def dashboard_figures(record: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a metrics record the dashboard shows: the seed papers' shares, the
    allocation's correlations and score, and only the latest order of each key group
    (the page shows the protocol ordered last)."""
    latest = {o["key_group"]: o for o in record["orders"]}
    orders = sorted(latest.values(), key=lambda o: o["t"])  # in the order they were made
    return {k: record[k] for k in FIGURE_KEYS} | {"orders": orders}


HEATMAP_MAX_GROUPS = 100
"""Key groups up to which ``controller-metrics.json`` carries the correlation matrix
(100 groups = 10,000 numbers, written once a round; more would bloat the file)."""


def allocation_summary(loop: ControllerLoop, view: ClusterView | None) -> dict[str, Any]:
    """What the allocation works from, for the dashboard: the correlation matrix (up to
    ``HEATMAP_MAX_GROUPS`` key groups) and, once checkpoints were allocated (and a round
    gave a ``view``), the score of the holders now against Algorithm 3's allocation for
    the same view and correlations (Madsen & Zhou 2015, section 6: re-optimisation
    moves checkpoints when that drift exceeds ``theta``). Non-finite scores are written as None."""
    out: dict[str, Any] = {"theta": loop.options.theta}
    try:
        corr = loop.correlation.correlation()
    except ControllerModelError as exc:  # a factor-model correlation: no dense matrix
        return out | {"correlation_note": str(exc)}
    if len(corr.key_groups) <= HEATMAP_MAX_GROUPS:
        out["correlation"] = {
            "key_groups": [str(kg) for kg in corr.key_groups],
            "matrix": [[round(float(x), 3) for x in row] for row in corr.matrix],
        }
    if loop.allocation is not None and view is not None:
        try:
            spec = AllocationSpec(view=view, correlation=corr, epsilon=loop.options.slack)
            now = allocation_score(spec, holders_allocation(loop.controls, loop.placement))
            best = allocation_score(spec, correlated_allocation(spec))
        except ControllerModelError as exc:  # e.g. InfeasibleAllocationError
            return out | {"score_note": str(exc)}
        finite = math.isfinite(now) and math.isfinite(best)
        out |= {
            "allocation_score": now if math.isfinite(now) else None,
            "reference_score": best if math.isfinite(best) else None,
            "score_drift": now - best if finite else None,
        }
    return out


def _load_prior(path: str, controls: Mapping[str, MigrationController]):
    from elastorm.core.correlation_artifact import decode_artifact

    with open(path, "rb") as f:
        artifact = decode_artifact(
            f.read(), expected_key_groups={op: c.num_key_groups for op, c in controls.items()}
        )
    log.info("controller: correlation prior from %s", path)
    return prior_from_artifact(artifact)
