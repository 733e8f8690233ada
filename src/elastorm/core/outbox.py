"""A keyed task's outputs, kept until each consumer says they are safe there.

Acks are off in an elastorm topology, so an output in flight to a task whose worker
dies (Storm's Netty client drops what it held for the dead worker; the task's batch,
queue and buffers die with it) is gone, and nothing upstream sends it again: chaos
``wordcount/sink`` lost 581 of 4,000 rows, ``chained/sink`` 2,056, ``chained/router``
(the router between two keyed bolts) 1,036 (``docs/raw/chaos_243b695_user_analysis.txt``).
So a keyed task keeps each output it sends on a stream with output ids, under its id,
once per consumer that confirms: an ``elastorm.sinks.Sink`` once the transaction that
commits it is done, the router before another keyed bolt once that bolt's checkpoint
covers it (the router's trim). Each tells the sending task on its
``storm.elastic.COMMITTED_STREAM``; the task forgets what every consumer confirmed, and
sends again what waited longer than ``elastorm.unconfirmed_resend_secs``, then
after twice, four times, at most eight times as long while it stays unconfirmed (a
consumer behind on its input is not sent its input twice; :data:`MAX_BACKOFF`). Consumers
drop repeats by id (the sink's marks; the keyed bolt's ``core.once``): at least once
on the wire, exactly once in effect, as a Kafka producer keeps a record until the
broker acks it.

Sans-IO: the caller sends, delivers confirmations and asks what is due on its
ticks. Outputs with sequence 0 (``rectified``, processing-time timers' outputs) carry
no id the sink de-duplicates, so they are not kept (at most once across a sink
crash, as documented in ``docs/sinks.md``).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elastorm.core.state import RESERVED

OutputKey = tuple[str, int, str, int]
"""An output's id as a consumer confirms it: ``(stream, key group, source, seq)``."""

PENDING = RESERVED + "unconfirmed"
"""The reserved state entry of a key group's outputs not yet confirmed, as of its last
copy: ``{id: [stream, values]}``. Written before every copy is taken (``pending``), so
it travels with the group (held copy, durable set, savepoint); whoever takes the group
over sends them again (``adopt``): an output's producer may die before it resends
it, and a restore replays only the tuples after its copy."""


MAX_BACKOFF = 8
"""An output sent again waits twice as long before each next resend, at most this
many times ``resend_after``: a consumer behind on its input (the join's windows
under overload, session 25: 58,452 resends on one task in two minutes) is not sent
that input again every period, and a dead one still gets it within ``MAX_BACKOFF``
periods of coming back."""


@dataclass
class Outbox:
    """Outputs sent and not yet confirmed, per consumer: those never sent again in
    send order (``_fresh``), those sent again by when each is due next (``_retry``,
    a heap over it; exponential backoff, :data:`MAX_BACKOFF`)."""

    resend_after: float
    _fresh: OrderedDict[tuple[str, OutputKey], tuple[list, float]] = field(
        default_factory=OrderedDict
    )
    # (consumer, id) -> (values, due next, tries, last sent); the heap holds (due, key)
    _retry: dict[tuple[str, OutputKey], tuple[list, float, int, float]] = field(
        default_factory=dict
    )
    _due_heap: list[tuple[float, tuple[str, OutputKey]]] = field(default_factory=list)
    resent: int = 0  # outputs sent again (a consumer lost or had not confirmed them)

    def __len__(self) -> int:
        return len(self._fresh) + len(self._retry)

    def sent(self, stream: str, values: list, now: float, consumers: Iterable[str]) -> None:
        """Keep ``values`` (an output on ``stream``, its id at its end) until each of
        ``consumers`` confirms it. O(consumers)."""
        group, source, seq = values[-4], values[-3], values[-2]
        if seq:
            fresh, retry = self._fresh, self._retry
            for consumer in consumers:
                key = (consumer, (stream, group, source, seq))
                if retry:
                    retry.pop(key, None)  # made again (a replay): a fresh send
                fresh[key] = (values, now)
                fresh.move_to_end(key)  # sent again (a replay): newest now

    def confirmed(self, consumer: str, keys: Iterable[OutputKey]) -> int:
        """Forget the outputs ``consumer`` confirmed; returns how many were kept.
        O(keys)."""
        fresh, retry = self._fresh.pop, self._retry.pop
        return sum(
            fresh((consumer, key), None) is not None or retry((consumer, key), None) is not None
            for key in keys
        )

    def due(self, now: float) -> list[tuple[str, list]]:
        """The outputs due again, as ``(stream, values)`` to send (once, whichever
        consumers wait for it): those kept ``resend_after`` since their send, oldest
        first, then those sent again whose backoff ran out. O(1) when none is due,
        else O(due outputs * log kept)."""
        fresh, limit = self._fresh, now - self.resend_after
        out: dict[OutputKey, tuple[str, list]] = {}
        while fresh:
            key, (values, at) = next(iter(fresh.items()))
            if at > limit:
                break
            del fresh[key]
            self._again(key, values, now, 1)
            out.setdefault(key[1], (key[1][0], values))
        heap, retry = self._due_heap, self._retry
        while heap and heap[0][0] <= now:
            due, key = heapq.heappop(heap)
            entry = retry.get(key)
            if entry is None or entry[1] != due:
                continue  # confirmed, or sent afresh, since
            self._again(key, entry[0], now, entry[2] + 1)
            out.setdefault(key[1], (key[1][0], entry[0]))
        self.resent += len(out)
        return list(out.values())

    def _again(self, key: tuple[str, OutputKey], values: list, now: float, tries: int) -> None:
        """Note ``key`` sent again at ``now`` for the ``tries``-th time: due next after
        ``2**tries`` periods, at most :data:`MAX_BACKOFF`."""
        due = now + self.resend_after * min(2**tries, MAX_BACKOFF)
        self._retry[key] = (values, due, tries, now)
        heapq.heappush(self._due_heap, (due, key))

    def pending(self, key_group: int) -> dict[str, list]:
        """``key_group``'s kept outputs as :data:`PENDING` holds them (once each,
        whichever consumers wait). O(kept outputs)."""
        out: dict[str, list] = {}
        kept = [(k, e[0]) for k, e in self._fresh.items()]
        kept += [(k, e[0]) for k, e in self._retry.items()]
        for (_, (stream, group, _, _)), values in kept:
            if group == key_group:
                out.setdefault(pending_key(stream, values), [stream, values])
        return out

    def adopt(
        self, entry: Mapping[str, Any], consumers: Callable[[str], Iterable[str]], now: float
    ) -> int:
        """Keep the outputs of a group taken over at ``now`` (its :data:`PENDING` entry)
        as sent ``resend_after`` ago, so the next :meth:`due` sends them;
        ``consumers(stream)`` says who must confirm each. Those kept already stay as
        they are. Returns how many."""
        taken = 0
        for stream, values in entry.values():
            group, source, seq = values[-4], values[-3], values[-2]
            for consumer in consumers(stream):
                key = (consumer, (stream, group, source, seq))
                if key not in self._fresh and key not in self._retry:
                    self._fresh[key] = (list(values), now - self.resend_after)
                    self._fresh.move_to_end(key, last=False)  # due first
                    taken += 1
        return taken

    def oldest_age(self, now: float) -> float:
        """Seconds the output kept longest has waited since it was last sent (0 if
        none). O(1) unless some were sent again, then O(those)."""
        last = [e[3] for e in self._retry.values()]
        if self._fresh:
            last.append(next(iter(self._fresh.values()))[1])
        return now - min(last) if last else 0.0


def pending_key(stream: str, values: list) -> str:
    """An output's key in :data:`PENDING` (``stream``, its source and sequence)."""
    return f"{stream}\x1f{values[-3]}\x1f{values[-2]}"


@dataclass
class Unreleased:
    """Outputs held back until a copy that any restore of their key group starts from
    covers the input that made them (``elastorm.release_outputs_on_copy``): the group's
    trim watermarks, per input source. Until then a restore may compute them again,
    perhaps with other contents (a running count over inputs from several sources, in
    another order), so nobody downstream may have seen them. Those a copy covers travel
    in its :data:`PENDING` entry (:meth:`pending`) and are sent by whoever restores it.

    Sans-IO: the caller holds, releases on the group's trims and sends what is
    returned. A group's outputs are kept in the order they were made."""

    _held: dict[int, list[tuple[str, int, str, list]]] = field(default_factory=dict)
    # key group -> when its oldest held output was held (monotonic s)
    _since: dict[int, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(h) for h in self._held.values())

    def hold(
        self, key_group: int, source: str, seq: int, stream: str, values: list, now: float
    ) -> None:
        """Keep ``values`` (an output on ``stream``, made by input ``seq`` of
        ``source``, at ``now``) until a trim of ``key_group`` covers that input. O(1)."""
        self._held.setdefault(key_group, []).append((source, seq, stream, values))
        self._since.setdefault(key_group, now)

    def stalled(self, now: float, after: float) -> dict[int, float]:
        """The key groups whose outputs have waited longer than ``after`` s for a copy
        (no trim released any), with how long: a stall to report, never to wait out
        silently. O(key groups with held outputs)."""
        return {g: now - t for g, t in sorted(self._since.items()) if now - t > after}

    def release(
        self, key_group: int, marks: Mapping[str, int], now: float
    ) -> list[tuple[str, list]]:
        """The outputs of ``key_group`` whose inputs ``marks`` (trim watermarks per
        source) cover, in the order they were made, as ``(stream, values)``; the rest
        stay held (at ``now``). O(held outputs of the group)."""
        held = self._held.get(key_group)
        if not held:
            return []
        out, kept = [], []
        for entry in held:
            if entry[1] <= marks.get(entry[0], 0):
                out.append((entry[2], entry[3]))
            else:
                kept.append(entry)
        if kept:
            self._held[key_group] = kept
            if out:  # progress: the wait is counted from this release
                self._since[key_group] = now
        else:
            del self._held[key_group]
            self._since.pop(key_group, None)
        return out

    def pending(self, key_group: int) -> dict[str, list]:
        """``key_group``'s held outputs as :data:`PENDING` holds them: a copy taken now
        covers the inputs of every one. O(held outputs of the group)."""
        return {
            pending_key(stream, values): [stream, values]
            for _, _, stream, values in self._held.get(key_group, ())
        }

    def drop(self, key_group: int) -> int:
        """Forget ``key_group``'s held outputs (its state went to a move's target, which
        has them from the copy or makes them again); returns how many."""
        self._since.pop(key_group, None)
        return len(self._held.pop(key_group, ()))


@dataclass
class Receipts:
    """A router's record of the keyed outputs it routes to another keyed bolt, until
    that bolt's checkpoint covers them (its trim): then their senders are told.

    An output's path: :meth:`arrived` (from which task, its id) before the router's
    emitter numbers it; :meth:`numbered` with the ``(key group, sequence)`` it got
    (at once, or later if the emit was parked behind a full buffer: the values list
    is the same object, so it is the handle); :meth:`trimmed` returns the senders'
    ids the trim covers. A router that restarts loses this record; its senders send
    the outputs again (``Outbox``), and the keyed bolt drops what it applied
    (``core.once``)."""

    _waiting: dict[int, tuple[int, OutputKey]] = field(default_factory=dict)
    _routed: dict[int, deque[tuple[int, int, OutputKey]]] = field(default_factory=dict)

    def arrived(self, values: list, task: int, stream: str) -> None:
        """``values`` (ending with an output id) came from ``task`` on ``stream``. O(1)."""
        group, source, seq = values[-4], values[-3], values[-2]
        if seq:
            self._waiting[id(values)] = (task, (stream, group, source, seq))

    def numbered(self, values: list, key_group: int, seq: int) -> None:
        """The router's emitter sent ``values`` as ``seq`` of ``key_group``. O(1)."""
        origin = self._waiting.pop(id(values), None)
        if origin is not None:
            self._routed.setdefault(key_group, deque()).append((seq, *origin))

    def dropped(self, values: list) -> tuple[int, OutputKey] | None:
        """``values`` will never be routed (no key): its sender and id, to confirm now."""
        return self._waiting.pop(id(values), None)

    def trimmed(self, key_group: int, upto: int) -> dict[int, list[OutputKey]]:
        """The ids ``key_group``'s checkpoint now covers (router sequence <= ``upto``),
        by sending task. O(ids covered)."""
        lane = self._routed.get(key_group)
        out: dict[int, list[OutputKey]] = {}
        while lane and lane[0][0] <= upto:
            _, task, key = lane.popleft()
            out.setdefault(task, []).append(key)
        return out


def confirmation(keys: Iterable[OutputKey]) -> list[list[Any]]:
    """The wire form of confirmed ids (a list of ``[stream, group, source, seq]``)."""
    return [list(k) for k in keys]


def confirmed_keys(wire: Iterable[Any]) -> list[OutputKey]:
    """:func:`confirmation`'s inverse; ``ValueError`` on a malformed entry."""
    out = []
    for entry in wire:
        stream, group, source, seq = entry
        if not (isinstance(stream, str) and type(group) is int and isinstance(source, str)):
            raise ValueError(f"malformed confirmed output id {entry!r}")
        out.append((stream, group, source, int(seq)))
    return out


def consumers_by_stream(
    confirmed_outputs: Mapping[str, Iterable[str]], producer: str
) -> dict[str, tuple[str, ...]]:
    """``producer``'s streams whose consumers confirm, and those consumers, from
    ``elastorm.confirmed_outputs`` (``{keyed bolt: ["consumer:stream", ...]}``).

    >>> consumers_by_stream({"counts": ["sink:default", "letters_router:default"]}, "counts")
    {'default': ('sink', 'letters_router')}
    """
    out: dict[str, tuple[str, ...]] = {}
    for entry in confirmed_outputs.get(producer, ()):
        consumer, stream = entry.rsplit(":", 1)
        out[stream] = (*out.get(stream, ()), consumer)
    return out


def confirmed_inputs(
    confirmed_outputs: Mapping[str, Iterable[str]], consumer: str
) -> frozenset[tuple[str, str]]:
    """The ``(keyed bolt, stream)`` inputs whose outputs ``consumer`` confirms.

    >>> sorted(confirmed_inputs({"counts": ["sink:default", "r:default"]}, "sink"))
    [('counts', 'default')]
    """
    return frozenset(
        (producer, entry.rsplit(":", 1)[1])
        for producer, entries in confirmed_outputs.items()
        for entry in entries
        if entry.rsplit(":", 1)[0] == consumer
    )
