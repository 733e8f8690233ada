"""Scale-out and scale-in as plain data: which nodes, which key groups, in what order.

Madsen & Zhou 2015 deploy each operator with one task per node it may ever run on,
so scaling is only a matter of moving key groups; the elastic scheduler
(``ElasticScheduler.java``) keeps one task of every elastic operator per bound node.
This module decides, without any I/O:

* the node set (:class:`NodeSet`, the ``scheduler/nodes`` znode): which named nodes
  are wanted and which drain, for ``elastorm scale --nodes N`` (:func:`scale_to`) and
  ``elastorm drain NODE`` (:func:`drain`), and when a drained node is let go
  (:func:`release`);
* each controller round of a rescale (:func:`plan_rescale`): the key groups a joining
  node takes (by load, checkpoint holders first, so they move by CPAL: Madsen & Zhou
  2015, Alg. 2) and everything a draining node gives up (its key groups and the
  checkpoints it holds), as holder changes and moves;
* which moves run at once (:func:`concurrent_moves`): no two share a source or a
  target task, and at most ``limit`` are in flight.

Logical node ``i`` (``node<i>``) is the ``i``-th task of every keyed operator; the
scheduler publishes which named node each one is bound to (:class:`Binding`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from elastorm.controller.adaptation import Move, MoveReason, Thresholds, is_overloaded
from elastorm.controller.model import (
    MIN_ACTIVE_NODES,
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    NodeId,
)
from elastorm.core.messages import Protocol


class ScalingError(ValueError):
    """A scaling request that cannot be carried out (names what is wrong)."""


T = TypeVar("T")


def _decode(raw: bytes | None, what: str, empty: T, build: Callable[[dict], T]) -> T:
    """``build`` of the JSON in ``raw``; ``empty`` when there is no znode (None or empty
    bytes); ``ScalingError`` naming ``what`` when the bytes are not what ``build`` reads."""
    if not raw:
        return empty
    try:
        return build(json.loads(raw.decode()))
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise ScalingError(f"malformed {what}: {exc}") from None


# -- the node set: what people and the controller ask of the scheduler -----------------
@dataclass(frozen=True, kw_only=True)
class NodeSet:
    """The ``scheduler/nodes`` znode: named nodes that may be bound (``wanted``; None =
    every live node) and nodes that take no new work because they are being emptied
    (``draining``)."""

    wanted: tuple[str, ...] | None = None
    draining: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.wanted is not None:
            object.__setattr__(self, "wanted", tuple(sorted(set(self.wanted))))
        object.__setattr__(self, "draining", tuple(sorted(set(self.draining))))


def encode_node_set(nodes: NodeSet) -> bytes:
    """JSON bytes of ``nodes`` (what ``ElasticScheduler.parseNodes`` reads)."""
    wanted = None if nodes.wanted is None else list(nodes.wanted)
    return json.dumps({"wanted": wanted, "draining": list(nodes.draining)}).encode()


def decode_node_set(raw: bytes | None) -> NodeSet:
    """Inverse of :func:`encode_node_set`; no znode (None or empty) = every node wanted."""

    def build(data: dict) -> NodeSet:
        wanted = data.get("wanted")
        return NodeSet(
            wanted=None if wanted is None else tuple(str(n) for n in wanted),
            draining=tuple(str(n) for n in data.get("draining") or ()),
        )

    return _decode(raw, "node set", NodeSet(), build)


@dataclass(frozen=True, kw_only=True)
class Binding:
    """What the scheduler applied (``scheduler/placement``): logical node ``i`` -> the
    named node it runs on (None: idle, its tasks wait in the idle worker)."""

    nodes: tuple[str | None, ...] = ()

    def name_of(self, node: NodeId) -> str | None:
        index = int(node.removeprefix("node"))
        return self.nodes[index] if index < len(self.nodes) else None

    @property
    def bound(self) -> tuple[str, ...]:
        """Bound names in logical-node order."""
        return tuple(n for n in self.nodes if n is not None)


def decode_binding(raw: bytes | None) -> Binding:
    """The scheduler's published placement; empty before its first decision."""

    def build(data: dict) -> Binding:
        return Binding(nodes=tuple(None if n is None else str(n) for n in data["binding"]))

    return _decode(raw, "scheduler placement", Binding(), build)


@dataclass(frozen=True, kw_only=True)
class RescaleProgress:
    """What the controller publishes in ``controller/rescale`` after each rescale round:
    the nodes (by name) still joining (waiting for their share of key groups) and
    draining (being emptied; the node set's draining nodes the scheduler still binds),
    the key groups still to move, and the node count the adaptation manager wants
    (:func:`scale_hint`; None: no wish)."""

    joining: tuple[str, ...] = ()
    draining: tuple[str, ...] = ()
    pending: int = 0
    want: int | None = None

    def encode(self) -> bytes:
        return json.dumps(
            {
                "joining": list(self.joining),
                "draining": list(self.draining),
                "pending": self.pending,
                "want": self.want,
            }
        ).encode()


def decode_rescale(raw: bytes | None) -> RescaleProgress:
    """Inverse of :meth:`RescaleProgress.encode`; nothing published yet = nothing under way.

    >>> decode_rescale(RescaleProgress(draining=("supervisor-2",), pending=3).encode())
    RescaleProgress(joining=(), draining=('supervisor-2',), pending=3, want=None)
    """

    def build(data: dict) -> RescaleProgress:
        want = data.get("want")
        return RescaleProgress(
            joining=tuple(str(n) for n in data.get("joining") or ()),
            draining=tuple(str(n) for n in data.get("draining") or ()),
            pending=int(data.get("pending") or 0),
            want=None if want is None else int(want),
        )

    return _decode(raw, "rescale progress", RescaleProgress(), build)


@dataclass(frozen=True, kw_only=True)
class ScaleChange:
    """What ``elastorm scale`` does: start these nodes, then write ``nodes``; the
    controller then empties the draining ones."""

    start: tuple[str, ...]
    drain: tuple[str, ...]
    nodes: NodeSet


def active_names(nodes: NodeSet, binding: Binding) -> tuple[str, ...]:
    """Bound names that are not draining, in logical-node order."""
    return tuple(n for n in binding.bound if n not in nodes.draining)


def check_target(target: int, binding: Binding) -> None:
    """``ScalingError`` unless ``MIN_ACTIVE_NODES <= target <=`` the number of logical
    nodes (the keyed operators' task count, fixed at submit)."""
    limit = len(binding.nodes)
    if target < MIN_ACTIVE_NODES:
        raise ScalingError(
            f"--nodes {target}: an elastic topology keeps at least {MIN_ACTIVE_NODES} nodes, "
            "since each key group's checkpoint is held on a node other than its owner's"
        )
    if target > limit:
        raise ScalingError(
            f"--nodes {target}: the topology has {limit} tasks per keyed operator, so "
            f"{MIN_ACTIVE_NODES}..{limit} nodes (the task count is fixed at submit)"
        )


def scale_to(
    target: int, *, nodes: NodeSet, binding: Binding, live: Iterable[str], spare: Sequence[str]
) -> ScaleChange:
    """The change that brings the topology to ``target`` active nodes.

    Scale-out wants live nodes that are not bound yet first (sorted), then the
    provisioner's ``spare`` names (started by the caller); scale-in drains the nodes
    bound last (highest logical node first), never logical node 0, which hosts the
    topology's spouts and other non-keyed executors. Raises ``ScalingError`` when
    ``target`` is below ``MIN_ACTIVE_NODES`` or above the number of logical nodes.

    >>> b = Binding(nodes=("s0", "s1", None))
    >>> scale_to(3, nodes=NodeSet(), binding=b, live=["s0", "s1"], spare=["s2"]).start
    ('s2',)
    >>> b3 = Binding(nodes=("s0", "s1", "s2"))
    >>> scale_to(2, nodes=NodeSet(), binding=b3, live=["s0", "s1", "s2"], spare=[]).drain
    ('s2',)
    """
    check_target(target, binding)
    active = list(active_names(nodes, binding))
    draining = set(nodes.draining)
    start: list[str] = []
    drains: list[str] = []
    if target > len(active):
        # A node still draining is taken back first: it has the tasks already.
        for name in sorted(draining & set(binding.bound)):
            if len(active) < target:
                draining.discard(name)
                active.append(name)
        free = sorted(set(live) - set(binding.bound) - draining)
        for name in free:
            if len(active) < target:
                active.append(name)
        for name in spare:
            if len(active) < target and name not in active and name not in draining:
                active.append(name)
                start.append(name)
        if len(active) < target:
            raise ScalingError(f"only {len(active)} nodes available, {target} asked")
    elif target < len(active):
        order = sorted(active, key=lambda n: binding.nodes.index(n) if n in binding.nodes else -1)
        while len(order) > target:
            victim = order.pop()
            if binding.nodes and binding.nodes[0] == victim:
                raise ScalingError(f"{victim} hosts the topology's non-keyed executors")
            drains.append(victim)
            draining.add(victim)
        active = order
    wanted = tuple(sorted(set(active) | draining))
    return ScaleChange(
        start=tuple(start), drain=tuple(drains), nodes=NodeSet(wanted=wanted, draining=draining)
    )


def drain(name: str, *, nodes: NodeSet, binding: Binding) -> NodeSet:
    """The node set with ``name`` draining; ``ScalingError`` if it is not bound, would
    leave fewer than ``MIN_ACTIVE_NODES`` active, or hosts the non-keyed executors
    (logical node 0)."""
    if name not in binding.bound:
        raise ScalingError(
            f"{name} runs no task of this topology (bound: {', '.join(binding.bound) or 'none'})"
        )
    if binding.nodes[0] == name:
        raise ScalingError(f"{name} hosts the topology's spouts and non-keyed bolts (node0)")
    active = active_names(nodes, binding)
    if name in active and len(active) <= MIN_ACTIVE_NODES:
        raise ScalingError(
            f"draining {name} would leave {len(active) - 1} active node(s): an elastic topology "
            f"keeps at least {MIN_ACTIVE_NODES}, since each key group's checkpoint is held on a "
            "node other than its owner's"
        )
    wanted = nodes.wanted if nodes.wanted is not None else binding.bound
    return NodeSet(wanted=(*wanted, name), draining=(*nodes.draining, name))


def release(name: str, nodes: NodeSet, binding: Binding) -> NodeSet:
    """The node set once ``name`` is empty: neither wanted nor draining (the scheduler
    then moves its idle tasks away, and the provisioner may stop it)."""
    wanted = nodes.wanted if nodes.wanted is not None else binding.bound
    return NodeSet(
        wanted=tuple(n for n in wanted if n != name),
        draining=tuple(n for n in nodes.draining if n != name),
    )


# -- the controller's side: one round of a rescale ---------------------------------------
@dataclass(frozen=True, kw_only=True)
class RescaleView:
    """The controller's state for one rescale round.

    ``view``: owners, holders and loads over the bound logical nodes; ``active``: the
    bound logical nodes that are not draining; ``draining``: those being emptied;
    ``joining``: active nodes that still wait for their share (newly bound, until a
    step reports them ``filled``); ``moving``: key groups whose migration is in flight,
    with their target; ``assisted``: key groups whose holder has reported the newest
    checkpoint (a CPAL can start).
    """

    view: ClusterView
    active: frozenset[NodeId]
    draining: frozenset[NodeId] = frozenset()
    joining: frozenset[NodeId] = frozenset()
    moving: Mapping[KeyGroupId, NodeId] = field(default_factory=dict)
    assisted: frozenset[KeyGroupId] = frozenset()

    def __post_init__(self) -> None:
        if not self.active:
            raise ControllerModelError("a rescale needs at least one active node")
        if self.active & self.draining or not self.joining <= self.active:
            raise ControllerModelError("active and draining overlap, or joining is not active")


@dataclass(frozen=True, kw_only=True)
class RescaleStep:
    """One round: checkpoints to re-place first (``holders``), then CPAL moves whose
    target already holds the newest checkpoint (``moves``), the draining nodes now
    empty (``released``: no key group, no checkpoint, nothing moving) and the joining
    nodes that have their share (``filled``: nothing planned or moving towards them)."""

    holders: tuple[tuple[KeyGroupId, NodeId], ...] = ()
    moves: tuple[Move, ...] = ()
    released: tuple[NodeId, ...] = ()
    filled: tuple[NodeId, ...] = ()
    pending: int = 0  # key groups still to move (holders being placed or moves waiting)


@dataclass
class _Loads:
    """Predicted load per node as the round decides (weights: loads, or 1 per group when
    no load is measured yet)."""

    weight: dict[KeyGroupId, float]
    load: dict[NodeId, float] = field(default_factory=dict)

    def least(self, nodes: Iterable[NodeId], exclude: Iterable[NodeId] = ()) -> NodeId | None:
        """Least loaded node of ``nodes`` not in ``exclude``; ties by node id."""
        skip = set(exclude)
        options = sorted(n for n in nodes if n not in skip)
        return min(options, key=lambda n: (self.load[n], n)) if options else None

    def move(self, kg: KeyGroupId, source: NodeId, target: NodeId) -> None:
        self.load[source] -= self.weight[kg]
        self.load[target] += self.weight[kg]


def _loads(view: ClusterView, moving: Mapping[KeyGroupId, NodeId]) -> _Loads:
    """Loads with every migration in flight counted at its target."""
    measured = sum(k.load for k in view.key_groups) > 0
    weight = {k.key_group: (k.load if measured else 1.0) for k in view.key_groups}
    out = _Loads(weight=weight, load=dict.fromkeys(view.node_ids(), 0.0))
    for k in view.key_groups:
        out.load[moving.get(k.key_group, k.owner)] += weight[k.key_group]
    return out


def plan_rescale(state: RescaleView) -> RescaleStep:
    """One controller round of a rescale (pure, deterministic).

    Draining nodes: every key group they own goes to its checkpoint holder if that is
    an active node, else to the least-loaded active node, which first becomes its
    holder; every checkpoint they hold for a group owned elsewhere is re-placed on the
    least-loaded active node other than the owner. Joining nodes: each takes key
    groups from the most loaded nodes until it carries ``total / active`` (in load, or
    in groups while no load is measured): among the groups that fit in what is left of
    its share, those whose checkpoint it already holds first, then the heaviest; the
    chosen groups' checkpoints are placed on it first. A move is returned only once its
    target holds the newest checkpoint (``assisted``), so every planned move is a CPAL
    (the caller may count a holder that has not reported for long as assisted: the
    move then falls back to direct). Key groups in flight are left
    alone. Complexity ``O(K log K + K x N)``.

    >>> from elastorm.controller.model import KeyGroupInfo, NodeInfo
    >>> kgs = [KeyGroupInfo(key_group=KeyGroupId("op", g), owner="node0") for g in range(4)]
    >>> view = ClusterView(nodes=[NodeInfo(node_id="node0"), NodeInfo(node_id="node1")],
    ...                    key_groups=kgs, checkpoints={KeyGroupId("op", 3): ("node1",)})
    >>> step = plan_rescale(RescaleView(view=view, active=frozenset({"node0", "node1"}),
    ...                                 joining=frozenset({"node1"}),
    ...                                 assisted=frozenset({KeyGroupId("op", 3)})))
    >>> [str(m.key_group) for m in step.moves], [str(k) for k, _ in step.holders]
    (['op/3'], ['op/0'])
    """
    view = state.view
    loads = _loads(view, state.moving)
    # Only nodes that take work receive or give any (ClusterView.targets): a down joining
    # node stays joining, and is filled once its restart is recovered.
    active = frozenset(state.active) & set(view.targets())
    holders: list[tuple[KeyGroupId, NodeId]] = []
    moves: list[Move] = []
    pending = 0

    def holder(kg: KeyGroupId) -> NodeId | None:
        found = view.checkpoints.holders(kg)
        return found[0] if found else None

    def runs(kg: KeyGroupId) -> list[NodeId]:
        """The active nodes ``kg`` may move to: those running a task of its operator."""
        return sorted(active & set(view.targets(kg.operator)))

    def plan(kg: KeyGroupId, source: NodeId, target: NodeId, reason: MoveReason) -> None:
        nonlocal pending
        pending += 1
        loads.move(kg, source, target)
        if holder(kg) == target and kg in state.assisted:
            move = Move(
                key_group=kg, source=source, target=target, protocol=Protocol.CPAL, reason=reason
            )
            moves.append(move)
        elif holder(kg) != target:
            holders.append((kg, target))

    # Scale-in: empty the draining nodes; no checkpoint stays off the active nodes.
    for node in sorted(state.draining):
        for kg in view.owned_by(node):
            if kg in state.moving:
                pending += 1
                continue
            h = holder(kg)
            target = h if h in active else loads.least(runs(kg))
            if target is None:  # every active node of its operator is down: wait
                pending += 1
                continue
            plan(kg, node, target, MoveReason.SCALE_IN)
    for kg in sorted(k.key_group for k in view.key_groups):
        k = view.key_group(kg)
        parked = holder(kg) is not None and holder(kg) not in active
        if parked and k.owner not in state.draining and kg not in state.moving:
            target = loads.least(runs(kg), exclude=[k.owner])
            if target is not None:
                holders.append((kg, target))
                pending += 1

    # Scale-out: give each joining node its share.
    total = sum(loads.weight.values())
    share = total / max(len(active), 1)
    filled = []
    for node in sorted(state.joining & active):
        planned = {kg for kg, _ in holders} | {m.key_group for m in moves}
        before = len(planned)
        while loads.load[node] < share - 1e-9:
            donors = sorted(
                (n for n in active if n != node and loads.load[n] > share + 1e-9),
                key=lambda n: (-loads.load[n], n),
            )
            if not donors:
                break
            candidates = [
                kg
                for donor in donors
                for kg in view.owned_by(donor)
                if kg not in state.moving and kg not in planned and view.runs(kg.operator, node)
            ]
            room = share - loads.load[node]
            if not candidates:
                break
            # Among the groups that fit, those whose checkpoint is already here first,
            # then the heaviest; if none fits, an empty node still takes the lightest.
            fitting = [k for k in candidates if loads.weight[k] <= room + 1e-9]
            if fitting:
                kg = min(
                    fitting,
                    key=lambda k, n=node: (0 if holder(k) == n else 1, -loads.weight[k], k),
                )
            elif loads.load[node] <= 0:
                kg = min(candidates, key=lambda k: (loads.weight[k], k))
            else:
                break  # every candidate would overshoot the share: stop here
            planned.add(kg)
            plan(kg, view.key_group(kg).owner, node, MoveReason.SCALE_OUT)
        if len(planned) == before and node not in state.moving.values():
            filled.append(node)

    released = tuple(
        n
        for n in sorted(state.draining)
        if not view.owned_by(n)
        and not any(n in view.checkpoints.holders(k.key_group) for k in view.key_groups)
    )
    return RescaleStep(
        holders=tuple(holders),
        moves=tuple(moves),
        released=released,
        filled=tuple(filled),
        pending=pending,
    )


def concurrent_moves(
    moves: Sequence[Move], in_flight: Mapping[KeyGroupId, tuple[NodeId, NodeId]], limit: int
) -> tuple[Move, ...]:
    """The moves to start now, in order: none shares a source or target task (an
    operator's task on a node) with another or with a migration in flight
    (``in_flight``: key group -> (source, target)), and at most ``limit`` migrations
    run in all, so the data path is not starved. ``ScalingError`` if ``limit < 1``.

    >>> m = lambda g, s, t: Move(key_group=KeyGroupId("op", g), source=s, target=t,
    ...                          protocol=Protocol.CPAL, reason=MoveReason.SCALE_OUT)
    >>> [x.key_group.index for x in concurrent_moves([m(0, "a", "c"), m(1, "b", "c"),
    ...                                               m(2, "b", "d")], {}, 4)]
    [0, 2]
    """
    if limit < 1:
        raise ScalingError(f"limit must be >= 1, got {limit}")
    taken = {(kg.operator, n) for kg, ends in in_flight.items() for n in ends}
    chosen: list[Move] = []
    for move in moves:
        if len(in_flight) + len(chosen) >= limit:
            break
        op = move.key_group.operator
        ends = {(op, move.source), (op, move.target)}
        if move.key_group in in_flight or ends & taken:
            continue
        taken |= ends
        chosen.append(move)
    return tuple(chosen)


def scale_hint(
    view: ClusterView,
    planned: Sequence[Move],
    thresholds: Thresholds,
    active: frozenset[NodeId],
    joining: frozenset[NodeId] = frozenset(),
) -> int | None:
    """How many nodes the adaptation manager wants, when that is not how many it has
    (Kumbhare et al. 2015, section VI, through provisioning): one more when an active
    node is overloaded and this round's ``planned`` moves relieve it of nothing (no
    active node can take load and no bound node is idle); fewer when, with no node
    overloaded, active nodes other than ``node0`` own nothing (the adaptation's
    scale-in emptied them; a joining node is not counted), never below
    ``MIN_ACTIVE_NODES``. None otherwise. The
    adaptation's own cooldowns and relief target are the first hysteresis; the
    autoscaler adds a hold time before acting on a hint (``elastorm autoscale``).

    >>> from elastorm.controller.model import KeyGroupInfo, NodeInfo
    >>> view = ClusterView(
    ...     nodes=[NodeInfo(node_id="node0", queue_length=500, cpu=0.95),
    ...            NodeInfo(node_id="node1", queue_length=500, cpu=0.9)],
    ...     key_groups=[KeyGroupInfo(key_group=KeyGroupId("op", 0), owner="node0"),
    ...                 KeyGroupInfo(key_group=KeyGroupId("op", 1), owner="node1")])
    >>> scale_hint(view, (), Thresholds(), frozenset({"node0", "node1"}))
    3
    """
    relieved = {m.source for m in planned}
    hot = [n for n in sorted(active) if is_overloaded(view, n, thresholds)]
    if any(n not in relieved for n in hot):
        return len(active) + 1
    if hot:
        return None
    idle = [n for n in sorted(active) if n != "node0" and n not in joining and not view.owned_by(n)]
    fewer = max(len(active) - len(idle), MIN_ACTIVE_NODES)
    if idle and not planned and fewer < len(active):
        return fewer
    return None
