"""Adaptation manager as a pure planner.

Madsen & Zhou 2015, section 4 (the adaptation manager); Kumbhare et al. 2015, section VI
(adaptive load balancing and elasticity).

``plan_adaptation(view, thresholds, state) -> (moves, new_state)`` decides
load-balancing, scale-out (bring an idle node in) and scale-in (empty a node).
Kumbhare et al. 2015's rule (section VI): a node is *overloaded* when
``queue >= queue_high`` AND ``cpu >= cpu_high``; it *can take load* when
``queue <= queue_low`` AND ``cpu <= cpu_low``. Anti-oscillation (Kumbhare et al. 2015
note that the simple rule oscillates):

* a key group that moved is frozen for ``cooldown`` seconds, and so is a node
  that was scaled in or brought in;
* a move may not push its target above ``cpu_high`` (predicted from key-group
  loads), and an overloaded node is relieved down to the mid-point between the
  two CPU thresholds, not just below ``cpu_high``;
* scale-in only happens when no node is overloaded and only if every receiving
  node stays at or below ``cpu_low`` afterwards.

Targets that already hold the key group's checkpoint are preferred (CPA, or
CPAL when there is something to replay); otherwise ``lazy_move`` relocates the
checkpoint first (full checkpoints) and then moves by CPA, else the move is direct.
The protocol comes from :func:`~elastorm.core.protocol_choice.choose_protocol`, the
one place that chooses it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from elastorm.controller.model import (
    MIN_ACTIVE_NODES,
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    KeyGroupInfo,
    NodeId,
)
from elastorm.core.messages import Protocol
from elastorm.core.protocol_choice import choose_protocol


class MoveReason(enum.Enum):
    """Why the controller ordered a move."""

    LOAD_BALANCE = "load_balance"
    SCALE_OUT = "scale_out"
    SCALE_IN = "scale_in"
    RECOVERY = "recovery"
    REQUEST = "request"  # an operator's (``elastorm migrate``, the dashboard's form)


@dataclass(frozen=True, kw_only=True, slots=True)
class Move:
    """Move ``key_group`` from ``source`` to ``target`` using ``protocol``. Only a durable
    recovery may have ``source == target``: the node restarted empty and reads its own
    group back from the store (nothing else runs the group's operator)."""

    key_group: KeyGroupId
    source: NodeId
    target: NodeId
    protocol: Protocol
    reason: MoveReason

    def __post_init__(self) -> None:
        own_restart = self.protocol is Protocol.DURABLE and self.reason is MoveReason.RECOVERY
        if self.source == self.target and not own_restart:
            raise ControllerModelError(f"{self.key_group}: move from {self.source} to itself")


@dataclass(frozen=True, kw_only=True, slots=True)
class Thresholds:
    """Kumbhare et al. 2015's thresholds (section VI) plus the anti-oscillation knobs.

    Raises ``ControllerModelError`` unless ``0 <= cpu_low < cpu_high`` and
    ``0 <= queue_low < queue_high`` and the other knobs are non-negative.
    """

    cpu_high: float = 0.8
    cpu_low: float = 0.5
    queue_high: float = 100.0
    queue_low: float = 10.0
    cooldown: float = 30.0
    max_moves: int = 16
    cpal_min_replay: float = 1.0
    lazy_move: bool = False
    scale_in: bool = True
    min_active_nodes: int = MIN_ACTIVE_NODES

    def __post_init__(self) -> None:
        if not 0 <= self.cpu_low < self.cpu_high:
            raise ControllerModelError("need 0 <= cpu_low < cpu_high")
        if not 0 <= self.queue_low < self.queue_high:
            raise ControllerModelError("need 0 <= queue_low < queue_high")
        if self.cooldown < 0 or self.max_moves < 0 or self.min_active_nodes < MIN_ACTIVE_NODES:
            raise ControllerModelError(
                f"cooldown, max_moves >= 0 and min_active_nodes >= {MIN_ACTIVE_NODES}"
            )

    @property
    def relief_target(self) -> float:
        """CPU an overloaded node is relieved down to: midway between low and high."""
        return (self.cpu_high + self.cpu_low) / 2


@dataclass(frozen=True, slots=True)
class AdaptationState:
    """What the planner remembers between rounds: when things last moved (view time)."""

    moved_at: Mapping[KeyGroupId, float] = field(default_factory=lambda: MappingProxyType({}))
    node_changed_at: Mapping[NodeId, float] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "moved_at", MappingProxyType(dict(self.moved_at)))
        object.__setattr__(self, "node_changed_at", MappingProxyType(dict(self.node_changed_at)))


def is_overloaded(view: ClusterView, node: NodeId, thresholds: Thresholds) -> bool:
    """Kumbhare et al. 2015's overload test (section VI): ``queue >= queue_high`` and
    ``cpu >= cpu_high``."""
    info = view.node(node)
    return (
        info.queue_length >= thresholds.queue_high and view.utilization(node) >= thresholds.cpu_high
    )


def can_take_load(view: ClusterView, node: NodeId, thresholds: Thresholds) -> bool:
    """Kumbhare et al. 2015's "can share load" test (section VI): ``queue <= queue_low`` and
    ``cpu <= cpu_low``."""
    info = view.node(node)
    return (
        info.queue_length <= thresholds.queue_low and view.utilization(node) <= thresholds.cpu_low
    )


def _protocol_at(
    kg: KeyGroupInfo, target: NodeId, holders: tuple[NodeId, ...], th: Thresholds
) -> Protocol:
    """The protocol proposed for moving ``kg`` to ``target``, by the one rule
    (:func:`~elastorm.core.protocol_choice.choose_protocol`) on what the view shows:
    a holder target is taken as ready (the loop checks its newest checkpoint before
    ordering), and a lazy move may wait (its checkpoint is placed first)."""
    return choose_protocol(
        None,
        target_is_holder=target in holders,
        holder_ready=True,
        replay=kg.replay_size,
        cpal_min_replay=th.cpal_min_replay,
        lazy=th.lazy_move,
        waited=0.0,
        defer_secs=math.inf,
    ).protocol


class _Round:
    """Book-keeping for one planning round: predicted CPU as moves are decided."""

    def __init__(self, view: ClusterView, th: Thresholds, state: AdaptationState) -> None:
        self.view, self.th, self.state = view, th, state
        self.now = view.now
        self.util = {n: view.utilization(n) for n in view.node_ids()}
        self.pred = dict(self.util)
        self.owner = {k.key_group: k.owner for k in view.key_groups}
        self.active = {n for n in view.targets() if view.owned_by(n)}  # never a down node
        self.moves: list[Move] = []
        self.moved: dict[KeyGroupId, float] = dict(state.moved_at)
        self.changed: dict[NodeId, float] = dict(state.node_changed_at)

    def cooling(self, kg: KeyGroupId) -> bool:
        t = self.moved.get(kg)
        return t is not None and self.now - t < self.th.cooldown

    def node_cooling(self, n: NodeId) -> bool:
        t = self.changed.get(n)
        return t is not None and self.now - t < self.th.cooldown

    def overloaded(self, n: NodeId) -> bool:
        return is_overloaded(self.view, n, self.th)

    def can_take(self, n: NodeId) -> bool:
        return can_take_load(self.view, n, self.th)

    def delta(self, kg: KeyGroupInfo, n: NodeId) -> float:
        return kg.load / self.view.node(n).capacity

    def fits(self, kg: KeyGroupInfo, n: NodeId, ceiling: float) -> bool:
        return self.pred[n] + self.delta(kg, n) <= ceiling + 1e-12

    def room(self, n: NodeId) -> tuple[float, NodeId]:
        """Tie-breaker among targets: least predicted CPU, then node id."""
        return (self.pred[n], n)

    def add(self, kg: KeyGroupInfo, target: NodeId, reason: MoveReason) -> None:
        src = self.owner[kg.key_group]
        holders = self.view.checkpoints.holders(kg.key_group)
        self.moves.append(
            Move(
                key_group=kg.key_group,
                source=src,
                target=target,
                protocol=_protocol_at(kg, target, holders, self.th),
                reason=reason,
            )
        )
        self.pred[src] -= self.delta(kg, src)
        self.pred[target] += self.delta(kg, target)
        self.owner[kg.key_group] = target
        self.moved[kg.key_group] = self.now
        if target not in self.active:
            self.active.add(target)
            self.changed[target] = self.now


def _pick_target(
    rnd: _Round, kg: KeyGroupInfo, candidates: Iterable[NodeId], ceiling: float
) -> NodeId | None:
    """Best target among ``candidates`` that run a task of ``kg``'s operator: a
    checkpoint holder first, then least CPU."""
    fitting = [
        n
        for n in candidates
        if rnd.view.runs(kg.key_group.operator, n) and rnd.fits(kg, n, ceiling)
    ]
    if not fitting:
        return None
    holders = rnd.view.checkpoints.holders(kg.key_group)
    with_cp = [n for n in fitting if n in holders]
    return min(with_cp or fitting, key=rnd.room)


def _relieve(rnd: _Round, source: NodeId) -> None:
    """Load-balance / scale-out away from one overloaded node."""
    view, th = rnd.view, rnd.th
    kgs = [
        view.key_group(kg)
        for kg in view.owned_by(source)
        if not rnd.cooling(kg) and rnd.owner[kg] == source
    ]
    receivers = sorted(
        n for n in rnd.active if n != source and rnd.can_take(n) and not rnd.overloaded(n)
    )
    idle = sorted(
        n
        for n in view.targets()
        if n not in rnd.active and not rnd.node_cooling(n) and rnd.can_take(n)
    )

    def assisted_first(kg: KeyGroupInfo) -> tuple[int, float, KeyGroupId]:
        # Checkpoint-assisted candidates first, heavier first, then key-group order.
        holders = view.checkpoints.holders(kg.key_group)
        ok = any(h in receivers and rnd.fits(kg, h, th.cpu_high) for h in holders)
        return (0 if ok else 1, -kg.load, kg.key_group)

    for kg in sorted(kgs, key=assisted_first):
        if rnd.pred[source] <= th.relief_target or len(rnd.moves) >= th.max_moves:
            return
        if kg.load <= 0:
            continue
        target = _pick_target(rnd, kg, receivers, th.cpu_high)
        reason = MoveReason.LOAD_BALANCE
        if target is None:
            target = _pick_target(rnd, kg, idle, th.cpu_high)
            reason = MoveReason.SCALE_OUT
            if target is not None:
                idle.remove(target)
                receivers.append(target)
                receivers.sort()
        if target is not None:
            rnd.add(kg, target, reason)


def _scale_in(rnd: _Round) -> None:
    """Empty one lightly loaded node if the others can absorb it below ``cpu_low``."""
    view, th = rnd.view, rnd.th
    if len(rnd.active) <= th.min_active_nodes:
        return
    candidates = sorted(
        (n for n in rnd.active if rnd.can_take(n) and not rnd.node_cooling(n)),
        key=lambda n: (view.node_load(n), n),
    )
    for victim in candidates:
        kgs = [view.key_group(kg) for kg in view.owned_by(victim)]
        if any(rnd.cooling(k.key_group) for k in kgs):
            continue
        if len(rnd.moves) + len(kgs) > th.max_moves:
            continue
        others = sorted(n for n in rnd.active if n != victim and rnd.can_take(n))
        saved = dict(rnd.pred)
        plan: list[tuple[KeyGroupInfo, NodeId]] = []
        for kg in sorted(kgs, key=lambda k: (-k.load, k.key_group)):
            target = _pick_target(rnd, kg, others, th.cpu_low)
            if target is None:
                break
            plan.append((kg, target))
            rnd.pred[victim] -= rnd.delta(kg, victim)
            rnd.pred[target] += rnd.delta(kg, target)
        rnd.pred = saved
        if len(plan) == len(kgs):
            for kg, target in plan:
                rnd.add(kg, target, MoveReason.SCALE_IN)
            rnd.active.discard(victim)
            rnd.changed[victim] = rnd.now
            return


def plan_adaptation(
    view: ClusterView, thresholds: Thresholds, state: AdaptationState | None = None
) -> tuple[tuple[Move, ...], AdaptationState]:
    """Plan one adaptation round: load-balance / scale-out, else maybe scale-in.

    Overloaded nodes are relieved in order of highest CPU, then node id; each
    sheds key groups (checkpoint-assisted candidates first, then heavier first)
    to active nodes that can take load, else brings in an idle node (scale-out).
    With no overloaded node, at most one node is scaled in per round. A ``down`` node
    (:meth:`ClusterView.targets`) is neither relieved, nor a receiver, nor scaled in.

    Pure and deterministic: time comes from ``view.now``; all iteration is sorted.
    Complexity ``O(|overloaded| * |Gamma_n| * |N|)`` per round.

    >>> from elastorm.controller.model import KeyGroupInfo, NodeInfo
    >>> kg = KeyGroupId("op", 0)
    >>> view = ClusterView(
    ...     nodes=[NodeInfo(node_id="a", queue_length=500, background_load=0.5),
    ...            NodeInfo(node_id="b")],
    ...     key_groups=[KeyGroupInfo(key_group=kg, owner="a", load=0.4),
    ...                 KeyGroupInfo(key_group=KeyGroupId("op", 1), owner="b", load=0.1)],
    ...     checkpoints={kg: ("b",)},
    ... )
    >>> moves, _ = plan_adaptation(view, Thresholds())
    >>> [(str(m.key_group), m.target, m.protocol.value) for m in moves]
    [('op/0', 'b', 'cpa')]
    """
    rnd = _Round(view, thresholds, state or AdaptationState())
    hot = sorted((n for n in view.targets() if rnd.overloaded(n)), key=lambda n: (-rnd.util[n], n))
    for n in hot:
        _relieve(rnd, n)
    if not hot and thresholds.scale_in:
        _scale_in(rnd)
    horizon = view.now - thresholds.cooldown
    new_state = AdaptationState(
        moved_at={k: t for k, t in rnd.moved.items() if t > horizon},
        node_changed_at={n: t for n, t in rnd.changed.items() if t > horizon},
    )
    return tuple(rnd.moves), new_state
