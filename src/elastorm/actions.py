"""Actions: what the sans-IO machines ask their adapter to do.

Frozen keyword-only dataclasses. The adapter performs them in list order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from elastorm.errors import Hint
from elastorm.messages import CheckpointId, DataTuple, Message, Protocol


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
    """

    key_group: int
    item: DataTuple
    result: Any
    emit_output: bool


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
    """This task finished its part (``role``) of migration ``epoch`` of ``key_group``."""

    key_group: int
    epoch: int
    protocol: Protocol
    role: Role


@dataclass(frozen=True, kw_only=True, slots=True)
class MigrationAborted:
    """Migration ``epoch`` cannot finish here; ``hint`` says what the controller should do."""

    key_group: int
    epoch: int
    reason: str
    hint: Hint


@dataclass(frozen=True, kw_only=True, slots=True)
class HolderLost:
    """``key_group``'s holder died: the controller should pick a new one."""

    key_group: int
    holder: int


Action = (
    Send | Applied | Rejected | CheckpointStored | MigrationDone | MigrationAborted | HolderLost
)
