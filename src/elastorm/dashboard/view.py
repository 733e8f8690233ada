"""The dashboard's view model (pure): what was read from ZooKeeper and Nimbus in,
what the page and ``/metrics`` show out.

A :class:`Snapshot` is one read of a topology (task records with their durable
writers' numbers, the controllers' published status, the migration requests, the
checkpoint allocation, the elastic scheduler's binding and the controller's rescale
progress, Storm's summary). :class:`Tracker` folds successive snapshots into a
timeline of events (migrations, failures, recoveries, nodes starting and ending a
drain), running counters and the durable writers' recent counts;
:func:`build_view` turns a snapshot plus the tracker into the JSON the page draws.
No I/O and no clock here: the time of a snapshot is a field of it.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastorm.controller.model import Allocation, KeyGroupId, TaskRecord, node_name
from elastorm.controller.problems import TopologyFacts, problems, why_no_status
from elastorm.controller.requests import MigrationRequest
from elastorm.controller.scaling import Binding, RescaleProgress
from elastorm.core.messages import Protocol
from elastorm.core.routing import RoutingTable

SUSPECT_AFTER = 3.0
"""Seconds without a new heartbeat (published every 1 s) after which a live task is
shown as suspect: its znode is still there, but it has stopped refreshing it (a
killed process keeps its ephemeral znode until the session expires, 4-6 s)."""

ASSISTED = frozenset(p.value for p in Protocol if p.checkpoint_assisted)

DURABLE_RATE_WINDOW = 10.0
"""Seconds of heartbeats over which a task's durable write rate is measured: several
checkpoint intervals, so that the rate does not read 0 or a burst depending on which
two heartbeats it compares."""

TRAILING_ROWS = 50
"""Key groups listed as trailing in the store (the most behind first); the rest are
counted (1,000 groups behind a stopped store would be 1,000 rows a second)."""


@dataclass(frozen=True, kw_only=True)
class LagLimits:
    """When the page highlights a key group's durable lag: its durable copy trails the
    newest checkpoint by more than ``checkpoints`` checkpoints or ``seconds`` seconds.

    The defaults: one checkpoint is normally on its way to the store (the writer's
    thread writes it after the holder got it) and a second may wait behind other
    groups' writes, so more than 2 says the store is slow or failing; 30 s is the
    writer's retry backoff ceiling (``elastorm.durable.retry_max_secs``' default), so a
    group trailing longer has failed for at least one full backoff. With
    ``elastorm.durable.every`` = k, k - 1 checkpoints are held back on purpose: use
    ``checkpoints`` = k + 1 (``elastorm dashboard --durable-lag-checkpoints``).
    """

    checkpoints: int = 2
    seconds: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.checkpoints, bool) or not isinstance(self.checkpoints, int):
            raise ValueError(f"checkpoints must be an int, got {self.checkpoints!r}")
        if self.checkpoints < 0 or not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"lag limits must be >= 0, got {self.checkpoints}, {self.seconds}")

    def lagging(self, checkpoints: int, seconds: float) -> bool:
        """Whether a lag of ``checkpoints`` and ``seconds`` is past the limits."""
        return checkpoints > self.checkpoints or seconds > self.seconds


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """One read of a topology's znodes (and Nimbus) at wall-clock time ``at``."""

    topology: str
    at: float
    live: Mapping[int, TaskRecord] = field(default_factory=dict)
    departed: Mapping[int, TaskRecord] = field(default_factory=dict)
    statuses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    controllers: Mapping[str, bool] = field(default_factory=dict)
    requests: Sequence[tuple[str, MigrationRequest]] = ()
    checkpoints: Allocation | None = None
    routing: Mapping[str, RoutingTable] = field(default_factory=dict)
    binding: Binding = Binding()
    rescale: RescaleProgress = RescaleProgress()
    storm: Mapping[str, Any] | None = None
    storm_error: str | None = None
    controller_metrics: Mapping[str, Any] | None = None
    zk_connected: bool = True
    zk_reads: int = 0
    facts: TopologyFacts | None = None  # why it may not run (``elastorm.controller.problems``)


def operator_statuses(snap: Snapshot) -> dict[str, Mapping[str, Any]]:
    """Each operator's published status; an operator without one (its controller never
    published) shows the routing table the controller store persisted."""
    out: dict[str, Mapping[str, Any]] = {
        op: {"epoch": t.epoch, "owners": list(t.owners)} for op, t in snap.routing.items()
    }
    out.update(snap.statuses)
    return dict(sorted(out.items()))


def node_index(name: str) -> tuple[int, str]:
    """Sort key of node names: ``node2`` before ``node10``."""
    digits = "".join(c for c in name if c.isdigit())
    return (int(digits) if digits else -1, name)


class Tracker:
    """Folds snapshots into events and counters, in the order they are observed.

    Events are plain dicts with ``t`` (wall clock, s), ``kind`` (``migration``,
    ``move``, ``failure``, ``recovery``, ``scaling``) and what happened. Counters never go
    down, as Prometheus counters must not.
    """

    def __init__(self, *, max_events: int = 1000, history: int = 300) -> None:
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_events)
        self.throughput: dict[str, collections.deque[tuple[float, float]]] = {}
        self.latency: dict[str, collections.deque[tuple[float, float | None]]] = {}
        self.history = history
        self.task_failures: collections.Counter[str] = collections.Counter()
        self.node_failures = 0
        self.moves: collections.Counter[tuple[str, str]] = collections.Counter()
        self.seq = 0
        self._live: dict[int, TaskRecord] | None = None
        self._seen: set[int] = set()
        self._request_states: dict[str, set[str]] = {}
        self._owners: dict[str, list[int]] = {}
        self._in_flight: dict[tuple[str, int], str] = {}
        self._draining: set[str] = set()
        self._logical: dict[str, str] = {}  # named node -> the logical node it was bound as
        self._ended: set[tuple[str, int, int]] = set()
        # (operator, protocol) -> [count, sum] of the pauses of the controller's own
        # migrations and restores seen to end (requests' are on the durable board).
        self.pauses: dict[tuple[str, str], list[float]] = {}
        # task -> its heartbeats' (time, durable writes, bytes) of the last
        # DURABLE_RATE_WINDOW seconds, oldest first (the store's write rate).
        self._durable: dict[int, collections.deque[tuple[float, int, int]]] = {}

    def observe(self, snap: Snapshot) -> list[dict[str, Any]]:
        """Record ``snap``; return the events it revealed (also kept in ``events``)."""
        self.seq += 1
        new: list[dict[str, Any]] = []
        try:
            for stage in (
                self._tasks, self._requests, self._routing, self._ended_by_controller,
                self._scaling,
            ):  # fmt: skip
                new += stage(snap)
        finally:
            # Each stage marks what it reported as seen: a later stage that raises must
            # not take the earlier stages' events with it (they would never come again).
            new.sort(key=lambda e: e["t"])
            self.events.extend(new)
        self._name_protocols(snap)
        self._durable_samples(snap)
        for op, load in operator_load(snap).items():
            for series, value in ((self.throughput, load["rate"]), (self.latency, load["latency"])):
                series.setdefault(op, collections.deque(maxlen=self.history)).append(
                    (snap.at, value)
                )
        return new

    def _tasks(self, snap: Snapshot) -> list[dict[str, Any]]:
        before, self._live = self._live, dict(snap.live)
        if before is None:
            self._seen.update(snap.live)
            return []
        out = []
        for tid in sorted(set(before) - set(snap.live)):
            rec = before[tid]
            self.task_failures[rec.identity.operator] += 1
            out.append(_task_event("failure", "task lost", rec, snap.at))
        for tid in sorted(set(snap.live) - set(before)):
            if tid in self._seen:  # a first start is no recovery
                out.append(_task_event("recovery", "task back", snap.live[tid], snap.at))
        self._seen.update(snap.live)
        nodes_before = {r.node_id for r in before.values()}
        nodes_now = {r.node_id for r in snap.live.values()}
        for node in sorted(nodes_before - nodes_now, key=node_index):
            self.node_failures += 1
            out.append({"t": snap.at, "kind": "failure", "what": "node lost", "node": node})
        return out

    def _durable_samples(self, snap: Snapshot) -> None:
        """Keep each live task's durable counts of the last ``DURABLE_RATE_WINDOW``
        seconds (one per heartbeat; a count going down means a new process: start over)."""
        for tid in set(self._durable) - set(snap.live):
            del self._durable[tid]
        for tid, rec in snap.live.items():
            d = rec.heartbeat.durable
            if d is None:
                self._durable.pop(tid, None)
                continue
            samples = self._durable.setdefault(tid, collections.deque())
            if samples and (d.writes < samples[-1][1] or d.bytes < samples[-1][2]):
                samples.clear()
            if not samples or rec.time > samples[-1][0]:
                samples.append((rec.time, d.writes, d.bytes))
            while len(samples) > 2 and samples[1][0] <= rec.time - DURABLE_RATE_WINDOW:
                samples.popleft()

    def durable_rates(self, task: int) -> tuple[float, float] | None:
        """``task``'s durable writes/s and bytes/s over its recent heartbeats (None
        until two were seen)."""
        samples = self._durable.get(task)
        if not samples or len(samples) < 2:
            return None
        (t0, w0, b0), (t1, w1, b1) = samples[0], samples[-1]
        return (w1 - w0) / (t1 - t0), (b1 - b0) / (t1 - t0)

    def _requests(self, snap: Snapshot) -> list[dict[str, Any]]:
        out = []
        for name, req in snap.requests:
            seen = self._request_states.setdefault(name, set())
            for state, t in sorted(req.times.items(), key=lambda kv: kv[1]):
                if state in seen or state == "pending":
                    continue
                seen.add(state)
                out.append(_request_event(name, req, state, t))
        return out

    def _routing(self, snap: Snapshot) -> list[dict[str, Any]]:
        out = []
        requested = _ordered_protocols(snap.controller_metrics)
        requested |= {
            (op, int(e["key_group"])): str(e["protocol"])
            for op, status in snap.statuses.items()
            for e in status.get("ended", [])
        }
        requested |= {
            (r.operator, r.key_group): (r.protocol_used or r.protocol).value
            for _, r in snap.requests
            if r.state.value != "pending"
        }
        for op, status in operator_statuses(snap).items():
            owners = [int(t) for t in status.get("owners", [])]
            before = self._owners.get(op)
            for g, task in enumerate(owners):
                if before is not None and g < len(before) and before[g] != task:
                    # Seen in flight, else the request that asked for it or the ended
                    # migration the controller published (a CPAL can start and end
                    # between two reads), else unknown.
                    protocol = self._in_flight.get((op, g)) or requested.get((op, g), "unknown")
                    self.moves[(op, protocol)] += 1
                    out.append(
                        {
                            "t": snap.at,
                            "kind": "recovery" if protocol == "restore" else "move",
                            "what": "key group restored" if protocol == "restore" else "owner",
                            "operator": op,
                            "group": g,
                            "source": before[g],
                            "target": task,
                            "protocol": protocol,
                            "epoch": status.get("epoch"),
                        }
                    )
            self._owners[op] = owners
            self._in_flight = {k: v for k, v in self._in_flight.items() if k[0] != op}
            for m in status.get("migrations", []):
                self._in_flight[(op, int(m["key_group"]))] = str(m["protocol"])
        return out

    def _ended_by_controller(self, snap: Snapshot) -> list[dict[str, Any]]:
        """The controller's own migrations and restores that ended (the ``ended`` list
        of its status: its ``MigrationEnded`` records), each once, as a ``done`` (or
        ``restore done``) event with the pause its target measured. Requested ones are
        left to the request board, which carries the same pause."""
        out = []
        for op, status in sorted(snap.statuses.items()):
            for e in status.get("ended", []):
                key = (op, int(e["key_group"]), int(e["epoch"]))
                if e.get("by") != "controller" or key in self._ended:
                    continue
                self._ended.add(key)
                restore = e["protocol"] == "restore"
                event = {
                    "t": float(e["at"]),
                    "kind": "recovery" if restore else "migration",
                    "what": "restore done" if restore else "done",
                    "by": "controller",
                    "operator": op,
                    "group": key[1],
                    "protocol": e["protocol"],
                    "source": e.get("source"),
                    "target": e["target"],
                    "epoch": key[2],
                    "seconds": e.get("completion"),
                    "assisted": e["protocol"] in ASSISTED,
                    "pause": e.get("pause"),
                }
                if event["pause"] is not None:
                    tally = self.pauses.setdefault((op, e["protocol"]), [0, 0.0])
                    tally[0] += 1
                    tally[1] += event["pause"]
                out.append(event)
        return out

    def _name_protocols(self, snap: Snapshot, recent: int = 200) -> None:
        """Fill in the protocol of owner changes shown as ``unknown`` from the ended
        migrations the controller published: its own moves often start and end between
        two reads and change the routing before both ends report done, so the owner
        change is seen first. (``elastorm_key_group_moves_total`` keeps ``unknown``:
        a counter's sample cannot move to another label.)"""
        ended = {
            (op, int(e["key_group"]), e["target"]): str(e["protocol"])
            for op, status in snap.statuses.items()
            for e in status.get("ended", [])
        }
        if not ended:
            return
        for event in itertools.islice(reversed(self.events), recent):
            if event["kind"] == "move" and event["protocol"] == "unknown":
                key = (event["operator"], event["group"], event["target"])
                event["protocol"] = ended.get(key, "unknown")

    def _scaling(self, snap: Snapshot) -> list[dict[str, Any]]:
        """A node that starts draining, and one that stops (drained and released, or the
        drain withdrawn), as the controller publishes them."""
        now = set(snap.rescale.draining)
        before, self._draining = self._draining, now
        # The scheduler unbinds a released node, often in the same read that shows it
        # no longer draining: it keeps the logical name it had while bound.
        self._logical.update((name, node) for node, name in node_names(snap.binding).items())
        return [
            {
                "t": snap.at,
                "kind": "scaling",
                "what": what,
                "node": self._logical.get(name, name),
                "name": name,
            }
            for what, names in (("node draining", now - before), ("node drained", before - now))
            for name in sorted(names)
        ]


def node_names(binding: Binding) -> dict[str, str]:
    """Logical node (``node<i>``, as the tasks report it) -> the named node the elastic
    scheduler bound it to; unbound logical nodes are left out."""
    return {node_name(i): name for i, name in enumerate(binding.nodes) if name is not None}


def _ordered_protocols(metrics: Mapping[str, Any] | None) -> dict[tuple[str, int], str]:
    """(operator, group) -> protocol of the controller's latest order for it, from
    ``controller/figures`` (its own moves are not requests)."""
    out: dict[tuple[str, int], str] = {}
    for order in (metrics or {}).get("orders", []):
        op, _, index = str(order.get("key_group", "")).rpartition("/")
        if op and index.isdigit() and order.get("protocol"):
            out[(op, int(index))] = str(order["protocol"])
    return out


def _task_event(kind: str, what: str, rec: TaskRecord, at: float) -> dict[str, Any]:
    return {
        "t": at,
        "kind": kind,
        "what": what,
        "task": rec.task_id,
        "operator": rec.identity.operator,
        "node": rec.node_id,
        "pid": rec.identity.pid,
    }


def _request_event(name: str, req: MigrationRequest, state: str, t: float) -> dict[str, Any]:
    used = req.protocol_used.value if req.protocol_used else None
    event = {
        "t": t,
        "kind": "migration",
        "what": state,
        "request": name,
        "operator": req.operator,
        "group": req.key_group,
        "protocol": used or req.protocol.value,
        "asked": req.protocol.value,
        "source": req.source,
        "target": req.target,
        "epoch": req.epoch,
    }
    if state == "done" and "started" in req.times:
        event["seconds"] = round(req.times["done"] - req.times["started"], 4)
        event["assisted"] = (used or req.protocol.value) in ASSISTED
    if state == "done" and req.pause is not None:
        event["pause"] = round(req.pause, 4)
    if req.detail:  # why refused, stuck, abandoned, re-driven, or run by another protocol
        event["detail"] = req.detail
    return event


def _weighted(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    """Mean of the values that are not None, weighted (by tuples/s); None if none."""
    known = [(x, w) for x, w in pairs if x is not None]
    total = sum(w for _, w in known)
    if not known:
        return None
    if total <= 0:
        return round(sum(x for x, _ in known) / len(known), 6)
    return round(sum(x * w for x, w in known) / total, 6)


def operator_load(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """Per keyed operator, from its live tasks' heartbeats: tuples/s in (the sum of the
    per-key-group input rates), latency (mean s from the upstream's emit to applied)
    and service time (s of work per tuple), each weighted by the task's tuples/s,
    queued tuples, and the number of live tasks."""
    tasks: dict[str, list[TaskRecord]] = {op: [] for op in operator_statuses(snap)}
    for rec in snap.live.values():
        tasks.setdefault(rec.identity.operator, []).append(rec)
    out = {}
    for op, recs in sorted(tasks.items()):
        rates = [sum(r for _, r in rec.heartbeat.input_rates) for rec in recs]
        beats = [rec.heartbeat for rec in recs]
        out[op] = {
            "rate": round(sum(rates), 3),
            "latency": _weighted([(h.latency, w) for h, w in zip(beats, rates, strict=True)]),
            "service": _weighted([(h.service_time, w) for h, w in zip(beats, rates, strict=True)]),
            "queue": round(sum(h.queue_length for h in beats), 1),
            "tasks": len(recs),
        }
    return out


def _node_of(task: int, snap: Snapshot) -> str:
    rec = snap.live.get(task) or snap.departed.get(task)
    return rec.node_id if rec else f"task{task}"


def _nodes(snap: Snapshot, owned: Mapping[str, int], held: Mapping[str, int]) -> list[dict]:
    """One row per node; ``draining`` (instead of ``alive``) while the controller
    publishes it as being emptied, ``joining`` while it still waits for its share."""
    names = node_names(snap.binding)
    by_node: dict[str, dict[str, list[TaskRecord]]] = {}
    for state, records in (("live", snap.live), ("departed", snap.departed)):
        for rec in records.values():
            by_node.setdefault(rec.node_id, {"live": [], "departed": []})[state].append(rec)
    out = []
    for node in sorted(by_node, key=node_index):
        live, gone = by_node[node]["live"], by_node[node]["departed"]
        fresh = [r for r in live if snap.at - r.time <= SUSPECT_AFTER]
        name = names.get(node)
        state = "alive" if fresh else "suspect" if live else "lost"
        if state == "alive" and name is not None and name in snap.rescale.draining:
            state = "draining"
        hb = [r.heartbeat for r in live]
        node_cpu = [h.node_cpu for h in hb if h.node_cpu is not None]
        cpu = max(node_cpu) if node_cpu else sum(h.cpu or 0.0 for h in hb) if hb else None
        out.append(
            {
                "id": node,
                "name": name,
                "state": state,
                "joining": name is not None and name in snap.rescale.joining,
                "idle": bool(live) and owned.get(node, 0) == 0,
                "cpu": None if cpu is None else round(cpu, 4),
                "queue": round(sum(h.queue_length for h in hb), 1),
                "memory": sum(h.memory or 0.0 for h in hb),
                "rate": round(sum(r for h in hb for _, r in h.input_rates), 2),
                "owned": owned.get(node, 0),
                "held": held.get(node, 0),
                "tasks": sorted(r.task_id for r in live),
                "lost_tasks": sorted(r.task_id for r in gone),
                "last_seen": round(max((r.time for r in live + gone), default=0.0), 3),
            }
        )
    return out


def _first(nodes: Sequence[str]) -> str | None:
    return nodes[0] if nodes else None


def _operator_durable(
    op: str, snap: Snapshot, key_groups: int, limits: LagLimits
) -> dict[str, Any] | None:
    """How far each of ``op``'s key groups' durable copy trails the newest checkpoint,
    as the live tasks that own it report (``lag[g]``: ``[checkpoints, seconds]``, None
    when no reporting task owns it); the groups past ``limits``; None when no live task
    of ``op`` reports a durable writer (the tier is off)."""
    lag: list[list[float] | None] = [None] * key_groups
    reporting = False
    for rec in snap.live.values():
        d = rec.heartbeat.durable
        if rec.identity.operator != op or d is None:
            continue
        reporting = True
        behind = d.behind()
        for g in rec.heartbeat.key_groups:
            if g < key_groups:
                n, secs = behind.get(g, (0, 0.0))
                was = lag[g] or [0, 0.0]
                lag[g] = [max(was[0], n), max(was[1], secs)]
    if not reporting:
        return None
    known = [x for x in lag if x is not None]
    return {
        "lag": lag,
        "lagging": [g for g, x in enumerate(lag) if x is not None and limits.lagging(*x)],
        "trailing": sum(1 for x in known if x[0] > 0),
        "max_checkpoints": max((x[0] for x in known), default=0),
        "max_seconds": max((x[1] for x in known), default=0.0),
    }


def durable_view(
    snap: Snapshot, tracker: Tracker, operators: Sequence[Mapping[str, Any]], limits: LagLimits
) -> dict[str, Any] | None:
    """The durable tier's panel: per live task its writer's counts, write rate and
    queue; the key groups that trail in the store (the most behind first, at most
    ``TRAILING_ROWS``) and the limits past which they are highlighted. None when no
    task reports a durable writer (the tier is off, or tasks from before the field)."""
    tasks = []
    for rec in sorted(snap.live.values(), key=lambda r: (r.identity.operator, r.task_id)):
        d = rec.heartbeat.durable
        if d is None:
            continue
        rates = tracker.durable_rates(rec.task_id)
        tasks.append(
            {
                "task": rec.task_id,
                "operator": rec.identity.operator,
                "node": rec.node_id,
                "writes": d.writes,
                "bytes": d.bytes,
                "errors": d.errors,
                "coalesced": d.coalesced,
                "queue": d.queue,
                "write_rate": None if rates is None else round(rates[0], 3),
                "byte_rate": None if rates is None else round(rates[1], 1),
                "trailing": len(d.lag),
                "lagging": sum(1 for _, n, secs in d.lag if limits.lagging(n, secs)),
                "max_checkpoints": max((n for _, n, _ in d.lag), default=0),
                "max_seconds": max((secs for _, _, secs in d.lag), default=0.0),
            }
        )
    if not tasks:
        return None
    trailing = [
        {
            "operator": op["name"],
            "group": g,
            "node": op["owners"][g],
            "checkpoints": x[0],
            "seconds": x[1],
            "lagging": limits.lagging(*x),
        }
        for op in operators
        if op["durable"] is not None
        for g, x in enumerate(op["durable"]["lag"])
        if x is not None and x[0] > 0
    ]
    trailing.sort(key=lambda r: (not r["lagging"], -r["seconds"], r["operator"], r["group"]))
    return {
        "limits": {"checkpoints": limits.checkpoints, "seconds": limits.seconds},
        "tasks": tasks,
        "trailing": trailing[:TRAILING_ROWS],
        "trailing_total": len(trailing),
    }


def _operator(
    op: str, status: Mapping[str, Any], snap: Snapshot, limits: LagLimits
) -> dict[str, Any]:
    owners = [int(t) for t in status.get("owners", [])]
    holders: list[Any] = [None if h is None else int(h) for h in status.get("holders", [])]
    if not holders and snap.checkpoints is not None:  # the store's allocation, over nodes
        holders = [_first(snap.checkpoints.holders(KeyGroupId(op, g))) for g in range(len(owners))]
    load = [0.0] * len(owners)
    for rec in snap.live.values():
        if rec.identity.operator == op:
            for g, rate in rec.heartbeat.input_rates:
                if g < len(load):
                    load[g] = max(load[g], rate)
    assisted = list(status.get("assisted", []))
    return {
        "name": op,
        "epoch": status.get("epoch"),
        "key_groups": len(owners),
        "controller": bool(snap.controllers.get(op)),
        "owners": [_node_of(t, snap) for t in owners],
        "owner_tasks": owners,
        "holders": [h if not isinstance(h, int) else _node_of(h, snap) for h in holders],
        "load": [round(x, 2) for x in load],
        "moving": sorted(int(g) for g in status.get("moving", [])),
        "in_flight": list(status.get("migrations", [])),
        "usable_share": round(sum(map(bool, assisted)) / len(assisted), 4) if assisted else None,
        "durable": _operator_durable(op, snap, len(owners), limits),
    }


def paper_metrics(snap: Snapshot) -> dict[str, Any]:
    """The seed papers' metrics: share of checkpoint-assisted migrations among the done
    ones, and share of key groups whose holder has the newest checkpoint (usable).

    The controller's own figures (``controller/figures``) are shown beside them once
    the leading controller published them.
    """
    done = [r for _, r in snap.requests if r.state.value == "done"]
    assisted = [r for r in done if r.protocol_used and r.protocol_used.value in ASSISTED]
    flags = [bool(a) for s in snap.statuses.values() for a in s.get("assisted", [])]
    out: dict[str, Any] = {
        "migrations_done": len(done),
        "assisted_share": round(len(assisted) / len(done), 4) if done else None,
        "usable_share": round(sum(flags) / len(flags), 4) if flags else None,
    }
    cm = snap.controller_metrics or {}
    for key in ("assisted_share", "ordered_assisted_share", "usable_share_now", "strategy"):
        if key in cm:
            out[f"controller_{key}"] = cm[key]
    return out


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (the page's JSON.parse
    refuses them; the controller's figures may hold them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def allocation_view(snap: Snapshot) -> dict[str, Any] | None:
    """The correlations the checkpoint allocation works from and its score against
    theta, as the leading controller published them in ``controller/figures`` (see
    ``elastorm.storm.controller_runtime.dashboard_figures``); None before it did."""
    cm = snap.controller_metrics or {}
    summary = cm.get("allocation")
    if not isinstance(summary, dict):
        return None
    return finite(summary) | {"strategy": cm.get("strategy")}


def problem_lines(snap: Snapshot) -> list[str]:
    """The lines ``elastorm status`` prints for the topology's problems, and why no
    operator has a status (if none has): the page shows them above everything."""
    if snap.facts is None:
        return []
    out = [p.line if p.current else f"earlier: {p.line}" for p in problems(snap.facts)]
    if not snap.statuses and not snap.routing:
        out.append(f"no controller status: {why_no_status(snap.facts)}")
    return out


def build_view(
    snap: Snapshot, tracker: Tracker, *, max_events: int = 300, limits: LagLimits | None = None
) -> dict[str, Any]:
    """The JSON the page draws (and ``/metrics`` reads), from the latest snapshot;
    ``limits``: when a key group's durable lag is highlighted (default ``LagLimits()``)."""
    limits = LagLimits() if limits is None else limits
    operators = [_operator(op, s, snap, limits) for op, s in operator_statuses(snap).items()]
    owned: collections.Counter[str] = collections.Counter()
    held: collections.Counter[str] = collections.Counter()
    for op in operators:
        owned.update(op["owners"])
        held.update(h for h in op["holders"] if h is not None)
    requests = [
        {
            "name": name,
            "operator": r.operator,
            "group": r.key_group,
            "state": r.state.value,
            "protocol": (r.protocol_used or r.protocol).value,
            "seconds": (
                round(r.times["done"] - r.times["started"], 4)
                if "done" in r.times and "started" in r.times
                else None
            ),
            "pause": None if r.pause is None else round(r.pause, 4),
        }
        for name, r in snap.requests
    ]
    events = list(tracker.events)[-max_events:]
    return {
        "topology": snap.topology,
        "at": snap.at,
        "seq": tracker.seq,
        "zookeeper": {"connected": snap.zk_connected, "reads": snap.zk_reads},
        "storm": dict(snap.storm) if snap.storm else None,
        "storm_error": snap.storm_error,
        "problems": problem_lines(snap),
        "nodes": _nodes(snap, owned, held),
        "operators": operators,
        "scaling": {
            "bound": len(snap.binding.bound),
            "joining": list(snap.rescale.joining),
            "draining": list(snap.rescale.draining),
            "pending": snap.rescale.pending,
            "want": snap.rescale.want,
        },
        "requests": requests,
        "events": events,
        "operator_load": [{"name": op} | load for op, load in operator_load(snap).items()],
        "throughput": {
            op: [[round(t, 3), r] for t, r in series] for op, series in tracker.throughput.items()
        },
        "latency": {
            op: [[round(t, 3), s] for t, s in series] for op, series in tracker.latency.items()
        },
        "paper": finite(paper_metrics(snap)),
        "allocation": allocation_view(snap),
        "durable": durable_view(snap, tracker, operators, limits),
        "counters": {
            "task_failures": dict(tracker.task_failures),
            "node_failures": tracker.node_failures,
            "moves": [[op, p, n] for (op, p), n in sorted(tracker.moves.items())],
            "pauses": [[op, p, n, total] for (op, p), (n, total) in sorted(tracker.pauses.items())],
        },
    }
