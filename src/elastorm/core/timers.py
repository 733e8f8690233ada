"""A key group's event-time clock: its watermark and its timer index, kept in its state.

Both live in one reserved entry of the key group's state (:data:`TIMERS`), beside the
keys' records, so they are checkpointed, migrated, restored, replicated and written to
the durable tier exactly like a key's record, by the machinery that already moves
records. Nothing here is kept outside the state, so a restored or migrated group fires
what the old owner would have fired.

**Watermark** (Flink's bounded-out-of-orderness strategy, per key group): the largest
event time applied in the group minus the allowed lateness
(``elastorm.allowed_lateness_secs``); it never goes back. An event with a time below
the watermark is *late*: the windows it belonged to may have fired.

**Timers**: ``(time, key, tag)``, one per distinct triple (registering twice is one
timer, as in Flink). When an applied tuple advances the watermark, every timer with
``time <= watermark`` fires within that tuple's step, in ``(time, key, tag)`` order, and
its outputs are that tuple's outputs. A key group applies each source's tuples in
that source's order wherever it runs (``KeyGroupState.admission``), so a replay fires
the same timers at the same tuple, and their outputs get the same ids
(``core.outputs.next_output``). (As with every output that depends on a key's whole
state, that holds per upstream task: with several upstream tasks interleaving into
one group, see ``elastorm.core.outputs``.) The tag says who gets the timer: ``""``
the user's ``on_timer``, others elastorm's own (state TTL sweeps, windows).

Cost: the index is a sorted list copied on its first change in a step (a state entry
is never changed in place: checkpoint fragments share it), so O(timers of the group)
per step that registers, deletes or fires a timer, plus O(log timers) per operation.
"""

from __future__ import annotations

import bisect
from typing import Any

from elastorm.core.state import KeyGroupState

TIMERS = "\x00elastorm.timers"
"""The reserved state entry of a key group's clock: ``{"watermark": W or None,
"timers": [[time, key, tag], ...] sorted}`` (lists: it travels as JSON). A user key
cannot be it: keys come from ``str()`` of a field, and no field starts with NUL in
practice; the name says whose it is."""

Timer = tuple[Any, str, str]
"""``(time, key, tag)``."""


class GroupTimers:
    """A key group's watermark and timers while one tuple is applied.

    Reads the reserved entry once; changes go to a copy, written back by
    :meth:`commit` (not at all if the step fails: the tuple is dropped with its
    timers, as its record's changes are).
    """

    __slots__ = ("_state", "watermark", "_timers", "_changed")

    def __init__(self, state: KeyGroupState) -> None:
        entry = state.get(TIMERS) or {}
        self._state = state
        self.watermark: Any = entry.get("watermark")
        self._timers: list[list[Any]] = entry.get("timers") or []
        self._changed = False

    def _writable(self) -> list[list[Any]]:
        if not self._changed:
            self._timers = list(self._timers)
            self._changed = True
        return self._timers

    def register(self, time: Any, key: str, tag: str = "") -> None:
        """Add timer ``(time, key, tag)`` (nothing if it is there already)."""
        entry = [time, key, tag]
        i = bisect.bisect_left(self._timers, entry)
        if i < len(self._timers) and self._timers[i] == entry:
            return
        self._writable().insert(i, entry)

    def delete(self, time: Any, key: str, tag: str = "") -> None:
        """Remove timer ``(time, key, tag)`` if there is one."""
        entry = [time, key, tag]
        i = bisect.bisect_left(self._timers, entry)
        if i < len(self._timers) and self._timers[i] == entry:
            del self._writable()[i]

    def pending(self) -> list[Timer]:
        """Every timer, in firing order."""
        return [(t, k, g) for t, k, g in self._timers]

    def advance(self, event_time: Any, lateness: float) -> bool:
        """Take an applied event's time into the watermark; whether it moved."""
        mark = event_time - lateness
        if self.watermark is not None and mark <= self.watermark:
            return False
        self.watermark = mark
        self._changed = True
        return True

    def pop_due(self) -> Timer | None:
        """The first timer due (``time <= watermark``), removed; ``None`` if none is."""
        if not self._timers or self.watermark is None or self._timers[0][0] > self.watermark:
            return None
        t, k, g = self._writable().pop(0)
        return t, k, g

    def commit(self) -> None:
        """Write the clock back to the group's state (into its active fragment, so the
        next incremental checkpoint carries it), if it changed."""
        if self._changed:
            self._state.put(TIMERS, {"watermark": self.watermark, "timers": self._timers})
            self._changed = False


def watermark_of(state: KeyGroupState) -> Any:
    """The group's watermark (``None`` before its first event time); O(1)."""
    entry = state.get(TIMERS)
    return None if entry is None else entry.get("watermark")
