"""Minimal complete trees (Su & Zhou 2016, section III-B, Definition 1)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from elastorm.replication.model import InputKind, ReplicationModelError, TaskGraph


@dataclass(frozen=True, kw_only=True)
class MCTree:
    """An MC-tree: tasks that together carry one share of the output, alive or not at all.

    ``weight`` is the share of Output Fidelity the tree carries: the sink task's
    share of the sink rate times, at each task, the chosen substream's share of
    the input it stands for. The weights of all MC-trees sum to 1, and the Output
    Fidelity of a failure is the total weight of the MC-trees with no failed task.
    """

    tasks: frozenset[str]
    weight: float


def mc_trees(graph: TaskGraph, limit: int | None = None) -> tuple[MCTree, ...]:
    """Every MC-tree of ``graph``, in a deterministic order.

    A tree grows from a sink task upstream: an independent-input task takes one of
    its input substreams (any upstream task), a correlated-input task one substream
    of each input stream (one task per upstream operator), down to source tasks.
    Their number is the product of those choices, up to ``p^|O|`` for ``|O|``
    operators of parallelism ``p`` (Full partitioning); time and memory are linear
    in the number of trees times their size.

    References: Su & Zhou 2016, section III-B, Definition 1.

    Raises:
        ReplicationModelError: more than ``limit`` MC-trees.
    """
    partial: dict[str, list[tuple[frozenset[str], float]]] = {}
    for task in graph.tasks:
        streams = graph.input_streams(task)
        if not streams:
            partial[task] = [(frozenset({task}), 1.0)]
            continue
        if graph.operator_of(task).kind is InputKind.CORRELATED:
            groups = list(streams.values())
        else:
            groups = [{u: r for sub in streams.values() for u, r in sub.items()}]
        choices = []
        for sub in groups:
            total = sum(sub.values())
            choices.append(
                [(tasks, w * r / total) for u, r in sub.items() for tasks, w in partial[u]]
            )
        grown = []
        for combo in itertools.product(*choices):
            weight = 1.0
            for _, w in combo:
                weight *= w
            grown.append((frozenset({task}).union(*(tasks for tasks, _ in combo)), weight))
            if limit is not None and len(grown) > limit:
                raise ReplicationModelError(f"more than {limit} MC-trees (at task {task!r})")
        partial[task] = grown
    if limit is not None and sum(len(partial[t]) for t in graph.sink_tasks) > limit:
        raise ReplicationModelError(f"more than {limit} MC-trees")
    total_rate = sum(graph.sink_rate(t) for t in graph.sink_tasks)
    return tuple(
        MCTree(tasks=tasks, weight=w * graph.sink_rate(t) / total_rate)
        for t in graph.sink_tasks
        for tasks, w in partial[t]
    )
