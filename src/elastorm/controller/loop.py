"""The controller's decision loop, sans-IO: task heartbeats in, orders out.

Madsen & Zhou 2015, sections 4 (controller and adaptation manager) and 6 (checkpoint
allocation), put together. Each round (one per heartbeat interval) the runtime hands
:class:`ControllerLoop` the live tasks' records; the loop

1. builds a :class:`~controller.model.ClusterView` whose key-group owners and
   checkpoint holders are the controller's own decisions (the routing tables and
   holders of its ``MigrationController`` per operator) and whose loads come
   from the heartbeats (:func:`build_view`);
2. pushes the key-group input rates into a sliding Pearson correlation (seeded
   from the Spark artifact when one is given);
3. once the warm-up is over, allocates checkpoints with the configured strategy
   (baseline, even, Algorithm 3 or Kumbhare et al. 2015's peer ring), afterwards
   re-optimises when the score drifts by more than ``theta`` (correlated) or
   re-applies the ring (ring), and turns holder changes into
   ``SetHolder`` commands;
4. plans adaptation (``plan_adaptation``) and orders each move through the
   operator's ``MigrationController``, its protocol chosen by
   :func:`~elastorm.core.protocol_choice.choose_protocol` (the one place; a lazy move
   places the checkpoint first), as are operator requests (:meth:`ControllerLoop.request`);
5. keeps Madsen & Zhou 2015's section 7.3 metrics (:meth:`ControllerLoop.metrics`).

Tasks are placed on *nodes* by :class:`Placement`: one task of every keyed
operator per node, so a key group moves between nodes by moving between its
operator's tasks. Nothing here talks to Storm or ZooKeeper.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.controller.adaptation import (
    AdaptationState,
    Move,
    MoveReason,
    Thresholds,
    plan_adaptation,
)
from elastorm.controller.allocation import (
    AllocationSpec,
    baseline_allocation,
    correlated_allocation,
    even_allocation,
    reoptimize,
    ring_allocation,
)
from elastorm.controller.correlation import CorrelationMatrix, push_loads, sliding_correlation
from elastorm.controller.metrics import (
    MetricsSnapshot,
    MigrationRecord,
    snapshot,
    usable_checkpoint_share,
)
from elastorm.controller.model import (
    Allocation,
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    KeyGroupInfo,
    MigrationEnded,
    NodeId,
    NodeInfo,
    NodeState,
    TaskRecord,
    node_name,
)
from elastorm.controller.recovery import RecoveryPlan, plan_recovery
from elastorm.controller.replication import (
    downstream_operators,
    keyed_tasks,
    operator_inputs,
    place_replicas,
    plan_replicas,
    predicted_fidelity,
    replan,
    running_graph,
    task_name,
)
from elastorm.controller.requests import HOLDER, MigrationRequest
from elastorm.controller.scaling import (
    RescaleStep,
    RescaleView,
    concurrent_moves,
    plan_rescale,
    scale_hint,
)
from elastorm.core.actions import MigrationDone, Send
from elastorm.core.control import CrashPlan, MigrationController, MigrationRefused, Overdue
from elastorm.core.messages import Protocol
from elastorm.core.protocol_choice import ProtocolChoice, Verdict
from elastorm.replication.model import TaskGraph


@dataclass(frozen=True)
class Placement:
    """Which task of each keyed operator runs on which node.

    ``tasks[operator][node]`` is the operator's task on ``node``; an operator has at
    most one task on each node, and one with fewer tasks than there are nodes has
    none on some: its key groups move only among the nodes it runs on (``hosts``).
    """

    tasks: Mapping[str, Mapping[NodeId, int]]

    def __post_init__(self) -> None:
        if any(len(by_node) < 2 for by_node in self.tasks.values()):
            on = ", ".join(f"{op} on {len(by_node)}" for op, by_node in sorted(self.tasks.items()))
            raise ControllerModelError(
                "every keyed operator needs tasks on two nodes at least (a key group's "
                f"owner and its checkpoint holder), got: {on}"
            )
        seen = [t for by_node in self.tasks.values() for t in by_node.values()]
        if len(seen) != len(set(seen)):
            raise ControllerModelError("a task is placed twice")

    @classmethod
    def by_index(cls, operator_tasks: Mapping[str, Sequence[int]]) -> Placement:
        """Node ``i`` hosts the ``i``-th task (by id) of every operator with more than ``i``.

        >>> Placement.by_index({"a": [4, 3], "b": [7, 8]}).task_on("b", "node0")
        7
        """
        return cls(
            {
                op: {node_name(i): t for i, t in enumerate(sorted(tasks))}
                for op, tasks in operator_tasks.items()
            }
        )

    @property
    def nodes(self) -> tuple[NodeId, ...]:
        """Every node some operator runs a task on, sorted."""
        return tuple(sorted({n for by_node in self.tasks.values() for n in by_node}))

    @property
    def hosts(self) -> dict[str, frozenset[NodeId]]:
        """Each operator's nodes (``ClusterView.hosts``)."""
        return {op: frozenset(by_node) for op, by_node in self.tasks.items()}

    def task_on(self, operator: str, node: NodeId) -> int:
        return self.tasks[operator][node]

    def node_of(self, task: int) -> NodeId:
        for by_node in self.tasks.values():
            for node, t in by_node.items():
                if t == task:
                    return node
        raise KeyError(f"task {task} is not a placed keyed task")

    def operator_of(self, task: int) -> str:
        for op, by_node in self.tasks.items():
            if task in by_node.values():
                return op
        raise KeyError(f"task {task} is not a placed keyed task")


def loop_thresholds(options: ControllerConfig) -> Thresholds:
    """The adaptation thresholds of a topology's ``elastorm.controller.*`` options (the
    one place ``Thresholds`` is built from the configuration)."""
    return Thresholds(
        cpu_high=options.cpu_high,
        cpu_low=options.cpu_low,
        queue_high=options.queue_high,
        queue_low=options.queue_low,
        cooldown=options.cooldown_secs,
        max_moves=options.max_moves,
        scale_in=options.scale_in,
        lazy_move=options.lazy_move,
    )


def per_tuple_cpu(record: TaskRecord) -> float:
    """CPU share one tuple/s costs on this task: its CPU over its total input rate.

    Madsen & Zhou 2015 measure a key group's load as its share of the node's CPU; a task
    reports its process CPU and per-group rates, so each group gets the task's
    CPU in proportion to its rate. 0 when the task reported no rate or no CPU.
    """
    total = sum(rate for _, rate in record.heartbeat.input_rates)
    cpu = record.heartbeat.cpu
    return cpu / total if total > 0 and cpu else 0.0


def build_view(
    records: Iterable[TaskRecord],
    *,
    controls: Mapping[str, MigrationController],
    placement: Placement,
    now: float,
    background: Mapping[NodeId, float] | None = None,
    zones: Mapping[NodeId, str] | None = None,
    down: Collection[NodeId] = (),
) -> ClusterView:
    """The controller's ``ClusterView``: its routing and holders, the tasks' loads.

    Node CPU = the summed process CPU of its live tasks plus ``background``
    (external load); queue = their summed queue estimates; ``zones`` names each node's
    fault zone (unnamed: its own); ``down`` the nodes no planner may give work
    (``NodeInfo.down``: a node with no live record looks idle). A key group's load is
    its input rate times its reporting task's :func:`per_tuple_cpu`; its state
    size and replay size come from the heartbeats. ``O(T + K)``.
    """
    bg = background or {}
    recs = [r for r in records if r.task_id in _placed(placement)]
    cpu: dict[NodeId, float] = dict.fromkeys(placement.nodes, 0.0)
    queue: dict[NodeId, float] = dict.fromkeys(placement.nodes, 0.0)
    load: dict[KeyGroupId, float] = {}
    size: dict[KeyGroupId, float] = {}
    replay: dict[KeyGroupId, float] = {}
    for r in recs:
        hb, node = r.heartbeat, placement.node_of(r.task_id)
        cpu[node] += hb.cpu or 0.0
        queue[node] += hb.queue_length
        cost = per_tuple_cpu(r)
        for g, rate in hb.input_rates:
            kg = KeyGroupId(r.identity.operator, g)
            load[kg] = max(load.get(kg, 0.0), rate * cost)
        for g, n in hb.state_sizes:
            kg = KeyGroupId(r.identity.operator, g)
            size[kg] = max(size.get(kg, 0.0), n)
        for kg, n in hb.buffered:
            replay[kg] = replay.get(kg, 0.0) + n
    nodes = [
        NodeInfo(
            node_id=n,
            background_load=bg.get(n, 0.0),
            zone=(zones or {}).get(n),
            queue_length=queue[n],
            cpu=cpu[n] + bg.get(n, 0.0),
            down=n in down,
        )
        for n in placement.nodes
    ]
    kgs, holders = [], {}
    for op, control in controls.items():
        for g in range(control.num_key_groups):
            kg = KeyGroupId(op, g)
            kgs.append(
                KeyGroupInfo(
                    key_group=kg,
                    owner=placement.node_of(control.owner(g)),
                    load=load.get(kg, 0.0),
                    checkpoint_size=size.get(kg, 0.0),
                    replay_size=replay.get(kg, 0.0),
                )
            )
            holders[kg] = (placement.node_of(control.holders[g]),)
    return ClusterView(
        nodes=nodes, key_groups=kgs, checkpoints=holders, now=now, hosts=placement.hosts
    )


def bound_view(view: ClusterView, nodes: NodeState | None) -> ClusterView:
    """``view`` over the nodes the scheduler has bound (active and draining, and any that
    still owns a key group), so adaptation never moves a key group to an idle logical
    node, whose tasks wait on some other node; checkpoints on other nodes are left out.
    ``view`` itself when the topology is not elastically scheduled (``nodes`` None)."""
    if nodes is None:
        return view
    keep = set(nodes.active) | set(nodes.draining) | {k.owner for k in view.key_groups}
    return view.replace(
        nodes=[n for n in view.nodes if n.node_id in keep],
        checkpoints={
            kg: tuple(h for h in holders if h in keep) for kg, holders in view.checkpoints.entries
        },
    )


def _placed(placement: Placement) -> set[int]:
    return {t for by_node in placement.tasks.values() for t in by_node.values()}


@dataclass(frozen=True, kw_only=True)
class Round:
    """What one round decided: commands to send and why."""

    view: ClusterView
    sends: tuple[Send, ...] = ()
    moves: tuple[Move, ...] = ()  # as ordered (protocol = the one actually used)
    refused: tuple[tuple[Move, str], ...] = ()
    changed: tuple[tuple[Move, str], ...] = ()  # of ``moves``: protocol changed, and why
    holders_moved: tuple[tuple[KeyGroupId, NodeId, NodeId], ...] = ()
    allocated: bool = False
    replicas_started: tuple[tuple[KeyGroupId, NodeId], ...] = ()
    replicas_dropped: tuple[KeyGroupId, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ReplicationStatus:
    """The replication plan and what it buys, for the metrics and the dashboard.

    ``plan``: the planned primary tasks (``"<operator>:<task>"``); ``replicas``: each
    replicated key group's replica node; ``fidelity_planned``: the Output Fidelity if
    every keyed task failed at once and the planned tasks survived on their replicas
    (Su & Zhou 2016's worst case); ``fidelity_now``: the Output Fidelity right now,
    over the task graph of the last round (rates as last measured), with the tasks
    that died while owning key groups still being restored from checkpoints counted
    as failed; ``graph``: that task graph (operators with their kind, streams with
    their rates), so any failure can be predicted from it.
    """

    plan: tuple[str, ...] = ()
    replicas: Mapping[KeyGroupId, NodeId] = field(default_factory=dict)
    fidelity_planned: float | None = None
    fidelity_now: float | None = None
    graph: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": list(self.plan),
            "replicas": {str(kg): node for kg, node in sorted(self.replicas.items())},
            "fidelity_planned": self.fidelity_planned,
            "fidelity_now": self.fidelity_now,
            "graph": self.graph,
        }


def graph_json(graph: TaskGraph) -> dict[str, Any]:
    """A task graph as JSON-able data: operators (name, kind, tasks) and streams."""
    return {
        "operators": [
            {"name": op.name, "kind": op.kind.value, "tasks": list(op.tasks)}
            for op in graph.operators
        ],
        "streams": [[s.source, s.target, round(s.rate, 3)] for s in graph.streams],
    }


@dataclass(frozen=True, kw_only=True)
class Recovery:
    """What the loop did after keyed tasks were lost or restarted empty: the planner's
    ``plan`` (over nodes), the operator controller's commands carrying it out, and the
    operator requests it ended (``refused``: request name -> why)."""

    operator: str
    plan: RecoveryPlan
    crash: CrashPlan
    refused: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class Ordered:
    """A move the loop ordered: ``move`` as ordered (its protocol the one run), the
    ``choice`` behind that protocol (``choice.changed``: not the one wanted, and
    ``choice.reason`` says why), the routing ``epoch`` it runs under, its end tasks and
    the commands that start it."""

    move: Move
    choice: ProtocolChoice
    epoch: int
    source: int
    target: int
    sends: tuple[Send, ...]


@dataclass(frozen=True, kw_only=True)
class RequestOutcome:
    """What the loop made of an operator request: ``ordered`` (started), ``refused``
    (why it cannot run), or ``waiting`` (why not yet: it stays pending and is asked
    again next round)."""

    ordered: Ordered | None = None
    refused: str = ""
    waiting: str = ""

    def __post_init__(self) -> None:
        if sum((self.ordered is not None, bool(self.refused), bool(self.waiting))) != 1:
            raise ControllerModelError(
                "a request outcome is exactly one of ordered, refused or waiting"
            )


def recovery_view(
    control: MigrationController,
    operator: str,
    dead: Collection[int],
    *,
    placement: Placement,
    now: float,
    loads: ClusterView | None = None,
    zones: Mapping[NodeId, str] | None = None,
    down: Collection[NodeId] = (),
    stale_through: int | None = None,
) -> ClusterView:
    """The one operator's cluster as the recovery planner needs it after the ``dead``
    tasks lost their state (lost, or restarted empty), with ``down`` marking the nodes
    that take no work (now, whatever ``loads`` said); ``stale_through``: see
    ``MigrationController.lost_key_groups``.

    Every key group a dead task owned or was moving is owned by that task's node (its
    state is gone) and its checkpoints are the nodes of its surviving copies
    (``MigrationController.surviving_copies``: the newest checkpoints on live tasks,
    or the live end of a migration); every other key group keeps its owner and
    holder. Loads, sizes and queues come from ``loads`` (the last round's view) when
    there is one. O(K x tasks).
    """
    lost = {
        g: placement.node_of(d)
        for d in sorted(dead)
        for g in control.lost_key_groups(d, stale_through)
    }
    known = {k.key_group: k for k in loads.key_groups} if loads is not None else {}
    nodes = (
        [
            dataclasses.replace(n, down=n.node_id in down)
            for n in loads.nodes
            if n.node_id in placement.nodes
        ]
        if loads is not None
        else [
            NodeInfo(node_id=n, zone=(zones or {}).get(n), down=n in down) for n in placement.nodes
        ]
    )
    kgs, holders = [], {}
    for g in range(control.num_key_groups):
        kg = KeyGroupId(operator, g)
        seen = known.get(kg)
        if g in lost:
            owner = lost[g]
            holders[kg] = tuple(placement.node_of(t) for t in control.surviving_copies(g, dead))
        else:
            owner = placement.node_of(control.owner(g))
            holder = placement.node_of(control.holders[g])
            holders[kg] = (holder,) if holder != owner else ()
        kgs.append(
            KeyGroupInfo(
                key_group=kg,
                owner=owner,
                load=seen.load if seen else 0.0,
                checkpoint_size=seen.checkpoint_size if seen else 0.0,
                replay_size=seen.replay_size if seen else 0.0,
            )
        )
    return ClusterView(
        nodes=nodes, key_groups=kgs, checkpoints=holders, now=now, hosts=placement.hosts
    )


@dataclass(frozen=True, kw_only=True)
class RescaleRound:
    """What one rescale round decided: the planner's ``step``, the moves started now
    (bounded and disjoint, see ``concurrent_moves``) and the commands."""

    step: RescaleStep
    started: tuple[Move, ...] = ()
    sends: tuple[Send, ...] = ()
    changed: tuple[tuple[Move, str], ...] = ()  # of ``started``: protocol changed, and why


@dataclass
class _Started:
    move: Move
    at: float


@dataclass(frozen=True)
class _PutOff:
    """A move not ordered this round: why, and the commands of its lazy relocation."""

    reason: str = ""
    sends: tuple[Send, ...] = ()


ENDED_KEPT = 20
"""Ended migrations kept per operator for the published status (the dashboard reads
them every 0.5 s, so it sees each one while at most this many end in between)."""


class ControllerLoop:
    """Decides, round by round, where checkpoints live and which key groups move.

    ``controls`` holds one ``MigrationController`` per keyed operator (shared with
    the runtime, which also feeds it reports); ``config`` is the topology's
    configuration: its ``controller`` section (``options``), ``external_load`` as
    the nodes' background CPU, ``fault_zones``, the keyed operators' inputs
    (``operators`` and ``routed_from``) and ``join_operators``; ``prior`` is the
    offline correlation artifact's matrix, if any.
    """

    def __init__(
        self,
        *,
        controls: Mapping[str, MigrationController],
        placement: Placement,
        config: TopologyConfig,
        started_at: float,
        prior: CorrelationMatrix | None = None,
        prior_weight: float = 0.0,
    ) -> None:
        self.controls = dict(controls)
        self.placement = placement
        self.config = config
        self.options: ControllerConfig = config.controller
        self.thresholds = loop_thresholds(config.controller)
        # Each keyed operator and its inputs, through routers (the Output Fidelity graph).
        self.operators = operator_inputs(config.operators, config.routed_from)
        self.started_at = started_at
        self.key_groups = tuple(
            KeyGroupId(op, g) for op, c in self.controls.items() for g in range(c.num_key_groups)
        )
        self.correlation = sliding_correlation(
            self.key_groups, self.options.window, prior=prior, prior_weight=prior_weight
        )
        self.adaptation = AdaptationState()
        self.allocation: Allocation | None = None
        self.allocated_at: float | None = None
        self.records: list[MigrationRecord] = []
        self.orders: list[Move] = []
        self._running: dict[KeyGroupId, _Started] = {}
        # (operator, key group, epoch) -> the pause its target reported, until both
        # ends are done (the source may report last).
        self._pauses: dict[tuple[str, int, int], float] = {}
        self.ended: dict[str, collections.deque[MigrationEnded]] = {
            op: collections.deque(maxlen=ENDED_KEPT) for op in self.controls
        }
        self.last_view: ClusterView | None = None
        self.usable_samples: list[tuple[float, float]] = []  # (time, share) while overloaded
        self.running_since: float | None = None  # first round that saw any input
        self._pending: list[float] | None = None  # summed rates of the current sample
        self._pending_rounds = 0
        self._waiting_since: dict[KeyGroupId, float] = {}
        self._request_since: dict[str, float] = {}  # request name -> first asked (waiting)
        self._sample_start = 0.0
        self._quiet_until = -math.inf  # no decisions before (see resume_warm)
        self._rescale_active: frozenset[NodeId] = frozenset()  # see rescale
        self._joining: set[NodeId] = set()
        # Nodes whose restarted tasks were recovered: joining at the next rescale round.
        self._rejoined: set[NodeId] = set()
        self._holder_set: dict[KeyGroupId, float] = {}  # rescale's SetHolder times
        self._rescale_pending = 0
        # The scheduler's bound nodes (set by ``rescale``); None: not elastically scheduled.
        self.node_state: NodeState | None = None
        # Nodes the adaptation manager wants (``scaling.scale_hint``), for the autoscaler.
        self.scale_hint: int | None = None
        # Partially active replication (Su & Zhou 2016): the last plan and its graph.
        self.replication_plan: frozenset[str] = frozenset()
        self.replication_graph: TaskGraph | None = None
        self._replanned_at: float | None = None
        self._restoring: dict[str, set[KeyGroupId]] = {}  # dead task -> groups restoring
        self.requested: dict[KeyGroupId, str] = {}  # moving for an operator request: its name
        self.recoveries: list[dict[str, Any]] = []  # each recovery: restored, promoted
        # Keyed tasks declared lost whose restart is not recovered yet: their nodes take
        # no work (NodeInfo.down), from the declaration to the restart's recovery.
        self.down: set[int] = set()

    def resume_warm(self, allocation: Allocation, now: float) -> None:
        """Carry on after a predecessor that had allocated checkpoints (so was warm).

        The tasks kept running through the controller's restart, so there is no
        start-up backlog to wait out: no second warm-up, and the predecessor's
        ``allocation`` is the one later re-allocations re-optimize (Madsen & Zhou 2015:
        lazily, past the threshold θ) instead of one made afresh from a correlation
        with no samples yet. It decides nothing for ``settle_secs``, though: which
        holder has a group's newest checkpoint is known only from the holders'
        reports, which this controller has not heard yet (ordering at once made
        every move direct).
        """
        self.running_since = now - max(self.options.warmup_secs, self.options.settle_secs)
        self._sample_start = now
        self._quiet_until = now + self.options.settle_secs
        self.allocation = allocation
        self.allocated_at = now

    # -- one round ---------------------------------------------------------------------
    def round(self, records: Iterable[TaskRecord], now: float) -> Round:
        """Run one round on the live tasks' latest records (time ``now``, seconds)."""
        view = self.view(records, now)
        self._sample(records, now)
        sends: list[Send] = []
        holders_moved = []
        allocated = False
        if self._allocation_due(now):
            holders_moved, alloc_sends = self._allocate(view)
            sends += alloc_sends
            allocated = True
            view = self.view(records, now)
        usable = usable_checkpoint_share(view, self.thresholds)
        if usable is not None:
            self.usable_samples.append((now, usable))
        started: tuple[tuple[KeyGroupId, NodeId], ...] = ()
        dropped: tuple[KeyGroupId, ...] = ()
        if self.options.replication_budget > 0 and self.warm(now):
            started, dropped, replica_sends = self._replicate(records, view, now)
            sends += replica_sends
        elif self.warm(now):  # no replicas: the graph still gives fidelity_now
            joins = self.config.join_operators
            graph = running_graph(records, self.operators, joins=joins)
            self.replication_graph = graph or self.replication_graph
        moves, refused, changed = [], [], []
        if self.options.adapt and self.warm(now) and not self.rescaling:
            bound = bound_view(view, self.node_state)
            planned, state = plan_adaptation(bound, self.thresholds, self.adaptation)
            if self.node_state is not None:
                self.scale_hint = scale_hint(
                    bound,
                    planned,
                    self.thresholds,
                    self.node_state.active,
                    frozenset(self._joining),
                )
            waiting = []
            for move in planned:
                try:
                    ordered, put_off = self._start(move, now, patient=True)
                except MigrationRefused as exc:
                    refused.append((move, str(exc)))
                    continue
                if ordered is None:
                    waiting.append(move.key_group)
                    refused.append((move, put_off.reason))
                    sends += put_off.sends
                    continue
                sends += ordered.sends
                moves.append(ordered.move)
                if ordered.choice.changed:
                    changed.append((ordered.move, ordered.choice.reason))
            # A move put off is not a move: it must not start the group's cooldown.
            self.adaptation = AdaptationState(
                moved_at={k: t for k, t in state.moved_at.items() if k not in waiting},
                node_changed_at=state.node_changed_at,
            )
        self.last_view = view
        return Round(
            view=view,
            sends=tuple(sends),
            moves=tuple(moves),
            refused=tuple(refused),
            changed=tuple(changed),
            holders_moved=tuple(holders_moved),
            allocated=allocated,
            replicas_started=started,
            replicas_dropped=dropped,
        )

    def view(self, records: Iterable[TaskRecord], now: float) -> ClusterView:
        """This round's :func:`build_view`, the nodes of :attr:`down` tasks marked down."""
        return build_view(
            records,
            controls=self.controls,
            placement=self.placement,
            now=now,
            background=self.config.external_load,
            zones=self.config.fault_zones,
            down=self.down_nodes(),
        )

    def down_nodes(self) -> frozenset[NodeId]:
        """The nodes of the tasks in :attr:`down`: no planner gives them work."""
        placed = _placed(self.placement)
        return frozenset(self.placement.node_of(t) for t in self.down if t in placed)

    def declare_lost(self, tasks: Collection[int]) -> None:
        """The failure detector declared ``tasks`` lost: their nodes take no work until
        each one's restart is recovered (:meth:`recover` with ``rejoined``). Called by
        :meth:`recover` for lost tasks, and by the caller when it leaves lost tasks to
        Storm's restart instead (``recover_lost`` off)."""
        self.down |= set(tasks)

    def _sample(self, records: Iterable[TaskRecord], now: float) -> None:
        """Add this round's key-group rates to the current sample; push a sample into
        the correlation window every ``sample_secs`` (the mean of its rounds).

        Only once the job runs: before the first tuple every load is 0, and a
        window holding the jump from nothing to something makes every pair of key
        groups look positively correlated. The first non-zero round (a partial
        interval) is not used; the warm-up counts from it. Samples of several
        seconds, not single rounds: one-second rates carry common-mode noise (every
        task stalls when the machine does), which made weakly anti-correlated groups
        look correlated on real runs.
        """
        rates = self._rates(records)
        if not any(rates.values()):
            return
        if self.running_since is None:
            self.running_since = self._sample_start = now
            return
        if now - self.running_since < self.options.settle_secs:
            self._sample_start = now
            return
        row = [rates.get(k, 0.0) for k in self.key_groups]
        self._pending = (
            row
            if self._pending is None
            else [a + b for a, b in zip(self._pending, row, strict=True)]
        )
        self._pending_rounds += 1
        if now - self._sample_start >= self.options.sample_secs:
            mean = [v / self._pending_rounds for v in self._pending]
            self.correlation = push_loads(self.correlation, mean)
            self._pending, self._pending_rounds, self._sample_start = None, 0, now

    def warm(self, now: float) -> bool:
        """Whether the warm-up is over: ``warmup`` s of statistics since input began.

        Nothing is decided before: a start-up backlog looks like overload (a real
        run moved three key groups directly in its first second).
        """
        return (
            self.running_since is not None
            and now - self.running_since >= self.options.warmup_secs
            and now >= self._quiet_until
        )

    def _rates(self, records: Iterable[TaskRecord]) -> dict[KeyGroupId, float]:
        rates: dict[KeyGroupId, float] = {}
        for r in records:
            for g, rate in r.heartbeat.input_rates:
                kg = KeyGroupId(r.identity.operator, g)
                rates[kg] = max(rates.get(kg, 0.0), rate)
        return rates

    # -- checkpoint allocation -----------------------------------------------------------
    def _allocation_due(self, now: float) -> bool:
        s = self.options
        if s.strategy == "none" or not self.warm(now):
            return False
        if self.allocated_at is None:
            return True
        periodic = s.strategy in ("correlated", "ring")
        return periodic and now - self.allocated_at >= s.reallocate_secs

    def _allocate(self, view: ClusterView) -> tuple[list, list[Send]]:
        """Compute the allocation and order the holder changes (skips moving groups)."""
        s = self.options
        spec = AllocationSpec(
            view=view, correlation=self.correlation.correlation(), epsilon=s.slack
        )
        if s.strategy == "baseline":
            alloc = baseline_allocation(spec)
        elif s.strategy == "even":
            alloc = even_allocation(spec, seed=s.seed)
        elif s.strategy == "ring":
            alloc = ring_allocation(spec)
        elif self.allocation is None:
            alloc = correlated_allocation(spec)
        else:
            alloc, _ = reoptimize(spec, view.checkpoints, theta=s.theta)
        self.allocation = alloc
        self.allocated_at = view.now
        moved, sends = [], []
        for kg, nodes in alloc.entries:
            old = view.checkpoints.holders(kg)
            if not nodes or nodes[0] in old:
                continue
            task = self.placement.task_on(kg.operator, nodes[0])
            out = self.controls[kg.operator].set_holder(kg.index, task)
            if out:
                moved.append((kg, old[0] if old else "", nodes[0]))
                sends += out
        return moved, sends

    # -- partially active replication ---------------------------------------------------
    def _replicate(
        self, records: Iterable[TaskRecord], view: ClusterView, now: float
    ) -> tuple[tuple[tuple[KeyGroupId, NodeId], ...], tuple[KeyGroupId, ...], list[Send]]:
        """Re-plan every ``replan_secs`` from the current rates (Su & Zhou 2016's future
        work: rates drift), then apply exactly :func:`place_replicas`'s changes: drop the
        replicas no longer wanted; for each one to start, make its node the group's
        holder first (the replica starts from the holder's checkpoint), then, once that
        holder reported the newest checkpoint, start it. Returns the replicas started,
        those dropped and the commands."""
        s = self.options
        graph = running_graph(records, self.operators, joins=self.config.join_operators)
        if graph is not None:
            self.replication_graph = graph  # the rates now: what fidelity_now is over
            due = self._replanned_at is None or now - self._replanned_at >= s.replan_secs
            if due:
                scenario = keyed_tasks(graph, self.controls)
                candidate = plan_replicas(
                    graph, s.replication_budget, scenario, planner=s.replication_planner
                )
                self.replication_plan = replan(
                    graph,
                    scenario,
                    self.replication_plan,
                    candidate,
                    budget=s.replication_budget,
                    min_gain=s.replan_min_gain,
                )
                self._replanned_at = now
        primaries = []
        for name in sorted(self.replication_plan):
            op, _, task = name.rpartition(":")
            primaries.append((op, self.placement.node_of(int(task))))
        current = self.replicas()
        placed = place_replicas(view, primaries, current)
        sends: list[Send] = []
        dropped, started = [], []
        for kg in placed.drop:
            try:
                out = self.controls[kg.operator].drop_replica(kg.index)
            except MigrationRefused:
                continue  # still starting: dropped next round
            dropped.append(kg)
            sends += out
        for kg, node in placed.start:
            control = self.controls[kg.operator]
            task = self.placement.task_on(kg.operator, node)
            if kg.index in control.replicas:
                continue  # its old replica is being dropped
            if control.holders[kg.index] != task:
                out = control.set_holder(kg.index, task)
                if out:
                    self._holder_set[kg] = now
                sends += out
            elif control.can_replicate(kg.index, task):
                sends += control.replicate(kg.index, task, now=now)
                started.append((kg, node))
        return tuple(started), tuple(dropped), sends

    def tentative_operators(self) -> frozenset[str]:
        """Keyed operators whose outputs are tentative now: downstream of an operator
        with key groups still being restored from checkpoints."""
        recovering = {kg.operator for groups in self._restoring.values() for kg in groups}
        return downstream_operators(self.operators, recovering)

    def replicas(self) -> dict[KeyGroupId, NodeId]:
        """Each key group with an active replica (started or starting) -> its node."""
        return {
            KeyGroupId(op, g): self.placement.node_of(task)
            for op, control in self.controls.items()
            for g, task in sorted(control.replicas.items())
        }

    def replication_status(self) -> ReplicationStatus:
        """The plan, the replicas and the Output Fidelity (see :class:`ReplicationStatus`).
        O(|V| + |E|) of the last plan's graph."""
        graph = self.replication_graph
        if graph is None:
            return ReplicationStatus(replicas=self.replicas())
        scenario = keyed_tasks(graph, self.controls)
        down = {t for t, groups in self._restoring.items() if groups} & set(graph.tasks)
        return ReplicationStatus(
            plan=tuple(sorted(self.replication_plan)),
            replicas=self.replicas(),
            fidelity_planned=predicted_fidelity(graph, scenario, self.replication_plan),
            fidelity_now=predicted_fidelity(graph, down, ()),
            graph=graph_json(graph),
        )

    # -- recovery ------------------------------------------------------------------------
    def recover(
        self,
        operator: str,
        dead: Collection[int],
        now: float,
        *,
        rejoined: bool,
        durable: Collection[int] = (),
        stale_through: int | None = None,
    ) -> Recovery:
        """The ``dead`` tasks of ``operator`` lost their state: plan with
        :func:`~elastorm.controller.recovery.plan_recovery`, all at once, and apply
        exactly its plan.

        Phase 1's restores become ``RESTORE`` orders to the chosen holders, run in
        parallel (one per key group, spread over the holders); phase 2's checkpoint
        moves become new holders. ``rejoined``: the tasks restarted empty (Storm
        restarted them), so they may hold checkpoints again and take work from now on:
        their nodes join again at the next rescale round (:attr:`joining`, under the
        elastic scheduler), which gives them their share back;
        otherwise they are lost (declared by the failure detector) and get nothing until
        their restart is recovered (:attr:`down`). ``stale_through`` (a restart): the
        routing epoch the new incarnation read at its start; groups routed to it later
        are its own, not restored (``MigrationController.lost_key_groups``). No planner
        gives a :attr:`down` node anything. ``durable``: the key groups
        of ``operator`` the durable store has a copy of; those with no live holder
        become ``DURABLE`` restores (the target reads the store). Key groups the plan
        lists as lost (no copy anywhere) keep their dead owner, now empty; the caller
        reports them. With a correlated strategy past its warm-up the
        re-placement uses the sliding correlation; with ``ring`` the ring re-places
        them (each on the next eligible node along the ring), every other strategy
        uses Algorithm 3.
        """
        control = self.controls[operator]
        nodes = sorted({self.placement.node_of(d) for d in dead})
        if rejoined:
            self.down -= set(dead)
            # Its groups went to their holders: like a node that became active, it takes
            # its share back by CPAL in the next rescale rounds (else they pile up there).
            self._rejoined |= set(nodes)
        else:
            stale_through = None
        lost = {d: control.lost_key_groups(d, stale_through) for d in dead}
        view = recovery_view(
            control,
            operator,
            dead,
            placement=self.placement,
            now=now,
            loads=self.last_view,
            zones=self.config.fault_zones,
            # A rejoined task's node is back for its operator, though another operator's
            # task there may not have restarted yet (chained zk-stop, session 29: else
            # the restarted task was given no checkpoint and its peer's groups none).
            down=self.down_nodes() - set(nodes) if rejoined else self.down_nodes(),
            stale_through=stale_through,
        )
        gone = {KeyGroupId(operator, g) for groups in lost.values() for g in groups}
        correlated = self.options.strategy == "correlated" and self.allocation is not None
        plan = plan_recovery(
            view,
            nodes,
            rejoined=nodes if rejoined else (),
            kept={kg for n in nodes for kg in view.owned_by(n)} - gone,
            durable={KeyGroupId(operator, g) for g in durable},
            correlation=self.correlation.correlation() if correlated else None,
            epsilon=self.options.slack,
            allocate=ring_allocation if self.options.strategy == "ring" else correlated_allocation,
        )
        restores = {
            m.key_group.index: self.placement.task_on(operator, m.target)
            for m in (*plan.restores, *plan.durable_restores)
        }
        holders = {
            m.key_group.index: self.placement.task_on(operator, m.target)
            for m in plan.checkpoint_moves
        }
        if not rejoined:
            self.declare_lost(dead)
        crash = control.recover(
            dead,
            restores=restores,
            holders=holders,
            now=now,
            from_store={m.key_group.index for m in plan.durable_restores},
            restarted=rejoined,
        )
        for g in restores:
            self._running.pop(KeyGroupId(operator, g), None)
        # Groups no live task could take (they wait, or are lost): a restore in flight to
        # a dead task is over (MigrationController.recover), so nothing restores them now.
        idle = {kg for kg in gone if kg.index not in restores}
        for groups in self._restoring.values():
            groups -= idle
        refused = tuple(
            (name, f"tasks {sorted(dead)} died; key group {g} restored instead")
            for g in crash.restored
            if (name := self.requested.pop(KeyGroupId(operator, g), None)) is not None
        )
        self.recoveries.append(
            {
                "t": now,
                "operator": operator,
                "dead": sorted(dead),
                "restored": list(crash.restored),
                "from_store": sorted(m.key_group.index for m in plan.durable_restores),
                "lost": [kg.index for kg in plan.lost],
                "waiting": [kg.index for kg in plan.waiting],
                "promoted": list(crash.promoted),
                "replicas_lost": list(crash.replicas_lost),
            }
        )
        for d, groups in lost.items():  # from checkpoints (promoted replicas: at once)
            self._restoring[task_name(operator, d)] = {
                KeyGroupId(operator, g) for g in groups if g in restores and g not in crash.promoted
            }
        return Recovery(operator=operator, plan=plan, crash=crash, refused=refused)

    # -- scale-out and scale-in ------------------------------------------------------------
    def rescale(
        self, records: Iterable[TaskRecord], nodes: NodeState, now: float, *, limit: int
    ) -> RescaleRound:
        """One round of a rescale: apply exactly :func:`~controller.scaling.plan_rescale`'s
        step (holder changes, then the CPAL moves of it that ``concurrent_moves`` lets
        start, at most ``limit`` migrations in flight).

        A node joins when it becomes active and stays joining until the planner reports
        it filled; idle nodes still owning or holding something are emptied like
        draining ones (they are not released: they were never bound). A holder placed by
        a rescale that has not reported the newest checkpoint after ``defer_secs``
        counts as ready: the move then falls back to direct (and says so)."""
        view = self.view(records, now)
        parked = {
            n
            for n in view.node_ids()
            if n not in nodes.active
            and (view.owned_by(n) or any(n in h for _, h in view.checkpoints.entries))
        }
        moving, assisted, in_flight = {}, set(), {}
        for op, control in self.controls.items():
            for g in range(control.num_key_groups):
                kg = KeyGroupId(op, g)
                m = control.moving.get(g)
                if m is not None:
                    moving[kg] = self.placement.node_of(m.target)
                    if m.source is not None:
                        in_flight[kg] = (
                            self.placement.node_of(m.source),
                            self.placement.node_of(m.target),
                        )
                elif control.has_newest(control.holders[g], g):
                    assisted.add(kg)
                elif now - self._holder_set.get(kg, now) >= self.options.defer_secs:
                    # The holder never reported (a group that checkpoints rarely): go
                    # ahead after ``defer_secs``; the move falls back to direct.
                    assisted.add(kg)
        # A node joins when it becomes active (or, at the first round, owns nothing),
        # and stays joining until a step reports it filled.
        new = nodes.active - self._rescale_active
        if not self._rescale_active:
            new = frozenset(n for n in new if not view.owned_by(n))
        new |= self._rejoined
        self._rejoined.clear()
        self._joining = (self._joining | new) & nodes.active
        self._rescale_active = nodes.active
        step = plan_rescale(
            RescaleView(
                view=view,
                active=nodes.active,
                draining=frozenset(nodes.draining | parked),
                joining=frozenset(self._joining),
                moving=moving,
                assisted=frozenset(assisted),
            )
        )
        self._joining -= set(step.filled)
        self._rescale_pending = step.pending
        self.node_state = nodes
        sends: list[Send] = []
        for kg, node in step.holders:
            task = self.placement.task_on(kg.operator, node)
            out = self.controls[kg.operator].set_holder(kg.index, task)
            if out:
                self._holder_set[kg] = now
            sends += out
        started, changed = [], []
        for move in concurrent_moves(step.moves, in_flight, limit):
            try:
                ordered, _ = self._start(move, now, patient=False)
            except MigrationRefused:
                continue
            assert ordered is not None  # an impatient move is always ordered
            sends += ordered.sends
            started.append(ordered.move)
            if ordered.choice.changed:
                changed.append((ordered.move, ordered.choice.reason))
        released = tuple(n for n in step.released if n in nodes.draining)
        step = RescaleStep(
            holders=step.holders,
            moves=step.moves,
            released=released,
            filled=step.filled,
            pending=step.pending,
        )
        self.last_view = view
        return RescaleRound(
            step=step, started=tuple(started), sends=tuple(sends), changed=tuple(changed)
        )

    @property
    def rescaling(self) -> bool:
        """Whether a rescale is under way (nodes joining or draining, groups to move):
        adaptation waits for it."""
        return bool(
            self._joining
            or self._rescale_pending
            or (self.node_state is not None and self.node_state.draining)
        )

    @property
    def joining(self) -> frozenset[NodeId]:
        """Nodes that joined and still wait for their share of key groups."""
        return frozenset(self._joining)

    # -- migrations ----------------------------------------------------------------------
    def _start(self, move: Move, now: float, *, patient: bool) -> tuple[Ordered | None, _PutOff]:
        """Choose ``move``'s protocol (:func:`~elastorm.core.protocol_choice.choose_protocol`,
        the one place) and order it, recording it running; ``MigrationRefused`` if it
        cannot be ordered.

        ``patient`` (adaptation's moves): a checkpoint-assisted move whose target has
        no newest checkpoint yet is put off for up to ``defer_secs``, and with
        ``thresholds.lazy_move`` a move to a target that is not the holder first makes it
        the holder (Madsen & Zhou 2015's lazy move; the ``SetHolder`` is in the
        returned put-off's sends); then (None, why). Impatient moves (a rescale's, which
        waits for its holders itself) are ordered at once."""
        kg = move.key_group
        control = self.controls[kg.operator]
        target = self.placement.task_on(kg.operator, move.target)
        rules: dict[str, Any] = {}
        if patient:
            since = self._waiting_since.setdefault(kg, now)
            rules = {
                "lazy": self.thresholds.lazy_move,
                "waited": now - since,
                "defer_secs": self.options.defer_secs,
            }
        choice = control.choose(kg.index, target, move.protocol, **rules)
        if choice.verdict is Verdict.WAIT:
            return None, _PutOff(reason=choice.reason)
        if choice.verdict is Verdict.RELOCATE:
            sends = control.set_holder(kg.index, target)
            if sends:
                self._holder_set[kg] = now
            return None, _PutOff(reason=choice.reason, sends=tuple(sends))
        self._waiting_since.pop(kg, None)
        ordered = self._order(kg.operator, kg.index, target, choice, move.reason, now)
        self.orders.append(ordered.move)
        self._running[kg] = _Started(ordered.move, now)
        return ordered, _PutOff()

    def _order(
        self,
        operator: str,
        key_group: int,
        target: int,
        choice: ProtocolChoice,
        reason: MoveReason,
        now: float,
    ) -> Ordered:
        """Order the move of ``key_group`` to task ``target`` by ``choice.protocol``
        (``MigrationRefused`` if it cannot run): the commands, and the move as ordered."""
        control = self.controls[operator]
        sends = control.migrate(key_group, target, choice.protocol, now=now)
        moving = control.moving[key_group]
        assert moving.source is not None  # a migration always has a source
        move = Move(
            key_group=KeyGroupId(operator, key_group),
            source=self.placement.node_of(moving.source),
            target=self.placement.node_of(target),
            protocol=choice.protocol,
            reason=reason,
        )
        return Ordered(
            move=move,
            choice=choice,
            epoch=moving.epoch,
            source=moving.source,
            target=target,
            sends=tuple(sends),
        )

    def request(
        self, name: str, request: MigrationRequest, now: float, *, lost: Collection[int] = ()
    ) -> RequestOutcome:
        """An operator's request ``name`` (``elastorm migrate``, the dashboard's form),
        decided like the loop's own moves: the same protocol choice, the same order. A
        CPA or CPAL to the holder that has not reported the newest checkpoint yet waits
        (``waiting``: asked again each round) up to ``defer_secs`` from when ``name`` was
        first asked, as the loop's own moves do (a holder just placed gets its first
        checkpoint within an interval); then it runs direct, and the outcome's
        ``choice`` says so and why. Refused, not raised, when its operator is not keyed
        here, its target task is ``lost`` (declared by the failure detector) or the
        operator's controller refuses the order (busy, replicated, unknown task, already
        the owner). A started request is tracked until it ends
        (:meth:`on_migration_done`, :meth:`recover`)."""
        outcome = self._decide_request(name, request, now, lost)
        if not outcome.waiting:  # decided: the next ask of ``name`` starts afresh
            self._request_since.pop(name, None)
        return outcome

    def _decide_request(
        self, name: str, request: MigrationRequest, now: float, lost: Collection[int]
    ) -> RequestOutcome:
        """:meth:`request`'s decision; it only starts ``name``'s wait, never ends it."""
        control = self.controls.get(request.operator)
        if control is None:
            return RequestOutcome(refused=f"{request.operator!r} is not a keyed operator here")
        g = request.key_group
        target = control.holders.get(g, -1) if request.target == HOLDER else int(request.target)
        if target in lost or target in self.down:
            return RequestOutcome(refused=f"task {target} is lost (declared by the controller)")
        since = self._request_since.setdefault(name, now)
        try:
            choice = control.choose(
                g, target, request.protocol, waited=now - since, defer_secs=self.options.defer_secs
            )
            if choice.verdict is Verdict.WAIT:
                return RequestOutcome(waiting=choice.reason)
            ordered = self._order(request.operator, g, target, choice, MoveReason.REQUEST, now)
        except MigrationRefused as exc:
            return RequestOutcome(refused=str(exc))
        self.requested[ordered.move.key_group] = name
        return RequestOutcome(ordered=ordered)

    def overdue(self, operator: str, now: float, limit: float) -> list[tuple[Overdue, str | None]]:
        """``operator``'s migrations and restores past ``limit`` s (each reported once),
        with the operator request each carries out, if any."""
        return [
            (o, self.requested.get(KeyGroupId(operator, o.key_group)))
            for o in self.controls[operator].overdue(now, limit)
        ]

    def on_migration_done(
        self, operator: str, done: MigrationDone, now: float
    ) -> MigrationEnded | None:
        """Feed one end's report; when the migration ended, what ended (kept in
        ``ended``, and a metrics record for the loop's own moves), else None.

        The pause is the target's (``done.pause``), kept until the other end reports
        too; nothing here computes a pause."""
        control = self.controls[operator]
        g = done.key_group
        if done.pause is not None:
            self._pauses[(operator, g, done.epoch)] = done.pause
        moving = control.moving.get(g)  # gone once both ends are done
        if moving is None or not control.on_migration_done(done):
            return None
        pause = self._pauses.pop((operator, g, done.epoch), None)
        for key in [k for k in self._pauses if k[:2] == (operator, g) and k[2] < done.epoch]:
            del self._pauses[key]  # aborted migrations' reports
        if done.protocol.restores:
            for groups in self._restoring.values():
                groups.discard(KeyGroupId(operator, g))
        started = self._running.pop(KeyGroupId(operator, g), None)
        request = self.requested.pop(KeyGroupId(operator, g), None)
        completion = max(0.0, now - (started.at if started else moving.since))
        if started is not None:
            self.records.append(
                MigrationRecord(move=started.move, pause=pause, completion=completion)
            )
        ended = MigrationEnded(
            operator=operator,
            key_group=g,
            epoch=done.epoch,
            protocol=moving.protocol,
            source=moving.source,
            target=moving.target,
            at=now,
            completion=completion,
            pause=pause,
            by="controller" if started or moving.protocol.restores else "request",
            request=request,
        )
        if moving.protocol is not Protocol.REPLICATE:  # a replica's start moves nothing
            self.ended[operator].append(ended)
        return ended

    def metrics(self) -> MetricsSnapshot | None:
        """Madsen & Zhou 2015's section 7.3 metrics over the migrations so far and the last view.

        ``accumulated_latency`` sums the pauses the migrations' targets measured.
        """
        if self.last_view is None:
            return None
        return snapshot(self.records, self.last_view, self.thresholds)

    def ordered_share(self) -> float | None:
        """Share of ordered (not only finished) migrations that were checkpoint-assisted."""
        moves = [m for m in self.orders if m.reason is not MoveReason.RECOVERY]
        if not moves:
            return None
        return sum(m.protocol.checkpoint_assisted for m in moves) / len(moves)


def prior_from_artifact(artifact) -> CorrelationMatrix:
    """The Spark job's correlation matrix as a prior (constant key groups: 0)."""
    import numpy as np

    kgs = [KeyGroupId(op, g) for op, g in artifact.key_groups]
    return CorrelationMatrix(kgs, np.nan_to_num(artifact.matrix, nan=0.0))
