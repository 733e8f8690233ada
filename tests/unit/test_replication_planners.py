"""The planners (Su & Zhou 2016, section IV) on hand-worked topologies."""

from __future__ import annotations

import pytest
from replication_graphs import graph

from elastorm.replication.model import InputKind, ReplicationModelError, output_fidelity
from elastorm.replication.planners import (
    brute_force,
    dynamic_programming,
    greedy,
    random_plan,
    structure_aware,
)

IND, COR = InputKind.INDEPENDENT, InputKind.CORRELATED


def three_chains():
    """Sink k unions chain x1 -> x2 (rate 4.4), source y (3.1) and source z (2.5).

    All failed, budget 3. MC-trees: {x1,x2,k} weight 0.44, {y,k} 0.31, {z,k} 0.25.
    Greedy ranks by OF with one task failed: k 0, x1 0.56, x2 0.56, y 0.69, z 0.75,
    so it takes {k, x1, x2}: OF 0.44. The optimum is {k, y, z}: OF 0.31 + 0.25 = 0.56.
    Structure-Aware: densities 0.44/3 = 0.147, 0.31/2 = 0.155, 0.25/2 = 0.125, so
    {y, k} first; then one task left: {z} adds 0.25, {x1, x2} does not fit: {k, y, z}.
    """
    return graph(
        {
            "X1": (("x1",), IND),
            "X2": (("x2",), IND),
            "Y": (("y",), IND),
            "Z": (("z",), IND),
            "K": (("k",), IND),
        },
        {"x1->x2": 4.4, "x2->k": 4.4, "y->k": 3.1, "z->k": 2.5},
    )


def of(g, plan, failed=None) -> float:
    down = set(g.tasks) if failed is None else set(failed)
    return output_fidelity(g, down - plan)


def test_greedy_misses_complete_mc_trees() -> None:
    g = three_chains()
    plan = greedy(g, 3)
    assert plan == {"k", "x1", "x2"}
    assert of(g, plan) == pytest.approx(0.44)


@pytest.mark.parametrize("planner", [dynamic_programming, structure_aware, brute_force])
def test_mc_tree_planners_find_the_optimum(planner) -> None:
    g = three_chains()
    plan = planner(g, 3)
    assert plan == {"k", "y", "z"}
    assert of(g, plan) == pytest.approx(0.56)


def test_dp_over_budgets_by_hand() -> None:
    g = three_chains()
    # budget 1: no MC-tree fits, nothing worth replicating
    assert dynamic_programming(g, 1) == frozenset()
    # budget 2: {y, k} (0.31) beats {z, k} (0.25)
    assert dynamic_programming(g, 2) == {"y", "k"}
    # budget 5: everything, OF 1
    assert dynamic_programming(g, 5) == set(g.tasks)
    assert of(g, dynamic_programming(g, 5)) == 1.0


def test_a_narrower_failure_scenario_only_replicates_failed_tasks() -> None:
    # only x2 and y fail (a fault zone): replicating x2 restores 0.44, y 0.31
    g = three_chains()
    for planner in (dynamic_programming, structure_aware, greedy, brute_force):
        plan = planner(g, 1, failed={"x2", "y"})
        assert plan == {"x2"}, planner.__name__
        assert of(g, plan, failed={"x2", "y"}) == pytest.approx(1 - 0.31)


def test_structure_aware_on_a_full_topology_completes_one_tree_first() -> None:
    """A -> B -> C, Full partitioning, two tasks each; every task failed.

    a1 emits 3 of A's 4 units (1.5 to each of b1, b2), a2 emits 1 (0.5 to each); b1
    and b2 each send 1 to c1 and to c2. So c1, c2 weigh 1/2 each (eq. 4), each b
    carries 1/2 of a c's input and a1 3/4 of a b's input: MC-tree (a1, b_j, c_k)
    weighs 1/2 * 1/2 * 3/4 = 3/16, (a2, b_j, c_k) 1/16.
    Algorithm 4's gains (rest of the operator failed, other operators alive): a1 3/4,
    a2 1/4, b1 = b2 = c1 = c2 = 1/2. Budget 3: one task per operator, best gain
    first, ties by name: {a1, b1, c1}, OF 3/16. Budget 4: then the largest gain left,
    b2 (tie with c2, by name): trees (a1, b1, c1) and (a1, b2, c1), OF 3/8 -- also
    the optimum.
    """
    g = graph(
        {"A": (("a1", "a2"), IND), "B": (("b1", "b2"), IND), "C": (("c1", "c2"), IND)},
        {
            "a1->b1": 1.5,
            "a1->b2": 1.5,
            "a2->b1": 0.5,
            "a2->b2": 0.5,
            "b1->c1": 1.0,
            "b1->c2": 1.0,
            "b2->c1": 1.0,
            "b2->c2": 1.0,
        },
    )
    plan = structure_aware(g, 3)
    assert plan == {"a1", "b1", "c1"}
    assert of(g, plan) == pytest.approx(3 / 16)
    assert structure_aware(g, 4) == {"a1", "b1", "b2", "c1"}
    assert of(g, structure_aware(g, 4)) == pytest.approx(3 / 8)
    assert of(g, dynamic_programming(g, 4)) == pytest.approx(3 / 8)


def test_budget_zero_and_negative() -> None:
    g = three_chains()
    for planner in (dynamic_programming, structure_aware, greedy, brute_force, random_plan):
        assert planner(g, 0) == frozenset()
        with pytest.raises(ReplicationModelError, match="budget"):
            planner(g, -1)


def test_random_plan_is_seeded() -> None:
    g = three_chains()
    assert random_plan(g, 2, seed=5) == random_plan(g, 2, seed=5)
    assert len(random_plan(g, 2, seed=5)) == 2
    assert {random_plan(g, 2, seed=s) for s in range(20)} != {random_plan(g, 2, seed=0)}
