"""Keyed operators with their own task counts: ``letters`` runs 2 tasks, ``counts`` 3,
so logical node ``node2`` runs no ``letters`` task. No planner may put a ``letters`` key
group, its checkpoint or a replica there (``ClusterView.hosts``), whatever the loads say:
the runtime would find no task of the operator on that node."""

from __future__ import annotations

import pytest

from elastorm.controller.adaptation import Thresholds, plan_adaptation
from elastorm.controller.allocation import (
    AllocationSpec,
    baseline_allocation,
    correlated_allocation,
    even_allocation,
    ring_allocation,
)
from elastorm.controller.loop import Placement
from elastorm.controller.model import (
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    KeyGroupInfo,
    NodeInfo,
)
from elastorm.controller.recovery import plan_recovery
from elastorm.controller.replication import place_replicas
from elastorm.controller.scaling import RescaleView, plan_rescale

PLACEMENT = Placement.by_index({"counts": [10, 11, 12], "letters": [20, 21]})
NODES = ("node0", "node1", "node2")


def _view(owners: dict[KeyGroupId, str], *, hot: str | None = None, **kw) -> ClusterView:
    """Every group at load 0.3 on ``owners``; ``hot`` overloaded, the others idle."""
    nodes = [
        NodeInfo(node_id=n, cpu=0.95 if n == hot else 0.05, queue_length=900 if n == hot else 0)
        for n in NODES
    ]
    kgs = [KeyGroupInfo(key_group=kg, owner=o, load=0.3) for kg, o in owners.items()]
    return ClusterView(nodes=nodes, key_groups=kgs, hosts=PLACEMENT.hosts, **kw)


def letters(g: int) -> KeyGroupId:
    return KeyGroupId("letters", g)


def counts(g: int) -> KeyGroupId:
    return KeyGroupId("counts", g)


def test_the_placement_puts_the_smaller_operator_on_the_first_nodes() -> None:
    assert PLACEMENT.nodes == NODES
    assert PLACEMENT.hosts["letters"] == {"node0", "node1"}
    assert PLACEMENT.task_on("letters", "node1") == 21
    assert PLACEMENT.task_on("counts", "node2") == 12
    assert PLACEMENT.node_of(21) == "node1"


def test_a_view_refuses_a_group_or_checkpoint_where_its_operator_has_no_task() -> None:
    with pytest.raises(ControllerModelError, match="owner 'node2' runs no task"):
        _view({letters(0): "node2"})
    with pytest.raises(ControllerModelError, match="holder 'node2' runs no task"):
        _view({letters(0): "node0"}, checkpoints={letters(0): ("node2",)})
    assert _view({letters(0): "node0"}).targets("letters") == ("node0", "node1")
    assert _view({letters(0): "node0"}).targets() == NODES


@pytest.mark.parametrize(
    "policy", [baseline_allocation, ring_allocation, even_allocation, correlated_allocation]
)
def test_every_allocation_policy_holds_checkpoints_on_the_operators_nodes(policy) -> None:
    owners = {letters(g): NODES[g % 2] for g in range(6)} | {
        counts(g): NODES[g % 3] for g in range(6)
    }
    alloc = policy(AllocationSpec(view=_view(owners)))
    for g in range(6):
        assert alloc.holders(letters(g)) == (NODES[1 - g % 2],)  # the other letters node
        assert alloc.holders(counts(g))[0] in set(NODES) - {NODES[g % 3]}


def test_adaptation_relieves_a_hot_node_only_onto_the_operators_nodes() -> None:
    # node1 is hot and owns letters groups; node0 is busy with counts, node2 idle
    owners = {letters(g): "node1" for g in range(3)} | {counts(g): "node0" for g in range(4)}
    view = _view(owners, hot="node1")
    view = view.replace(
        nodes=[
            NodeInfo(node_id="node0", cpu=0.4, queue_length=0),
            NodeInfo(node_id="node1", cpu=0.95, queue_length=900),
            NodeInfo(node_id="node2", cpu=0.05, queue_length=0),
        ]
    )
    moves, _ = plan_adaptation(view, Thresholds())
    assert moves, "node1 is overloaded: something should move"
    assert all(m.target == "node0" for m in moves if m.key_group.operator == "letters")
    # node0 busy too: the letters groups stay (nowhere to go), counts go to idle node2
    owners |= {counts(g): "node1" for g in range(4, 6)}
    busy = [NodeInfo(node_id="node0", cpu=0.7, queue_length=0), *view.nodes[1:]]
    moves, _ = plan_adaptation(_view(owners).replace(nodes=busy), Thresholds())
    assert [(m.key_group.operator, m.target) for m in moves] == [("counts", "node2")] * len(moves)
    assert moves


def test_recovery_restores_a_group_only_where_its_operator_runs() -> None:
    owners = {letters(0): "node1", counts(0): "node1", counts(1): "node0"}
    plan = plan_recovery(_view(owners), ["node1"], durable={letters(0), counts(0)})
    by_kg = {m.key_group: m.target for m in plan.durable_restores}
    assert by_kg[letters(0)] == "node0"  # node2 is idle, but runs no letters task
    assert by_kg[counts(0)] == "node2"  # the least loaded node that runs counts
    for kg, holders in plan.view.checkpoints.entries:
        assert all(plan.view.runs(kg.operator, h) for h in holders)
    # both letters tasks lost: nowhere to restore it now (it waits, not placed on node2)
    lost = plan_recovery(_view(owners), ["node0", "node1"], durable={letters(0)})
    assert letters(0) in lost.waiting and letters(0) not in lost.lost
    assert letters(0) not in {m.key_group for m in lost.durable_restores}
    # ... unless the other one is back (restarted, empty): the durable copy goes there
    back = plan_recovery(
        _view(owners), ["node0", "node1"], rejoined=["node0"], durable={letters(0)}
    )
    assert [(m.key_group, m.target) for m in back.durable_restores] == [(letters(0), "node0")]
    assert letters(0) not in back.lost


def test_a_drain_and_a_join_move_a_group_only_among_its_operators_nodes() -> None:
    owners = {letters(0): "node1", letters(1): "node0", counts(0): "node1", counts(1): "node0"}
    view = _view(owners)
    drain = plan_rescale(
        RescaleView(view=view, active=frozenset({"node0", "node2"}), draining=frozenset({"node1"}))
    )
    assert dict(drain.holders)[letters(0)] == "node0"
    assert dict(drain.holders)[counts(0)] in {"node0", "node2"}
    join = plan_rescale(
        RescaleView(view=view, active=frozenset(NODES), joining=frozenset({"node2"}))
    )
    assert join.holders, "node2 joins empty: it should get its share"
    assert all(kg.operator == "counts" for kg, node in join.holders if node == "node2")


def test_a_replica_goes_only_where_its_operator_runs() -> None:
    owners = {letters(0): "node0", counts(0): "node0"}
    placed = place_replicas(_view(owners), [("letters", "node0"), ("counts", "node0")], {})
    assert placed.wanted[letters(0)] == "node1"
    assert placed.wanted[counts(0)] in {"node1", "node2"}
