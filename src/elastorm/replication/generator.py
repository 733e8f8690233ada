"""Seeded random topologies like the paper's generator (Su & Zhou 2016, section VI-C)."""

from __future__ import annotations

import random

from elastorm.replication.model import (
    InputKind,
    Operator,
    ReplicationModelError,
    Stream,
    TaskGraph,
)

#: Tuples/s entering the topology at each source operator.
SOURCE_RATE = 1000.0


def _links(up: int, down: int, full: bool) -> list[tuple[int, int]]:
    """(upstream, downstream) task index pairs: Full, else one-to-one, split or merge."""
    if full:
        return [(u, d) for u in range(up) for d in range(down)]
    if up == down:  # one-to-one
        return [(u, u) for u in range(up)]
    if down > up:  # split: downstream task d listens to upstream d mod m
        return [(d % up, d) for d in range(down)]
    return [(u, u % down) for u in range(up)]  # merge


def _skewed_shares(rng: random.Random, tasks: int, skew: float) -> list[float]:
    """Zipf(skew) workload shares of an operator's tasks, in random order."""
    shares = [1.0 / (k + 1) ** skew for k in range(tasks)]
    rng.shuffle(shares)
    return shares


def random_topology(
    seed: int,
    *,
    operators: int = 4,
    parallelism: int = 4,
    skew: float = 0.5,
    full: bool = False,
    join_fraction: float = 0.0,
) -> TaskGraph:
    """A random task graph: a chain of ``operators`` operators ending in one sink.

    Each operator gets ``parallelism // 2``, ``parallelism`` or ``2 * parallelism``
    tasks (at least 1). A non-source operator is a join (correlated-input) with
    probability ``join_fraction``, and then also reads a fresh source operator. A
    structured topology (``full=False``) links operators one-to-one, split or merge
    as their task counts allow and only the sink's inputs use Full partitioning; a
    full topology uses Full everywhere. Tasks of an operator share its input by
    Zipf(``skew``) weights; every operator has selectivity 1.

    References: Su & Zhou 2016, section VI-C (specifications of Fig. 14).

    Raises:
        ReplicationModelError: fewer than 2 operators, parallelism < 1,
            or ``join_fraction`` outside [0, 1].
    """
    if operators < 2 or parallelism < 1 or not 0.0 <= join_fraction <= 1.0:
        raise ReplicationModelError(
            f"need operators >= 2, parallelism >= 1, 0 <= join_fraction <= 1; got "
            f"{operators}, {parallelism}, {join_fraction}"
        )
    rng = random.Random(seed)
    degrees = [max(1, parallelism // 2), parallelism, 2 * parallelism]
    ops: list[Operator] = []
    shares: dict[str, list[float]] = {}
    rate_out: dict[str, float] = {}
    streams: list[Stream] = []

    def add(name: str, kind: InputKind) -> Operator:
        op = Operator(
            name=name,
            tasks=tuple(f"{name}/{k}" for k in range(rng.choice(degrees))),
            kind=kind,
        )
        ops.append(op)
        shares[name] = _skewed_shares(rng, len(op.tasks), skew)
        return op

    def link(up: Operator, down: Operator, full: bool) -> None:
        pairs = _links(len(up.tasks), len(down.tasks), full)
        for u in range(len(up.tasks)):
            targets = [d for uu, d in pairs if uu == u]
            total = sum(shares[down.name][d] for d in targets)
            for d in targets:
                rate = rate_out[up.tasks[u]] * shares[down.name][d] / total
                streams.append(Stream(source=up.tasks[u], target=down.tasks[d], rate=rate))

    def settle(op: Operator) -> None:
        for t in op.tasks:
            rate_out[t] = sum(s.rate for s in streams if s.target == t)

    def feed(source: Operator) -> None:
        total = sum(shares[source.name])
        for k, t in enumerate(source.tasks):
            rate_out[t] = SOURCE_RATE * shares[source.name][k] / total

    previous = add("op0", InputKind.INDEPENDENT)
    feed(previous)
    for i in range(1, operators):
        join = rng.random() < join_fraction
        op = add(f"op{i}", InputKind.CORRELATED if join else InputKind.INDEPENDENT)
        inputs = [previous]
        if join:
            inputs.append(add(f"src{i}", InputKind.INDEPENDENT))
            feed(inputs[-1])
        for up in inputs:
            link(up, op, full or i == operators - 1)
        settle(op)
        previous = op
    return TaskGraph(operators=tuple(ops), streams=tuple(streams))
