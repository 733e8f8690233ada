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

**Processing-time timers** (PyFlink's ``register_processing_time_timer``): ``(time, key,
tag)`` at a wall-clock time, in a second sorted list of the same entry. They fire on
the owner's first tick at or after their time (:func:`processing_due` says whether a
group has one due; :meth:`GroupTimers.pop_due_processing` takes them in order), never
inside a tuple's step: so, as in Flink, they are not replay-deterministic. A replay
does not repeat a tick, so a group restored or moved from a checkpoint taken before a
firing fires that timer again at its new owner (at least once); a timer that came due
while its group was moving fires once, at the new owner (only an ``ACTIVE`` owner
fires). See ``docs/time.md``.

**Idle groups** (Flink's ``withIdleness``): a group whose watermark has not moved for
``elastorm.idle_timeout_secs`` of wall-clock time stops holding event time back: a
tick moves its watermark up to the task's event-time frontier
(:func:`idle_advance`), firing what that passes, as a tuple would; like a
processing-time timer's firing, that is not repeated by a replay.

Cost: the index is a sorted list copied on its first change in a step (a state entry
is never changed in place: checkpoint fragments share it), so O(timers of the group)
per step that registers, deletes or fires a timer, plus O(log timers) per operation.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

from elastorm.core.state import KeyGroupState

TIMERS = "\x00elastorm.timers"
"""The reserved state entry of a key group's clock: ``{"watermark": W or None,
"timers": [[time, key, tag], ...] sorted}``, plus ``"processing": [[time, key, tag],
...]`` sorted once the group has had a processing-time timer (lists: it travels as
JSON). A user key
cannot be it: keys come from ``str()`` of a field, and no field starts with NUL in
practice; the name says whose it is."""

Timer = tuple[Any, str, str]
"""``(time, key, tag)``."""


def _insert(timers: list[list[Any]], entry: list[Any]) -> int | None:
    """Where ``entry`` goes in the sorted ``timers``; ``None`` if it is there. O(log n)."""
    i = bisect.bisect_left(timers, entry)
    return None if i < len(timers) and timers[i] == entry else i


def _find(timers: list[list[Any]], entry: list[Any]) -> int | None:
    """``entry``'s index in the sorted ``timers``; ``None`` if it is not there. O(log n)."""
    i = bisect.bisect_left(timers, entry)
    return i if i < len(timers) and timers[i] == entry else None


class GroupTimers:
    """A key group's watermark and timers while one tuple (or one tick) is applied.

    Reads the reserved entry once; changes go to copies, written back by
    :meth:`commit` (not at all if the step fails: the tuple is dropped with its
    timers, as its record's changes are).
    """

    __slots__ = ("_state", "watermark", "_timers", "_processing", "_changed", "_own", "_own_p")

    def __init__(self, state: KeyGroupState) -> None:
        entry = state.get(TIMERS) or {}
        self._state = state
        self.watermark: Any = entry.get("watermark")
        self._timers: list[list[Any]] = entry.get("timers") or []
        self._processing: list[list[Any]] = entry.get("processing") or []
        self._changed = False
        self._own = self._own_p = False  # whether each list is this step's copy yet

    def _writable(self, processing: bool = False) -> list[list[Any]]:
        self._changed = True
        if processing:
            if not self._own_p:
                self._processing = list(self._processing)
                self._own_p = True
            return self._processing
        if not self._own:
            self._timers = list(self._timers)
            self._own = True
        return self._timers

    def register(self, time: Any, key: str, tag: str = "") -> None:
        """Add event-time timer ``(time, key, tag)`` (nothing if it is there already)."""
        entry = [time, key, tag]
        i = _insert(self._timers, entry)
        if i is not None:
            self._writable().insert(i, entry)

    def delete(self, time: Any, key: str, tag: str = "") -> None:
        """Remove event-time timer ``(time, key, tag)`` if there is one."""
        i = _find(self._timers, [time, key, tag])
        if i is not None:
            del self._writable()[i]

    def register_processing(self, time: Any, key: str, tag: str = "") -> None:
        """Add processing-time timer ``(time, key, tag)`` (nothing if it is there already)."""
        entry = [time, key, tag]
        i = _insert(self._processing, entry)
        if i is not None:
            self._writable(processing=True).insert(i, entry)

    def delete_processing(self, time: Any, key: str, tag: str = "") -> None:
        """Remove processing-time timer ``(time, key, tag)`` if there is one."""
        i = _find(self._processing, [time, key, tag])
        if i is not None:
            del self._writable(processing=True)[i]

    def pending(self) -> list[Timer]:
        """Every event-time timer, in firing order."""
        return [(t, k, g) for t, k, g in self._timers]

    def advance(self, event_time: Any, lateness: float) -> bool:
        """Take an applied event's time into the watermark; whether it moved."""
        return self.advance_to(event_time - lateness)

    def advance_to(self, mark: Any) -> bool:
        """Move the watermark up to ``mark``; whether it moved (it never goes back)."""
        if self.watermark is not None and mark <= self.watermark:
            return False
        self.watermark = mark
        self._changed = True
        return True

    def pop_due(self) -> Timer | None:
        """The first event-time timer due (``time <= watermark``), removed; ``None`` if
        none is."""
        if not self._timers or self.watermark is None or self._timers[0][0] > self.watermark:
            return None
        t, k, g = self._writable().pop(0)
        return t, k, g

    def pop_due_processing(self, now: Any) -> Timer | None:
        """The first processing-time timer due at wall-clock ``now`` (``time <= now``),
        removed; ``None`` if none is."""
        if not self._processing or self._processing[0][0] > now:
            return None
        t, k, g = self._writable(processing=True).pop(0)
        return t, k, g

    def commit(self) -> None:
        """Write the clock back to the group's state (into its active fragment, so the
        next incremental checkpoint carries it), if it changed."""
        if self._changed:
            entry: dict[str, Any] = {"watermark": self.watermark, "timers": self._timers}
            if self._processing or self._own_p:
                entry["processing"] = self._processing
            self._state.put(TIMERS, entry)
            self._changed = self._own = self._own_p = False


def processing_due(state: KeyGroupState, now: Any) -> bool:
    """Whether the group has a processing-time timer due at wall-clock ``now``; O(1)
    (a tick asks it of every group it owns)."""
    entry = state.get(TIMERS)
    if entry is None:
        return False
    processing = entry.get("processing")
    return bool(processing) and processing[0][0] <= now


IdleWatch = dict[int, tuple[Any, float]]
"""Per key group of a task: ``(watermark, wall-clock time it was first seen at it)``."""


def idle_advance(
    seen: IdleWatch, marks: Mapping[int, Any], now: float, timeout: float
) -> tuple[IdleWatch, dict[int, Any]]:
    """Flink's ``withIdleness`` for the key groups of one task, at a tick.

    ``marks``: the watermark of each group the task owns now; ``seen``: what the last
    tick returned. A group whose watermark has not moved for ``timeout`` seconds of
    wall clock is idle and goes up to the frontier: the largest watermark among the
    task's groups (with sources in time order, how far the task's input has come).
    It stays idle, following the frontier, until a tuple of its own moves its
    watermark. Returns the new ``seen`` and ``{group: new watermark}`` for the idle
    groups behind the frontier (none if ``timeout <= 0``). Groups with no watermark
    (no event time yet) are left alone. O(groups).

    >>> seen, up = idle_advance({}, {1: 10, 2: 3, 3: None}, 0.0, 5.0)
    >>> up
    {}
    >>> seen, up = idle_advance(seen, {1: 12, 2: 3, 3: None}, 5.0, 5.0)
    >>> up
    {2: 12}
    """
    out: IdleWatch = {}
    for g, mark in marks.items():
        prev = seen.get(g)
        out[g] = (mark, prev[1] if prev is not None and prev[0] == mark else now)
    known = [m for m in marks.values() if m is not None]
    if timeout <= 0 or not known:
        return out, {}
    frontier = max(known)
    up = {
        g: frontier
        for g, (mark, since) in sorted(out.items())
        if mark is not None and mark < frontier and now - since >= timeout
    }
    for g in up:
        out[g] = (frontier, out[g][1])
    return out, up


def watermark_of(state: KeyGroupState) -> Any:
    """The group's watermark (``None`` before its first event time); O(1)."""
    entry = state.get(TIMERS)
    return None if entry is None else entry.get("watermark")
