"""Window assigners: which event-time windows a timestamp falls in, and session merging.

Pure functions over numbers, in the style of Flink's ``KeyGroupRangeAssignment`` (and
its ``TumblingEventTimeWindows``, ``SlidingEventTimeWindows``,
``EventTimeSessionWindows``). A window is the half-open interval ``[start, end)`` of
event time; ``end`` is when it fires (an event-time timer at ``end``: the key group's
watermark has passed every event of the window). Times are numbers in the user's unit
(seconds, if ``KeyedBolt.event_time`` returns Unix time), int or float.

What keeps a window's contents (in the key's record) and fires it is
``elastorm.core.keyed_state.WindowState``; everything here decides and stores nothing.
"""

from __future__ import annotations

from typing import NamedTuple


class Window(NamedTuple):
    """The half-open event-time interval ``[start, end)``, ``start < end``."""

    start: float
    end: float


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


class TumblingWindow:
    """Fixed, non-overlapping windows of ``size``: ``[k*size + offset, (k+1)*size + offset)``.

    ``assign(t)`` is the one window with ``start <= t < end``; O(1).

    >>> TumblingWindow(10).assign(23)
    [Window(start=20, end=30)]
    >>> TumblingWindow(10, offset=5).assign(4)
    [Window(start=-5, end=5)]
    """

    merging = False

    def __init__(self, size: float, *, offset: float = 0) -> None:
        _positive("size", size)
        self.size, self.offset = size, offset

    def assign(self, t: float) -> list[Window]:
        start = t - (t - self.offset) % self.size
        return [Window(start, start + self.size)]


class SlidingWindow:
    """Windows of ``size`` starting every ``slide``: each ``t`` falls in ``ceil(size/slide)``
    of them (fewer if ``slide`` does not divide ``size``), the earliest first.

    ``assign(t)`` is every ``[s, s + size)`` with ``s = k*slide + offset`` and
    ``s <= t < s + size``; O(size / slide).

    >>> SlidingWindow(10, 5).assign(12)
    [Window(start=5, end=15), Window(start=10, end=20)]
    """

    merging = False

    def __init__(self, size: float, slide: float, *, offset: float = 0) -> None:
        _positive("size", size)
        _positive("slide", slide)
        self.size, self.slide, self.offset = size, slide, offset

    def assign(self, t: float) -> list[Window]:
        last = t - (t - self.offset) % self.slide  # the latest start <= t
        out = []
        start = last
        while start > t - self.size:
            out.append(Window(start, start + self.size))
            start -= self.slide
        return out[::-1]


class SessionWindow:
    """Sessions: an event at ``t`` opens ``[t, t + gap)``; windows that overlap or touch
    merge into one (:func:`merge_windows`), so a session ends ``gap`` after its last
    event. ``assign`` is O(1); merging is O(windows of the key).

    >>> SessionWindow(5).assign(12)
    [Window(start=12, end=17)]
    """

    merging = True

    def __init__(self, gap: float) -> None:
        _positive("gap", gap)
        self.gap = gap

    def assign(self, t: float) -> list[Window]:
        return [Window(t, t + self.gap)]


Assigner = TumblingWindow | SlidingWindow | SessionWindow


def merge_windows(existing: list[Window], new: Window) -> tuple[Window, list[Window]]:
    """Session merging: the window ``new`` becomes once joined with every window of
    ``existing`` it overlaps or touches (``a.start <= b.end and b.start <= a.end``, as
    Flink's ``TimeWindow.intersects``), and which of ``existing`` it absorbed. Among
    windows already merged (pairwise apart), one new window can bridge several. O(n).

    >>> merge_windows([Window(0, 5), Window(8, 12), Window(20, 25)], Window(4, 9))
    (Window(start=0, end=12), [Window(start=0, end=5), Window(start=8, end=12)])
    """
    start, end = new
    absorbed = []
    for w in sorted(existing):
        if w.start <= end and start <= w.end:
            absorbed.append(w)
            start, end = min(start, w.start), max(end, w.end)
    return Window(start, end), absorbed
