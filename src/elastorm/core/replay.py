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

A spout can also number what it sends each emitter task (a **link**: one spout
task, one emitter task), 1, 2, 3, ...: :class:`Links` picks the task of each
position itself, as deterministically as a fields grouping. Storm keeps a link
FIFO, so a number that skips is a certain loss on the wire between two live
workers: the emitter then admits nothing more from that spout task and asks it to
rewind, as a restarted emitter does (``ReplayTracker``).
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


@dataclass(frozen=True, kw_only=True, slots=True)
class RewindAsk:
    """An emitter asks ``upstream`` (``component:task``) to replay from just after
    ``positions`` (upstream -> last position admitted) and to name ``token`` in the
    marker that precedes the replay. ``missing``: link numbers found missing (0 when
    it asks again because no marker came)."""

    token: str
    upstream: str
    positions: Mapping[str, int]
    missing: int = 0


class Links:
    """The spout's side of the link check: which emitter task gets ``position``, and
    its number on that link.

    The task is ``tasks[position mod n]`` (sorted task ids): as deterministic as a
    fields grouping, so a replay reaches the same task. Each link is numbered 1, 2,
    3, ... in emit order and never goes back, a replay included: the emitter checks
    that the numbers it receives do not skip. O(1) per tuple.

    >>> links = Links([7, 4])
    >>> [links.next(p) for p in (0, 1, 2, 0)]
    [(1, 4), (1, 7), (2, 4), (3, 4)]
    """

    __slots__ = ("tasks", "_sent")

    def sent(self) -> list[list[int]]:
        """``[[task, last link number sent], ...]``: what every rewind marker carries,
        so an emitter sees a loss with nothing behind it (the end of the input)."""
        return [[t, n] for t, n in zip(self.tasks, self._sent, strict=True)]

    def __init__(self, tasks: Iterable[int]) -> None:
        self.tasks = tuple(sorted(tasks))
        if not self.tasks:
            raise ValueError("Links needs at least one emitter task")
        self._sent = [0] * len(self.tasks)

    def next(self, position: int) -> tuple[int, int]:
        """``(link number, task)`` of the next tuple, at ``position`` (>= 0)."""
        i = position % len(self.tasks)
        self._sent[i] += 1
        return self._sent[i], self.tasks[i]


def emitter_source(
    component: str, task: int, incarnation: int, *, replayed: bool, restored: int = 0
) -> str:
    """The source name an emitter numbers its tuples under (receivers de-duplicate by
    it, ``KeyGroupState.admission``).

    An emitter that recovers by replay keeps ``component:task`` across restarts: its
    output is a function of its inputs, so the replay numbers every tuple as before
    and receivers drop what they already applied. One that cannot replay restarts
    empty: under its old name its new tuples (1, 2, ...) would sit at or below the old
    watermark and be dropped as duplicates, silently. So each of its incarnations after
    the first numbers under a name of its own, ``component:task@n``, from 1.

    >>> emitter_source("words_router", 5, 1, replayed=False)
    'words_router:5'
    >>> emitter_source("words_router", 5, 3, replayed=False)
    'words_router:5@3'
    >>> emitter_source("words_router", 5, 3, replayed=True)
    'words_router:5'

    A submission restored from a savepoint (``restored``: its first routing epoch, > 0)
    is a new start too: an emitter that cannot replay numbers under
    ``component:task@r<epoch>``, since the restored watermarks still hold its old name.

    >>> emitter_source("words_router", 5, 1, replayed=False, restored=4)
    'words_router:5@r4'
    """
    if incarnation < 1:
        raise ValueError(f"incarnation must be >= 1, got {incarnation}")
    name = f"{component}:{task}"
    if replayed:
        return name
    if restored:
        return f"{name}@r{restored}" if incarnation == 1 else f"{name}@r{restored}.{incarnation}"
    return name if incarnation == 1 else f"{name}@{incarnation}"


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


class _LinkWait:
    """A link found lossy: the tokens asked for (any marker naming one ends the wait)
    and when the latest was asked (None until the adapter takes it)."""

    __slots__ = ("tokens", "asked_at")

    def __init__(self) -> None:
        self.tokens: set[str] = set()
        self.asked_at: float | None = None


class ReplayTracker:
    """The emitter's side: which inputs to admit, and its newest durable restart point.

    ``start`` is the restart point it resumed from (empty on a first start). With
    ``awaiting`` (a restarted emitter's token), nothing is admitted until the
    source's rewind marker naming that token arrives: what the source sent before
    the rewind may skip positions this emitter never processed.

    **Links.** An input that carries its link number (``admit(..., link=n)``) is
    checked first: every number received is recorded, admitted or not, so a skip is
    seen whenever it happens, a wait included. On a skip (a certain loss: Storm keeps
    a link FIFO) nothing more from that upstream is admitted, and a :class:`RewindAsk`
    from the last position admitted + 1 with a fresh token (``<token>.<n>``) waits in
    :meth:`rewind_asks` until the marker naming it arrives (:meth:`rewound`). A
    later row admitted meanwhile would make :class:`Positions` drop the lost one as a
    repeat when the replay brings it. A skip during a wait asks nothing more: the
    replay starts before it. If no marker comes within ``retry_after`` seconds (it
    was lost too), the same rewind is asked again with a fresh token; a marker of
    any token asked ends the wait (all start at the same position, since nothing
    was admitted). A restarted spout (its marker names :data:`ALL`) numbers its
    links from 1 again; a number below the expected one is accepted for the same
    reason. A loss with no tuple behind it (the end of the input) shows in the
    spout's markers: each carries the last number it sent on the link
    (``rewound(..., sent=n)``), and the spout sends one every so often.
    A restarted emitter (``awaiting``) cannot know the number to expect and takes
    the first one it gets; a first start expects 1. Its own wait is asked again the
    same way: if no marker naming its token comes within ``retry_after`` seconds of its
    first :meth:`rewind_asks` (the restart's request was written at its start), each
    spout in ``sources`` is asked again to rewind to its restart point, with a fresh
    token (``<token>.r<n>``); a marker of any of them ends the wait.

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
        token: str = "emitter",
        retry_after: float = 30.0,
        sources: Iterable[str] = (),
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
        self._awaiting_tokens = {awaiting} if awaiting is not None else set()
        self._awaiting_asked_at: float | None = None  # set at the first rewind_asks
        self._sources = tuple(sources)
        self._waited = 0
        self._token = token
        self._retry_after = retry_after
        self._next_link: dict[str, int] = {}  # upstream -> link number expected next
        self._first_link = 1 if awaiting is None else None  # expected of a new upstream
        self._waits: dict[str, _LinkWait] = {}  # lossy links waiting for their marker
        self._asks: list[RewindAsk] = []  # not yet taken by the adapter
        self.link_lost = 0  # link numbers found missing
        self.link_asks = 0  # rewinds asked for lossy links (retries included)
        self.restart_asks = 0  # a restart's rewind asked again (no marker came)

    @property
    def dropped(self) -> int:
        """Inputs dropped as already processed, or sent before the awaited rewind."""
        return self._waited + self._positions.dropped

    @property
    def asking(self) -> bool:
        """True when :meth:`rewind_asks` has a request to hand out."""
        return bool(self._asks)

    def link_waits(self) -> list[str]:
        """The upstreams whose link lost tuples and whose marker has not come yet."""
        return sorted(self._waits)

    def admit(self, upstream: str, position: int, link: int | None = None) -> bool:
        """True if this input is new to this emitter (and records it as processed).
        ``link``: its number on its link, if the upstream numbers them (see above)."""
        if link is not None:
            expected = self._next_link.get(upstream, self._first_link)
            self._next_link[upstream] = link + 1
            if expected is not None and link > expected:
                self._lost(upstream, link - expected)
        if self.awaiting is not None or (self._waits and upstream in self._waits):
            self._waited += 1
            return False
        return self._positions.admit(upstream, position)

    def _lost(self, upstream: str, missing: int) -> None:
        self.link_lost += missing
        if self.awaiting is None and upstream not in self._waits:
            self._ask(upstream, missing)

    def _ask(self, upstream: str, missing: int) -> None:
        self.link_asks += 1
        token = f"{self._token}.{self.link_asks}"
        wait = self._waits.setdefault(upstream, _LinkWait())
        wait.tokens.add(token)
        wait.asked_at = None
        positions = MappingProxyType(self._positions.snapshot())
        self._asks.append(
            RewindAsk(token=token, upstream=upstream, positions=positions, missing=missing)
        )

    def rewind_asks(self, now: float) -> list[RewindAsk]:
        """The rewinds to ask for now (each once; the adapter writes them): new ones,
        and again, with a fresh token, for every wait older than ``retry_after``.
        Call it after an input when :attr:`asking`, and on every tick."""
        for upstream, wait in self._waits.items():
            if wait.asked_at is not None and now - wait.asked_at >= self._retry_after:
                self._ask(upstream, 0)
        if self.awaiting is not None:
            if self._awaiting_asked_at is None:
                self._awaiting_asked_at = now
            elif now - self._awaiting_asked_at >= self._retry_after:
                self._ask_restart_again(now)
        asks, self._asks = self._asks, []
        for ask in asks:
            if ask.upstream in self._waits:
                self._waits[ask.upstream].asked_at = now
        return asks

    def _ask_restart_again(self, now: float) -> None:
        """No marker for this restart yet (its request or its marker was lost): ask
        every source again, from the same restart point, with a fresh token."""
        self.restart_asks += 1
        token = f"{self._token}.r{self.restart_asks}"
        self._awaiting_tokens.add(token)
        self._awaiting_asked_at = now
        positions = MappingProxyType(self._positions.snapshot())
        for source in self._sources:
            self._asks.append(RewindAsk(token=token, upstream=source, positions=positions))

    def rewound(
        self, tokens: Iterable[str], upstream: str | None = None, sent: int | None = None
    ) -> bool:
        """The source's rewind marker, naming the restarts it serves (none: a probe),
        from ``upstream`` (the spout task that sent it), which had sent ``sent`` tuples
        on this link before it; True if it ends a wait of this emitter."""
        tokens = set(tokens)
        ended = False
        if upstream is not None:
            if ALL in tokens:  # a restarted spout: its links are numbered from 1 again
                self._next_link[upstream] = 1
            if sent is not None:  # before the wait ends: the replay covers what it finds
                expected = self._next_link.get(upstream, self._first_link)
                self._next_link[upstream] = sent + 1
                if expected is not None and sent >= expected:
                    self._lost(upstream, sent - expected + 1)
            wait = self._waits.get(upstream)
            if wait is not None and (ALL in tokens or not wait.tokens.isdisjoint(tokens)):
                del self._waits[upstream]
                ended = True
        if self.awaiting is not None and (tokens & self._awaiting_tokens or ALL in tokens):
            self.awaiting = None
            ended = True
        return ended

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
