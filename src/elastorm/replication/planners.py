"""Partially active replication planners (Su & Zhou 2016, section IV).

Each planner takes a task graph, a replication budget (how many tasks may get an
active replica) and a failure scenario (the tasks that fail together; ``None`` is
the paper's worst case, every task), and returns the set of tasks to replicate:
plain data in, plain data out, exactly what a runtime would apply. Replicating a
task outside the scenario is useless, so plans only hold tasks of the scenario.
Ties are broken by named rules so the result never depends on set order.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Collection, Iterable

from elastorm.replication.mctrees import mc_trees
from elastorm.replication.model import (
    Partitioning,
    ReplicationModelError,
    TaskGraph,
    failure_scenario,
    output_fidelity,
    partitioning,
)

Plan = frozenset[str]


def _setup(graph: TaskGraph, budget: int, failed: Collection[str] | None) -> tuple[Plan, int]:
    """The failure scenario, and the budget capped at its size."""
    if budget < 0:
        raise ReplicationModelError(f"replication budget must be >= 0, got {budget}")
    down = failure_scenario(graph, failed)
    return down, min(budget, len(down))


def _fidelity(graph: TaskGraph, down: Plan, plan: Plan) -> float:
    """Output Fidelity when ``down`` fail and the tasks of ``plan`` survive on replicas."""
    return output_fidelity(graph, down - plan)


def _best(graph: TaskGraph, down: Plan, plans: Iterable[Plan]) -> Plan:
    """The plan of highest Output Fidelity; ties: fewer tasks, then the smaller sorted names."""
    return min(plans, key=lambda p: (-_fidelity(graph, down, p), len(p), sorted(p)))


def _tree_parts(graph: TaskGraph, down: Plan, limit: int | None) -> list[Plan]:
    """The failed part of each MC-tree, distinct and non-empty, smallest first."""
    parts = {t.tasks & down for t in mc_trees(graph, limit)} - {frozenset()}
    return sorted(parts, key=lambda p: (len(p), sorted(p)))


def brute_force(graph: TaskGraph, budget: int, failed: Collection[str] | None = None) -> Plan:
    """The optimal plan by trying every subset of the scenario of at most ``budget`` tasks.

    For testing the planners on tiny graphs only. Complexity
    O(C(|F|, <=k) * (|V| + |E|)) for scenario F and budget k.

    References: Su & Zhou 2016, section III-B, Definition 2 (the problem it solves).

    Raises:
        ReplicationModelError: negative budget, or unknown tasks in ``failed``.
    """
    down, budget = _setup(graph, budget, failed)
    ordered = sorted(down)
    subsets = (
        frozenset(c) for size in range(budget + 1) for c in itertools.combinations(ordered, size)
    )
    return _best(graph, down, subsets)


def dynamic_programming(
    graph: TaskGraph,
    budget: int,
    failed: Collection[str] | None = None,
    limit: int | None = None,
) -> Plan:
    """The optimal plan, built from MC-trees (Algorithm 1).

    Candidate plans grow by whole MC-trees: a plan of ``r`` replicated tasks is
    expanded by each MC-tree whose not-yet-replicated failed tasks fit the budget
    left, duplicates are dropped, and a plan no MC-tree fits is no longer expanded;
    the plan of highest Output Fidelity wins. Only an MC-tree with every failed task
    replicated contributes to the output, so some optimal plan is a union of MC-trees,
    and this enumerates all such unions: the result is optimal for any topology and
    any failure scenario (for the worst case, as the paper states in Theorem 1).

    Complexity O(|M|^k * |M| * (|V| + |E|)) for |M| MC-trees and budget k
    (|M| up to p^|O|): exponential; for small topologies.

    References: Su & Zhou 2016, section IV-A, Algorithm 1.

    Raises:
        ReplicationModelError: negative budget, unknown tasks, more than ``limit`` MC-trees.
    """
    down, budget = _setup(graph, budget, failed)
    trees = _tree_parts(graph, down, limit)
    seen: set[Plan] = {frozenset()}
    queue: deque[Plan] = deque(seen)
    while queue:
        plan = queue.popleft()
        room = budget - len(plan)
        for tree in trees:
            extra = tree - plan
            if extra and len(extra) <= room and (grown := plan | extra) not in seen:
                seen.add(grown)
                queue.append(grown)
    return _best(graph, down, seen)


def greedy(graph: TaskGraph, budget: int, failed: Collection[str] | None = None) -> Plan:
    """The ``budget`` tasks whose failure alone costs the most Output Fidelity (Algorithm 2).

    Each failed task is ranked by the Output Fidelity of the topology with only that
    task failed, lowest first (ties: task name). Blind to whether the chosen tasks
    form complete MC-trees. Complexity O(|V| * (|V| + |E|) + |V| log |V|).

    References: Su & Zhou 2016, section IV-B, Algorithm 2.

    Raises:
        ReplicationModelError: negative budget, or unknown tasks in ``failed``.
    """
    down, budget = _setup(graph, budget, failed)
    alone = {t: output_fidelity(graph, {t}) for t in down}
    return frozenset(sorted(down, key=lambda t: (alone[t], t))[:budget])


def _is_full_topology(graph: TaskGraph) -> bool:
    """Whether every pair of neighbouring operators uses Full partitioning (section IV-C)."""
    pairs = {(graph.operator_of(s.source), graph.operator_of(s.target)) for s in graph.streams}
    return all(partitioning(graph, up, dn) is Partitioning.FULL for up, dn in pairs)


def _full_topology_plan(graph: TaskGraph, budget: int, down: Plan) -> Plan:
    """Algorithm 4: one best task per operator first, then the best tasks anywhere.

    A task's gain is the Output Fidelity its replica restores when the rest of its
    operator is failed and every other operator is alive. Operators with a live task
    need no replica to complete an MC-tree. Ties: larger gain, then task name.
    """
    gain = {}
    for t in down:
        siblings = set(graph.operator_of(t).tasks)
        gain[t] = output_fidelity(graph, siblings - {t}) - output_fidelity(graph, siblings)

    def by_gain(tasks: Iterable[str]) -> list[str]:
        return sorted(tasks, key=lambda t: (-gain[t], t))

    firsts = [
        by_gain(op.tasks)[0] for op in graph.operators if set(op.tasks) <= down
    ]  # every task of op failed: a replica is needed for any MC-tree through it
    chosen = by_gain(firsts)[:budget]
    rest = by_gain(down - set(chosen))
    return frozenset(chosen + rest[: budget - len(chosen)])


def _structured_plan(graph: TaskGraph, budget: int, down: Plan, limit: int | None) -> Plan:
    """Algorithms 3 and 5's rule: add the MC-tree of highest profit density until none fits.

    Profit density = (OF(plan + tree) - OF(plan)) / (tasks the tree adds); ties:
    fewer added tasks, then the smaller sorted names.
    """
    trees = _tree_parts(graph, down, limit)
    plan: Plan = frozenset()
    while True:
        room = budget - len(plan)
        base = _fidelity(graph, down, plan)
        best: tuple[float, int, list[str]] | None = None
        pick: Plan = frozenset()
        for tree in trees:
            extra = tree - plan
            if not extra or len(extra) > room:
                continue
            density = (_fidelity(graph, down, plan | extra) - base) / len(extra)
            key = (-density, len(extra), sorted(extra))
            if best is None or key < best:
                best, pick = key, extra
        if best is None:
            return plan
        plan = plan | pick


def structure_aware(
    graph: TaskGraph,
    budget: int,
    failed: Collection[str] | None = None,
    limit: int | None = None,
) -> Plan:
    """A plan that replicates complete MC-trees, best Output Fidelity per replica first.

    A full topology (Full partitioning between every pair of neighbouring
    operators, where MC-trees number p^|O|) takes Algorithm 4: complete one MC-tree
    with the best task of each operator, then add the tasks of largest gain; its
    complexity is O(|V| * (|V| + |E|) + |V| log |V|). Any other topology takes the
    profit-density rule of Algorithms 3 and 5 over whole MC-trees: complexity
    O(k * |M| * (|V| + |E|)) for budget k and |M| MC-trees. The paper's split of a
    structured topology into units and segments, and of a general one into
    sub-topologies, only bounds that enumeration; it is not implemented here
    (docs/replication.md).

    References: Su & Zhou 2016, section IV-C, Algorithms 3-5.

    Raises:
        ReplicationModelError: negative budget, unknown tasks, more than ``limit`` MC-trees.
    """
    down, budget = _setup(graph, budget, failed)
    if _is_full_topology(graph):
        return _full_topology_plan(graph, budget, down)
    return _structured_plan(graph, budget, down, limit)


def random_plan(
    graph: TaskGraph, budget: int, failed: Collection[str] | None = None, seed: int = 0
) -> Plan:
    """``budget`` tasks of the scenario drawn uniformly (seeded): the baseline of the comparison.

    Complexity O(|V| log |V|).

    Raises:
        ReplicationModelError: negative budget, or unknown tasks in ``failed``.
    """
    down, budget = _setup(graph, budget, failed)
    return frozenset(random.Random(seed).sample(sorted(down), budget))
