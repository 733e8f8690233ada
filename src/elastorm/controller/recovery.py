"""Failure handling as a pure plan (Madsen & Zhou 2015, section 4: fault-tolerance manager).

Phase 1 -- restore: every key group of a lost node is restored on a live holder
of its checkpoint (convert checkpoint to state, replay upstream buffers). When a
key group has several live holders, the work is spread across them the way
the parallel recovery of Zaharia et al. 2012 (section 3, fault recovery) spreads a lost
node's partitions: longest restore first, each onto the holder with the least restore
work so far (LPT).

Phase 2 -- re-place: checkpoints consumed by phase 1 and checkpoints the lost
nodes held are placed again with an allocation policy (Algorithm 3 by
default), keeping every surviving checkpoint where it is.

A key group with no live in-memory checkpoint (its owner and every holder are
gone) is restored from the durable store (Kwon et al. 2008: checkpoints in a
replicated file system) when the store has a copy of it: a ``Protocol.DURABLE``
restore onto the least-loaded live node outside the lost owner's fault zone
(where a holder restore would land too), and upstream replays from the durable
copy's positions. Only a group with no copy anywhere is *lost*: it is listed by
name and given to that same node, empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace

from elastorm.controller.adaptation import Move, MoveReason
from elastorm.controller.allocation import (
    AllocationSpec,
    CheckpointMove,
    InfeasibleAllocationError,
    correlated_allocation,
    moves_between,
)
from elastorm.controller.correlation import Correlation
from elastorm.controller.model import (
    Allocation,
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    KeyGroupInfo,
    NodeId,
)
from elastorm.core.messages import Protocol

AllocatePolicy = Callable[..., Allocation]


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryPlan:
    """What to do after ``failed`` nodes were lost.

    ``restores`` (phase 1, ``Protocol.RESTORE``, source = the lost owner) can run
    in parallel; ``durable_restores`` (``Protocol.DURABLE``, source = the lost
    owner, or the owner itself once it restarted) rebuild groups with no live holder
    from the durable store; ``lost`` groups had no copy anywhere; ``waiting`` groups
    have a durable copy but no live task of their operator to take it (every one
    failed): they keep their dead owner and are restored from the store when a task of
    their operator restarts; ``unprotected`` key groups have fewer checkpoints than asked
    because the survivors cannot satisfy constraint 1 / the zone rule;
    ``checkpoint_moves`` (phase 2, ``source=None``: a fresh
    checkpoint) follow. ``view`` is the cluster once both phases are done.
    """

    failed: tuple[NodeId, ...]
    restores: tuple[Move, ...]
    durable_restores: tuple[Move, ...]
    lost: tuple[KeyGroupId, ...]
    waiting: tuple[KeyGroupId, ...]
    unprotected: tuple[KeyGroupId, ...]
    checkpoint_moves: tuple[CheckpointMove, ...]
    view: ClusterView


def _restore(kg: KeyGroupInfo, target: NodeId, protocol: Protocol) -> Move:
    """A recovery move of ``kg`` from its lost owner to ``target`` (``protocol``: from a
    live holder's checkpoint, or from the durable store)."""
    return Move(
        key_group=kg.key_group,
        source=kg.owner,
        target=target,
        protocol=protocol,
        reason=MoveReason.RECOVERY,
    )


def plan_recovery(
    view: ClusterView,
    failed: Iterable[NodeId],
    *,
    rejoined: Iterable[NodeId] = (),
    kept: Collection[KeyGroupId] = frozenset(),
    durable: Collection[KeyGroupId] = frozenset(),
    correlation: Correlation | None = None,
    replicas: int = 1,
    epsilon: float = math.inf,
    allocate: AllocatePolicy = correlated_allocation,
) -> RecoveryPlan:
    """Plan recovery from the loss of ``failed`` nodes (restore, then re-place).

    ``rejoined`` names failed nodes that are back, empty (a Storm worker that
    restarted): nothing is restored from them, but phase 2 may place checkpoints
    on them again, and a durable restore may go to one (to the owner itself when no
    other task of the operator is left); ``kept`` names key groups a rejoined node's
    new incarnation was given after its restart (it has them: they are not restored).
    Nodes that are ``down`` (:meth:`ClusterView.targets`: lost earlier, or restarted
    and not yet recovered) neither take restores nor hold checkpoints. ``durable`` names
    the key groups the durable store has a copy of: those with no live holder get a
    durable restore, the others are lost.
    ``allocate`` is any policy of :mod:`elastorm.controller.allocation` taking
    ``(spec, keep=...)``. Complexity: ``O(K log K + |lost| * replicas)`` for
    phase 1 plus one run of the policy.

    Raises ``ControllerModelError`` if a failed node is unknown. When no node survives
    (every keyed task declared lost at once), nothing is restored now: groups with a
    durable copy wait for a restart, the others are lost. If the survivors cannot hold
    every checkpoint under constraint 1 and the zone rule, surviving checkpoints stay
    and the bare key groups are listed in ``unprotected``.

    >>> from elastorm.controller.model import NodeInfo
    >>> kg = KeyGroupId("op", 0)
    >>> view = ClusterView(
    ...     nodes=[NodeInfo(node_id=n) for n in ("a", "b", "c")],
    ...     key_groups=[KeyGroupInfo(key_group=kg, owner="a", load=1.0)],
    ...     checkpoints={kg: ("b",)},
    ... )
    >>> plan = plan_recovery(view, ["a"])
    >>> [(m.target, m.protocol.value) for m in plan.restores], plan.view.checkpoints.holders(kg)
    ([('b', 'restore')], ('c',))
    >>> plan = plan_recovery(view, ["a", "b"], durable={kg})
    >>> [(m.target, m.protocol.value) for m in plan.durable_restores], plan.lost
    ([('c', 'durable')], ())
    """
    down = tuple(sorted(set(failed)))
    known = set(view.node_ids())
    for n in down:
        if n not in known:
            raise ControllerModelError(f"failed node {n!r} is not in the view")
    live = [n for n in view.nodes if n.node_id not in down and not n.down]
    live_ids = {n.node_id for n in live}
    back = set(rejoined)
    if not back <= set(down):
        raise ControllerModelError(f"rejoined nodes {sorted(back - set(down))} did not fail")

    holders = {kg: [h for h in nodes if h in live_ids] for kg, nodes in view.checkpoints.entries}
    lost_kgs = [view.key_group(kg) for n in down for kg in view.owned_by(n) if kg not in kept]
    # LPT: longest restore first, onto the least-busy live holder (then id).
    lost_kgs.sort(key=lambda k: (-(k.checkpoint_size + k.replay_size), k.key_group))
    work = {n: 0.0 for n in live_ids | back}
    base_load = {n: view.node_load(n) for n in live_ids | back}
    zone = {n.node_id: n.fault_zone for n in view.nodes}
    restores: list[Move] = []
    durable_restores: list[Move] = []
    lost_groups: list[KeyGroupId] = []
    waiting: list[KeyGroupId] = []
    new_owner: dict[KeyGroupId, NodeId] = {}
    stranded: set[NodeId] = set()  # failed nodes that keep a group (``down`` in ``view``)
    for kg in lost_kgs:
        cands = holders.get(kg.key_group, [])
        if not cands:
            # A live node that runs the group's operator: outside the lost owner's zone
            # first (a zone may be failing as a whole), then the least load (then id);
            # the same node if the group is lost. When every task of the operator failed
            # (it has fewer tasks than there are nodes), another one that rejoined, empty,
            # else the owner itself once it rejoined (its own copy, from the store).
            owner_zone = zone[kg.owner]
            op = kg.key_group.operator
            rejoined_op = sorted(n for n in back if view.runs(op, n))
            runs = (
                [n for n in live_ids if view.runs(op, n)]
                or [n for n in rejoined_op if n != kg.owner]
                or [n for n in rejoined_op if kg.key_group in durable]
            )
            if not runs:  # every task of its operator failed: nowhere to restore it now
                (waiting if kg.key_group in durable else lost_groups).append(kg.key_group)
                stranded.add(kg.owner)
                continue
            target = min(runs, key=lambda n: (zone[n] == owner_zone, base_load[n], n))
            if kg.key_group in durable:
                durable_restores.append(_restore(kg, target, Protocol.DURABLE))
            else:
                lost_groups.append(kg.key_group)
        else:
            target = min(cands, key=lambda n: (work[n], base_load[n], n))
            holders[kg.key_group].remove(target)  # the checkpoint becomes the state
            restores.append(_restore(kg, target, Protocol.RESTORE))
        work[target] += kg.checkpoint_size + kg.replay_size
        base_load[target] += kg.load
        new_owner[kg.key_group] = target

    key_groups = [
        KeyGroupInfo(
            key_group=k.key_group,
            owner=new_owner.get(k.key_group, k.owner),
            load=k.load,
            checkpoint_size=k.checkpoint_size,
            replay_size=k.replay_size,
        )
        for k in view.key_groups
    ]
    survived = Allocation(holders)
    after_restore = ClusterView(
        nodes=[
            n if n.node_id not in stranded or n.node_id in back else replace(n, down=True)
            for n in view.nodes
            if n.node_id in live_ids or n.node_id in back or n.down or n.node_id in stranded
        ],
        key_groups=key_groups,
        checkpoints=survived,
        now=view.now,
        hosts=view.hosts,
    )
    spec = AllocationSpec(
        view=after_restore, correlation=correlation, replicas=replicas, epsilon=epsilon
    )
    try:
        placed = allocate(spec, keep=survived)
    except InfeasibleAllocationError:
        # Too few zones left for the constraint: recover anyway, report who is bare.
        placed = survived
    return RecoveryPlan(
        failed=down,
        restores=tuple(restores),
        durable_restores=tuple(sorted(durable_restores, key=lambda m: m.key_group)),
        lost=tuple(sorted(lost_groups)),
        waiting=tuple(sorted(waiting)),
        unprotected=tuple(
            k.key_group
            for k in after_restore.key_groups
            if len(placed.holders(k.key_group)) < replicas
        ),
        checkpoint_moves=moves_between(survived, placed),
        view=after_restore.replace(checkpoints=placed),
    )
