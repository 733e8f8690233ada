"""Task records -> ClusterView and join/leave events (pure; no ZooKeeper)."""

from __future__ import annotations

import pytest

from elastorm.controller.model import Allocation, ControllerModelError, KeyGroupId
from elastorm.controller.recovery import plan_recovery
from elastorm.zk.codec import Heartbeat, TaskIdentity, TaskRecord
from elastorm.zk.view import (
    NodeJoined,
    NodeLost,
    TaskEntry,
    TaskJoined,
    TaskLeft,
    cluster_view,
    diff_tasks,
    orphan_checkpoints,
    reported_checkpoints,
)


def rec(task_id, node, *, op="op", zone=None, seq=0, **hb) -> TaskRecord:
    ident = TaskIdentity(task_id=task_id, operator=op, node_id=node, host="h", pid=1, zone=zone)
    return TaskRecord(identity=ident, heartbeat=Heartbeat(**hb), seq=seq)


def entries(*pairs) -> dict[str, TaskEntry]:
    return {str(r.task_id): TaskEntry(record=r, incarnation=inc) for r, inc in pairs}


def test_diff_reports_joins_leaves_and_node_changes_in_fixed_order() -> None:
    a1, a2, b3 = rec(1, "a"), rec(2, "a"), rec(3, "b")
    old = entries((a1, 10), (a2, 11))
    new = entries((a2, 11), (b3, 12))
    assert diff_tasks(old, new) == (
        TaskLeft(task_id=1, operator="op", node_id="a", incarnation=10),
        NodeJoined(node_id="b"),
        TaskJoined(task_id=3, operator="op", node_id="b", incarnation=12),
    )
    # Last task of node a gone: node lost.
    assert diff_tasks(new, entries((b3, 12))) == (
        TaskLeft(task_id=2, operator="op", node_id="a", incarnation=11),
        NodeLost(node_id="a", tasks=(2,)),
    )


def test_a_new_incarnation_is_a_leave_then_a_join() -> None:
    r = rec(1, "a")
    events = diff_tasks(entries((r, 10)), entries((r, 20)))
    assert events == (
        TaskLeft(task_id=1, operator="op", node_id="a", incarnation=10),
        TaskJoined(task_id=1, operator="op", node_id="a", incarnation=20),
    )
    assert diff_tasks(entries((r, 10)), entries((rec(1, "a", seq=5), 10))) == ()


def test_cluster_view_builds_nodes_key_groups_and_checkpoints() -> None:
    live = [
        rec(
            1,
            "a",
            key_groups=(0, 1),
            input_rates={0: 3.0},
            queue_length=2,
            cpu=0.2,
            state_sizes={1: 50.0},
            checkpoints=(2,),
        ),
        rec(2, "a", op="up", queue_length=3, cpu=0.1, buffered={KeyGroupId("op", 0): 7}),
        rec(3, "b", key_groups=(2,), checkpoints=(0, 1), node_cpu=0.9, cpu=0.05),
    ]
    view = cluster_view(live, now=12.0, capacities={"a": 2.0})
    assert view.node_ids() == ("a", "b") and view.now == 12.0
    a, b = view.node("a"), view.node("b")
    assert a.capacity == 2.0 and a.queue_length == 5 and a.cpu == pytest.approx(0.3)
    assert b.cpu == 0.9  # the host measurement wins over process shares
    kg0 = view.key_group(KeyGroupId("op", 0))
    assert (kg0.owner, kg0.load, kg0.replay_size) == ("a", 3.0, 7)
    assert view.key_group(KeyGroupId("op", 1)).checkpoint_size == 50.0
    assert view.checkpoints.holders(KeyGroupId("op", 0)) == ("b",)
    assert view.checkpoints.holders(KeyGroupId("op", 2)) == ("a",)


def test_claims_on_one_key_group_resolve_live_then_epoch_then_seq() -> None:
    old = rec(1, "a", key_groups=(0,), epoch=1, seq=99)
    new = rec(2, "b", key_groups=(0,), epoch=2, seq=1)
    kg = KeyGroupId("op", 0)
    assert cluster_view([old, new], now=0).key_group(kg).owner == "b"
    assert cluster_view([new, old], now=0).key_group(kg).owner == "b"
    # A departed task's claim never beats a live one, whatever its epoch.
    gone = rec(3, "c", key_groups=(0,), epoch=9)
    assert cluster_view([old], departed=[gone], now=0).key_group(kg).owner == "a"


def test_departed_tasks_stay_in_the_view_so_recovery_can_be_planned() -> None:
    live = [rec(1, "a", key_groups=(0,), checkpoints=(1,))]
    gone = [rec(2, "b", key_groups=(1,), checkpoints=(0,))]
    view = cluster_view(live, departed=gone, now=0)
    assert view.owned_by("b") == (KeyGroupId("op", 1),)
    # Only live tasks' reported checkpoints count: b's copy of op/0 is gone.
    assert view.checkpoints.holders(KeyGroupId("op", 0)) == ()
    plan = plan_recovery(view, ["b"])
    assert [(m.key_group, m.target) for m in plan.restores] == [(KeyGroupId("op", 1), "a")]


def test_given_allocation_is_used_and_unknown_entries_left_out() -> None:
    live = [rec(1, "a", key_groups=(0,)), rec(2, "b")]
    alloc = Allocation({KeyGroupId("op", 0): ("b", "zz"), KeyGroupId("op", 9): ("a",)})
    view = cluster_view(live, now=0, checkpoints=alloc)
    assert view.checkpoints == Allocation({KeyGroupId("op", 0): ("b",)})


def test_tasks_of_one_node_must_agree_on_its_zone() -> None:
    with pytest.raises(ControllerModelError, match="zones"):
        cluster_view([rec(1, "a", zone="z1"), rec(2, "a", zone="z2")], now=0)
    view = cluster_view([rec(1, "a", zone="z1"), rec(2, "a", zone="z1")], now=0)
    assert view.node("a").zone == "z1"


def test_reported_and_orphan_checkpoints() -> None:
    recs = [rec(1, "a", key_groups=(0,), checkpoints=(1,)), rec(2, "b", checkpoints=(1, 0))]
    assert reported_checkpoints(recs) == Allocation(
        {KeyGroupId("op", 0): ("b",), KeyGroupId("op", 1): ("a", "b")}
    )
    assert orphan_checkpoints(recs) == (KeyGroupId("op", 1),)
