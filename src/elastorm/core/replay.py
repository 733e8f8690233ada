"""An emitter behind a replayable source recovers by replay, not from a checkpoint.

An emitter's output (the sequence number of each tuple per key group, and its
output buffer) is a function of the inputs it processed, in order: when the
source replays the same tuples in the same order to the same task (a replayable
spout, a deterministic grouping, Storm's FIFO between two tasks), the emitter
rebuilds it exactly. What it must keep durable is only a **restart point**: the
upstream positions up to which every tuple it sent is already covered by a held
checkpoint downstream (trimmed from its buffer), with its counters there. A
restarted emitter resumes its counters from it and the source replays from just
after its positions; downstream de-duplicates by sequence whatever it had
already applied. This is upstream backup (Madsen & Zhou 2015, section 4)
extended one hop up: the spout's file is the emitter's buffer.

Positions of one upstream grow; an input at or below the last one this emitter
admitted from that upstream is a replay it already processed, and is dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

ALL = "*"
"""The rewind token a restarted source sends first: it replays from the oldest restart
point of every emitter it feeds, so it serves every emitter waiting."""

Counters = Mapping[str, Mapping[int, int]]
"""Per keyed operator, per key group: the last sequence number sent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RestartPoint:
    """Where an emitter can resume: after ``positions`` (upstream -> last position
    processed) with ``counters`` as they were there."""

    positions: Mapping[str, int] = field(default_factory=dict)
    counters: Counters = field(default_factory=dict)
    state: Mapping[str, Any] = field(default_factory=dict)
    """Whatever else of the emitter's is a function of its inputs (JSON-able): its
    counts, say, which it resumes from too."""

    def start(self, upstream: str) -> int:
        """The first position ``upstream`` must replay for this emitter."""
        return self.positions.get(upstream, -1) + 1


def replay_start(points: Iterable[RestartPoint | None], upstream: str) -> int:
    """Where ``upstream`` (a replayable source) starts so that every emitter it feeds
    gets what it needs: the smallest start over their restart points; 0 if any
    emitter has none (it never made one durable). O(emitters).

    >>> replay_start([RestartPoint(positions={"s": 9}), RestartPoint(positions={"s": 4})], "s")
    5
    >>> replay_start([RestartPoint(positions={"s": 9}), None], "s")
    0
    """
    starts = [0 if p is None else p.start(upstream) for p in points]
    return min(starts, default=0)


class Positions:
    """The last position admitted from each upstream: drops what a replay repeats.

    Any operator downstream of a replayable source (directly, or through emitters
    that pass positions on in order) can de-duplicate this way; keyed operators
    need not, they de-duplicate by sequence number. O(1) per input.
    """

    __slots__ = ("_last", "dropped")

    def __init__(self, last: Mapping[str, int] | None = None) -> None:
        self._last: dict[str, int] = dict(last or {})
        self.dropped = 0

    def admit(self, upstream: str, position: int) -> bool:
        """True if ``position`` is past the last one admitted from ``upstream``."""
        if position <= self._last.get(upstream, -1):
            self.dropped += 1
            return False
        self._last[upstream] = position
        return True

    def snapshot(self) -> dict[str, int]:
        return dict(self._last)


class ReplayTracker:
    """The emitter's side: which inputs to admit, and its newest durable restart point.

    ``start`` is the restart point it resumed from (empty on a first start). With
    ``awaiting`` (a restarted emitter's token), nothing is admitted until the
    source's rewind marker naming that token arrives: what the source sent before
    the rewind may skip positions this emitter never processed.

    ``processed`` records a candidate restart point every ``every`` inputs;
    ``trimmed`` feeds the downstream trims; ``durable()`` is the newest candidate all
    of whose tuples are trimmed. O(key groups) per candidate, O(1) per input.
    """

    def __init__(
        self,
        *,
        start: RestartPoint | None = None,
        awaiting: str | None = None,
        every: int = 1_000,
    ) -> None:
        start = start or RestartPoint()
        self._positions = Positions(start.positions)
        self._trimmed: dict[str, dict[int, int]] = {
            op: dict(groups) for op, groups in start.counters.items()
        }
        self._durable = start
        self._candidates: deque[RestartPoint] = deque()
        self._every = max(1, every)
        self._since = 0
        self.awaiting = awaiting
        self._waited = 0

    @property
    def dropped(self) -> int:
        """Inputs dropped as already processed, or sent before the awaited rewind."""
        return self._waited + self._positions.dropped

    def admit(self, upstream: str, position: int) -> bool:
        """True if this input is new to this emitter (and records it as processed)."""
        if self.awaiting is not None:
            self._waited += 1
            return False
        return self._positions.admit(upstream, position)

    def rewound(self, tokens: Iterable[str]) -> bool:
        """The source's rewind marker, naming the restarts it serves; True if it
        ends this emitter's wait."""
        tokens = set(tokens)
        if self.awaiting is not None and (self.awaiting in tokens or ALL in tokens):
            self.awaiting = None
            return True
        return False

    def processed(
        self,
        counters: Callable[[], Counters],
        state: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        """After an admitted input was emitted: every ``every`` inputs, remember a
        candidate (``counters()`` and ``state()`` are called then only)."""
        self._since += 1
        if self._since < self._every:
            return
        self._since = 0
        snapshot = {op: MappingProxyType(dict(groups)) for op, groups in counters().items()}
        self._candidates.append(
            RestartPoint(
                positions=MappingProxyType(self._positions.snapshot()),
                counters=snapshot,
                state=state() if state is not None else {},
            )
        )

    def trimmed(self, operator: str, key_group: int, upto: int) -> None:
        """Downstream holds a checkpoint covering this emitter's tuples of ``key_group``
        up to sequence ``upto``."""
        groups = self._trimmed.setdefault(operator, {})
        if upto > groups.get(key_group, 0):
            groups[key_group] = upto

    def durable(self) -> RestartPoint:
        """The newest candidate whose every tuple is trimmed (older ones are dropped)."""
        while self._candidates and self._covered(self._candidates[0]):
            self._durable = self._candidates.popleft()
        return self._durable

    def _covered(self, point: RestartPoint) -> bool:
        for op, groups in point.counters.items():
            trimmed = self._trimmed.get(op, {})
            for g, seq in groups.items():
                if seq > trimmed.get(g, 0):
                    return False
        return True
