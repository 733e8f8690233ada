"""A set of output sequences, kept as ranges: which outputs of one channel were taken.

An output of a keyed bolt has a stable id (``elastorm.storm.keyed_bolt``): a channel
and a sequence 1, 2, 3, ... per channel. Whoever must take each output once (a sink
committing rows, ``elastorm.sinks.commits``; a keyed bolt applying an upstream keyed
bolt's outputs, ``elastorm.core.once``) keeps, per channel, the sequences it took.
Outputs of one channel arrive mostly in order, not always (a migration target may
send its first outputs before the source's last ones arrive), so the set is a
high-water mark plus the few short holes below it.
"""

from __future__ import annotations

from collections.abc import Iterable


class Committed:
    """The committed sequences of one channel: sorted, disjoint, non-adjacent closed
    ranges (usually the one range ``1..mark``). Immutable; O(ranges) per operation.

    >>> c = Committed().add(1).add(2).add(5)
    >>> c.mark, c.holes, 4 in c, 2 in c
    (5, ((3, 4),), False, True)
    >>> Committed.decode(c.mark, c.encode_holes()) == c
    True
    """

    __slots__ = ("ranges",)

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.ranges: tuple[tuple[int, int], ...] = tuple(ranges)

    def __contains__(self, seq: int) -> bool:
        return any(lo <= seq <= hi for lo, hi in self.ranges)

    def add(self, seq: int) -> Committed:
        """This set with ``seq`` (>= 1) in it, ranges merged."""
        if seq < 1:
            raise ValueError(f"output sequence must be >= 1, got {seq}")
        merged: list[tuple[int, int]] = []
        lo, hi = seq, seq
        for a, b in self.ranges:
            if b < lo - 1 or a > hi + 1:
                merged.append((a, b))
            else:
                lo, hi = min(lo, a), max(hi, b)
        merged.append((lo, hi))
        merged.sort()
        return Committed(merged)

    @property
    def mark(self) -> int:
        """The highest committed sequence (0: none)."""
        return self.ranges[-1][1] if self.ranges else 0

    @property
    def holes(self) -> tuple[tuple[int, int], ...]:
        """The ranges of sequences below :attr:`mark` not committed."""
        out, nxt = [], 1
        for lo, hi in self.ranges:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        return tuple(out)

    def encode_holes(self) -> str:
        """:attr:`holes` as text for a table column: ``"3-4,9-9"`` (empty: none)."""
        return ",".join(f"{lo}-{hi}" for lo, hi in self.holes)

    @classmethod
    def decode(cls, mark: int, holes: str) -> Committed:
        """The set whose :attr:`mark` and :meth:`encode_holes` are these; ``ValueError``
        on text that is not sorted ranges below ``mark``."""
        if mark < 0:
            raise ValueError(f"mark must be >= 0, got {mark}")
        ranges, nxt = [], 1
        for part in filter(None, holes.split(",")):
            lo, hi = (int(x) for x in part.split("-"))
            if not nxt <= lo <= hi < mark:
                raise ValueError(f"holes {holes!r} are not sorted ranges below {mark}")
            if lo > nxt:
                ranges.append((nxt, lo - 1))
            nxt = hi + 1
        if mark >= nxt:
            ranges.append((nxt, mark))
        elif ranges or holes:
            raise ValueError(f"holes {holes!r} reach the mark {mark}")
        return cls(ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Committed) and self.ranges == other.ranges

    def __hash__(self) -> int:
        return hash(self.ranges)

    def __repr__(self) -> str:
        return f"Committed({list(self.ranges)!r})"
