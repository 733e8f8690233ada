"""A keyed task's outputs to a sink, kept until the sink says it committed them.

Acks are off in an elastorm topology, so an output in flight to a sink task whose
worker dies (Storm's Netty client drops what it held for the dead worker; the sink
task's batch and queue die with it) is gone, and nothing upstream sends it again:
chaos ``wordcount/sink`` lost 581 of 4,000 rows, ``chained/sink`` 2,056
(``docs/raw/chaos_243b695_user_analysis.txt``). So a keyed task keeps each output it
sends on a stream an ``elastorm.sinks.Sink`` commits, under its stable id; the sink,
after the transaction that commits a batch, tells each sending task which ids it
committed (``storm.elastic.COMMITTED_STREAM``); the task forgets those, and sends
again what waited longer than ``elastorm.sinks.resend_after_secs``. The sink commits
each id once, so a resend of something committed is dropped there: at least once on
the wire, exactly once in the database. This is the sink's own acknowledgement, as a
Kafka producer keeps a record until the broker acks it.

Sans-IO: the caller sends, delivers confirmations and asks what is due on its
ticks. Outputs with sequence 0 (``rectified``, processing-time timers' outputs) carry
no id the sink de-duplicates, so they are not kept (at most once across a sink
crash, as documented in ``docs/sinks.md``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

OutputKey = tuple[str, int, str, int]
"""An output's id as a sink confirms it: ``(stream, key group, source, seq)``."""


@dataclass
class Outbox:
    """Outputs sent and not yet confirmed, oldest send first."""

    resend_after: float
    _kept: OrderedDict[OutputKey, tuple[list, float]] = field(default_factory=OrderedDict)
    resent: int = 0  # outputs sent again (a sink lost or had not confirmed them)

    def __len__(self) -> int:
        return len(self._kept)

    def sent(self, stream: str, values: list, now: float) -> None:
        """Keep ``values`` (an output on ``stream``, its id at its end) until confirmed.
        O(1)."""
        group, source, seq = values[-4], values[-3], values[-2]
        if seq:
            key = (stream, group, source, seq)
            self._kept[key] = (values, now)
            self._kept.move_to_end(key)  # sent again (a replay): newest now

    def confirmed(self, keys: Iterable[OutputKey]) -> int:
        """Forget the outputs a sink committed; returns how many were kept. O(keys)."""
        pop = self._kept.pop
        return sum(pop(key, None) is not None for key in keys)

    def due(self, now: float) -> list[tuple[str, list]]:
        """The outputs kept longer than ``resend_after`` since they were last sent, as
        ``(stream, values)`` to send again, oldest first; each counts as sent ``now``.
        O(1) when none is due, else O(due outputs)."""
        kept, limit, out = self._kept, now - self.resend_after, []
        while kept:
            key, (values, at) = next(iter(kept.items()))
            if at > limit:
                break
            kept.move_to_end(key)
            kept[key] = (values, now)
            out.append((key[0], values))
            if len(out) >= len(kept):  # every kept output is due: all sent once
                break
        self.resent += len(out)
        return out

    def oldest_age(self, now: float) -> float:
        """Seconds the oldest kept output has waited since it was last sent (0 if none)."""
        if not self._kept:
            return 0.0
        return now - next(iter(self._kept.values()))[1]


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
