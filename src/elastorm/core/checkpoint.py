"""The checkpoint holder: a full copy of each key group as of its latest checkpoint.

The holder applies deltas in order into its copy. A delta must name the held
copy as its ``base`` (or be full and newer than it); anything else is refused
with :class:`CheckpointOrderError`, so a duplicate, stale or out-of-order delta
never corrupts the copy. "Convert checkpoint to state" hands the copy's dicts
over to a live :class:`KeyGroupState` without copying them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from elastorm.core.buffers import SequenceCounters
from elastorm.core.errors import CheckpointOrderError, Hint
from elastorm.core.messages import CheckpointDelta, CheckpointId, DurableLoaded
from elastorm.core.state import KeyGroupState, Step, sum_step


@dataclass(kw_only=True)
class HeldCheckpoint:
    """A full copy of one key group.

    ``checkpoint`` is ``None`` when the copy came from converting live state into
    a checkpoint (CPA/CPAL source): it is a valid restore point but not a base
    any delta was computed against.
    """

    key_group: int
    checkpoint: CheckpointId | None
    entries: dict[str, Any] = field(default_factory=dict)
    watermarks: dict[str, int] = field(default_factory=dict)
    out_seq: dict[tuple[str, int], int] = field(default_factory=dict)
    epoch: int = 0


class CheckpointHolder:
    """Held copies on one task, by key group."""

    def __init__(self) -> None:
        self._held: dict[int, HeldCheckpoint] = {}

    def apply(self, delta: CheckpointDelta) -> HeldCheckpoint:
        """Apply ``delta`` to the held copy of its group; return the copy.

        Raises :class:`CheckpointOrderError` (hint ``SEND_FULL_CHECKPOINT``) when a
        delta's base is not the held copy, or a full delta is older than it; the held
        full checkpoint again is a repeat, kept (and acked again by the caller).
        """
        g = delta.key_group
        held = self._held.get(g)
        if delta.full:
            if held is not None and held.checkpoint == delta.checkpoint:
                return held  # the same full checkpoint again (a direct source's repeat)
            stale = held is not None and (
                delta.checkpoint[0] < held.epoch
                or (held.checkpoint is not None and delta.checkpoint <= held.checkpoint)
            )
            if stale:
                raise CheckpointOrderError(
                    f"group {g}: full checkpoint {delta.checkpoint} not newer than held "
                    f"{held.checkpoint} (epoch {held.epoch})"
                )
            copy = full_copy(delta)
            self._held[g] = copy
            return copy
        if held is None or held.checkpoint != delta.base:
            have = None if held is None else held.checkpoint
            kind = "duplicate" if have is not None and delta.checkpoint <= have else "out of order"
            raise CheckpointOrderError(
                f"group {g}: {kind} delta {delta.checkpoint} on base {delta.base}, held {have}",
                hint=Hint.SEND_FULL_CHECKPOINT,
            )
        held.entries.update(delta.entries)
        held.watermarks = dict(delta.watermarks)
        held.out_seq = dict(delta.out_seq)
        held.checkpoint = delta.checkpoint
        return held

    def get(self, key_group: int) -> HeldCheckpoint | None:
        return self._held.get(key_group)

    def __contains__(self, key_group: int) -> bool:
        return key_group in self._held

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._held))

    def put(self, copy: HeldCheckpoint) -> None:
        """Keep ``copy`` unless a newer-epoch copy of its group is held."""
        held = self._held.get(copy.key_group)
        if held is None or held.epoch <= copy.epoch:
            self._held[copy.key_group] = copy

    def take(self, key_group: int) -> HeldCheckpoint:
        """Remove and return the copy of ``key_group`` (``KeyError`` if none)."""
        return self._held.pop(key_group)

    def drop(self, key_group: int) -> None:
        self._held.pop(key_group, None)


def full_copy(full: CheckpointDelta | DurableLoaded) -> HeldCheckpoint:
    """A held copy of a full checkpoint: a full delta, or a key group's durable copy.

    The copy gets its own dicts and the routing epoch the checkpoint was taken in;
    ``ValueError`` if ``full`` names no checkpoint (a durable store with no copy).
    """
    if full.checkpoint is None:
        raise ValueError(f"group {full.key_group}: no checkpoint to copy")
    return HeldCheckpoint(
        key_group=full.key_group,
        checkpoint=full.checkpoint,
        entries=dict(full.entries),
        watermarks=dict(full.watermarks),
        out_seq=dict(full.out_seq),
        epoch=full.checkpoint[0],
    )


def checkpoint_to_state(
    copy: HeldCheckpoint, *, epoch: int, step: Step = sum_step
) -> KeyGroupState:
    """Promote a held copy to live state owned from routing epoch ``epoch``.

    O(1): the copy's dicts become the state's master. The holder must not keep
    using ``copy`` afterwards (take it out first). The next checkpoint is full.
    """
    return KeyGroupState(
        copy.key_group,
        step=step,
        epoch=epoch,
        master=copy.entries,
        applied=copy.watermarks,
        out_seq=SequenceCounters(copy.out_seq),
        needs_full=True,
    )


def state_to_checkpoint(state: KeyGroupState, *, epoch: int) -> HeldCheckpoint:
    """Turn live state into a held copy (the CPA/CPAL source's last step), numbered
    ``(epoch, 0)``: after every copy of the old owner's lineage, before the first
    checkpoint of the new owner's (which owns it from ``epoch``)."""
    return HeldCheckpoint(
        key_group=state.key_group,
        checkpoint=(epoch, 0),
        entries=state.items(),
        watermarks=dict(state.applied),
        out_seq=state.out_seq.snapshot(),
        epoch=epoch,
    )
