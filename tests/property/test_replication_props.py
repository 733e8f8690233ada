"""Properties of Output Fidelity and the planners (Su & Zhou 2016) on small random DAGs.

``ELASTORM_PROPERTY_SCALE`` multiplies the example counts for a thorough run
(``bench/property_long.py``).
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from property_scale import examples

from elastorm.replication.generator import random_topology
from elastorm.replication.mctrees import mc_trees
from elastorm.replication.model import InputKind, Operator, Stream, TaskGraph, output_fidelity
from elastorm.replication.planners import (
    brute_force,
    dynamic_programming,
    greedy,
    random_plan,
    structure_aware,
)

EXAMPLES = settings(max_examples=examples(60))
PLANNERS = [dynamic_programming, structure_aware, greedy, random_plan, brute_force]
TOLERANCE = 1e-9


@st.composite
def task_graphs(draw: st.DrawFn) -> TaskGraph:
    """A layered DAG of 2-4 layers, 1-2 operators a layer (one sink), 1-2 tasks each.

    Each non-source task reads 1-3 tasks of earlier layers; a task that would emit
    nothing sends to a task of the sink. Operators beyond the sources are joins or
    unions at random; rates are 1-9.
    """
    layers = draw(st.integers(2, 4))
    ops: list[tuple[Operator, int]] = []
    for layer in range(layers):
        for j in range(1 if layer == layers - 1 else draw(st.integers(1, 2))):
            name = f"L{layer}o{j}"
            size = draw(st.integers(1, 2))
            kind = draw(st.sampled_from(InputKind)) if layer else InputKind.INDEPENDENT
            tasks = tuple(f"{name}t{k}" for k in range(size))
            ops.append((Operator(name=name, tasks=tasks, kind=kind), layer))
    rate = st.integers(1, 9).map(float)
    edges: dict[tuple[str, str], float] = {}
    for op, layer in ops:
        earlier = [t for o, lay in ops if lay < layer for t in o.tasks]
        for task in op.tasks if layer else ():
            ups = draw(st.lists(st.sampled_from(earlier), min_size=1, max_size=3, unique=True))
            edges.update({(u, task): draw(rate) for u in ups})
    sink = ops[-1][0].tasks
    for op, _ in ops[:-1]:
        for task in op.tasks:
            if not any(u == task for u, _ in edges):
                edges[(task, draw(st.sampled_from(sink)))] = draw(rate)
    return TaskGraph(
        operators=tuple(op for op, _ in ops),
        streams=tuple(Stream(source=u, target=v, rate=r) for (u, v), r in sorted(edges.items())),
    )


def subsets(g: TaskGraph) -> st.SearchStrategy[frozenset[str]]:
    return st.frozensets(st.sampled_from(g.tasks))


@EXAMPLES
@given(st.data())
def test_fidelity_is_one_without_failure_and_zero_with_all(data: st.DataObject) -> None:
    g = data.draw(task_graphs())
    assert output_fidelity(g, set()) == 1.0
    assert output_fidelity(g, set(g.tasks)) == 0.0


@EXAMPLES
@given(st.data())
def test_fidelity_is_monotone_in_the_failed_set(data: st.DataObject) -> None:
    g = data.draw(task_graphs())
    failed = data.draw(subsets(g))
    more = failed | data.draw(subsets(g))
    assert 0.0 <= output_fidelity(g, more) <= output_fidelity(g, failed) + TOLERANCE
    assert output_fidelity(g, failed) <= 1.0 + TOLERANCE


@EXAMPLES
@given(st.data())
def test_fidelity_is_the_weight_of_the_intact_mc_trees(data: st.DataObject) -> None:
    g = data.draw(task_graphs())
    failed = data.draw(subsets(g))
    trees = mc_trees(g)
    assert sum(t.weight for t in trees) == pytest.approx(1.0)
    intact = sum(t.weight for t in trees if not t.tasks & failed)
    assert output_fidelity(g, failed) == pytest.approx(intact, abs=TOLERANCE)


@EXAMPLES
@given(st.data())
def test_dp_equals_brute_force(data: st.DataObject) -> None:
    g = data.draw(task_graphs())
    assume(len(g.tasks) <= 9)
    down = data.draw(subsets(g))
    budget = data.draw(st.integers(0, len(g.tasks)))
    best = output_fidelity(g, down - brute_force(g, budget, down))
    dp = output_fidelity(g, down - dynamic_programming(g, budget, down))
    assert dp == pytest.approx(best, abs=TOLERANCE)


@EXAMPLES
@given(st.data(), st.sampled_from(PLANNERS))
def test_planners_keep_to_the_budget_and_the_scenario(data: st.DataObject, planner) -> None:
    g = data.draw(task_graphs())
    down = data.draw(st.one_of(st.none(), subsets(g)))
    budget = data.draw(st.integers(0, len(g.tasks) + 2))
    plan = planner(g, budget, down)
    assert len(plan) <= budget
    assert plan <= (set(g.tasks) if down is None else down)


@EXAMPLES
@given(st.data())
def test_dp_is_never_beaten_and_more_budget_never_hurts(data: st.DataObject) -> None:
    g = data.draw(task_graphs())
    assume(len(g.tasks) <= 9)
    budget = data.draw(st.integers(0, len(g.tasks) - 1))
    down = frozenset(g.tasks)
    dp = output_fidelity(g, down - dynamic_programming(g, budget))
    for planner in (structure_aware, greedy, random_plan):
        assert output_fidelity(g, down - planner(g, budget)) <= dp + TOLERANCE
    assert output_fidelity(g, down - dynamic_programming(g, budget + 1)) >= dp - TOLERANCE


@EXAMPLES
@given(
    seed=st.integers(0, 10**6),
    full=st.booleans(),
    join_fraction=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_dp_equals_brute_force_on_tiny_generated_topologies(
    seed: int, full: bool, join_fraction: float
) -> None:
    g = random_topology(seed, operators=3, parallelism=2, full=full, join_fraction=join_fraction)
    assume(len(g.tasks) <= 9)
    budget = len(g.tasks) // 2
    best = output_fidelity(g, set(g.tasks) - brute_force(g, budget))
    assert output_fidelity(g, set(g.tasks) - dynamic_programming(g, budget)) == pytest.approx(
        best, abs=TOLERANCE
    )
