"""Actions: what the sans-IO machines ask their adapter to do.

Frozen keyword-only dataclasses. The adapter performs them in list order.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from enum import Enum
from typing import Any

from elastorm.core.errors import Hint
from elastorm.core.messages import CheckpointId, DataTuple, Message, Protocol


class Role(Enum):
    SOURCE = "source"
    TARGET = "target"


@dataclass(frozen=True, kw_only=True, slots=True)
class Send:
    """Put ``message`` on the FIFO channel to task ``to_task`` (Storm: emit_direct)."""

    to_task: int
    message: Message

    def __post_init__(self) -> None:
        if not isinstance(self.to_task, int) or self.to_task < 0:
            raise ValueError(f"to_task must be a task id >= 0, got {self.to_task!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Applied:
    """``item`` was folded into ``key_group``'s state; ``result`` is the key's new value.

    ``emit_output`` is False when another task already produced this tuple's
    outputs (replays during CPA/CPAL, CPAL shadow processing): the adapter then
    still advances the output counters but emits nothing.

    ``tentative`` is True while some state this output depends on is still being
    restored (the group's own, replaying after its owner died, or an upstream
    operator's): the output may lack tuples a replay will bring, so the adapter
    marks it tentative and sends the final value once recovery ends (Su & Zhou 2016).
    """

    key_group: int
    item: DataTuple
    result: Any
    emit_output: bool
    tentative: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejected:
    """A message could not be used here (e.g. data for a group this task does not
    own). Count it and put it on the error stream; the tuple stays in its
    upstream buffer, so nothing is lost."""

    sender: int
    message: Message
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointStored:
    """This task now holds checkpoint ``checkpoint`` of ``key_group`` (for the controller)."""

    key_group: int
    checkpoint: CheckpointId


@dataclass(frozen=True, kw_only=True, slots=True)
class MigrationDone:
    """This task finished its part (``role``) of migration ``epoch`` of ``key_group``.

    ``pause``: seconds the group's new tuples waited for the protocol at the target
    (``elastorm.core.migration.pause``), filled in by the adapter, which has the clock;
    None from a source or when not measured."""

    key_group: int
    epoch: int
    protocol: Protocol
    role: Role
    pause: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MigrationAborted:
    """Migration ``epoch`` cannot finish here; ``hint`` says what the controller should do."""

    key_group: int
    epoch: int
    reason: str
    hint: Hint


@dataclass(frozen=True, kw_only=True, slots=True)
class HolderLost:
    """``key_group``'s holder died (a ``PeerDown``): the owner forgot it; the controller
    names it again once it is back (``MigrationController.on_holder_lost``)."""

    key_group: int
    holder: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskStarted:
    """Task ``task`` started; ``restarted`` if it had run before and lost everything.

    A restarted task owns nothing and ignores commands up to ``stale_through``;
    the controller restores what it owned (``MigrationController.crash``).
    """

    task: int
    restarted: bool
    stale_through: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TuplesStalled:
    """``parked`` tuples of ``source`` in ``key_group`` have waited ``seconds`` for
    sequence ``awaited``, which has not arrived: a tuple was lost on the way (a routing
    bug, a dropped message). Reported once per gap; nothing stalls silently."""

    key_group: int
    source: str
    awaited: int
    parked: int
    seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class EmitterRestarted:
    """Upstream emitter ``task`` began a new life knowing routing epoch ``epoch`` (its
    ``UpstreamRestarted``): the commands of restores up to that epoch died with its
    earlier life and its new one ignores them, so a restore in flight that waits for
    its toState, or that no upstream started, is ordered again
    (``MigrationController.redrive``)."""

    task: int
    epoch: int


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadDurable:
    """Read ``key_group``'s newest durable copy from the store (off the task's thread)
    and hand it back as a ``DurableLoaded`` of epoch ``epoch``: this task is the
    target of the group's DURABLE restore (its owner and every holder are gone)."""

    key_group: int
    epoch: int


Action = (
    Send
    | Applied
    | Rejected
    | CheckpointStored
    | MigrationDone
    | MigrationAborted
    | HolderLost
    | TuplesStalled
    | EmitterRestarted
    | LoadDurable
)


Report = (
    CheckpointStored
    | MigrationDone
    | MigrationAborted
    | HolderLost
    | TaskStarted
    | TuplesStalled
    | EmitterRestarted
)
"""What a task reports to the controller."""

_REPORT_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        CheckpointStored,
        MigrationDone,
        MigrationAborted,
        HolderLost,
        TaskStarted,
        TuplesStalled,
        EmitterRestarted,
    )
}


def encode_report(report: Report) -> dict[str, Any]:
    """A JSON-able dict for a report: ``{"type": name, field: value, ...}``."""
    out: dict[str, Any] = {"type": type(report).__name__}
    for name in report.__slots__:  # type: ignore[union-attr]
        value = getattr(report, name)
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def decode_report(data: dict[str, Any]) -> Report:
    """Inverse of :func:`encode_report`; raises ``ValueError`` on anything else."""
    cls = _REPORT_TYPES.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown report type {data.get('type')!r}")
    optional = {f.name for f in fields(cls) if f.default is not MISSING}
    kwargs = {name: data[name] for name in cls.__slots__ if name in data or name not in optional}
    if "checkpoint" in kwargs:
        epoch, number = kwargs["checkpoint"]
        kwargs["checkpoint"] = (int(epoch), int(number))
    for name, enum in (("protocol", Protocol), ("role", Role), ("hint", Hint)):
        if name in kwargs:
            kwargs[name] = enum(kwargs[name])
    return cls(**kwargs)
