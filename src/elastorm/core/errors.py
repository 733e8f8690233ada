"""Named errors of the sans-IO core.

Modelled on h11's ``LocalProtocolError``: an error says what broke and carries a
``hint`` telling the caller what to do next (wsproto's ``event_hint``).
"""

from __future__ import annotations

from enum import Enum


class Hint(Enum):
    """What the caller should do after a protocol error."""

    NONE = "none"
    FALL_BACK_TO_DIRECT = "fall back to direct migration"
    RESTORE_FROM_CHECKPOINT = "restore the key group from its holder"
    SEND_FULL_CHECKPOINT = "send a full checkpoint"
    UNRECOVERABLE = "no copy of the key group survives"


class ElastormError(Exception):
    """Base class of the core's errors."""

    def __init__(self, message: str, *, hint: Hint = Hint.NONE) -> None:
        super().__init__(message)
        self.hint = hint


class MigrationProtocolError(ElastormError):
    """A message arrived that the key group's machine does not allow in its phase.

    The machine that raised it stays ``FAILED``; every later message raises again.
    """


class CheckpointOrderError(ElastormError):
    """A checkpoint delta does not follow the held copy (duplicate, stale or gap)."""


class StateTransitionError(ElastormError):
    """An input that a state machine's table does not allow in its current state
    (``elastorm.core.sessions``): the caller fed it wrong; the state is unchanged."""
