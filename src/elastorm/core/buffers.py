"""Output buffers and output sequence counters of an upstream emitter.

Every emitter (spouts included) keeps, per downstream key group, the tuples it
sent that no held checkpoint covers yet (upstream backup, Madsen & Zhou 2015, section 4).
A ``Trim`` drops them once the group's holder has a checkpoint reflecting them;
a migration or a recovery replays the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping

from elastorm.core.messages import DataTuple


class SequenceCounters:
    """Per ``(source, downstream key group)`` counters, each yielding 1, 2, 3, ...

    A stateful operator keeps one of these inside each key group's state, so the
    counters travel with the group when it moves.
    """

    __slots__ = ("_last",)

    def __init__(self, last: Mapping[tuple[str, int], int] | None = None) -> None:
        self._last: dict[tuple[str, int], int] = dict(last or {})

    def next(self, source: str, key_group: int) -> int:
        """The next sequence number of ``source`` towards ``key_group``."""
        k = (source, key_group)
        seq = self._last.get(k, 0) + 1
        self._last[k] = seq
        return seq

    def last(self, source: str, key_group: int) -> int:
        return self._last.get((source, key_group), 0)

    def snapshot(self) -> dict[tuple[str, int], int]:
        return dict(self._last)

    def of_source(self, source: str) -> dict[int, int]:
        """``source``'s last sequence number per key group. O(counters)."""
        return {g: seq for (src, g), seq in self._last.items() if src == source}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SequenceCounters) and self._last == other._last

    def __repr__(self) -> str:
        return f"SequenceCounters({self._last!r})"


class OutputBuffer:
    """Sent-but-not-yet-checkpointed tuples, per downstream key group and source.

    Within one ``(key group, source)`` the tuples are kept in sequence order, so a
    trim pops from the left: ``O(trimmed)``.
    """

    __slots__ = ("_groups", "_sizes", "_size")

    def __init__(self) -> None:
        self._groups: dict[int, dict[str, deque[DataTuple]]] = {}
        self._sizes: dict[int, int] = {}  # tuples buffered per key group
        self._size = 0

    def append(self, key_group: int, item: DataTuple) -> int:
        """Buffer ``item``; its sequence must follow the last buffered one of its source.
        Returns how many tuples of ``key_group`` are buffered now. O(1)."""
        lanes = self._groups.get(key_group)
        if lanes is None:
            lanes = self._groups[key_group] = {}
        lane = lanes.get(item.source)
        if lane is None:
            lane = lanes[item.source] = deque()
        elif lane and item.seq <= lane[-1].seq:
            raise ValueError(
                f"group {key_group} source {item.source}: seq {item.seq} after {lane[-1].seq}"
            )
        lane.append(item)
        self._size += 1
        n = self._sizes[key_group] = self._sizes.get(key_group, 0) + 1
        return n

    def trim(self, key_group: int, watermarks: Mapping[str, int]) -> int:
        """Drop tuples with ``seq <= watermarks[source]``; return how many."""
        lanes = self._groups.get(key_group)
        if not lanes:
            return 0
        dropped = 0
        for source, upto in watermarks.items():
            lane = lanes.get(source)
            while lane and lane[0].seq <= upto:
                lane.popleft()
                dropped += 1
        self._size -= dropped
        if dropped:
            self._sizes[key_group] -= dropped
        return dropped

    def replay(
        self, key_group: int, after: Mapping[str, int] | None = None
    ) -> tuple[DataTuple, ...]:
        """Buffered tuples of ``key_group`` with ``seq > after[source]`` (all if
        ``after`` is ``None``), each source's in sequence order, sources sorted."""
        lanes = self._groups.get(key_group, {})
        out: list[DataTuple] = []
        for source in sorted(lanes):
            lane = lanes[source]
            start = (after or {}).get(source, 0)
            if not lane or lane[0].seq > start:
                out.extend(lane)  # the usual case: nothing to skip
            else:
                out.extend(item for item in lane if item.seq > start)
        return tuple(out)

    def span(
        self, key_group: int, source: str, first: int, last: int
    ) -> tuple[DataTuple, ...] | None:
        """``source``'s buffered tuples of ``key_group`` numbered ``first`` to ``last``,
        in order: empty if ``first`` comes after every buffered one (not sent yet);
        ``None`` if the lane is empty or starts after ``first`` (a trim passed it, so
        re-sending cannot fill a gap there). O(tuples of the lane up to ``last``)."""
        lane = self._groups.get(key_group, {}).get(source)
        if lane and lane[-1].seq < first:
            return ()
        if not lane or lane[0].seq > first:
            return None
        out = []
        for item in lane:  # seqs grow along the lane: skip to first, stop after last
            if item.seq > last:
                break
            if item.seq >= first:
                out.append(item)
        return tuple(out)

    def newest(self) -> dict[tuple[int, str], DataTuple]:
        """The newest buffered tuple of every non-empty ``(key group, source)`` lane.
        O(lanes)."""
        return {
            (g, source): lane[-1]
            for g, lanes in self._groups.items()
            for source, lane in lanes.items()
            if lane
        }

    def size(self, key_group: int) -> int:
        """Tuples of ``key_group`` buffered. O(1)."""
        return self._sizes.get(key_group, 0)

    def __len__(self) -> int:
        """Tuples buffered over all key groups. O(1)."""
        return self._size

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._groups))
