"""From task znodes to join/leave events (pure).

The :class:`~elastorm.zk.watcher.ClusterWatcher` keeps ``{task znode name:
TaskEntry}``; after every change it calls :func:`diff_tasks` for the events. The
controller's ``ClusterView`` has one builder, ``elastorm.controller.loop.build_view``
(the routing tables and holders are the controller's own; loads come from the
records the watcher keeps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from elastorm.controller.model import (
    NodeId,
    TaskRecord,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskEntry:
    """A live task znode: its decoded record and its *incarnation* (the znode's
    creation zxid). A task that re-registers after its session expired, or a restarted
    task, gets a new incarnation even under the same task id."""

    record: TaskRecord
    incarnation: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskJoined:
    task_id: int
    operator: str
    node_id: NodeId
    incarnation: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskLeft:
    """The task's ephemeral znode is gone: process dead, session expired, or stopped."""

    task_id: int
    operator: str
    node_id: NodeId
    incarnation: int


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeJoined:
    node_id: NodeId


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeLost:
    """Every task znode of ``node_id`` is gone: treat the node as failed."""

    node_id: NodeId
    tasks: tuple[int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class MalformedTask:
    """A child of ``tasks/`` whose name or data does not decode (counted, not dropped
    silently); ``reason`` is the decoder's message."""

    name: str
    reason: str


ClusterEvent = TaskJoined | TaskLeft | NodeJoined | NodeLost | MalformedTask


def diff_tasks(
    old: Mapping[str, TaskEntry], new: Mapping[str, TaskEntry]
) -> tuple[ClusterEvent, ...]:
    """Events that turn ``old`` into ``new``, in a fixed order: task leaves, node
    losses, node joins, task joins (each sorted by id).

    A changed incarnation under one name is a leave followed by a join. A node is
    lost when it had tasks in ``old`` and has none in ``new``.

    >>> diff_tasks({}, {})
    ()
    """
    left, joined = [], []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is not None and (b is None or b.incarnation != a.incarnation):
            left.append(_task_event(TaskLeft, a))
        if b is not None and (a is None or b.incarnation != a.incarnation):
            joined.append(_task_event(TaskJoined, b))
    old_nodes = _tasks_by_node(old.values())
    new_nodes = _tasks_by_node(new.values())
    lost = [
        NodeLost(node_id=n, tasks=tuple(sorted(old_nodes[n])))
        for n in sorted(old_nodes)
        if n not in new_nodes
    ]
    came = [NodeJoined(node_id=n) for n in sorted(new_nodes) if n not in old_nodes]
    left.sort(key=lambda e: (e.task_id, e.incarnation))
    joined.sort(key=lambda e: (e.task_id, e.incarnation))
    return (*left, *lost, *came, *joined)


def _task_event(cls, entry: TaskEntry):
    ident = entry.record.identity
    return cls(
        task_id=ident.task_id,
        operator=ident.operator,
        node_id=ident.node_id,
        incarnation=entry.incarnation,
    )


def _tasks_by_node(entries: Iterable[TaskEntry]) -> dict[NodeId, list[int]]:
    out: dict[NodeId, list[int]] = {}
    for e in entries:
        out.setdefault(e.record.node_id, []).append(e.record.task_id)
    return out
