"""Key-group state: master state + active and inactive fragments.

Kumbhare et al. 2015, section V-C (the reducer state model and incremental peer checkpointing).

Updates go to the active fragment. A checkpoint swaps active and inactive
(``begin_checkpoint``), ships the inactive fragment as the delta, and folds it
into the master (``finish_checkpoint``); processing never waits for it. A read
looks in active, then inactive, then master, and stops at the first hit.

The fragments hold the *latest value* of each key updated in the interval (as in
Floe), so a delta is a plain ``{key: value}`` map and a holder applies it by
overwriting. A :data:`Step` is the operator: one tuple's effect on its key's
value, and what the operator makes of it (``Applied.result``). A fold
(``combine(current_or_None, value) -> new``) is one kind of step (:func:`fold`);
the keyed-state API (``elastorm.core.keyed_state``) is another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any

from elastorm.core.buffers import SequenceCounters
from elastorm.core.errors import ElastormError
from elastorm.core.messages import CheckpointDelta, CheckpointId, DataTuple

RESERVED = "\x00"
"""The first character of elastorm's own names: state entries beside the keys' records
(a key group's clock, ``core.timers.TIMERS``) and fields inside a record (a key's TTL
sweep, ``core.keyed_state.CLEANUP``). A user key or state name never starts with it
in practice (keys come from ``str()`` of fields); a state query never shows them."""


def is_reserved(name: str) -> bool:
    """Whether ``name`` is one of elastorm's own entries or fields, never the user's."""
    return name[:1] == RESERVED


Combine = Callable[[Any, Any], Any]
"""``combine(current, value) -> new``; ``current`` is ``None`` for a new key."""

Step = Callable[[str, Any, Any], tuple[Any, Any]]
"""``step(key, current, value) -> (new, result)``: ``new`` becomes the key's value
(``current`` is ``None`` for a new key), ``result`` is the operator's output for
this tuple (``Applied.result``)."""

_MISSING = object()


def fold(combine: Combine) -> Step:
    """The step of a fold: the key's new value is also the tuple's result."""

    def step(key: str, current: Any, value: Any) -> tuple[Any, Any]:
        new = combine(current, value)
        return new, new

    return step


def sum_combine(current: Any, value: Any) -> Any:
    """Running sum: the flights job's "sum of delays per plane per year"."""
    return value if current is None else current + value


sum_step = fold(sum_combine)


class Admission(Enum):
    """What to do with a data tuple, by its sequence against the watermarks."""

    APPLY = "apply"  # seq == last + 1
    DUPLICATE = "duplicate"  # seq <= last: already reflected, drop
    EARLY = "early"  # seq > last + 1: an earlier tuple is still on its way


class StateError(ElastormError):
    """Misuse of a key group's state (e.g. two checkpoints begun at once)."""


class KeyGroupState:
    """One key group's operator state, dedup watermarks and output counters.

    ``applied[source]`` is the last sequence of ``source`` folded in; the state
    always equals the fold of exactly those per-source prefixes. ``checkpoint``
    is the id of the latest checkpoint begun: ``(owner epoch, number)``.
    """

    __slots__ = (
        "key_group",
        "step",
        "master",
        "inactive",
        "active",
        "applied",
        "out_seq",
        "checkpoint",
        "needs_full",
        "_checkpointing",
    )

    def __init__(
        self,
        key_group: int,
        *,
        step: Step = sum_step,
        epoch: int = 0,
        master: dict[str, Any] | None = None,
        applied: dict[str, int] | None = None,
        out_seq: SequenceCounters | None = None,
        needs_full: bool = True,
    ) -> None:
        self.key_group = key_group
        self.step = step
        self.master: dict[str, Any] = {} if master is None else master
        self.inactive: dict[str, Any] = {}
        self.active: dict[str, Any] = {}
        self.applied: dict[str, int] = {} if applied is None else applied
        self.out_seq = SequenceCounters() if out_seq is None else out_seq
        self.checkpoint: CheckpointId = (epoch, 0)
        self.needs_full = needs_full
        self._checkpointing = False

    # -- reads and updates -------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        """Freshest value of ``key``: active, then inactive, then master."""
        for layer in (self.active, self.inactive, self.master):
            value = layer.get(key, _MISSING)
            if value is not _MISSING:
                return value
        return default

    def update(self, key: str, value: Any) -> Any:
        """Apply ``value`` to ``key`` with ``step``; return the step's result."""
        active = self.active
        current = active.get(key, _MISSING)
        if current is _MISSING:  # the same lookup order as get(), unrolled (hot path)
            current = self.inactive.get(key, _MISSING) if self.inactive else _MISSING
            if current is _MISSING:
                current = self.master.get(key)
        active[key], result = self.step(key, current, value)
        return result

    def put(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (in the active fragment)."""
        self.active[key] = value

    def items(self) -> dict[str, Any]:
        """A merged copy of the whole state."""
        merged = dict(self.master)
        merged.update(self.inactive)
        merged.update(self.active)
        return merged

    def __iter__(self) -> Iterator[str]:
        return iter(self.items())

    def __len__(self) -> int:
        """Distinct keys, without merging the layers (the master may hold 100k keys;
        the fragments only what changed since the last checkpoint)."""
        master, inactive = self.master, self.inactive
        n = len(master) + sum(1 for k in inactive if k not in master)
        return n + sum(1 for k in self.active if k not in master and k not in inactive)

    # -- exactly-once -----------------------------------------------------
    def admission(self, item: DataTuple) -> Admission:
        """Classify ``item`` by its sequence against ``applied[source]``."""
        last = self.applied.get(item.source, 0)
        if item.seq <= last:
            return Admission.DUPLICATE
        return Admission.APPLY if item.seq == last + 1 else Admission.EARLY

    def apply(self, item: DataTuple) -> Any:
        """Fold ``item`` in and advance its watermark; it must be ``APPLY``."""
        if self.admission(item) is not Admission.APPLY:
            raise StateError(f"group {self.key_group}: {item.source}#{item.seq} not next")
        self.applied[item.source] = item.seq
        return self.update(item.key, item.value)

    def apply_next(self, item: DataTuple) -> Any:
        """:meth:`apply` for a caller that has just seen ``admission(item)`` be
        ``APPLY`` (the per-tuple path): the same effect, without the second check."""
        self.applied[item.source] = item.seq
        return self.update(item.key, item.value)

    # -- checkpoints -------------------------------------------------------
    def begin_checkpoint(self, *, full: bool = False) -> CheckpointDelta:
        """Swap the fragments and return the delta (the now-inactive fragment).

        Full if asked, or if the holder may lack the base (``needs_full``). The
        delta also carries the watermarks and output counters at this instant.
        """
        if self._checkpointing:
            raise StateError(f"group {self.key_group}: checkpoint already in progress")
        if self.inactive:
            raise StateError(f"group {self.key_group}: inactive fragment not merged")
        self.active, self.inactive = self.inactive, self.active
        epoch, number = self.checkpoint
        full = full or self.needs_full
        if full:
            entries = dict(self.master)
            entries.update(self.inactive)
        else:
            entries = self.inactive
        base = None if full else self.checkpoint
        self.checkpoint = (epoch, number + 1)
        self._checkpointing = True
        return CheckpointDelta(
            key_group=self.key_group,
            checkpoint=self.checkpoint,
            base=base,
            entries=entries,
            watermarks=dict(self.applied),
            out_seq=self.out_seq.snapshot(),
        )

    def finish_checkpoint(self) -> None:
        """Merge the inactive fragment into the master and clear it."""
        if not self._checkpointing:
            raise StateError(f"group {self.key_group}: no checkpoint in progress")
        self.master.update(self.inactive)
        self.inactive = {}  # a new dict: the shipped delta keeps the old one intact
        self.needs_full = False
        self._checkpointing = False
