"""Checkpoint allocation (Madsen & Zhou 2015, section 6): baseline, even, Algorithm 3;
and Kumbhare et al. 2015's consistent-hashing peer ring.

Every function takes an immutable :class:`AllocationSpec` and returns an
immutable :class:`~controller.model.Allocation`; nothing here does I/O.

Definitions (Madsen & Zhou 2015, section 6; the text we had lost the formula, reconstructed in
``docs/controller.md``)::

    corr(cp, n)  = sum over g in Gamma_n of rho(g_cp, g)
    value(cp, n) = corr(cp, n) * load(g_cp)
    score(A)     = sum over checkpoints cp of value(cp, A(cp))      (minimise)

Constraint 1: a checkpoint is never on its key group's node nor on a node that
holds another checkpoint of the same key group; here strengthened by the fault
zone: never in the key group's owner's zone (a node without a zone is its own
zone, so without zones this is exactly constraint 1).

Constraint 2 (correlated): a node's checkpoint load (sum of the loads of the key
groups whose checkpoints it holds) stays within ``(1 + epsilon) * total / |N|``.
Constraint 2 (even): no node holds more than ``ceil(#cps / |N|)`` checkpoints.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from elastorm.controller.correlation import Correlation
from elastorm.controller.model import (
    Allocation,
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    NodeId,
)


class InfeasibleAllocationError(ControllerModelError):
    """No node can hold a checkpoint without breaking constraint 1 / the zone rule."""


class SearchTooLargeError(ControllerModelError):
    """The exhaustive solver would visit more states than its limit allows."""


@dataclass(frozen=True, kw_only=True)
class AllocationSpec:
    """What to allocate: a cluster view, correlations and the policy's knobs.

    ``replicas`` checkpoints per key group (the paper's experiments use 1);
    ``epsilon`` is constraint 2's slack (``math.inf`` = off, as in the paper's
    evaluation); ``tie_tolerance`` is the relative gap under which two node values
    count as equal (Algorithm 3's tie rule).
    """

    view: ClusterView
    correlation: Correlation | None = None
    replicas: int = 1
    epsilon: float = math.inf
    tie_tolerance: float = 1e-9

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ControllerModelError(f"replicas must be >= 1, got {self.replicas}")
        if not self.epsilon >= 0:
            raise ControllerModelError(f"epsilon must be >= 0, got {self.epsilon}")
        if not self.view.nodes:
            raise ControllerModelError("a cluster view with no nodes cannot hold checkpoints")


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointMove:
    """Move ``key_group``'s checkpoint from ``source`` to ``target``.

    ``lazy`` (full checkpoints, "lazy-move"): write the key group's next full
    checkpoint to ``target`` and then drop the old copy, instead of shipping the
    existing copy now. ``source`` is ``None`` for a checkpoint that does not exist
    yet (a new or lost one).
    """

    key_group: KeyGroupId
    source: NodeId | None
    target: NodeId
    lazy: bool = False


class _Problem:
    """Index arrays shared by the policies (nodes and key groups in sorted order)."""

    def __init__(self, spec: AllocationSpec, *, with_values: bool) -> None:
        view = spec.view
        self.spec = spec
        self.node_ids = view.node_ids()
        self.node_pos = {n: i for i, n in enumerate(self.node_ids)}
        self.kgs = tuple(k.key_group for k in view.key_groups)
        self.kg_pos = {kg: i for i, kg in enumerate(self.kgs)}
        self.load = np.array([k.load for k in view.key_groups], dtype=np.float64)
        self.owner = np.array([self.node_pos[k.owner] for k in view.key_groups], dtype=np.int64)
        zone_names = sorted({n.fault_zone for n in view.nodes})
        zpos = {z: i for i, z in enumerate(zone_names)}
        self.zone = np.array([zpos[n.fault_zone] for n in view.nodes], dtype=np.int64)
        # Nodes that may hold checkpoints (ClusterView.targets): never a down node, and
        # for each key group only one that runs a task of its operator (ClusterView.hosts).
        self.target = np.array([not n.down for n in view.nodes], dtype=bool)
        operators = sorted({kg.operator for kg in self.kgs})
        op_pos = {op: i for i, op in enumerate(operators)}
        self.op = np.array([op_pos[kg.operator] for kg in self.kgs], dtype=np.int64)
        self.hosts = np.array(
            [[view.runs(op, n) for n in self.node_ids] for op in operators],
            dtype=bool,
        ).reshape(len(operators), len(self.node_ids))
        self.n_nodes = len(self.node_ids)
        self.values = self._values() if with_values else None

    def why_not(self, k: int, i: int) -> str:
        """Why node ``i`` may not hold key group ``k``'s checkpoint."""
        if not self.target[i]:
            return "a down node"
        if not self.hosts[self.op[k], i]:
            return "a node with no task of its operator"
        return "in its owner's zone (constraint 1)"

    def eligible_row(self, k: int) -> np.ndarray:
        """Static constraint 1 + zone rule for key group ``k``, on the nodes that take
        work: a bool mask over nodes."""
        return (self.zone != self.zone[self.owner[k]]) & self.target & self.hosts[self.op[k]]

    def _values(self, chunk: int = 4096) -> np.ndarray:
        """``value(cp, n)`` for every key group and node; ineligible cells are +inf.

        Built block by block; ``level0`` / ``level1`` (best and second-best distinct
        value per key group) are computed on each block while it is in cache.
        """
        k_total = len(self.kgs)
        out = np.empty((k_total, self.n_nodes), dtype=np.float64)
        self.level0 = np.empty(k_total)
        self.level1 = np.empty(k_total)
        corr = self.spec.correlation
        if corr is None:
            blocks = (
                (s, np.zeros((min(chunk, k_total - s), self.n_nodes)))
                for s in range(0, k_total, chunk)
            )
        else:
            blocks = corr.iter_node_sums(self.kgs, self.owner, self.n_nodes, chunk)
        rel = self.spec.tie_tolerance
        for start, block in blocks:
            stop = start + block.shape[0]
            block *= self.load[start:stop, None]
            block[self.zone[None, :] == self.zone[self.owner[start:stop]][:, None]] = np.inf
            block[:, ~self.target] = np.inf
            block[~self.hosts[self.op[start:stop]]] = np.inf
            out[start:stop] = block
            lv0 = block.min(axis=1)
            tol = rel * (1.0 + np.abs(np.where(np.isfinite(lv0), lv0, 0.0)))
            block[block <= (lv0 + tol)[:, None]] = np.inf
            self.level0[start:stop] = lv0
            self.level1[start:stop] = block.min(axis=1)
        return out


def _slots(prob: _Problem, keep: Allocation | None) -> tuple[list[list[int]], list[int]]:
    """Holders already fixed (node indices) per key group, and missing slot counts."""
    spec = prob.spec
    fixed: list[list[int]] = [[] for _ in prob.kgs]
    if keep is not None:
        for kg, nodes in keep.entries:
            k = prob.kg_pos.get(kg)
            if k is None:
                continue
            elig = prob.eligible_row(k)
            for n in nodes:
                i = prob.node_pos.get(n)
                if i is not None and elig[i] and i not in fixed[k]:
                    fixed[k].append(i)
            del fixed[k][spec.replicas :]
    missing = [spec.replicas - len(f) for f in fixed]
    return fixed, missing


def _to_allocation(prob: _Problem, holders: list[list[int]]) -> Allocation:
    return Allocation(
        (kg, tuple(prob.node_ids[i] for i in h)) for kg, h in zip(prob.kgs, holders, strict=True)
    )


def _infeasible(prob: _Problem, k: int) -> InfeasibleAllocationError:
    return InfeasibleAllocationError(
        f"{prob.kgs[k]}: no node outside zone of {prob.node_ids[prob.owner[k]]} is free for"
        f" checkpoint replica (replicas={prob.spec.replicas}, nodes={prob.n_nodes})"
    )


def baseline_allocation(spec: AllocationSpec, *, keep: Allocation | None = None) -> Allocation:
    """Madsen & Zhou 2015's baseline (section 6): each checkpoint on the next node after its owner.

    Nodes form a ring in sorted id order; replica ``m`` goes to the ``m``-th next
    node that satisfies constraint 1 and the zone rule. Loads and correlations are
    ignored. Checkpoints in ``keep`` stay where they are.

    Complexity ``O(#cps * |N|)`` worst case. Raises ``InfeasibleAllocationError``.

    >>> from elastorm.controller.model import KeyGroupInfo, NodeInfo
    >>> view = ClusterView(
    ...     nodes=[NodeInfo(node_id=n) for n in ("a", "b", "c")],
    ...     key_groups=[KeyGroupInfo(key_group=KeyGroupId("op", 0), owner="c")],
    ... )
    >>> baseline_allocation(AllocationSpec(view=view)).holders(KeyGroupId("op", 0))
    ('a',)
    """
    prob = _Problem(spec, with_values=False)
    return _on_successors(prob, list(range(prob.n_nodes)), keep)


def _on_successors(prob: _Problem, ring: list[int], keep: Allocation | None) -> Allocation:
    """Place each missing checkpoint on the next node after its owner along ``ring``
    (node indices in clockwise order) that constraint 1 and the zone rule allow and
    that holds no other checkpoint of the key group; ``keep``'s checkpoints stay.
    ``O(#cps * |N|)`` worst case. Raises ``InfeasibleAllocationError``."""
    holders, missing = _slots(prob, keep)
    n = len(ring)
    at = {node: i for i, node in enumerate(ring)}
    for k, need in enumerate(missing):
        elig = prob.eligible_row(k)
        start = at[int(prob.owner[k])]
        step = 1
        while need > 0:
            if step > n:
                raise _infeasible(prob, k)
            cand = ring[(start + step) % n]
            step += 1
            if elig[cand] and cand not in holders[k]:
                holders[k].append(cand)
                need -= 1
    return _to_allocation(prob, holders)


def ring_token(node: NodeId) -> int:
    """``node``'s token on the peer ring: the first 8 bytes of BLAKE2b of its UTF-8 id.

    Kumbhare et al. 2015, section V-A give each node a random, unique token; a
    well-distributed hash of the id is random-looking and the same in every process
    (Python's ``hash()`` is salted per process, so never that). ``O(len(node))``.
    """
    return int.from_bytes(hashlib.blake2b(node.encode("utf-8"), digest_size=8).digest(), "big")


def peer_ring(nodes: Iterable[NodeId]) -> tuple[NodeId, ...]:
    """The nodes in clockwise ring order: by :func:`ring_token`, ties by node id.

    ``O(|N| log |N|)``.

    >>> peer_ring(["a", "b", "c"]) == tuple(sorted("abc", key=lambda n: (ring_token(n), n)))
    True
    """
    return tuple(sorted(set(nodes), key=lambda n: (ring_token(n), n)))


def ring_allocation(spec: AllocationSpec, *, keep: Allocation | None = None) -> Allocation:
    """Kumbhare et al. 2015's consistent-hashing peer ring: checkpoints on the owner's successors.

    Every node sits on a ring at its :func:`ring_token` (section V-A; no virtual
    nodes: the paper moves tokens at runtime instead, which is our load balancing's
    job). A node backs up its counter-clockwise neighbour: the ``r`` replicas of a key
    group's checkpoint go to the first ``r`` nodes clockwise after its owner (sections
    V-B, V-C), skipping nodes that constraint 1 or the zone rule forbid and down
    nodes (section VII: a failed node's load passes to the next node on the ring;
    fault zones, Fig. 13). Loads and correlations are ignored. Checkpoints in
    ``keep`` stay where they are.

    Consistent hashing's monotonicity carries over: a node joining the ring only
    takes checkpoints (those of the owners just before it, about ``r/|N|`` of all),
    every other checkpoint stays; a node leaving (or going down) only hands the
    checkpoints it held on, each to the next eligible node along the ring.

    References: A. Kumbhare, M. Frincu, Y. Simmhan, V. K. Prasanna, "Fault-tolerant
    and elastic streaming MapReduce with decentralized coordination", ICDCS 2015,
    sections V-A to V-C and VII.

    Complexity ``O(|N| log |N| + #cps * |N|)`` worst case (``O(#cps * r)`` when no
    zone or down node is skipped). Raises ``InfeasibleAllocationError``.

    >>> from elastorm.controller.model import KeyGroupInfo, NodeInfo
    >>> kg = KeyGroupId("op", 0)
    >>> view = ClusterView(
    ...     nodes=[NodeInfo(node_id=n) for n in ("a", "b", "c")],
    ...     key_groups=[KeyGroupInfo(key_group=kg, owner="a")],
    ... )
    >>> ring = peer_ring(["a", "b", "c"])
    >>> ring_allocation(AllocationSpec(view=view)).holders(kg) == (
    ...     ring[(ring.index("a") + 1) % 3],)
    True
    """
    prob = _Problem(spec, with_values=False)
    ring = [prob.node_pos[n] for n in peer_ring(prob.node_ids)]
    return _on_successors(prob, ring, keep)


def even_allocation(
    spec: AllocationSpec, *, seed: int = 0, keep: Allocation | None = None
) -> Allocation:
    """Madsen & Zhou 2015's even distribution: constraint 1, at most ``ceil(#cps/|N|)`` each.

    Checkpoints are visited in a random order drawn from ``seed``; each goes to an
    eligible node holding the fewest checkpoints (ties: a per-run random node
    rank, also from ``seed``), which keeps every node within the ceiling whenever
    the zone rule allows it. Loads and correlations are ignored, like the
    "most existing systems" behaviour the paper compares against.

    Complexity ``O(#cps * |N|)``. Raises ``InfeasibleAllocationError``.
    """
    prob = _Problem(spec, with_values=False)
    holders, missing = _slots(prob, keep)
    rng = np.random.default_rng(seed)
    rank = rng.permutation(prob.n_nodes).astype(np.float64)
    count = np.zeros(prob.n_nodes, dtype=np.float64)
    for h in holders:
        for i in h:
            count[i] += 1
    order = [k for k in rng.permutation(len(prob.kgs)).tolist() for _ in range(missing[k])]
    scale = float(prob.n_nodes + 1)
    for k in order:
        key = count * scale + rank
        key[~prob.eligible_row(k)] = np.inf
        key[holders[k]] = np.inf
        best = int(np.argmin(key))
        if not np.isfinite(key[best]):
            raise _infeasible(prob, k)
        holders[k].append(best)
        count[best] += 1
    return _to_allocation(prob, holders)


def _cap(prob: _Problem) -> float:
    eps = prob.spec.epsilon
    if math.isinf(eps):
        return math.inf
    total = float(prob.load.sum()) * prob.spec.replicas
    return (1.0 + eps) * total / prob.n_nodes


def _next_level(row: np.ndarray, level: float, tol: float) -> float:
    above = row[row > level + tol]
    above = above[np.isfinite(above)]
    return float(above.min()) if above.size else math.inf


def correlated_allocation(spec: AllocationSpec, *, keep: Allocation | None = None) -> Allocation:
    """Madsen & Zhou 2015, Algorithm 3 (partial checkpoint allocation), correlation-optimised.

    For every checkpoint ``cp`` and node ``n`` compute ``value(cp, n)`` (lower is
    better). Checkpoints are placed most "sensitive" first: the priority of a
    checkpoint is the regret ``value at its next-best level - value at its
    current level``. A popped checkpoint tries the nodes of its current level
    (nodes whose values tie within ``tie_tolerance``) that satisfy constraint 1
    and the zone rule; among them, the first that satisfies constraint 2 in order
    of least checkpoint load, then node id. If none does, the checkpoint moves to
    its next level and is re-queued with the new regret. When every level has
    been tried, it goes to the constraint-1 node with the least value, then the
    least checkpoint load (constraint 2 is then knowingly broken).

    Heap ties (equal regret) go to the heavier key group first (it weighs more in
    the score), then key-group order. Checkpoints in ``keep`` stay put and count
    towards checkpoint loads.

    Complexity: ``O(K |N| W)`` to build values from factors (``O(K^2 |N|)`` from a
    dense matrix), then ``O(#cps log #cps + #cps |N| L)`` where ``L`` is the
    number of levels a checkpoint has to try (1 unless constraint 2 binds) --
    the paper's ``O(|N| #cps)`` up to the heap.

    Raises ``InfeasibleAllocationError`` if some checkpoint has no node allowed
    by constraint 1 and the zone rule.

    >>> from elastorm.controller.correlation import CorrelationMatrix
    >>> from elastorm.controller.model import KeyGroupInfo, NodeInfo
    >>> a, b = KeyGroupId("op1", 0), KeyGroupId("op2", 0)
    >>> view = ClusterView(
    ...     nodes=[NodeInfo(node_id=n) for n in ("n0", "n1", "n2")],
    ...     key_groups=[KeyGroupInfo(key_group=a, owner="n1", load=1.0),
    ...                 KeyGroupInfo(key_group=b, owner="n2", load=1.0)],
    ... )
    >>> rho = CorrelationMatrix((a, b), [[1.0, -1.0], [-1.0, 1.0]])
    >>> alloc = correlated_allocation(AllocationSpec(view=view, correlation=rho))
    >>> alloc.holders(a), alloc.holders(b)
    (('n2',), ('n1',))
    """
    prob = _Problem(spec, with_values=True)
    values = prob.values
    assert values is not None
    holders, missing = _slots(prob, keep)
    cap = _cap(prob)
    cp_load = np.zeros(prob.n_nodes, dtype=np.float64)
    for k, h in enumerate(holders):
        for i in h:
            cp_load[i] += prob.load[k]
    rel = spec.tie_tolerance

    level0, level1 = prob.level0, prob.level1
    finite1 = np.isfinite(level1)
    regret0 = np.zeros_like(level0)
    regret0[finite1] = level1[finite1] - level0[finite1]

    heap: list[tuple[float, float, int, int, float]] = []
    for k, need in enumerate(missing):
        if need <= 0:
            continue
        if not np.isfinite(level0[k]):
            raise _infeasible(prob, k)
        for r in range(need):
            heap.append((-float(regret0[k]), -float(prob.load[k]), k, r, float(level0[k])))
    heapq.heapify(heap)

    while heap:
        _, neg_load, k, r, level = heapq.heappop(heap)
        row = values[k]
        load = prob.load[k]
        tol = rel * (1.0 + abs(level))
        taken = holders[k]
        if math.isinf(level):
            # Every level tried: least value, then least checkpoint load; c2 ignored.
            ok = np.isfinite(row)
            ok[taken] = False
            idx = np.flatnonzero(ok)
            if idx.size == 0:
                raise _infeasible(prob, k)
            best_val = row[idx].min()
            idx = idx[row[idx] <= best_val + rel * (1.0 + abs(best_val))]
            choice = int(idx[np.argmin(cp_load[idx])])
        else:
            in_level = np.abs(row - level) <= tol
            in_level[taken] = False
            idx = np.flatnonzero(in_level)
            if idx.size and not math.isinf(cap):
                idx = idx[cp_load[idx] + load <= cap * (1.0 + 1e-12)]
            if idx.size == 0:
                # Re-queue at the next level that still has room. Levels whose nodes
                # are taken or full are skipped at once: checkpoint loads only grow,
                # so the paper's loop would fail on them at every later pop anyway.
                usable = row > level + tol
                usable[taken] = False
                if not math.isinf(cap):
                    usable &= cp_load + load <= cap * (1.0 + 1e-12)
                nxt = _next_level(row[usable], -math.inf, 0.0)
                nxt2 = _next_level(row[usable], nxt, rel * (1.0 + abs(nxt)))
                regret = nxt2 - nxt if math.isfinite(nxt2) else 0.0
                heapq.heappush(heap, (-regret, neg_load, k, r, nxt))
                continue
            choice = int(idx[np.argmin(cp_load[idx])])
        taken.append(choice)
        cp_load[choice] += load
    return _to_allocation(prob, holders)


def _holder_values(prob: _Problem, allocation: Allocation) -> list[tuple[int, int, float]]:
    values = prob.values
    assert values is not None
    out = []
    for kg, nodes in allocation.entries:
        k = prob.kg_pos.get(kg)
        if k is None:
            continue
        for n in nodes:
            out.append((k, prob.node_pos[n], float(values[k, prob.node_pos[n]])))
    return out


def allocation_score(spec: AllocationSpec, allocation: Allocation) -> float:
    """The minimisation objective: ``sum over cps of load(g_cp) * corr(cp, holder)``.

    Lower is better; a checkpoint sitting on a forbidden node (constraint 1 or
    zone) scores ``+inf``. Checkpoints of unknown key groups are ignored.

    Complexity as building the values: ``O(K |N| W)`` or ``O(K^2 |N|)``.
    """
    prob = _Problem(spec, with_values=True)
    return float(sum(v for _, _, v in _holder_values(prob, allocation)))


def constraint_violations(spec: AllocationSpec, allocation: Allocation) -> tuple[str, ...]:
    """Human-readable violations of constraint 1 / zone rule / replica count / constraint 2.

    Empty tuple = the allocation is valid for ``spec``.
    """
    prob = _Problem(spec, with_values=False)
    out: list[str] = []
    cp_load = np.zeros(prob.n_nodes)
    for k, kg in enumerate(prob.kgs):
        nodes = allocation.holders(kg)
        if len(nodes) != spec.replicas:
            out.append(f"{kg}: {len(nodes)} checkpoints, expected {spec.replicas}")
        elig = prob.eligible_row(k)
        for n in nodes:
            i = prob.node_pos.get(n)
            if i is None:
                out.append(f"{kg}: holder {n} is not a node")
                continue
            if not elig[i]:
                out.append(f"{kg}: checkpoint on {n}, {prob.why_not(k, i)}")
            cp_load[i] += prob.load[k]
    cap = _cap(prob)
    for i in np.flatnonzero(cp_load > cap * (1 + 1e-9)):
        out.append(f"{prob.node_ids[i]}: checkpoint load {cp_load[i]:.6g} > {cap:.6g} (c2)")
    return tuple(out)


def reoptimize(
    spec: AllocationSpec,
    current: Allocation,
    *,
    theta: float,
    lazy: bool = False,
) -> tuple[Allocation, tuple[CheckpointMove, ...]]:
    """Madsen & Zhou 2015's temporal re-optimisation (section 6) with threshold ``theta``.

    Computes Algorithm 3's allocation as the reference. First, checkpoints that
    break constraint 1 / the zone rule, or are missing, are (re)placed whatever
    ``theta`` says. Then, if ``score(current) - score(reference) > theta``,
    checkpoints are moved to their reference node in order of greatest score
    improvement (ties: key-group order), skipping moves that would break
    constraint 2, until the difference is ``<= theta``. ``lazy=True`` marks the
    moves lazy (full checkpoints: relocate at the next checkpoint).

    Returns the new allocation and the moves, in the order to apply them: applied
    to ``current`` they give the allocation, and each checkpoint moves at most once
    (a repaired checkpoint that is then improved makes one move, not two).
    Complexity: one Algorithm 3 run plus ``O(#cps log #cps)``.
    Raises ``InfeasibleAllocationError``; ``ControllerModelError`` if ``theta < 0``.
    """
    if theta < 0:
        raise ControllerModelError(f"theta must be >= 0, got {theta}")
    prob = _Problem(spec, with_values=True)
    values = prob.values
    assert values is not None
    fixed, missing = _slots(prob, current)
    repaired = _to_allocation(prob, fixed)
    if any(missing):
        # Forbidden (dropped by _slots) or absent checkpoints: re-place with Algorithm 3.
        repaired = correlated_allocation(spec, keep=repaired)
    moves = list(moves_between(current, repaired, lazy=lazy))
    reference = correlated_allocation(spec)
    cur = {kg: [prob.node_pos[n] for n in nodes] for kg, nodes in repaired.entries}
    score_cur = sum(v for _, _, v in _holder_values(prob, repaired))
    score_ref = sum(v for _, _, v in _holder_values(prob, reference))
    if score_cur - score_ref > theta:
        cap = _cap(prob)
        cp_load = np.zeros(prob.n_nodes)
        for kg, idxs in cur.items():
            cp_load[idxs] += prob.load[prob.kg_pos[kg]]
        cands: list[tuple[float, KeyGroupId, int, int]] = []
        for kg, nodes in reference.entries:
            k = prob.kg_pos[kg]
            want = [prob.node_pos[n] for n in nodes]
            out_of_place = [i for i in cur[kg] if i not in want]
            targets = [i for i in want if i not in cur[kg]]
            for src, dst in zip(sorted(out_of_place), sorted(targets), strict=False):
                delta = float(values[k, dst] - values[k, src])
                if delta < 0:
                    cands.append((delta, kg, src, dst))
        cands.sort()
        gap = score_cur - score_ref
        for delta, kg, src, dst in cands:
            if gap <= theta:
                break
            load = prob.load[prob.kg_pos[kg]]
            if cp_load[dst] + load > cap * (1.0 + 1e-12):
                continue
            cur[kg][cur[kg].index(src)] = dst
            cp_load[src] -= load
            cp_load[dst] += load
            gap += delta
            _move_on(moves, kg, prob.node_ids[src], prob.node_ids[dst], lazy)
    final = Allocation((kg, tuple(prob.node_ids[i] for i in idxs)) for kg, idxs in cur.items())
    return final, tuple(moves)


def _move_on(
    moves: list[CheckpointMove], kg: KeyGroupId, src: NodeId, dst: NodeId, lazy: bool
) -> None:
    """Append the move ``src -> dst`` of ``kg``'s checkpoint or, if an earlier move of
    this plan put it on ``src`` (a repair), redirect that move to ``dst`` (dropping it
    if that leads back to where it started): each checkpoint moves at most once per
    plan, so no owner ships a full checkpoint to a holder the same plan drops.
    ``O(len(moves))``."""
    for i, m in enumerate(moves):
        if m.key_group == kg and m.target == src:
            if m.source == dst:
                del moves[i]
            else:
                moves[i] = CheckpointMove(key_group=kg, source=m.source, target=dst, lazy=lazy)
            return
    moves.append(CheckpointMove(key_group=kg, source=src, target=dst, lazy=lazy))


def optimal_allocation(spec: AllocationSpec, *, max_states: int = 2_000_000) -> Allocation | None:
    """Exhaustive branch-and-bound optimum of the minimisation (tiny instances only).

    Enforces constraint 1, the zone rule and constraint 2 strictly; returns
    ``None`` if no allocation satisfies them all. Used to measure Algorithm 3's
    gap to the optimum. Worst case ``O(|N|^#cps)``; raises
    ``SearchTooLargeError`` after ``max_states`` search nodes.
    """
    prob = _Problem(spec, with_values=True)
    values = prob.values
    assert values is not None
    cap = _cap(prob)
    slots = [k for k in range(len(prob.kgs)) for _ in range(spec.replicas)]
    # Most constrained / heaviest first makes the bound bite early.
    slots.sort(key=lambda k: (-prob.load[k], k))
    domains = []
    for k in slots:
        idx = np.flatnonzero(np.isfinite(values[k]))
        if idx.size == 0:
            return None
        domains.append(sorted(idx.tolist(), key=lambda i, k=k: (values[k, i], i)))
    floor = [float(values[k, d[0]]) for k, d in zip(slots, domains, strict=True)]
    rest = np.concatenate([np.cumsum(floor[::-1])[::-1], [0.0]])
    best: list[float | list[int] | None] = [math.inf, None]
    chosen: list[int] = []
    cp_load = np.zeros(prob.n_nodes)
    states = [0]

    def dfs(pos: int, score: float) -> None:
        states[0] += 1
        if states[0] > max_states:
            raise SearchTooLargeError(f"more than {max_states} states; instance too large")
        if score + rest[pos] >= best[0] - 1e-12:  # type: ignore[operator]
            return
        if pos == len(slots):
            best[0], best[1] = score, list(chosen)
            return
        k = slots[pos]
        same = [chosen[j] for j in range(pos) if slots[j] == k]
        for i in domains[pos]:
            if i in same or cp_load[i] + prob.load[k] > cap * (1.0 + 1e-12):
                continue
            chosen.append(i)
            cp_load[i] += prob.load[k]
            dfs(pos + 1, score + float(values[k, i]))
            cp_load[i] -= prob.load[k]
            chosen.pop()

    dfs(0, 0.0)
    if best[1] is None:
        return None
    holders: list[list[int]] = [[] for _ in prob.kgs]
    for k, i in zip(slots, best[1], strict=True):  # type: ignore[arg-type]
        holders[k].append(i)
    return _to_allocation(prob, holders)


def moves_between(
    current: Allocation, target: Allocation, *, lazy: bool = False
) -> tuple[CheckpointMove, ...]:
    """The checkpoint moves that turn ``current`` into ``target`` (key-group order)."""
    moves: list[CheckpointMove] = []
    kgs: Iterable[KeyGroupId] = sorted(set(current.as_dict()) | set(target.as_dict()))
    for kg in kgs:
        old = [n for n in current.holders(kg) if n not in target.holders(kg)]
        new = [n for n in target.holders(kg) if n not in current.holders(kg)]
        for i, dst in enumerate(new):
            src = old[i] if i < len(old) else None
            moves.append(CheckpointMove(key_group=kg, source=src, target=dst, lazy=lazy))
    return tuple(moves)
