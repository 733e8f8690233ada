"""Peace: a schedule of concurrent checkpoint writes (Kwon et al. 2008, SGuard, Section 5).

When many tasks checkpoint at once they contend for the store's DataNodes, disks and
network, and every write slows down. Kwon et al. 2008's Peace gives each write a time
step (and, inside HDFS, its replicas' DataNodes) so that only as many writes run at once
as the store has resources for, and each writer's chunks run close together: each
writer finishes about twice as fast, all writes together about 20% later (their
Figure 10).

What we can schedule. Peace runs inside the DFS master and picks every replica's
DataNode by a min-cost flow over servers, switches and links. A WebHDFS client cannot
pick DataNodes (the NameNode chooses the pipeline), so here the servers and replicas
collapse into one resource per time step: the store takes ``capacity`` chunk writes
at once. What is left to schedule is *when* each writer writes: its slots. Slots are
fixed time windows of a repeating cycle, computed alike by every task from the task
list (:func:`write_windows`, :func:`until_open`): no message, no coordinator.

Plain data in and out, no I/O (like ``elastorm.durable.format``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

W = TypeVar("W", bound=Hashable)
"""A writer's name (a task id, a string): hashable and sortable, so order is deterministic."""


def peace_schedule(sizes: Mapping[W, int], capacity: int) -> list[tuple[W, int]]:
    """Each writer's slots for its chunks: at most ``capacity`` chunks per slot, one
    chunk per writer per slot, each writer's chunks as early as the writers before it
    allow (Kwon et al. 2008, Section 5, Algorithm 1, with the time steps as a graph).

    Parameters
    ----------
    sizes : mapping writer -> number of chunks (>= 1) it writes
        Writers must be mutually sortable (the order breaks ties).
    capacity : int >= 1
        Chunk writes the store takes at once (one time step, one slot).

    Returns
    -------
    list of (writer, slot)
        One pair per chunk, sorted by slot, then writer. A writer's slots are
        consecutive (shown in Notes), so its first slot is when it starts writing.

    Raises
    ------
    ValueError
        ``capacity`` < 1, or a size < 1.

    Notes
    -----
    Like Peace's Algorithm 1 the requests are taken one at a time; each one's chunks
    are routed by a min-cost flow through the residual graph the earlier requests
    left: source -> writer (its chunks) -> slot ``t`` (capacity 1: a writer sends one
    stream, cost ``t``) -> sink (capacity: the slot's unused share of ``capacity``).
    The slot costs are distinct, so the flow is unique: the writer's ``k`` earliest
    slots with room. Kwon et al. take requests first come, first served; a batch of
    checkpoints arrives at once, so here they are taken smallest first (ties by
    writer), which minimises the sum of the writers' completion slots: the schedule
    is list scheduling in shortest-processing-time order on ``capacity`` identical
    machines, optimal for that sum (Conway, Maxwell & Miller 1967; McNaughton 1959:
    pre-emption does not help). Each step keeps the slots' load non-increasing over time, so the
    earliest slots with room are consecutive. Every writer ends by
    ``ceil(sum(sizes) / capacity) + max(sizes)``, the horizon of the graph.

    Complexity: ``n`` network-simplex solves (networkx's ``min_cost_flow``) on a graph
    of ``H + 3`` nodes and ``2H + 1`` edges, ``n`` writers, horizon
    ``H = ceil(sum(sizes) / capacity) + max(sizes)``; plus the sort, ``O(n log n)``.

    References
    ----------
    Kwon, Balazinska, Greenberg 2008, "Fault-tolerant stream processing using a
    distributed, replicated file system" (SGuard), VLDB, Section 5 (Peace) and
    Figure 10. Ahuja, Magnanti, Orlin 1993, "Network flows" (min-cost flow).

    Examples
    --------
    >>> peace_schedule({"a": 2, "b": 1, "c": 1}, capacity=2)
    [('b', 0), ('c', 0), ('a', 1), ('a', 2)]
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    bad = {w: k for w, k in sizes.items() if k < 1}
    if bad:
        raise ValueError(f"every writer writes >= 1 chunk, got {bad}")
    if not sizes:
        return []
    horizon = math.ceil(sum(sizes.values()) / capacity) + max(sizes.values())
    room = [capacity] * horizon
    out: list[tuple[W, int]] = []
    for writer in sorted(sizes, key=lambda w: (sizes[w], w)):  # shortest first
        for slot in _route(sizes[writer], room):
            room[slot] -= 1
            out.append((writer, slot))
    return sorted(out, key=lambda a: (a[1], a[0]))


def _route(chunks: int, room: Sequence[int]) -> list[int]:
    """The slots one writer's ``chunks`` take: a min-cost flow through the slots' ``room``."""
    import networkx as nx  # here, not with the module: every keyed worker imports it

    graph = nx.DiGraph()
    graph.add_node("writer", demand=-chunks)
    graph.add_node("sink", demand=chunks)
    for slot, free in enumerate(room):
        if free > 0:
            graph.add_edge("writer", ("slot", slot), capacity=1, weight=slot)
            graph.add_edge(("slot", slot), "sink", capacity=free, weight=0)
    flow = nx.min_cost_flow(graph)
    return sorted(node[1] for node, units in flow["writer"].items() if units > 0)


def completion(schedule: Sequence[tuple[W, int]]) -> dict[W, int]:
    """Each writer's completion: one past its last slot (what Peace keeps small)."""
    done: dict[W, int] = {}
    for writer, slot in schedule:
        done[writer] = max(done.get(writer, 0), slot + 1)
    return done


def write_windows(
    schedule: Sequence[tuple[W, int]], *, cycle_secs: float
) -> dict[W, tuple[float, float]]:
    """Each writer's window in a repeating cycle of ``cycle_secs``: (opens, closes) in
    seconds from the cycle's start; the cycle is cut into as many equal slots as the
    schedule uses, and a writer's window spans its (consecutive) slots."""
    if cycle_secs <= 0:
        raise ValueError(f"cycle_secs must be > 0, got {cycle_secs}")
    if not schedule:
        return {}
    width = cycle_secs / (max(slot for _, slot in schedule) + 1)
    first: dict[W, int] = {}
    for writer, slot in schedule:
        first[writer] = min(first.get(writer, slot), slot)
    done = completion(schedule)
    return {w: (first[w] * width, done[w] * width) for w in first}


def until_open(now: float, window: tuple[float, float], *, cycle_secs: float) -> float:
    """Seconds from ``now`` (a clock every writer shares: wall-clock time) until the
    window opens; 0.0 while it is open. Cycles start at multiples of ``cycle_secs``."""
    opens, closes = window
    phase = now % cycle_secs
    if opens <= phase < closes:
        return 0.0
    return (opens - phase) % cycle_secs


def task_windows(
    tasks: Sequence[int], *, capacity: int, cycle_secs: float
) -> dict[int, tuple[float, float]]:
    """The runtime's windows: every keyed task one chunk (a task cannot know the others'
    checkpoint sizes without a message), scheduled by :func:`peace_schedule`; every
    task computes the same from the same task list."""
    return write_windows(peace_schedule(dict.fromkeys(tasks, 1), capacity), cycle_secs=cycle_secs)
