"""Task records -> ClusterView and join/leave events (pure; no ZooKeeper)."""

from __future__ import annotations

from elastorm.controller.model import Heartbeat, TaskIdentity, TaskRecord
from elastorm.zk.view import (
    NodeJoined,
    NodeLost,
    TaskEntry,
    TaskJoined,
    TaskLeft,
    diff_tasks,
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
