"""The task graph and its Output Fidelity (Su & Zhou 2016, section III-A).

A topology is a DAG of tasks; each stream between two tasks carries a rate. An
operator is independent-input (its effective input is the union of its input
streams) or correlated-input (a join: the Cartesian product of its input streams).
A failed task loses its whole output; a live task's output loss follows from its
inputs' losses (eqs. 1-3); Output Fidelity is the rate-weighted share of the sink
tasks' output that survives (eq. 4). The formulas are written out in
docs/replication.md.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx


class ReplicationModelError(ValueError):
    """A task graph, failure scenario or budget that the model cannot take."""


class InputKind(enum.Enum):
    """How an operator combines its input streams (Su & Zhou 2016, section III-A1)."""

    INDEPENDENT = "independent"  # union of inputs: loss is the rate-weighted mean
    CORRELATED = "correlated"  # join: effective input is the Cartesian product


class Partitioning(enum.Enum):
    """How one operator's output reaches the next (Su & Zhou 2016, section II-A)."""

    ONE_TO_ONE = "one-to-one"
    SPLIT = "split"
    MERGE = "merge"
    FULL = "full"
    OTHER = "other"


@dataclass(frozen=True, kw_only=True)
class Operator:
    """An operator: its parallel tasks and how it combines its input streams."""

    name: str
    tasks: tuple[str, ...]
    kind: InputKind = InputKind.INDEPENDENT

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ReplicationModelError(f"operator {self.name!r} has no tasks")
        if len(set(self.tasks)) != len(self.tasks):
            raise ReplicationModelError(f"operator {self.name!r} lists a task twice")


@dataclass(frozen=True, kw_only=True)
class Stream:
    """The substream from task ``source`` to task ``target``, at ``rate`` tuples/s."""

    source: str
    target: str
    rate: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ReplicationModelError(
                f"stream {self.source}->{self.target}: rate must be finite and > 0, "
                f"got {self.rate!r}"
            )


@dataclass(frozen=True, kw_only=True)
class TaskGraph:
    """A topology's tasks and streams, checked on construction.

    Every operator is either a source (none of its tasks has an input stream) or
    every task of it has one, and either a sink (none of its tasks emits) or every
    task of it emits; no task is without streams; streams never stay inside one
    operator; the graph is acyclic.
    """

    operators: tuple[Operator, ...]
    streams: tuple[Stream, ...]
    _operator_of: dict[str, Operator] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.operators:
            raise ReplicationModelError("a task graph needs at least one operator")
        owner: dict[str, Operator] = {}
        for op in self.operators:
            for task in op.tasks:
                if task in owner:
                    raise ReplicationModelError(f"task {task!r} is in two operators")
                owner[task] = op
        object.__setattr__(self, "_operator_of", owner)
        seen: set[tuple[str, str]] = set()
        for s in self.streams:
            for end in (s.source, s.target):
                if end not in owner:
                    raise ReplicationModelError(f"stream names unknown task {end!r}")
            if owner[s.source] is owner[s.target]:
                raise ReplicationModelError(f"stream {s.source}->{s.target} inside an operator")
            if (s.source, s.target) in seen:
                raise ReplicationModelError(f"two streams {s.source}->{s.target}")
            seen.add((s.source, s.target))
        if not nx.is_directed_acyclic_graph(self.dag):
            raise ReplicationModelError("the task graph has a cycle")
        for op in self.operators:
            fed = {self.dag.in_degree(t) > 0 for t in op.tasks}
            emits = {self.dag.out_degree(t) > 0 for t in op.tasks}
            if len(fed) > 1 or len(emits) > 1:
                raise ReplicationModelError(
                    f"operator {op.name!r}: some tasks have inputs (or outputs) and some not"
                )
        isolated = sorted(t for t in self.dag if self.dag.degree(t) == 0)
        if isolated:  # a sink task's weight in eq. 4 is its input rate
            raise ReplicationModelError(f"tasks {isolated} have no stream at all")

    @cached_property
    def dag(self) -> nx.DiGraph:
        """Tasks as nodes, streams as edges with a ``rate`` attribute."""
        g = nx.DiGraph()
        g.add_nodes_from(t for op in self.operators for t in op.tasks)
        g.add_edges_from((s.source, s.target, {"rate": s.rate}) for s in self.streams)
        return g

    @cached_property
    def tasks(self) -> tuple[str, ...]:
        """Every task, in a deterministic topological order (sources first)."""
        return tuple(nx.lexicographical_topological_sort(self.dag))

    @cached_property
    def sink_tasks(self) -> tuple[str, ...]:
        """Tasks of the sink operators (those that emit nothing), sorted."""
        return tuple(sorted(t for t in self.dag if self.dag.out_degree(t) == 0))

    def operator_of(self, task: str) -> Operator:
        """The operator that ``task`` belongs to."""
        return self._operator_of[task]

    def input_streams(self, task: str) -> dict[str, dict[str, float]]:
        """``task``'s input streams: upstream operator name -> {upstream task: rate}."""
        grouped: dict[str, dict[str, float]] = {}
        for up in sorted(self.dag.predecessors(task)):
            rate = self.dag.edges[up, task]["rate"]
            grouped.setdefault(self._operator_of[up].name, {})[up] = rate
        return grouped

    def sink_rate(self, task: str) -> float:
        """The weight of sink task ``task`` in eq. 4: its input rate (selectivity 1)."""
        return sum(self.dag.edges[up, task]["rate"] for up in self.dag.predecessors(task))


def failure_scenario(graph: TaskGraph, failed: Collection[str] | None = None) -> frozenset[str]:
    """The tasks that fail together; ``None`` is the paper's worst case, every task.

    Su & Zhou 2016 (section IV) plan for a correlated failure that hits at least one
    task of every MC-tree; planning for all tasks failed covers it. A narrower
    scenario (the tasks of the nodes in one fault zone) is a subset.

    Raises:
        ReplicationModelError: ``failed`` names a task that is not in ``graph``.
    """
    if failed is None:
        return frozenset(graph.tasks)
    unknown = sorted(set(failed) - set(graph.tasks))
    if unknown:
        raise ReplicationModelError(f"failure scenario names unknown tasks {unknown}")
    return frozenset(failed)


def tasks_on(placement: Mapping[str, str], nodes: Collection[str]) -> frozenset[str]:
    """The tasks a correlated failure of ``nodes`` takes down, from a task -> node placement.

    The failure scenario of a rack, switch or fault zone (Su & Zhou 2016, section I).
    """
    lost = set(nodes)
    return frozenset(task for task, node in placement.items() if node in lost)


def output_losses(graph: TaskGraph, failed: Collection[str]) -> dict[str, float]:
    """Each task's output information loss, in [0, 1], when ``failed`` are down.

    A failed task loses everything (1). A live source loses nothing (0). A live
    task's input stream from one upstream operator loses the rate-weighted mean of
    its substreams' losses (eq. 1); an independent-input task loses the rate-weighted
    mean over all its input streams (eq. 3); a correlated-input task keeps the
    product of its input streams' kept shares (eq. 2). Every output substream of a
    task carries the task's loss. Complexity O(|V| + |E|).

    References: Su & Zhou 2016, section III-A1, eqs. (1)-(3).
    """
    down = failure_scenario(graph, failed)
    loss: dict[str, float] = {}
    for task in graph.tasks:
        if task in down:
            loss[task] = 1.0
            continue
        streams = graph.input_streams(task)
        if not streams:
            loss[task] = 0.0
        elif graph.operator_of(task).kind is InputKind.CORRELATED:
            kept = 1.0
            for sub in streams.values():
                kept *= 1.0 - sum(r * loss[u] for u, r in sub.items()) / sum(sub.values())
            loss[task] = 1.0 - kept
        else:
            rates = [(r, loss[u]) for sub in streams.values() for u, r in sub.items()]
            loss[task] = sum(r * lam for r, lam in rates) / sum(r for r, _ in rates)
    return loss


def output_fidelity(graph: TaskGraph, failed: Collection[str]) -> float:
    """Output Fidelity: the rate-weighted share of the sink tasks' output kept.

    ``OF = sum_t r_t (1 - loss_t) / sum_t r_t`` over the sink tasks t (eq. 4). It is
    1 when nothing fails and never rises when more tasks fail. Complexity O(|V| + |E|).

    References: Su & Zhou 2016, section III-A2, eq. (4).
    """
    loss = output_losses(graph, failed)
    weights = [(graph.sink_rate(t), loss[t]) for t in graph.sink_tasks]
    return sum(w * (1.0 - lam) for w, lam in weights) / sum(w for w, _ in weights)


def partitioning(graph: TaskGraph, upstream: Operator, downstream: Operator) -> Partitioning:
    """How ``upstream``'s tasks feed ``downstream``'s (Su & Zhou 2016, section II-A)."""
    targets: Mapping[str, set[str]] = {
        u: {d for d in graph.dag.successors(u) if graph.operator_of(d) is downstream}
        for u in upstream.tasks
    }
    sources: Mapping[str, set[str]] = {
        d: {u for u in graph.dag.predecessors(d) if graph.operator_of(u) is upstream}
        for d in downstream.tasks
    }
    fan_out = {len(v) for v in targets.values()}
    fan_in = {len(v) for v in sources.values()}
    # One task on either side makes Full look like split, merge or one-to-one: those
    # names win, so a topology is "full" only where Full partitioning is real.
    if fan_out == {1} and fan_in == {1}:
        return Partitioning.ONE_TO_ONE
    if fan_in == {1} and min(fan_out) >= 1:
        return Partitioning.SPLIT
    if fan_out == {1} and min(fan_in) >= 1:
        return Partitioning.MERGE
    if fan_out == {len(downstream.tasks)} and fan_in == {len(upstream.tasks)}:
        return Partitioning.FULL
    return Partitioning.OTHER
