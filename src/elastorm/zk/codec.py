"""Versioned JSON encodings of everything elastorm stores in znodes (pure).

Every znode's data is one UTF-8 JSON object ``{"schema": <kind>, "version": 1, ...}``
with sorted keys and no spaces. Decoders check the schema name, the version and
every field's type and range, and raise :class:`ZnodeSchemaError` naming the
field; they never return half-read values. A version newer than
:data:`SCHEMA_VERSION` is refused (written by a newer elastorm), not guessed at.
See docs/znodes.md for the field tables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from elastorm.controller.model import (
    Allocation,
    DurableHealth,
    FieldChecks,
    Heartbeat,
    KeyGroupId,
    TaskIdentity,
    TaskRecord,
)
from elastorm.controller.problems import StartFailure
from elastorm.core.replay import RestartPoint
from elastorm.core.routing import RoutingTable
from elastorm.zk.layout import check_name

SCHEMA_VERSION = 1
#: ZooKeeper's default ``jute.maxbuffer`` is 1 MiB - 1; stay clearly below it.
MAX_ZNODE_BYTES = 1_000_000

TASK = "elastorm.task"
ROUTING = "elastorm.routing"
CHECKPOINTS = "elastorm.checkpoints"
REPLICAS = "elastorm.replicas"
LEADER = "elastorm.leader"
TERM = "elastorm.term"
RESTART = "elastorm.restart"
REWIND = "elastorm.rewind"
SUBMISSION = "elastorm.submission"
START_FAILURE = "elastorm.start_failure"


class ZnodeSchemaError(ValueError):
    """A znode's data does not match its schema (its writer broke it)."""


class ZnodeTooLargeError(ValueError):
    """An encoded value exceeds :data:`MAX_ZNODE_BYTES`."""


# --------------------------------------------------------------------------- helpers


_CHECKS = FieldChecks(ZnodeSchemaError)
_nonneg, _int, _str = _CHECKS.nonneg, _CHECKS.integer, _CHECKS.string


def _list(x: object, what: str) -> list:
    if not isinstance(x, list):
        raise ZnodeSchemaError(f"{what} must be a list, got {type(x).__name__}")
    return x


def _obj(x: object, what: str) -> dict:
    if not isinstance(x, dict):
        raise ZnodeSchemaError(f"{what} must be an object, got {type(x).__name__}")
    return x


def _index_map(x: object, what: str) -> dict[int, float]:
    out = {}
    for k, v in _obj(x, what).items():
        if not k.isdigit():
            raise ZnodeSchemaError(f"{what}: key {k!r} is not a key-group index")
        out[int(k)] = _nonneg(v, f"{what}[{k}]")
    return out


def _dump(obj: dict) -> bytes:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_ZNODE_BYTES:
        raise ZnodeTooLargeError(
            f"{obj.get('schema')}: {len(data)} bytes exceeds the znode limit {MAX_ZNODE_BYTES}"
        )
    return data


def _load(data: bytes | None, schema: str) -> dict:
    if not data:
        raise ZnodeSchemaError(f"{schema}: empty znode")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZnodeSchemaError(f"{schema}: not UTF-8 JSON ({exc})") from None
    obj = _obj(obj, schema)
    if obj.get("schema") != schema:
        raise ZnodeSchemaError(f"expected schema {schema!r}, got {obj.get('schema')!r}")
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ZnodeSchemaError(f"{schema}: bad version {version!r}")
    if version > SCHEMA_VERSION:
        raise ZnodeSchemaError(
            f"{schema}: version {version} is newer than this elastorm reads ({SCHEMA_VERSION})"
        )
    return obj


def _head(schema: str, **fields) -> dict:
    return {"schema": schema, "version": SCHEMA_VERSION, **fields}


def _kg_list(x: object, what: str) -> tuple[int, ...]:
    out = tuple(_int(i, f"{what}[]") for i in _list(x, what))
    if len(set(out)) != len(out):
        raise ZnodeSchemaError(f"{what}: duplicate key groups")
    return tuple(sorted(out))


# --------------------------------------------------------------------------- task znode


def encode_task(record: TaskRecord) -> bytes:
    """``TaskRecord`` -> znode bytes (the operator must be a valid znode name)."""
    i, h = record.identity, record.heartbeat
    check_name(i.operator, "operator")
    return _dump(
        _head(
            TASK,
            task_id=i.task_id,
            operator=i.operator,
            node=i.node_id,
            host=i.host,
            pid=i.pid,
            zone=i.zone,
            seq=record.seq,
            time=record.time,
            epoch=h.epoch,
            key_groups=list(h.key_groups),
            checkpoints=list(h.checkpoints),
            load={
                "rates": {str(k): v for k, v in h.input_rates},
                "queue": h.queue_length,
                "cpu": h.cpu,
                "node_cpu": h.node_cpu,
                "memory": h.memory,
                "latency": h.latency,
                "service": h.service_time,
            },
            state_sizes={str(k): v for k, v in h.state_sizes},
            buffered=[[kg.operator, kg.index, n] for kg, n in h.buffered],
            **({} if h.durable is None else {"durable": _durable_fields(h.durable)}),
        )
    )


def _durable_fields(d: DurableHealth) -> dict[str, Any]:
    """A heartbeat's ``durable`` object: the writer's counts and ``lag`` as
    ``[[group, checkpoints, seconds], ...]`` (only groups that trail)."""
    return {
        "writes": d.writes,
        "bytes": d.bytes,
        "errors": d.errors,
        "coalesced": d.coalesced,
        "queue": d.queue,
        "lag": [list(row) for row in d.lag],
    }


def _decode_durable(x: object) -> DurableHealth | None:
    """A heartbeat's ``durable`` object (absent: the tier is off, or a task from before
    the field) -> ``DurableHealth`` or None."""
    if x is None:
        return None
    o = _obj(x, "durable")
    lag = []
    for row in _list(o.get("lag", []), "durable.lag"):
        if not isinstance(row, list) or len(row) != 3:
            raise ZnodeSchemaError(f"durable.lag entry {row!r} must be [group, checkpoints, s]")
        lag.append(tuple(row))
    counts = {k: o.get(k, 0) for k in ("writes", "bytes", "errors", "coalesced", "queue")}
    return DurableHealth(**counts, lag=tuple(lag))


def decode_task(data: bytes | None) -> TaskRecord:
    """Znode bytes -> ``TaskRecord``; ``ZnodeSchemaError`` naming the bad field."""
    o = _load(data, TASK)
    try:
        load = _obj(o.get("load"), "load")
        buffered = []
        for item in _list(o.get("buffered", []), "buffered"):
            if not isinstance(item, list) or len(item) != 3:
                raise ZnodeSchemaError(f"buffered item {item!r} must be [operator, index, n]")
            buffered.append((KeyGroupId(item[0], item[1]), item[2]))
        identity = TaskIdentity(
            task_id=o.get("task_id"),
            operator=check_name(o.get("operator"), "operator"),
            node_id=o.get("node"),
            host=o.get("host"),
            pid=o.get("pid"),
            zone=o.get("zone"),
        )
        heartbeat = Heartbeat(
            key_groups=_kg_list(o.get("key_groups"), "key_groups"),
            checkpoints=_kg_list(o.get("checkpoints"), "checkpoints"),
            input_rates=_index_map(load.get("rates", {}), "load.rates"),
            queue_length=load.get("queue", 0.0),
            cpu=load.get("cpu"),
            node_cpu=load.get("node_cpu"),
            memory=load.get("memory"),
            latency=load.get("latency"),
            service_time=load.get("service"),
            state_sizes=_index_map(o.get("state_sizes", {}), "state_sizes"),
            buffered=buffered,
            epoch=o.get("epoch", 0),
            durable=_decode_durable(o.get("durable")),
        )
        return TaskRecord(
            identity=identity, heartbeat=heartbeat, seq=o.get("seq"), time=o.get("time")
        )
    except ZnodeSchemaError as exc:
        raise ZnodeSchemaError(f"{TASK}: {exc}") from None
    except (ValueError, TypeError, AttributeError) as exc:  # model / layout validation
        raise ZnodeSchemaError(f"{TASK}: {exc}") from None


# --------------------------------------------------------------------------- routing


def encode_routing(
    operator: str,
    table: RoutingTable,
    *,
    controller: str,
    issued: int | None = None,
    copies: Mapping[int, Mapping[int, tuple[int, int]]] | None = None,
) -> bytes:
    """An operator's routing table (key group index -> owning task id) with its epoch;
    ``issued``: the highest epoch the controller has put on a command of this
    operator (a replica's start or drop bumps it without changing an owner), so a
    restarted controller never issues an epoch the emitters already saw; ``copies``:
    key group -> task -> id of the newest checkpoint the task reported holding, so a
    restarted controller still knows where each group's state survives. In the same
    znode as the owners, so the two never disagree."""
    check_name(operator, "operator")
    copies = copies or {}
    rows = sorted([g, t, *cid] for g, by_task in copies.items() for t, cid in by_task.items())
    return _dump(
        _head(
            ROUTING,
            operator=operator,
            epoch=table.epoch,
            owners=list(table.owners),
            controller=controller,
            issued=max(table.epoch, table.epoch if issued is None else issued),
            copies=rows,
        )
    )


def decode_routing(data: bytes | None) -> tuple[str, RoutingTable]:
    """Znode bytes -> ``(operator, RoutingTable)``."""
    o = _load(data, ROUTING)
    operator = _str(o.get("operator"), "routing.operator")
    owners = tuple(_int(t, "routing.owners[]") for t in _list(o.get("owners"), "routing.owners"))
    try:
        table = RoutingTable(epoch=_int(o.get("epoch"), "routing.epoch"), owners=owners)
    except (ValueError, TypeError) as exc:
        raise ZnodeSchemaError(f"{ROUTING}: {exc}") from None
    return operator, table


def decode_copies(data: bytes | None) -> dict[int, dict[int, tuple[int, int]]]:
    """Znode bytes of a routing table -> its ``copies`` (see :func:`encode_routing`;
    none in a znode written before the field existed)."""
    o = _load(data, ROUTING)
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for row in _list(o.get("copies", []), "routing.copies"):
        if not isinstance(row, list) or len(row) != 4:
            raise ZnodeSchemaError(f"routing.copies entry {row!r} must be [group, task, epoch, n]")
        g, t, e, n = (_int(x, "routing.copies[]") for x in row)
        out.setdefault(g, {})[t] = (e, n)
    return out


def decode_issued(data: bytes | None) -> int:
    """Znode bytes of a routing table -> the highest epoch issued (see
    :func:`encode_routing`; a znode written before the field existed: its epoch)."""
    o = _load(data, ROUTING)
    epoch = _int(o.get("epoch"), "routing.epoch")
    issued = o.get("issued", epoch)
    return max(epoch, _int(issued, "routing.issued"))


# --------------------------------------------------------------------------- checkpoints


def encode_checkpoints(allocation: Allocation, *, controller: str) -> bytes:
    """Checkpoint allocation as ``[[operator, index, [holder, ...]], ...]`` in key-group order."""
    return _encode_nodes(CHECKPOINTS, allocation, controller)


def decode_checkpoints(data: bytes | None) -> Allocation:
    """Znode bytes -> ``Allocation``."""
    return _decode_nodes(CHECKPOINTS, data)


def encode_replicas(replicas: Allocation, *, controller: str) -> bytes:
    """Active replicas (Su & Zhou 2016) as ``[[operator, index, [node]], ...]``: each
    replicated key group and the node of its replica, in key-group order."""
    return _encode_nodes(REPLICAS, replicas, controller)


def decode_replicas(data: bytes | None) -> Allocation:
    """Znode bytes -> ``Allocation`` (key group -> its replica's node)."""
    return _decode_nodes(REPLICAS, data)


def _encode_nodes(kind: str, allocation: Allocation, controller: str) -> bytes:
    entries = [[kg.operator, kg.index, list(nodes)] for kg, nodes in allocation.entries]
    return _dump(_head(kind, entries=entries, controller=controller))


def _decode_nodes(kind: str, data: bytes | None) -> Allocation:
    o = _load(data, kind)
    pairs = []
    for item in _list(o.get("entries"), f"{kind}.entries"):
        if not isinstance(item, list) or len(item) != 3:
            raise ZnodeSchemaError(f"{kind} entry {item!r} must be [operator, index, nodes]")
        nodes = tuple(_str(h, "node") for h in _list(item[2], "nodes"))
        try:
            pairs.append((KeyGroupId(item[0], item[1]), nodes))
        except ValueError as exc:
            raise ZnodeSchemaError(f"{kind}: {exc}") from None
    if len({kg for kg, _ in pairs}) != len(pairs):
        raise ZnodeSchemaError(f"{kind}: a key group appears twice")
    try:
        return Allocation(pairs)
    except ValueError as exc:
        raise ZnodeSchemaError(f"{kind}: {exc}") from None


# --------------------------------------------------------------------------- leader / term


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderInfo:
    """Data of ``controller/leader``: which controller leads, from which process, and
    that process's parent (``worker``: the Storm worker of a controller task; 0 if
    unknown), so a standby can tell whether it shares the leader's worker."""

    controller: str
    host: str
    pid: int
    worker: int = 0


def encode_leader(info: LeaderInfo) -> bytes:
    return _dump(
        _head(LEADER, controller=info.controller, host=info.host, pid=info.pid, worker=info.worker)
    )


def decode_leader(data: bytes | None) -> LeaderInfo:
    o = _load(data, LEADER)
    return LeaderInfo(
        controller=_str(o.get("controller"), "controller"),
        host=_str(o.get("host"), "host"),
        pid=_int(o.get("pid"), "pid", 1),
        worker=_int(o.get("worker", 0), "worker"),
    )


def encode_term(controller: str, *, incarnation: str) -> bytes:
    """Data of ``controller/term``: the last controller (and which start of it) that
    took the lead. The fencing token is the znode's *version*; the data lets a store
    recognise its own bump whose reply was lost."""
    return _dump(_head(TERM, controller=controller, incarnation=incarnation))


# --------------------------------------------------------------------------- replay


def encode_restart_point(point: RestartPoint) -> bytes:
    """Data of ``restart/<component>-<task>``: an emitter's durable restart point."""
    return _dump(
        _head(
            RESTART,
            positions=dict(point.positions),
            counters={op: {str(g): s for g, s in gs.items()} for op, gs in point.counters.items()},
            state=dict(point.state),
        )
    )


def decode_restart_point(data: bytes | None) -> RestartPoint:
    o = _load(data, RESTART)
    positions = {
        _str(k, "upstream"): _int(v, f"positions[{k}]", -1)
        for k, v in _obj(o.get("positions"), "positions").items()
    }
    counters = {}
    for op, groups in _obj(o.get("counters"), "counters").items():
        counters[_str(op, "operator")] = {
            int(g): _int(s, f"counters[{op}][{g}]") for g, s in _index_map_raw(groups, op).items()
        }
    state = _obj(o.get("state", {}), "state")
    return RestartPoint(positions=positions, counters=counters, state=state)


def _index_map_raw(x: object, what: str) -> dict[str, object]:
    groups = _obj(x, what)
    for k in groups:
        if not k.isdigit():
            raise ZnodeSchemaError(f"{what}: key {k!r} is not a key-group index")
    return groups


@dataclass(frozen=True, kw_only=True, slots=True)
class RewindRequest:
    """Data of ``rewinds/<source>/<emitter task>``: a restarted emitter asks its source
    to replay from just after ``positions`` (upstream -> last position it has) and to
    name ``token`` in the marker that precedes the replay."""

    token: str
    positions: Mapping[str, int]

    def start(self, upstream: str) -> int:
        return self.positions.get(upstream, -1) + 1


def encode_rewind(request: RewindRequest) -> bytes:
    return _dump(_head(REWIND, token=request.token, positions=dict(request.positions)))


def decode_rewind(data: bytes | None) -> RewindRequest:
    o = _load(data, REWIND)
    positions = {
        _str(k, "upstream"): _int(v, f"positions[{k}]", -1)
        for k, v in _obj(o.get("positions"), "positions").items()
    }
    return RewindRequest(token=_str(o.get("token"), "token"), positions=positions)


# --------------------------------------------------------------------------- submission


@dataclass(frozen=True, kw_only=True, slots=True)
class SetAside:
    """An earlier submission's znodes that a new submission set aside: its Storm id,
    how many key groups its routing tables had, how many znodes moved, and where to."""

    storm_id: str
    key_groups: int
    znodes: int
    path: str
    at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Submission:
    """Data of ``submission``: the Storm submission (``storm.id``) the topology's znodes
    belong to, since when, and what it set aside when it started (None: nothing)."""

    storm_id: str
    since: float
    set_aside: SetAside | None = None


def submission_fields(submission: Submission) -> dict[str, Any]:
    """``submission`` as plain JSON fields: the znode's body, and what the controller
    reports of it in ``controller-metrics.json``."""
    return asdict(submission)


def encode_submission(submission: Submission) -> bytes:
    return _dump(_head(SUBMISSION, **submission_fields(submission)))


def decode_submission(data: bytes | None) -> Submission:
    o = _load(data, SUBMISSION)
    aside = o.get("set_aside")
    if aside is not None:
        a = _obj(aside, "set_aside")
        aside = SetAside(
            storm_id=_str(a.get("storm_id"), "set_aside.storm_id"),
            key_groups=_int(a.get("key_groups"), "set_aside.key_groups"),
            znodes=_int(a.get("znodes"), "set_aside.znodes"),
            path=_str(a.get("path"), "set_aside.path"),
            at=_nonneg(a.get("at"), "set_aside.at"),
        )
    return Submission(
        storm_id=_str(o.get("storm_id"), "storm_id"),
        since=_nonneg(o.get("since"), "since"),
        set_aside=aside,
    )


# --------------------------------------------------------------------------- start failure


def encode_start_failure(failure: StartFailure, *, storm_id: str) -> bytes:
    """Data of ``failures/<component>-<task>``: the task's failed starts in submission
    ``storm_id`` (a later submission's readers skip it)."""
    return _dump(_head(START_FAILURE, storm_id=storm_id, **asdict(failure)))


def decode_start_failure(data: bytes | None) -> tuple[str, StartFailure]:
    """Znode bytes -> (storm id, ``StartFailure``); ``ZnodeSchemaError`` naming the field."""
    o = _load(data, START_FAILURE)
    try:
        failure = StartFailure(
            component=_str(o.get("component"), "component"),
            task=_int(o.get("task"), "task"),
            count=_int(o.get("count"), "count", 1),
            reason=_str(o.get("reason"), "reason"),
            at=_nonneg(o.get("at"), "at"),
        )
    except ValueError as exc:
        raise ZnodeSchemaError(f"{START_FAILURE}: {exc}") from None
    return _str(o.get("storm_id"), "storm_id"), failure
