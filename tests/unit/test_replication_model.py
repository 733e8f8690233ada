"""Output Fidelity and MC-trees (Su & Zhou 2016, section III) on hand-computed graphs."""

from __future__ import annotations

import pytest
from replication_graphs import graph

from elastorm.replication.generator import SOURCE_RATE, random_topology
from elastorm.replication.mctrees import mc_trees
from elastorm.replication.model import (
    InputKind,
    Operator,
    Partitioning,
    ReplicationModelError,
    TaskGraph,
    failure_scenario,
    output_fidelity,
    output_losses,
    partitioning,
    tasks_on,
)

IND, COR = InputKind.INDEPENDENT, InputKind.CORRELATED


def fan_in(kind: InputKind) -> TaskGraph:
    """Sources a1, a2 (operator A) and b1 (B) feed c1 (C): rates 2, 3 and 5."""
    return graph(
        {"A": (("a1", "a2"), IND), "B": (("b1",), IND), "C": (("c1",), kind)},
        {"a1->c1": 2, "a2->c1": 3, "b1->c1": 5},
    )


def three_levels(kind: InputKind) -> TaskGraph:
    """s1, s2 merge into m1 (rates 1, 3); m1 (rate 4) and source t1 (rate 2) feed j1."""
    return graph(
        {
            "S": (("s1", "s2"), IND),
            "M": (("m1",), IND),
            "T": (("t1",), IND),
            "J": (("j1",), kind),
        },
        {"s1->m1": 1, "s2->m1": 3, "m1->j1": 4, "t1->j1": 2},
    )


@pytest.mark.parametrize(
    ("kind", "failed", "expected"),
    [
        # independent: loss = (2*1 + 3*0 + 5*0) / 10 = 0.2, OF = 0.8
        (IND, {"a1"}, 0.8),
        # independent: loss = (2 + 5) / 10 = 0.7, OF = 0.3
        (IND, {"a1", "b1"}, 0.3),
        # correlated: stream A loses 2/5 = 0.4 (eq. 1), B loses 0; OF = 0.6 * 1 = 0.6
        (COR, {"a1"}, 0.6),
        # correlated: stream B lost entirely, the product is empty: OF = 0
        (COR, {"b1"}, 0.0),
        # correlated: A loses 3/5, B nothing: OF = 0.4
        (COR, {"a2"}, 0.4),
        # the sink itself failed
        (IND, {"c1"}, 0.0),
    ],
)
def test_fan_in_output_fidelity_by_hand(kind: InputKind, failed: set[str], expected: float) -> None:
    assert output_fidelity(fan_in(kind), failed) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kind", "failed", "expected"),
    [
        # m1 loses 3/4; j1 is a join: 1 - (1 - 0.75)(1 - 0) = 0.75 lost, OF = 0.25
        (COR, {"s2"}, 0.25),
        # m1 loses 1/4: OF = 0.75
        (COR, {"s1"}, 0.75),
        # m1 loses 1/4; j1 independent: (4 * 0.25 + 2 * 0) / 6 = 1/6 lost, OF = 5/6
        (IND, {"s1"}, 5 / 6),
        # t1 lost, j1 independent: 2/6 lost, OF = 2/3; a join would lose all
        (IND, {"t1"}, 2 / 3),
        (COR, {"t1"}, 0.0),
        # s2 and t1 lost, independent: (4 * 0.75 + 2 * 1) / 6 = 5/6 lost, OF = 1/6
        (IND, {"s2", "t1"}, 1 / 6),
    ],
)
def test_loss_propagates_through_three_levels_by_hand(
    kind: InputKind, failed: set[str], expected: float
) -> None:
    assert output_fidelity(three_levels(kind), failed) == pytest.approx(expected)


def test_losses_of_every_task_by_hand() -> None:
    losses = output_losses(three_levels(COR), {"s2"})
    assert losses == pytest.approx({"s1": 0.0, "s2": 1.0, "t1": 0.0, "m1": 0.75, "j1": 0.75})


def test_sink_tasks_weigh_by_their_rate_eq4() -> None:
    # s1 -> x1 at 4, s2 -> x2 at 1; losing s2 loses x2's output: OF = (4*1 + 1*0) / 5 = 0.8
    g = graph(
        {"S": (("s1", "s2"), IND), "X": (("x1", "x2"), IND)},
        {"s1->x1": 4, "s2->x2": 1},
    )
    assert g.sink_tasks == ("x1", "x2")
    assert output_fidelity(g, {"s2"}) == pytest.approx(0.8)
    assert output_fidelity(g, {"x1"}) == pytest.approx(0.2)


def test_no_failure_is_fidelity_one_and_total_failure_zero() -> None:
    g = three_levels(COR)
    assert output_fidelity(g, set()) == 1.0
    assert output_fidelity(g, set(g.tasks)) == 0.0


def test_mc_trees_of_a_join_take_one_task_per_input_operator() -> None:
    # j1 joins M and T: trees {s1,m1,t1,j1} (1/4 of m1's input) and {s2,m1,t1,j1} (3/4)
    trees = {t.tasks: t.weight for t in mc_trees(three_levels(COR))}
    assert trees == pytest.approx(
        {
            frozenset({"s1", "m1", "t1", "j1"}): 0.25,
            frozenset({"s2", "m1", "t1", "j1"}): 0.75,
        }
    )


def test_mc_trees_of_a_union_take_one_substream() -> None:
    # j1 independent: m1 carries 4/6 of its input (split 1:3 upstream), t1 2/6
    trees = {t.tasks: t.weight for t in mc_trees(three_levels(IND))}
    assert trees == pytest.approx(
        {
            frozenset({"s1", "m1", "j1"}): 4 / 6 * 1 / 4,
            frozenset({"s2", "m1", "j1"}): 4 / 6 * 3 / 4,
            frozenset({"t1", "j1"}): 2 / 6,
        }
    )


def test_mc_trees_limit_raises() -> None:
    with pytest.raises(ReplicationModelError, match="more than 1 MC-trees"):
        mc_trees(three_levels(COR), limit=1)


def test_partitioning_kinds() -> None:
    full = graph(
        {"A": (("a1", "a2"), IND), "B": (("b1", "b2"), IND)},
        {"a1->b1": 1, "a1->b2": 1, "a2->b1": 1, "a2->b2": 1},
    )
    assert partitioning(full, *full.operators) is Partitioning.FULL
    one = graph({"A": (("a1", "a2"), IND), "B": (("b1", "b2"), IND)}, {"a1->b1": 1, "a2->b2": 1})
    a, b = one.operators
    assert partitioning(one, a, b) is Partitioning.ONE_TO_ONE
    split = graph(
        {"A": (("a1",), IND), "B": (("b1", "b2"), IND), "C": (("c1",), IND)},
        {"a1->b1": 1, "a1->b2": 1, "b1->c1": 1, "b2->c1": 1},
    )
    a, b, c = split.operators
    # one task on a side: split and merge (not Full), so only real Full makes a full topology
    assert partitioning(split, a, b) is Partitioning.SPLIT
    assert partitioning(split, b, c) is Partitioning.MERGE
    merge = graph(
        {"A": (("a1", "a2", "a3", "a4"), IND), "B": (("b1", "b2"), IND)},
        {"a1->b1": 1, "a2->b1": 1, "a3->b2": 1, "a4->b2": 1},
    )
    assert partitioning(merge, *merge.operators) is Partitioning.MERGE
    spl = graph(
        {"A": (("a1", "a2"), IND), "B": (("b1", "b2", "b3", "b4"), IND)},
        {"a1->b1": 1, "a1->b2": 1, "a2->b3": 1, "a2->b4": 1},
    )
    assert partitioning(spl, *spl.operators) is Partitioning.SPLIT
    other = graph(
        {"A": (("a1", "a2"), IND), "B": (("b1", "b2"), IND)},
        {"a1->b1": 1, "a1->b2": 1, "a2->b2": 1},
    )
    assert partitioning(other, *other.operators) is Partitioning.OTHER


@pytest.mark.parametrize(
    ("ops", "edges", "message"),
    [
        ({"A": (("a",), IND), "B": (("a",), IND)}, {}, "two operators"),
        ({"A": (("a", "b"), IND)}, {"a->b": 1}, "inside an operator"),
        ({"A": (("a",), IND), "B": (("b",), IND)}, {"a->x": 1}, "unknown task"),
        ({"A": (("a",), IND)}, {}, "no stream at all"),
        ({}, {}, "at least one operator"),
        ({"A": (("a",), IND), "B": (("b",), IND)}, {"a->b": 0}, "rate must be"),
        ({"A": (("a",), IND), "B": (("b",), IND)}, {"a->b": 1, "b->a": 1}, "cycle"),
        (
            {"A": (("a",), IND), "B": (("b1", "b2"), IND)},
            {"a->b1": 1},
            "some tasks have inputs",
        ),
    ],
)
def test_bad_graphs_are_refused(ops: dict, edges: dict, message: str) -> None:
    with pytest.raises(ReplicationModelError, match=message):
        graph(ops, edges)


def test_a_task_listed_twice_or_an_empty_operator_is_refused() -> None:
    with pytest.raises(ReplicationModelError, match="twice"):
        Operator(name="A", tasks=("a", "a"))
    with pytest.raises(ReplicationModelError, match="no tasks"):
        Operator(name="A", tasks=())


def test_failure_scenario_defaults_to_every_task_and_checks_names() -> None:
    g = fan_in(IND)
    assert failure_scenario(g) == frozenset({"a1", "a2", "b1", "c1"})
    assert failure_scenario(g, ["a1"]) == frozenset({"a1"})
    with pytest.raises(ReplicationModelError, match="unknown tasks"):
        failure_scenario(g, ["zz"])


def test_a_zone_failure_takes_the_tasks_on_its_nodes() -> None:
    placement = {"a1": "n1", "a2": "n2", "b1": "n1", "c1": "n3"}
    assert tasks_on(placement, ["n1"]) == {"a1", "b1"}
    assert tasks_on(placement, ["n1", "n3", "n9"]) == {"a1", "b1", "c1"}
    assert tasks_on(placement, []) == frozenset()
    # the zone's scenario feeds the model: a1 and b1 down, the union c1 keeps a2's 3/10
    assert output_fidelity(fan_in(IND), tasks_on(placement, ["n1"])) == pytest.approx(0.3)


def test_generator_is_seeded_and_conserves_rates() -> None:
    g = random_topology(11, operators=5, parallelism=3, join_fraction=0.5)
    assert g == random_topology(11, operators=5, parallelism=3, join_fraction=0.5)
    assert g != random_topology(12, operators=5, parallelism=3, join_fraction=0.5)
    sources = [op for op in g.operators if not g.input_streams(op.tasks[0])]
    # selectivity 1 everywhere: what the sources emit reaches the sink
    assert sum(g.sink_rate(t) for t in g.sink_tasks) == pytest.approx(SOURCE_RATE * len(sources))


def test_generator_refuses_bad_specifications() -> None:
    with pytest.raises(ReplicationModelError, match="operators >= 2"):
        random_topology(1, operators=1)
