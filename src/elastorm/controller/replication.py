"""Partially active replication at runtime: which keyed tasks get an active replica,
and where (Su & Zhou 2016, sections III-IV), as plain data in, plain data out.

:func:`running_graph` turns the running topology (the keyed tasks' heartbeats and
which components feed which keyed operator) into the planners' task graph;
:func:`plan_replicas` runs a planner of :mod:`elastorm.replication.planners` on it
under the replication budget; :func:`place_replicas` puts a replica of every key
group of each planned task on a node outside its owner's fault zone (its holder's
when it qualifies, so no checkpoint moves) and returns the replicas to start and
those to drop. The controller loop applies exactly that; nothing here talks to
Storm, ZooKeeper or the tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from elastorm.controller.model import ClusterView, KeyGroupId, NodeId, TaskRecord
from elastorm.replication.model import (
    InputKind,
    Operator,
    Stream,
    TaskGraph,
    output_fidelity,
)
from elastorm.replication.planners import dynamic_programming, greedy, structure_aware

PLANNERS: dict[str, Callable[..., frozenset[str]]] = {
    "dp": dynamic_programming,
    "greedy": greedy,
    "structure_aware": structure_aware,
}
"""The planner option's values (``elastorm.controller.replication_planner``)."""


def task_name(operator: str, task: int) -> str:
    """A keyed task's vertex in the task graph: ``"<operator>:<task id>"``.

    >>> task_name("op2", 7)
    'op2:7'
    """
    return f"{operator}:{task}"


def running_graph(
    records: Iterable[TaskRecord],
    operators: Mapping[str, Collection[str]],
    *,
    joins: Collection[str] = (),
) -> TaskGraph | None:
    """The running topology's task graph, with rates from the heartbeats.

    ``operators`` maps each keyed operator to the components that emit to it
    (``elastorm.operators``); ``joins`` are the keyed operators whose inputs are
    joined (correlated-input), the rest are independent-input. Vertices are the
    keyed tasks that reported a positive input rate, as :func:`task_name`, and one
    source vertex per non-keyed emitting component (a spout or router: it recovers
    by replay, never by a replica, so it is never in a failure scenario). A keyed
    upstream none of whose tasks reported input this round (all restoring) stands as
    such a source vertex too.

    Rates: a keyed task's input rate is the sum of its key groups' rates. Which
    upstream task sent how much is not measured, so a task's input is split over the
    upstream tasks of each emitting operator in proportion to their own input rates
    (evenly over a source vertex's single stream); several emitting components share
    a task's input equally. Returns ``None`` while no keyed task has any input.
    O(T^2) for T keyed tasks (every upstream task feeds every downstream task, as
    key groups spread over all of them).
    """
    rate: dict[str, dict[int, float]] = {op: {} for op in operators}
    for r in records:
        op = r.identity.operator
        if op in rate:
            total = sum(v for _, v in r.heartbeat.input_rates)
            if total > 0:
                rate[op][r.task_id] = rate[op].get(r.task_id, 0.0) + total
    if not any(rate.values()):
        return None
    ops: list[Operator] = []
    streams: list[Stream] = []
    sources: set[str] = set()
    for op in sorted(operators):
        tasks = rate[op]
        if not tasks:
            continue
        kind = InputKind.CORRELATED if op in joins else InputKind.INDEPENDENT
        names = tuple(task_name(op, t) for t in sorted(tasks))
        ops.append(Operator(name=op, tasks=names, kind=kind))
        ups = sorted(operators[op])
        for t, total in sorted(tasks.items()):
            share = total / len(ups)
            for up in ups:
                up_rates = rate.get(up)
                if not up_rates:
                    # A source component; or a keyed upstream with no task measured this
                    # round (all restoring): it feeds as one source vertex, named apart
                    # from the operator (never a keyed task, never planned), so the task
                    # is not left without a stream.
                    name = up if up_rates is None else f"{up} (restoring)"
                    sources.add(name)
                    streams.append(Stream(source=name, target=task_name(op, t), rate=share))
                    continue
                whole = sum(up_rates.values())
                for u, r in sorted(up_rates.items()):
                    rate_u = share * r / whole
                    streams.append(
                        Stream(source=task_name(up, u), target=task_name(op, t), rate=rate_u)
                    )
    ops += [Operator(name=s, tasks=(s,)) for s in sorted(sources)]
    return TaskGraph(operators=tuple(ops), streams=tuple(streams))


def keyed_tasks(graph: TaskGraph, operators: Collection[str]) -> frozenset[str]:
    """The graph's keyed tasks (those of ``operators``): the ones a failure can take."""
    return frozenset(t for t in graph.tasks if graph.operator_of(t).name in operators)


def plan_replicas(
    graph: TaskGraph, budget: int, failed: Collection[str], *, planner: str = "structure_aware"
) -> frozenset[str]:
    """The tasks of ``failed`` that get an active replica, at most ``budget`` of them,
    chosen by ``planner`` (a key of :data:`PLANNERS`) to maximise Output Fidelity.

    Complexity: the planner's (see :mod:`elastorm.replication.planners`).

    Raises ``ValueError`` for an unknown planner; the planners raise
    ``ReplicationModelError`` for a negative budget or unknown tasks.

    >>> g = TaskGraph(
    ...     operators=(Operator(name="s", tasks=("s",)), Operator(name="a", tasks=("a:1", "a:2"))),
    ...     streams=(Stream(source="s", target="a:1", rate=3.0),
    ...              Stream(source="s", target="a:2", rate=1.0)),
    ... )
    >>> sorted(plan_replicas(g, 1, {"a:1", "a:2"}))
    ['a:1']
    """
    try:
        choose = PLANNERS[planner]
    except KeyError:
        known = sorted(PLANNERS)
        raise ValueError(f"unknown replication planner {planner!r}; one of {known}") from None
    return choose(graph, budget, failed)


def predicted_fidelity(
    graph: TaskGraph, failed: Collection[str], replicated: Collection[str]
) -> float:
    """Output Fidelity right after ``failed`` fail together, the tasks of
    ``replicated`` surviving on their replicas (Su & Zhou 2016, eq. 4). O(|V| + |E|)."""
    return output_fidelity(graph, set(failed) - set(replicated))


def replan(
    graph: TaskGraph,
    failed: Collection[str],
    current: Collection[str],
    candidate: Collection[str],
    *,
    budget: int,
    min_gain: float,
) -> frozenset[str]:
    """The plan to apply: ``candidate`` (the planner's answer for today's rates) only if
    its predicted Output Fidelity beats ``current``'s by more than ``min_gain``;
    otherwise ``current`` stays (hysteresis, Su & Zhou 2016's re-planning as rates
    drift): with near-equal task rates the planner's choice flips from round to round,
    and each flip drops replicas and starts others from full checkpoints for no gain.

    ``current`` is replaced whatever the gain when it is no longer a valid plan: a task
    of it left the graph or the scenario (it died, or stopped getting input), or it
    exceeds ``budget``. A plan with spare budget is kept only if the candidate gains
    no more than ``min_gain`` either. O(|V| + |E|).

    >>> g = TaskGraph(
    ...     operators=(Operator(name="s", tasks=("s",)), Operator(name="a", tasks=("a:1", "a:2"))),
    ...     streams=(Stream(source="s", target="a:1", rate=1.02),
    ...              Stream(source="s", target="a:2", rate=1.0)),
    ... )
    >>> sorted(replan(g, {"a:1", "a:2"}, {"a:2"}, {"a:1"}, budget=1, min_gain=0.05))
    ['a:2']
    """
    if min_gain < 0:
        raise ValueError(f"min_gain must be >= 0, got {min_gain}")
    new, old = frozenset(candidate), frozenset(current)
    if not old or len(old) > budget or not old <= set(failed) or not old <= set(graph.tasks):
        return new
    gain = predicted_fidelity(graph, failed, new) - predicted_fidelity(graph, failed, old)
    return new if gain > min_gain else old


@dataclass(frozen=True, kw_only=True)
class ReplicaPlacement:
    """What to change: replicas to start (key group -> node) and key groups whose
    replica to drop. ``wanted`` is the whole target: every replica the plan asks for."""

    wanted: Mapping[KeyGroupId, NodeId]
    start: tuple[tuple[KeyGroupId, NodeId], ...]
    drop: tuple[KeyGroupId, ...]


def place_replicas(
    view: ClusterView,
    primaries: Collection[tuple[str, NodeId]],
    current: Mapping[KeyGroupId, NodeId],
) -> ReplicaPlacement:
    """A replica for every key group that operator ``op`` owns on node ``n``, for each
    ``(op, n)`` of ``primaries``, on a node outside the owner's fault zone.

    The group's holder when it is outside the zone (replicas start on the holder, so
    then nothing moves); else the node, outside the zone, that gets the fewest
    replicas so far, then the lowest load, then the name (named tie-breakers, so the
    result never depends on set order). A replica in place and still outside its
    owner's zone is kept. Replicas of groups no longer wanted, or now in their
    owner's zone, are dropped. No node outside the zone: the group gets none. Only
    nodes that take work (:meth:`ClusterView.targets`) get a replica.
    O(K x N) for K key groups and N nodes.

    >>> from elastorm.controller.model import KeyGroupInfo, NodeInfo
    >>> kg = KeyGroupId("op", 0)
    >>> view = ClusterView(
    ...     nodes=[NodeInfo(node_id=n) for n in ("a", "b", "c")],
    ...     key_groups=[KeyGroupInfo(key_group=kg, owner="a", load=1.0)],
    ...     checkpoints={kg: ("c",)},
    ... )
    >>> place_replicas(view, [("op", "a")], {}).start
    ((KeyGroupId(operator='op', index=0), 'c'),)
    """
    zone = {n: view.node(n).fault_zone for n in view.targets()}  # never a down node
    load = {n: view.node_load(n) for n in zone}
    chosen = set(primaries)
    count: dict[NodeId, int] = dict.fromkeys(zone, 0)
    wanted: dict[KeyGroupId, NodeId] = {}
    for k in sorted(view.key_groups, key=lambda k: k.key_group):
        if (k.key_group.operator, k.owner) not in chosen:
            continue
        owner_zone = view.node(k.owner).fault_zone
        outside = sorted(
            n for n in zone if zone[n] != owner_zone and view.runs(k.key_group.operator, n)
        )
        if not outside:
            continue
        kept = current.get(k.key_group)
        holders = [h for h in view.checkpoints.holders(k.key_group) if h in outside]
        if kept in outside:
            node = kept
        elif holders:
            node = holders[0]
        else:
            node = min(outside, key=lambda n: (count[n], load[n], n))
        wanted[k.key_group] = node
        count[node] += 1
    start = tuple((kg, n) for kg, n in sorted(wanted.items()) if current.get(kg) != n)
    drop = tuple(kg for kg, n in sorted(current.items()) if wanted.get(kg) != n)
    return ReplicaPlacement(wanted=wanted, start=start, drop=drop)


def operator_inputs(
    operators: Mapping[str, Collection[str]], routed_from: Mapping[str, Collection[str]]
) -> dict[str, tuple[str, ...]]:
    """Each keyed operator and the components whose output it takes, looking through
    routers: ``operators`` (``elastorm.operators``) names a keyed bolt's router as its
    emitter, ``routed_from`` (``elastorm.routed_from``) what feeds that router, so a
    keyed bolt fed by another keyed bolt lists it. O(operators x emitters).

    >>> operator_inputs({"a": ["a_router"], "b": ["b_router"]}, {"a": ["s"], "b": ["a"]})
    {'a': ('s',), 'b': ('a',)}
    """
    out: dict[str, tuple[str, ...]] = {}
    for op, emitters in sorted(operators.items()):
        router = f"{op}_router"
        feeding = tuple(routed_from.get(op, ()))
        ups = [e for e in emitters if not (e == router and feeding)]
        out[op] = tuple(sorted({*ups, *feeding}))
    return out


def downstream_operators(
    operators: Mapping[str, Collection[str]], recovering: Collection[str]
) -> frozenset[str]:
    """The keyed operators fed, directly or through others, by one of ``recovering``:
    their outputs are tentative while it restores state (Su & Zhou 2016). A recovering
    operator itself is not listed: its groups being restored mark their own outputs.
    O(operators x emitters).

    >>> sorted(downstream_operators({"op1": ["spout"], "op2": ["op1"], "op3": ["op2"]}, ["op1"]))
    ['op2', 'op3']
    """
    found: set[str] = set()
    frontier = set(recovering)
    while frontier:
        fed = {op for op, ups in operators.items() if frontier & set(ups)} - found
        found |= fed
        frontier = fed
    return frozenset(found)


TENTATIVE_REFRESH_SECS = 10.0
"""How often a leading controller tells every keyed task again whether its outputs are
tentative, changed or not (:func:`operators_to_tell`)."""


def operators_to_tell(
    tentative: frozenset[str],
    told: frozenset[str] | None,
    told_at: float,
    now: float,
    operators: Iterable[str],
) -> tuple[list[str], bool]:
    """Which keyed operators' tasks to tell (``UpstreamRecovery``) whether their outputs
    are tentative now (``tentative``, :func:`downstream_operators`), and whether that is
    a refresh of them all.

    Those whose state changed since ``told`` (what this controller last told); every
    one when this controller told none yet (``told`` None: it has just taken over, and
    the tasks may still hold a dead leader's "tentative", which would then never end:
    no output of theirs rectified, seen in chaos ``join/cpal-source``, session 31) or
    ``TENTATIVE_REFRESH_SECS`` after ``told_at`` (a task restarted since, or a message
    was lost). O(operators).

    >>> operators_to_tell(frozenset(), None, 0.0, 5.0, ["op2", "op3"])
    (['op2', 'op3'], True)
    >>> operators_to_tell(frozenset({"op3"}), frozenset(), 5.0, 6.0, ["op2", "op3"])
    (['op3'], False)
    """
    if told is None or now - told_at >= TENTATIVE_REFRESH_SECS:
        return sorted(operators), True
    return sorted(tentative ^ told), False
