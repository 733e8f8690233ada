"""What the controller's tests compute to check it, outside the package: nothing
that runs needs these (``tests/unit/test_reachability.py``).

- :func:`apply_moves`: the cluster after a round's moves complete, to replay the
  adaptation planner round after round (convergence, no oscillation);
- :func:`checkpoint_loads`, :func:`restore_work`: per-node sums the allocation and
  recovery tests bound;
- :func:`dense`, :func:`node_sums`, :func:`pair`: plain reference computations of
  what the controller's correlations hold (``CorrelationFactors`` never forms the
  ``K x K`` matrix; these do, for small ``K``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from elastorm.controller.adaptation import Move
from elastorm.controller.allocation import AllocationSpec
from elastorm.controller.correlation import Correlation, CorrelationFactors, CorrelationMatrix
from elastorm.controller.model import (
    Allocation,
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    KeyGroupInfo,
    NodeId,
)
from elastorm.controller.recovery import RecoveryPlan
from elastorm.core.messages import Protocol


def apply_moves(view: ClusterView, moves: Iterable[Move]) -> ClusterView:
    """The view after ``moves`` complete (the planner's tests replay rounds with it).

    Ownership goes to the target. Checkpoints follow the protocols: after CPA,
    CPAL, lazy-CPA or direct the source turns its state into the checkpoint, so
    the source replaces the target (or, for direct/lazy, the first holder) among
    the holders; a restore consumes the holder's checkpoint. Loads are unchanged.
    """
    owner = {k.key_group: k for k in view.key_groups}
    holders = {kg: list(ns) for kg, ns in view.checkpoints.entries}
    for m in moves:
        info = owner[m.key_group]
        if info.owner != m.source and m.protocol is not Protocol.RESTORE:
            raise ControllerModelError(f"{m.key_group} is on {info.owner}, not {m.source}")
        owner[m.key_group] = KeyGroupInfo(
            key_group=info.key_group,
            owner=m.target,
            load=info.load,
            checkpoint_size=info.checkpoint_size,
            replay_size=0.0,
        )
        hs = holders.setdefault(m.key_group, [])
        if m.protocol is Protocol.RESTORE:
            if m.target in hs:
                hs.remove(m.target)
            continue
        if m.target in hs:
            hs[hs.index(m.target)] = m.source
        elif hs:
            hs[0] = m.source
        else:
            hs.append(m.source)
        holders[m.key_group] = list(dict.fromkeys(hs))
    return view.replace(key_groups=owner.values(), checkpoints=Allocation(holders))


def checkpoint_loads(spec: AllocationSpec, allocation: Allocation) -> dict[NodeId, float]:
    """Checkpoint load per node: sum of loads of the key groups whose checkpoints it holds."""
    out = {n: 0.0 for n in spec.view.node_ids()}
    for kg, nodes in allocation.entries:
        load = spec.view.key_group(kg).load
        for n in nodes:
            out[n] += load
    return out


def restore_work(plan: RecoveryPlan) -> dict[NodeId, float]:
    """Restore work per holder of ``plan`` (sum of checkpoint size + replay size)."""
    out: dict[NodeId, float] = {}
    for m in plan.restores:
        kg = plan.view.key_group(m.key_group)
        out[m.target] = out.get(m.target, 0.0) + kg.checkpoint_size + kg.replay_size
    return out


def dense(factors: CorrelationFactors) -> CorrelationMatrix:
    """The dense equivalent of ``factors`` (``K x K``; small ``K`` only)."""
    m = np.clip(factors.factors @ factors.factors.T, -1.0, 1.0)
    np.fill_diagonal(m, 1.0)
    m = (m + m.T) / 2
    return CorrelationMatrix(factors.key_groups, m)


def node_sums(
    corr: Correlation, key_groups: Sequence[KeyGroupId], owner_index: np.ndarray, n_nodes: int
) -> np.ndarray:
    """``C[k, n] = sum over g owned by n of rho(key_groups[k], g)``: ``K x N``, from the
    blocks the allocator reads (``iter_node_sums``)."""
    blocks = [b for _, b in corr.iter_node_sums(key_groups, owner_index, n_nodes)]
    return np.vstack(blocks) if blocks else np.zeros((0, n_nodes))


def pair(corr: Correlation, a: KeyGroupId, b: KeyGroupId) -> float:
    """``rho(a, b)``; 0.0 if either key group is unknown."""
    matrix = dense(corr) if isinstance(corr, CorrelationFactors) else corr
    kgs = matrix.key_groups
    if a not in kgs or b not in kgs:
        return 0.0
    return float(matrix.matrix[kgs.index(a), kgs.index(b)])
