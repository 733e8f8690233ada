"""Messages on the FIFO channel between two tasks.

Madsen & Zhou 2015, sections 3-5 (system model, architecture, state migration).

One FIFO channel per (sending task, receiving task) carries data and control.
The paper calls a message **fast** (handled on arrival, skipping the key group's
input queue) or **normal** (queued behind the key group's data), and **stateful**
when it carries tuples or state; each class's docstring names its kind, as the
table in ``docs/protocols.md`` does. Every message is a frozen keyword-only
dataclass, validated when built, and round-trips through plain JSON-able dicts
(:func:`encode` / :func:`decode`) so the Storm adapter can ship it as a tuple field.

The hot path skips the checks where the values are our own: the emitter builds
its tuples with ``DataTuple.trusted`` / ``Data.trusted``. What comes off the
wire is always checked (:func:`from_json`), and a ``Data`` travels as a flat
JSON array rather than an object (:func:`to_json`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple


class Protocol(Enum):
    """How a key group moves. ``RESTORE`` is recovery after its owner died, from an
    in-memory checkpoint its target holds; ``DURABLE`` is recovery from the durable
    store (Kwon et al. 2008) when the owner and every holder died.

    ``REPLICATE`` moves nothing: it starts an active replica of the group (Su & Zhou
    2016) on the group's holder, which then shadows the owner; a replica is promoted
    by a ``RESTORE`` to it, and ended by :class:`DropReplica`.
    """

    DIRECT = "direct"
    CPA = "cpa"
    CPAL = "cpal"
    RESTORE = "restore"
    REPLICATE = "replicate"
    DURABLE = "durable"

    @property
    def checkpoint_assisted(self) -> bool:
        """Whether the move starts from a checkpoint its target holds (all but DIRECT)."""
        return self in (Protocol.CPA, Protocol.CPAL, Protocol.RESTORE)

    @property
    def restores(self) -> bool:
        """Whether the move is a recovery (the old owner is gone): RESTORE or DURABLE."""
        return self in (Protocol.RESTORE, Protocol.DURABLE)


def _check_group(key_group: int) -> None:
    if not isinstance(key_group, int) or key_group < 0:
        raise ValueError(f"key_group must be an int >= 0, got {key_group!r}")


def _check_epoch(epoch: int) -> None:
    if not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")


def _check_group_and_epoch(message: Any) -> None:
    _check_group(message.key_group)
    _check_epoch(message.epoch)


def _check_watermarks(watermarks: Mapping[str, int]) -> None:
    for source, seq in watermarks.items():
        if not isinstance(source, str) or not isinstance(seq, int) or seq < 0:
            raise ValueError(f"bad watermark {source!r}: {seq!r}")


class _DataTupleFields(NamedTuple):
    source: str
    seq: int
    key: str
    value: Any
    ts: float


def _check_item(source: Any, seq: Any, key: Any) -> None:
    if not isinstance(source, str) or not source:
        raise ValueError(f"source must be a non-empty str, got {source!r}")
    if not isinstance(seq, int) or seq < 1:
        raise ValueError(f"seq must be an int >= 1, got {seq!r}")
    if not isinstance(key, str):
        raise TypeError(f"key must be str, got {type(key).__name__}")


class DataTuple(_DataTupleFields):
    """The paper's ``(id, key, value, ts)``; ``id = (source, seq)``.

    ``seq >= 1`` numbers the tuples of ``source`` bound for one downstream key
    group, without gaps, so a receiver can drop replays by sequence.

    An immutable named tuple, validated when built by name; :meth:`trusted`
    skips the checks for the emitter's own hot path (it numbers tuples itself),
    and a toState's items encode as plain JSON arrays at C speed.
    """

    __slots__ = ()

    def __new__(cls, source: str, seq: int, key: str, value: Any, ts: float) -> DataTuple:
        _check_item(source, seq, key)
        return _new_tuple(cls, (source, seq, key, value, ts))

    @classmethod
    def trusted(cls, source: str, seq: int, key: str, value: Any, ts: float) -> DataTuple:
        """Build without validation: only for values this process produced itself."""
        return _new_tuple(cls, (source, seq, key, value, ts))

    @classmethod
    def from_list(cls, fields: list) -> DataTuple:
        """Validated, from the wire (``ValueError`` unless five fields)."""
        if not isinstance(fields, (list, tuple)) or len(fields) != 5:
            raise ValueError(f"a data tuple has 5 fields, got {fields!r:.80}")
        source, seq, key, value, ts = fields
        _check_item(source, seq, key)
        return _new_tuple(cls, (source, seq, key, value, ts))


_new_tuple = tuple.__new__


class Message:
    """Base of every channel message: each names its ``key_group``."""

    key_group: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Data(Message):
    """A data tuple for ``key_group`` (normal)."""

    key_group: int
    item: DataTuple

    def __post_init__(self) -> None:
        _check_group(self.key_group)
        if not isinstance(self.item, DataTuple):
            raise TypeError("item must be a DataTuple")

    @classmethod
    def trusted(cls, key_group: int, item: DataTuple) -> Data:
        """Build without validation (the emitter's hot path: it computed both)."""
        message = new_unchecked(cls)
        set_unchecked(message, "key_group", key_group)
        set_unchecked(message, "item", item)
        return message


#: A frozen dataclass built field by field, without its ``__init__`` (its checks and its
#: keyword-argument call): only on the per-tuple paths, from values already checked.
new_unchecked = object.__new__
set_unchecked = object.__setattr__


@dataclass(frozen=True, kw_only=True, slots=True)
class ToState(Message):
    """Upstream -> target: the upstream's output buffer for the group (Alg. 1 l.3,
    Alg. 2 l.3). Fast for CPA and RESTORE, normal for CPAL, as in the paper.

    A CPAL toState may come in chunks: every chunk but the last has ``more``
    set, and the target answers each with a :class:`ToStateAck`, upon which the
    upstream sends the next one (flow control: the upstream never blocks for
    long on a big buffer, and keeps emitting in between). The chunks' items, in
    order, are the buffer.
    """

    key_group: int
    epoch: int
    protocol: Protocol
    items: tuple[DataTuple, ...]
    more: bool = False

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)
        if self.protocol is Protocol.DIRECT:
            raise ValueError("toState is sent by CPA, CPAL or RESTORE, never by DIRECT")
        if not isinstance(self.items, tuple):
            raise TypeError("items must be a tuple")
        if self.more is not False and (self.more is not True or self.protocol is not Protocol.CPAL):
            raise ValueError(f"only a CPAL toState comes in chunks (more={self.more!r})")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToStateAck(Message):
    """CPAL target -> upstream: a toState chunk (``more`` set) is applied; send the
    next (fast)."""

    key_group: int
    epoch: int

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToCheckpoint(Message):
    """Upstream -> source: no more data for the group from me (normal).

    ``protocol`` is the migration's (CPA or CPAL) for the source's report. ``items``:
    the upstream's output buffer for the group, as in the target's toState: whatever of
    it the source never got (lost on the wire, or parked behind such a loss) it applies
    now, with its outputs, before it drains; what it had it drops by sequence. The
    target replays the same tuples without outputs, so each tuple's outputs leave once."""

    key_group: int
    epoch: int
    protocol: Protocol = Protocol.CPA
    items: tuple[DataTuple, ...] = ()

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)
        if not isinstance(self.items, tuple):
            raise TypeError("items must be a tuple")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessedAllReplay(Message):
    """CPAL target -> every upstream: all toState replays are applied (fast)."""

    key_group: int
    epoch: int

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncGroup(Message):
    """CPAL upstream -> target: I stopped duplicating to the source (normal).

    ``items``: the upstream's output buffer for the group, the same the source's
    toCheckpoint carries: the target applies, without outputs, any of them a loss on
    the wire kept from it, so every tuple numbered before the switch is the source's
    to send outputs for, and every later one the target's."""

    key_group: int
    epoch: int
    items: tuple[DataTuple, ...] = ()

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)
        if not isinstance(self.items, tuple):
            raise TypeError("items must be a tuple")


CheckpointId = tuple[int, int]
"""``(owner epoch, number)``: ordered lexicographically, unique per key group."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointDelta(Message):
    """Owner -> holder: an incremental (``base`` set) or full (``base is None``)
    checkpoint of one key group (fast, stateful).

    ``entries`` are the keys updated since ``base`` with their new values;
    ``watermarks[source]`` is the last sequence of ``source`` the checkpoint
    reflects; ``out_seq[(source, downstream_group)]`` the group's output counters.
    """

    key_group: int
    checkpoint: CheckpointId
    base: CheckpointId | None
    entries: Mapping[str, Any]
    watermarks: Mapping[str, int]
    out_seq: Mapping[tuple[str, int], int]

    def __post_init__(self) -> None:
        _check_group(self.key_group)
        epoch, number = self.checkpoint
        _check_epoch(epoch)
        if number < 1:
            raise ValueError(f"checkpoint number must be >= 1, got {number}")
        if self.base is not None and tuple(self.base) >= tuple(self.checkpoint):
            raise ValueError(f"base {self.base} must precede checkpoint {self.checkpoint}")
        _check_watermarks(self.watermarks)

    @property
    def full(self) -> bool:
        return self.base is None


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointAck(Message):
    """Holder -> owner: checkpoint held; carries its watermarks for trimming."""

    key_group: int
    checkpoint: CheckpointId
    watermarks: Mapping[str, int]

    def __post_init__(self) -> None:
        _check_group(self.key_group)
        _check_watermarks(self.watermarks)


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointNack(Message):
    """Holder -> owner: delta refused (no matching base); send a full one next."""

    key_group: int
    checkpoint: CheckpointId

    def __post_init__(self) -> None:
        _check_group(self.key_group)


@dataclass(frozen=True, kw_only=True, slots=True)
class Trim(Message):
    """Owner -> upstream: drop buffered tuples up to ``watermarks`` (fast)."""

    key_group: int
    watermarks: Mapping[str, int]

    def __post_init__(self) -> None:
        _check_group(self.key_group)
        _check_watermarks(self.watermarks)


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointRequest(Message):
    """Upstream -> owner: the emitter keeps many of ``key_group``'s tuples that no held
    checkpoint covers yet; checkpoint the group now, so the ``Trim`` that frees them
    comes before the emitter's buffer reaches its bound (``elastorm.core.holdback``)."""

    key_group: int

    def __post_init__(self) -> None:
        _check_group(self.key_group)


@dataclass(frozen=True, kw_only=True, slots=True)
class Resend(Message):
    """Keyed task -> emitter: ``source``'s tuples for ``key_group`` numbered
    ``first`` to ``last`` did not all arrive; send them again from your output buffer
    to the group's owner (fast).

    A tuple lost between two live tasks (a worker reassigned while its peer sends,
    say) parks every later one of its source behind the gap. The output buffer still
    holds it (only a checkpoint that reflects it trims it, and the gap keeps the
    owner's watermark below it), and the receiver drops by sequence whatever it had.
    """

    key_group: int
    source: str
    first: int
    last: int

    def __post_init__(self) -> None:
        _check_group(self.key_group)
        if not isinstance(self.source, str) or not self.source:
            raise ValueError(f"source must be a non-empty str, got {self.source!r}")
        if not isinstance(self.first, int) or not 1 <= self.first <= self.last:
            raise ValueError(f"need 1 <= first <= last, got {self.first!r}, {self.last!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Migrate(Message):
    """Command: move ``key_group`` from ``source`` to ``target`` by ``protocol``.

    The controller sends DIRECT to the source task, and CPA / CPAL / RESTORE to
    every upstream emitter; the source of a direct migration forwards CPA to the
    upstreams once the target holds its checkpoint. ``source`` is ``None`` for
    RESTORE and DURABLE (the old owner is gone). ``epoch`` is the new routing epoch
    and names the migration.
    """

    key_group: int
    epoch: int
    protocol: Protocol
    source: int | None
    target: int

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)
        if (self.source is None) != self.protocol.restores:
            raise ValueError("source is None exactly for RESTORE and DURABLE")
        if self.source == self.target:
            raise ValueError("source and target must differ")


@dataclass(frozen=True, kw_only=True, slots=True)
class SetHolder(Message):
    """Command to the owner: checkpoints of ``key_group`` now go to ``holder``."""

    key_group: int
    holder: int | None

    def __post_init__(self) -> None:
        _check_group(self.key_group)


@dataclass(frozen=True, kw_only=True, slots=True)
class DropReplica(Message):
    """Controller -> every upstream and the replica: stop feeding ``replica`` with
    ``key_group``'s tuples; the replica turns its shadow state into a held copy (fast).

    ``epoch`` is the routing epoch the controller issued for it, so a drop that an
    emitter receives after a later command of the group is recognised as stale.
    """

    key_group: int
    epoch: int
    replica: int

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamRecovery(Message):
    """Controller -> every task of a keyed operator: whether some state upstream of
    it (or of its own operator) is being restored, so the outputs it makes now are
    tentative (Su & Zhou 2016). Not about one key group (``key_group`` is 0)."""

    key_group: int
    recovering: bool

    def __post_init__(self) -> None:
        _check_group(self.key_group)


@dataclass(frozen=True, kw_only=True, slots=True)
class PeerDown(Message):
    """Controller to every task: task ``task`` died and restarted empty.

    Not about one key group (``key_group`` is 0 and ignored): the receiver stops
    waiting for ``task`` wherever it did (``TaskCoordinator.peer_down``).
    """

    key_group: int
    task: int

    def __post_init__(self) -> None:
        _check_group(self.key_group)


@dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamRestarted(Message):
    """Emitter -> every task of each keyed operator it feeds, first thing in a new life
    (a restart): ``epoch`` is the routing epoch it read at its start.

    It ignores the commands of every migration at or before that epoch (its table has
    their outcome already), so no task waits for its toState, toCheckpoint or
    syncGroup in them: its earlier life's never come, and its replay from its restart
    point brings what that life had buffered. Not about one key group (``key_group``
    is 0); ``TaskCoordinator`` tells every machine.
    """

    key_group: int
    epoch: int

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class StandIn(Message):
    """Controller -> the ends of a move (CPA, CPAL, direct) of ``epoch`` that have not
    reported it done, once every emitter has restarted knowing that epoch: no emitter
    will send the toCheckpoint or the toState that starts them, so the controller sends
    what they would have (``MigrationController.redrive``). The ``source`` drains as on
    a toCheckpoint (a direct one once its full checkpoint is acked); the ``target``
    starts from its held copy as on a toState with no tuples (the emitters' new lives
    resend what it lacks, by sequence). An end that has started already ignores it.
    """

    key_group: int
    epoch: int
    protocol: Protocol
    source: int
    target: int

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)
        if self.protocol not in (Protocol.CPA, Protocol.CPAL, Protocol.DIRECT):
            raise ValueError(f"a stand-in is for a move, not {self.protocol.value}")
        if self.source == self.target:
            raise ValueError("source and target must differ")


@dataclass(frozen=True, kw_only=True, slots=True)
class DurableWritten(Message):
    """The task's durable writer -> its coordinator: checkpoint ``checkpoint`` of
    ``key_group``, reflecting upstream positions ``watermarks``, is in the durable
    store (Kwon et al. 2008). The owner trims upstream buffers no further than this,
    so a durable restore finds every later tuple still buffered."""

    key_group: int
    checkpoint: CheckpointId
    watermarks: Mapping[str, int]

    def __post_init__(self) -> None:
        _check_group(self.key_group)
        _check_watermarks(self.watermarks)


@dataclass(frozen=True, kw_only=True, slots=True)
class DurableLoaded(Message):
    """The task's store reader -> its coordinator: the newest durable copy of
    ``key_group`` for the DURABLE restore of routing epoch ``epoch`` (the fields of a
    held copy: ``entries``, the upstream positions ``watermarks``, the output
    counters ``out_seq``); ``checkpoint is None`` when the store has no intact set
    (the group starts empty; upstream replays all it buffers of it, which no trim
    passed without a durable copy)."""

    key_group: int
    epoch: int
    checkpoint: CheckpointId | None
    entries: Mapping[str, Any]
    watermarks: Mapping[str, int]
    out_seq: Mapping[tuple[str, int], int]

    def __post_init__(self) -> None:
        _check_group_and_epoch(self)
        if self.checkpoint is None and (self.entries or self.watermarks or self.out_seq):
            raise ValueError("a missing durable copy (checkpoint None) has no contents")
        _check_watermarks(self.watermarks)

    @classmethod
    def missing(cls, key_group: int, epoch: int) -> DurableLoaded:
        """The answer when the store has no intact set of ``key_group``."""
        return cls(
            key_group=key_group, epoch=epoch, checkpoint=None, entries={}, watermarks={}, out_seq={}
        )


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.__name__: cls
    for cls in (
        Data,
        ToState,
        ToStateAck,
        ToCheckpoint,
        ProcessedAllReplay,
        SyncGroup,
        CheckpointDelta,
        CheckpointAck,
        CheckpointNack,
        Trim,
        CheckpointRequest,
        Resend,
        Migrate,
        SetHolder,
        DropReplica,
        UpstreamRecovery,
        PeerDown,
        UpstreamRestarted,
        StandIn,
        DurableWritten,
        DurableLoaded,
    )
}


def _encode_field(name: str, value: Any) -> Any:
    if name == "item":
        return list(value)
    if name == "items":
        return list(value)  # named tuples: JSON arrays, encoded at C speed
    if name == "protocol":
        return value.value
    if name in ("checkpoint", "base"):
        return None if value is None else list(value)
    if name in ("entries", "watermarks"):
        return dict(value)
    if name == "out_seq":
        return [[source, group, seq] for (source, group), seq in value.items()]
    return value


def _decode_items(rows: Any) -> tuple[DataTuple, ...]:
    """A toState's items from the wire, each checked (a tight loop: 50k rows are common)."""
    if not isinstance(rows, list):
        raise ValueError(f"items must be a list, got {type(rows).__name__}")
    out = []
    append = out.append
    for row in rows:
        if type(row) is not list or len(row) != 5:
            raise ValueError(f"a data tuple has 5 fields, got {row!r:.80}")
        source, seq, key = row[0], row[1], row[2]
        if type(source) is not str or not source or type(seq) is not int or seq < 1:
            _check_item(source, seq, key)
            raise ValueError(f"bad data tuple {row!r:.80}")
        if type(key) is not str:
            raise TypeError(f"key must be str, got {type(key).__name__}")
        append(_new_tuple(DataTuple, row))
    return tuple(out)


def _decode_field(name: str, value: Any) -> Any:
    if name == "item":
        return DataTuple.from_list(value)
    if name == "items":
        return _decode_items(value)
    if name == "protocol":
        return Protocol(value)
    if name in ("checkpoint", "base"):
        return None if value is None else (int(value[0]), int(value[1]))
    if name == "out_seq":
        return {(source, int(group)): int(seq) for source, group, seq in value}
    return value


_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    for cls in MESSAGE_TYPES.values()
}


def encode(message: Message) -> dict:
    """A JSON-able dict for ``message``: ``{"type": name, field: value, ...}``."""
    out: dict[str, Any] = {"type": type(message).__name__}
    for name in _FIELDS[type(message)]:
        out[name] = _encode_field(name, getattr(message, name))
    return out


def decode(data: Mapping[str, Any]) -> Message:
    """Inverse of :func:`encode`; raises ``ValueError`` on an unknown type."""
    try:
        cls = MESSAGE_TYPES[data["type"]]
    except KeyError as exc:
        raise ValueError(f"unknown message type {data.get('type')!r}") from exc
    kwargs = {name: _decode_field(name, data[name]) for name in _FIELDS[cls]}
    return cls(**kwargs)


# -- the wire: one JSON text per message ------------------------------------------
def _not_json(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _make_dumps() -> Callable[[Any], str]:
    """``json.dumps(o, separators=(",", ":"))`` with its C encoder built once, not
    per call (``JSONEncoder.encode`` builds one every time: a third of a Data's cost)."""
    slow = json.JSONEncoder(separators=(",", ":")).encode
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator in this Python
        return slow
    encoder = make(None, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",",
                   False, False, True)  # fmt: skip

    def dumps(o: Any) -> str:
        if isinstance(o, str):
            return slow(o)
        return "".join(encoder(o, 0))

    return dumps


_dumps = _make_dumps()
_scan = json.decoder.JSONDecoder().scan_once


def _loads(text: str) -> Any:
    """``json.loads`` for our own compact texts (no surrounding whitespace)."""
    if not isinstance(text, str):
        raise TypeError(f"the JSON object must be str, not {type(text).__name__}")
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):  # whitespace around it, extra data, not JSON: the full parser decides
        return json.loads(text)
    return value


def to_json(message: Message) -> str:
    """``message`` as compact JSON text.

    A ``Data`` (the hot path: one per tuple) is a flat array
    ``[key_group, source, seq, key, value, ts]``; every other message is the
    object of :func:`encode`, ``"type"`` first.
    """
    if type(message) is Data:
        return _dumps([message.key_group, *message.item])
    return _dumps(encode(message))


_BIG_TEXT = 65_536
"""Texts longer than this (toState, full checkpoints) decode with the cyclic
garbage collector paused: their many small lists and tuples would otherwise
trigger collections that cost more than the decoding itself."""


def from_json(text: str | list) -> Message:
    """Inverse of :func:`to_json`; ``ValueError`` naming the fault on anything malformed.

    A ``Data`` may also come as its flat list, already decoded with the multilang
    message around it (the Storm adapter's wire): it is checked, not decoded again.
    """
    if isinstance(text, str) and len(text) > _BIG_TEXT and gc.isenabled():
        gc.disable()
        try:
            return _from_json(text)
        finally:
            gc.enable()
    return _from_json(text)


def _from_json(text: str | list) -> Message:
    if type(text) is list:
        data = text
    else:
        try:
            data = _loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not an elastorm message: {exc}") from None
    try:
        if type(data) is list:
            return _decode_data(data)
        if not isinstance(data, dict):
            raise ValueError(f"not an elastorm message: a {type(data).__name__}")
        return decode(data)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"not an elastorm message: {type(exc).__name__}: {exc}") from None


def _decode_data(fields: list) -> Data:
    if len(fields) != 6:
        raise ValueError(
            f"a Data message is [key_group, source, seq, key, value, ts], got {fields!r:.80}"
        )
    key_group, source, seq, key, value, ts = fields
    if type(key_group) is not int or key_group < 0:
        raise ValueError(f"key_group must be an int >= 0, got {key_group!r}")
    if type(source) is not str or not source or type(seq) is not int or seq < 1:
        _check_item(source, seq, key)
        raise ValueError(f"bad data tuple {fields!r:.80}")
    if type(key) is not str:
        raise TypeError(f"key must be str, got {type(key).__name__}")
    return Data.trusted(key_group, _new_tuple(DataTuple, (source, seq, key, value, ts)))


# -- data runs: many Data of one channel in one tuple (issue 34, stage 1) ------------
RunItem = Sequence[Any]
"""One tuple of a run without its id: ``(key, value, ts)`` (a list off the wire)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DataRun(Message):
    """Data tuples of ``key_group`` from ``source`` numbered ``first``,
    ``first + 1``, ... (normal): what many ``Data`` say, with the id said once.

    Only a transport: an emitter numbers, buffers, trims and resends per tuple as
    ever; a receiver admits a run as the ``Data`` it stands for (:meth:`data`), in
    one check per run where it can (``KeyGroupMachine.admit_run``).
    """

    key_group: int
    source: str
    first: int
    items: Sequence[RunItem]

    def __post_init__(self) -> None:
        _check_group(self.key_group)
        if not self.items:
            raise ValueError("a data run holds at least one tuple")
        for key, _value, _ts in self.items:
            _check_item(self.source, self.first, key)

    @classmethod
    def trusted(cls, key_group: int, source: str, first: int, items: Sequence[RunItem]) -> DataRun:
        """Build without validation: from values checked or made by this process."""
        run = new_unchecked(cls)
        set_unchecked(run, "key_group", key_group)
        set_unchecked(run, "source", source)
        set_unchecked(run, "first", first)
        set_unchecked(run, "items", items)
        return run

    @property
    def last(self) -> int:
        """The sequence of the run's last tuple."""
        return self.first + len(self.items) - 1

    def tuples(self) -> Iterator[DataTuple]:
        """The run's tuples with their ids, in order (unchecked: the run was checked)."""
        source, seq = self.source, self.first
        for key, value, ts in self.items:
            yield _new_tuple(DataTuple, (source, seq, key, value, ts))
            seq += 1

    def data(self) -> Iterator[Data]:
        """The ``Data`` messages the run stands for, in order."""
        g = self.key_group
        for item in self.tuples():
            yield Data.trusted(g, item)


def encode_runs(runs: Iterable[DataRun]) -> list:
    """Runs for one task as an ``elastorm`` tuple's message field:
    ``[[key_group, source, first, [[key, value, ts], ...]], ...]`` (items may be
    tuples: every encoder writes them as arrays)."""
    return [[r.key_group, r.source, r.first, r.items] for r in runs]


def is_runs(value: Any) -> bool:
    """Whether a message field holds runs: a list whose first element is a list (a
    flat ``Data`` starts with its key group, an int; other messages are texts)."""
    return type(value) is list and bool(value) and type(value[0]) is list


def decode_runs(value: Any) -> list[DataRun]:
    """Inverse of :func:`encode_runs`, each run and tuple checked; ``ValueError`` naming
    the fault on anything malformed (the whole field is refused: nothing half-read)."""
    if type(value) is not list or not value:
        raise ValueError(f"data runs are a non-empty list, got {value!r:.80}")
    runs = []
    for run in value:
        if type(run) is not list or len(run) != 4:
            raise ValueError(f"a data run is [key_group, source, first, items], got {run!r:.80}")
        g, source, first, items = run
        if type(g) is not int or g < 0:
            raise ValueError(f"key_group must be an int >= 0, got {g!r}")
        if type(source) is not str or not source or type(first) is not int or first < 1:
            raise ValueError(f"a data run needs a source and first >= 1, got {run!r:.80}")
        if type(items) is not list or not items:
            raise ValueError(f"a data run's items are a non-empty list, got {items!r:.80}")
        for item in items:
            if type(item) is not list or len(item) != 3:
                raise ValueError(f"a run's tuple is [key, value, ts], got {item!r:.80}")
            if type(item[0]) is not str:
                raise ValueError(f"key must be str, got {type(item[0]).__name__}")
        runs.append(DataRun.trusted(g, source, first, items))
    return runs
