"""From task znodes to the controller's model and to join/leave events (pure).

The :class:`~elastorm.zk.watcher.ClusterWatcher` keeps ``{task znode name:
TaskEntry}``; after every change it calls :func:`diff_tasks` for the events and,
on demand, :func:`cluster_view` for a :class:`elastorm.controller.model.ClusterView`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from elastorm.controller.model import (
    Allocation,
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    KeyGroupInfo,
    NodeId,
    NodeInfo,
)
from elastorm.zk.codec import TaskRecord


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


def cluster_view(
    live: Iterable[TaskRecord],
    *,
    now: float,
    departed: Iterable[TaskRecord] = (),
    checkpoints: Allocation | None = None,
    capacities: Mapping[NodeId, float] | None = None,
    background: Mapping[NodeId, float] | None = None,
) -> ClusterView:
    """Build the controller's ``ClusterView`` from task records.

    * **nodes**: every node of a live or departed task (departed ones are kept so
      ``plan_recovery(view, lost_nodes)`` sees what they owned). ``zone`` from the
      records (tasks of one node must agree); ``capacity`` / ``background_load``
      from the mappings (default 1.0 / 0.0); ``queue_length`` = sum over the node's
      tasks; ``cpu`` = max of the tasks' ``node_cpu`` if any reported one, else the
      sum of their process ``cpu`` if any, else ``None`` (derived from loads).
    * **key groups**: each owned index of a task becomes ``KeyGroupId(operator,
      index)`` with the task's node as owner, ``load`` = its input rate,
      ``checkpoint_size`` = its state size, ``replay_size`` = the sum of all tasks'
      ``buffered`` for it. When two records claim one key group (a migration in
      flight, or a stale departed record) the claim wins by: live before departed,
      higher routing ``epoch``, higher ``seq``, lower task id.
    * **checkpoints**: ``checkpoints`` if given (the controller's allocation), else
      what tasks report holding, holder = the task's node. Entries for key groups or
      holders the view does not know are left out (see :func:`orphan_checkpoints`).

    Raises ``ControllerModelError`` if two tasks of one node report different zones.
    Complexity: ``O(T + K log K)`` for ``T`` tasks and ``K`` key groups.
    """
    records = [(r, True) for r in live] + [(r, False) for r in departed]
    nodes = _nodes(records, capacities or {}, background or {})
    claims: dict[KeyGroupId, tuple[tuple, TaskRecord]] = {}
    replay: dict[KeyGroupId, float] = {}
    for rec, is_live in records:
        hb = rec.heartbeat
        rank = (is_live, hb.epoch, rec.seq, -rec.task_id)
        for idx in hb.key_groups:
            kg = KeyGroupId(rec.identity.operator, idx)
            if kg not in claims or rank > claims[kg][0]:
                claims[kg] = (rank, rec)
        if is_live:
            for kg, n in hb.buffered:
                replay[kg] = replay.get(kg, 0.0) + n
    key_groups = []
    for kg, (_, rec) in claims.items():
        hb = rec.heartbeat
        key_groups.append(
            KeyGroupInfo(
                key_group=kg,
                owner=rec.node_id,
                load=dict(hb.input_rates).get(kg.index, 0.0),
                checkpoint_size=dict(hb.state_sizes).get(kg.index, 0.0),
                replay_size=replay.get(kg, 0.0),
            )
        )
    node_ids = {n.node_id for n in nodes}
    if checkpoints is None:
        checkpoints = reported_checkpoints(r for r, is_live in records if is_live)
    kept = {
        kg: tuple(h for h in holders if h in node_ids)
        for kg, holders in checkpoints.entries
        if kg in claims
    }
    return ClusterView(
        nodes=nodes,
        key_groups=key_groups,
        checkpoints=Allocation({kg: hs for kg, hs in kept.items() if hs}),
        now=now,
    )


def _nodes(records, capacities, background) -> list[NodeInfo]:
    by_node: dict[NodeId, list[TaskRecord]] = {}
    for rec, _ in records:
        by_node.setdefault(rec.node_id, []).append(rec)
    out = []
    for node_id in sorted(by_node):
        recs = by_node[node_id]
        zones = {r.identity.zone for r in recs}
        if len(zones) > 1:
            raise ControllerModelError(
                f"node {node_id}: tasks report zones {sorted(map(str, zones))}"
            )
        node_cpus = [r.heartbeat.node_cpu for r in recs if r.heartbeat.node_cpu is not None]
        cpus = [r.heartbeat.cpu for r in recs if r.heartbeat.cpu is not None]
        cpu = max(node_cpus) if node_cpus else (sum(cpus) if cpus else None)
        out.append(
            NodeInfo(
                node_id=node_id,
                capacity=capacities.get(node_id, 1.0),
                background_load=background.get(node_id, 0.0),
                zone=zones.pop(),
                queue_length=sum(r.heartbeat.queue_length for r in recs),
                cpu=cpu,
            )
        )
    return out


def reported_checkpoints(records: Iterable[TaskRecord]) -> Allocation:
    """The checkpoints tasks report holding: key group -> holder nodes (sorted)."""
    held: dict[KeyGroupId, set[NodeId]] = {}
    for rec in records:
        for idx in rec.heartbeat.checkpoints:
            held.setdefault(KeyGroupId(rec.identity.operator, idx), set()).add(rec.node_id)
    return Allocation({kg: tuple(sorted(nodes)) for kg, nodes in held.items()})


def orphan_checkpoints(records: Iterable[TaskRecord]) -> tuple[KeyGroupId, ...]:
    """Key groups some task holds a checkpoint of but no task owns (sorted)."""
    recs = list(records)
    owned = {KeyGroupId(r.identity.operator, i) for r in recs for i in r.heartbeat.key_groups}
    return tuple(kg for kg, _ in reported_checkpoints(recs).entries if kg not in owned)
