"""Task graphs written by hand for the replication tests."""

from __future__ import annotations

from elastorm.replication.model import InputKind, Operator, Stream, TaskGraph


def graph(ops: dict[str, tuple[tuple[str, ...], InputKind]], edges: dict[str, float]) -> TaskGraph:
    """A task graph from ``{op: (tasks, kind)}`` and ``{"u->v": rate}``."""
    return TaskGraph(
        operators=tuple(Operator(name=n, tasks=t, kind=k) for n, (t, k) in ops.items()),
        streams=tuple(
            Stream(source=e.split("->")[0], target=e.split("->")[1], rate=r)
            for e, r in edges.items()
        ),
    )
