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
sends again what waited longer than ``elastorm.unconfirmed_resend_secs``. Consumers
drop repeats by id (the sink's marks; the keyed bolt's ``core.once``): at least once
on the wire, exactly once in effect, as a Kafka producer keeps a record until the
broker acks it.

Sans-IO: the caller sends, delivers confirmations and asks what is due on its
ticks. Outputs with sequence 0 (``rectified``, processing-time timers' outputs) carry
no id the sink de-duplicates, so they are not kept (at most once across a sink
crash, as documented in ``docs/sinks.md``).
"""

from __future__ import annotations

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


@dataclass
class Outbox:
    """Outputs sent and not yet confirmed, per consumer, oldest send first."""

    resend_after: float
    _kept: OrderedDict[tuple[str, OutputKey], tuple[list, float]] = field(
        default_factory=OrderedDict
    )
    resent: int = 0  # outputs sent again (a consumer lost or had not confirmed them)

    def __len__(self) -> int:
        return len(self._kept)

    def sent(self, stream: str, values: list, now: float, consumers: Iterable[str]) -> None:
        """Keep ``values`` (an output on ``stream``, its id at its end) until each of
        ``consumers`` confirms it. O(consumers)."""
        group, source, seq = values[-4], values[-3], values[-2]
        if seq:
            kept = self._kept
            for consumer in consumers:
                key = (consumer, (stream, group, source, seq))
                kept[key] = (values, now)
                kept.move_to_end(key)  # sent again (a replay): newest now

    def confirmed(self, consumer: str, keys: Iterable[OutputKey]) -> int:
        """Forget the outputs ``consumer`` confirmed; returns how many were kept.
        O(keys)."""
        pop = self._kept.pop
        return sum(pop((consumer, key), None) is not None for key in keys)

    def due(self, now: float) -> list[tuple[str, list]]:
        """The outputs kept longer than ``resend_after`` since they were last sent, as
        ``(stream, values)`` to send again (once, whichever consumers wait for it),
        oldest first; each counts as sent ``now``. O(1) when none is due, else O(due
        outputs)."""
        kept, limit = self._kept, now - self.resend_after
        out: dict[OutputKey, tuple[str, list]] = {}
        moved = 0
        while kept and moved < len(kept):  # each entry moves once at most
            key, (values, at) = next(iter(kept.items()))
            if at > limit:
                break
            kept.move_to_end(key)
            kept[key] = (values, now)
            moved += 1
            out.setdefault(key[1], (key[1][0], values))
        self.resent += len(out)
        return list(out.values())

    def pending(self, key_group: int) -> dict[str, list]:
        """``key_group``'s kept outputs as :data:`PENDING` holds them (once each,
        whichever consumers wait). O(kept outputs)."""
        out: dict[str, list] = {}
        for (_, (stream, group, source, seq)), (values, _) in self._kept.items():
            if group == key_group:
                out.setdefault(f"{stream}\x1f{source}\x1f{seq}", [stream, values])
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
                if key not in self._kept:
                    self._kept[key] = (list(values), now - self.resend_after)
                    self._kept.move_to_end(key, last=False)  # due first
                    taken += 1
        return taken

    def oldest_age(self, now: float) -> float:
        """Seconds the oldest kept output has waited since it was last sent (0 if none)."""
        if not self._kept:
            return 0.0
        return now - next(iter(self._kept.values()))[1]


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
