"""``/metrics``: the dashboard's view in Prometheus' text format, through the official
client library (``prometheus_client``).

Conventions: every name starts with ``elastorm_`` and carries its unit
(``_seconds``, ``_bytes``, ``_ratio``, ``_tuples``, ``_tuples_per_second``); counters
end in ``_total``; labels are ``topology``, ``operator``, ``node``, ``protocol``,
``outcome``, ``task`` (the durable writers' numbers), and ``key_group`` only on the
per-group gauges and only while an operator has at most ``key_group_limit`` groups
(1,000 groups x every scrape would be a cardinality problem; the page shows them all
anyway).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from elastorm.controller.requests import FINAL

KEY_GROUP_LIMIT = 64


def metric_families(
    view: Mapping[str, Any], *, key_group_limit: int = KEY_GROUP_LIMIT
) -> list[Metric]:
    """The metric families of one view (see :func:`elastorm.dashboard.view.build_view`)."""
    topo = view["topology"]
    out: list[Metric] = []

    def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["topology", *labels])
        out.append(family)
        return family

    def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["topology", *labels])
        out.append(family)
        return family

    up = gauge("elastorm_node_up", "1 while a node has a live, fresh task", ["node", "state"])
    cpu = gauge("elastorm_node_cpu_ratio", "CPU share of the node (0-1)", ["node"])
    queue = gauge("elastorm_node_queue_tuples", "tuples queued in the node's tasks", ["node"])
    mem = gauge("elastorm_node_memory_bytes", "resident memory of the node's tasks", ["node"])
    owned = gauge("elastorm_node_key_groups", "key groups the node owns", ["node"])
    held = gauge("elastorm_node_checkpoints", "checkpoints the node holds", ["node"])
    for n in view["nodes"]:
        node = n["id"]
        fresh = n["state"] in ("alive", "draining")
        up.add_metric([topo, node, n["state"]], 1.0 if fresh else 0.0)
        if n["cpu"] is not None:
            cpu.add_metric([topo, node], n["cpu"])
        queue.add_metric([topo, node], n["queue"])
        mem.add_metric([topo, node], n["memory"])
        owned.add_metric([topo, node], n["owned"])
        held.add_metric([topo, node], n["held"])

    rate = gauge(
        "elastorm_operator_input_tuples_per_second",
        "tuples/s into the operator (sum of its tasks' heartbeats)",
        ["operator"],
    )
    latency = gauge(
        "elastorm_operator_latency_seconds",
        "mean time from the upstream's emit to applied (tasks whose tuples carry an emit "
        "stamp; weighted by their tuples/s)",
        ["operator"],
    )
    service = gauge(
        "elastorm_operator_service_seconds",
        "seconds of work per applied tuple (weighted by the tasks' tuples/s)",
        ["operator"],
    )
    op_queue = gauge(
        "elastorm_operator_queue_tuples", "tuples queued in the operator", ["operator"]
    )
    groups = gauge("elastorm_operator_key_groups", "key groups of the operator", ["operator"])
    epoch = gauge("elastorm_routing_epoch", "routing epoch of the operator", ["operator"])
    moving = gauge("elastorm_migrations_in_flight", "migrations under way", ["operator"])
    usable = gauge(
        "elastorm_checkpoint_usable_ratio",
        "share of key groups whose holder has the newest checkpoint",
        ["operator"],
    )
    controller = gauge("elastorm_controller_up", "1 while the controller runs", ["operator"])
    group_load = gauge(
        "elastorm_key_group_input_tuples_per_second",
        f"tuples/s into a key group (only operators with <= {key_group_limit} groups)",
        ["operator", "key_group", "node"],
    )
    for load in view["operator_load"]:
        name = load["name"]
        rate.add_metric([topo, name], load["rate"])
        op_queue.add_metric([topo, name], load["queue"])
        if load["latency"] is not None:
            latency.add_metric([topo, name], load["latency"])
        if load["service"] is not None:
            service.add_metric([topo, name], load["service"])
    for op in view["operators"]:
        name = op["name"]
        groups.add_metric([topo, name], op["key_groups"])
        if op["epoch"] is not None:
            epoch.add_metric([topo, name], op["epoch"])
        moving.add_metric([topo, name], len(op["moving"]))
        if op["usable_share"] is not None:
            usable.add_metric([topo, name], op["usable_share"])
        controller.add_metric([topo, name], 1.0 if op["controller"] else 0.0)
        if op["key_groups"] <= key_group_limit:
            for g, (load, owner) in enumerate(zip(op["load"], op["owners"], strict=True)):
                group_load.add_metric([topo, name, str(g), owner], load)

    migrations = counter(
        "elastorm_migrations",
        "requested migrations that ended, by protocol used and outcome",
        ["operator", "protocol", "outcome"],
    )
    durations = SummaryMetricFamily(
        "elastorm_migration_duration_seconds",
        "completion time of done migrations (started -> done)",
        labels=["topology", "operator", "protocol"],
    )
    out.append(durations)
    pauses = SummaryMetricFamily(
        "elastorm_migration_pause_seconds",
        "pause of done migrations: s the group's new tuples waited at the target "
        "(requests; the controller's own migrations and restores since the dashboard started)",
        labels=["topology", "operator", "protocol"],
    )
    out.append(pauses)
    paused: dict[tuple[str, str], list[tuple[int, float]]] = collections.defaultdict(list)
    ended: collections.Counter[tuple[str, str, str]] = collections.Counter()
    took: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for r in view["requests"]:
        if r["state"] in {s.value for s in FINAL}:
            ended[(r["operator"], r["protocol"], r["state"])] += 1
        if r["seconds"] is not None:
            took[(r["operator"], r["protocol"])].append(r["seconds"])
        if r.get("pause") is not None:
            paused[(r["operator"], r["protocol"])].append((1, r["pause"]))
    for (op, protocol, outcome), n in sorted(ended.items()):
        migrations.add_metric([topo, op, protocol, outcome], n)
    for (op, protocol), values in sorted(took.items()):
        durations.add_metric([topo, op, protocol], len(values), sum(values))
    for op, protocol, n, total in view["counters"]["pauses"]:
        paused[(op, protocol)].append((n, total))
    for (op, protocol), values in sorted(paused.items()):
        pauses.add_metric(
            [topo, op, protocol], sum(n for n, _ in values), sum(t for _, t in values)
        )

    counters = view["counters"]
    moves = counter(
        "elastorm_key_group_moves",
        "owner changes seen in the routing tables since the dashboard started",
        ["operator", "protocol"],
    )
    for op, protocol, n in counters["moves"]:
        moves.add_metric([topo, op, protocol], n)
    lost = counter(
        "elastorm_task_failures", "tasks whose znode vanished (dashboard's count)", ["operator"]
    )
    for op, n in sorted(counters["task_failures"].items()):
        lost.add_metric([topo, op], n)
    counter("elastorm_node_failures", "nodes whose every task vanished", []).add_metric(
        [topo], counters["node_failures"]
    )

    paper = view["paper"]
    if paper["assisted_share"] is not None:
        gauge(
            "elastorm_migration_assisted_ratio",
            "share of done migrations that were checkpoint-assisted (CPA/CPAL)",
            [],
        ).add_metric([topo], paper["assisted_share"])

    alloc = view.get("allocation") or {}
    if alloc.get("score_drift") is not None:
        gauge(
            "elastorm_allocation_score_drift",
            "checkpoint allocation's score minus Algorithm 3's for the same view (lower is "
            "better; re-optimised when above theta)",
            [],
        ).add_metric([topo], alloc["score_drift"])
    if alloc.get("theta") is not None:
        gauge("elastorm_allocation_theta", "re-optimisation threshold theta", []).add_metric(
            [topo], alloc["theta"]
        )

    storm = view["storm"]
    storm_up = gauge("elastorm_storm_nimbus_up", "1 while Nimbus answers", [])
    storm_up.add_metric([topo], 0.0 if storm is None else 1.0)
    if storm is not None:
        sup = gauge("elastorm_storm_supervisors", "supervisors Nimbus knows", [])
        sup.add_metric([topo], len(storm["supervisors"]))
        workers = gauge(
            "elastorm_storm_topology_workers", "workers of each Storm topology", ["storm_topology"]
        )
        for t in storm["topologies"]:
            workers.add_metric([topo, t["name"]], t["workers"])

    reads = counter("elastorm_dashboard_zookeeper_reads", "ZooKeeper reads the dashboard made", [])
    reads.add_metric([topo], view["zookeeper"]["reads"])
    if view.get("durable") is not None:
        _durable_families(view, gauge, counter, key_group_limit)
    return out


def _durable_families(
    view: Mapping[str, Any],
    gauge: Callable[[str, str, list[str]], GaugeMetricFamily],
    counter: Callable[[str, str, list[str]], CounterMetricFamily],
    key_group_limit: int,
) -> None:
    """The durable tier's metrics (only while some task reports a durable writer): per
    key group how far its durable copy trails the newest checkpoint (only operators
    with at most ``key_group_limit`` groups; the per-operator maxima always), per task
    its writer's counters (they restart at 0 with the task's process: ``rate()`` and
    ``increase()`` take that as a reset) and queue."""
    topo = view["topology"]
    lag_n = gauge(
        "elastorm_durable_lag_checkpoints",
        "checkpoints by which a key group's durable copy trails its newest checkpoint "
        f"(only operators with <= {key_group_limit} groups)",
        ["operator", "key_group"],
    )
    lag_s = gauge(
        "elastorm_durable_lag_seconds",
        "seconds since the oldest checkpoint of a key group not yet in the durable store "
        f"(0: none; only operators with <= {key_group_limit} groups)",
        ["operator", "key_group"],
    )
    max_n = gauge(
        "elastorm_durable_max_lag_checkpoints",
        "the most checkpoints any of the operator's key groups trails in the durable store",
        ["operator"],
    )
    max_s = gauge(
        "elastorm_durable_max_lag_seconds",
        "the longest any of the operator's key groups has trailed in the durable store",
        ["operator"],
    )
    for op in view["operators"]:
        durable = op["durable"]
        if durable is None:
            continue
        name = op["name"]
        max_n.add_metric([topo, name], durable["max_checkpoints"])
        max_s.add_metric([topo, name], durable["max_seconds"])
        if op["key_groups"] <= key_group_limit:
            for g, lag in enumerate(durable["lag"]):
                if lag is not None:
                    lag_n.add_metric([topo, name, str(g)], lag[0])
                    lag_s.add_metric([topo, name, str(g)], lag[1])
    families = [
        (counter, "writes", "elastorm_durable_writes", "checkpoints the task wrote to the store"),
        (counter, "bytes", "elastorm_durable_bytes", "bytes the task wrote to the store"),
        (
            counter,
            "errors",
            "elastorm_durable_write_errors",
            "failed writes to the store (each retried, in order)",
        ),
        (
            counter,
            "coalesced",
            "elastorm_durable_coalesced",
            "pending checkpoints merged because the writer's queue was full",
        ),
        (
            gauge,
            "queue",
            "elastorm_durable_queue_checkpoints",
            "checkpoints waiting for the store in the task's writer",
        ),
    ]
    for make, key, name, doc in families:
        family = make(name, doc, ["task", "operator"])
        for t in view["durable"]["tasks"]:
            family.add_metric([topo, str(t["task"]), t["operator"]], t[key])


class ViewCollector:
    """A ``prometheus_client`` collector over whatever view ``latest()`` returns."""

    def __init__(self, latest, *, key_group_limit: int = KEY_GROUP_LIMIT) -> None:
        self._latest = latest
        self._limit = key_group_limit

    def collect(self) -> Iterator[Metric]:
        view = self._latest()
        if view is not None:
            yield from metric_families(view, key_group_limit=self._limit)


def render(view: Mapping[str, Any] | None, *, key_group_limit: int = KEY_GROUP_LIMIT) -> bytes:
    """The Prometheus text exposition of ``view``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(lambda: view, key_group_limit=key_group_limit))
    return generate_latest(registry)
