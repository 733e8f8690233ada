"""Fault injection: which of an emitter's data messages are lost on the wire.

A test hook, off unless ``elastorm.chaos.drop_tuples`` is set, like a chaos tool's
packet loss: Storm drops tuples between live workers only in rare races (a worker
reassigned while its peer sends), so the recovery of such a loss (``Resend``) is
exercised on the real cluster by losing chosen messages on purpose. Pure: the
adapter asks once per data message and skips the emit when told to.
"""

from __future__ import annotations

from typing import Protocol


class ChaosOptions(Protocol):
    """The ``elastorm.chaos.*`` options this module reads (``TopologyConfig`` has them);
    a protocol so that the core does not import the configuration module."""

    chaos_drop_tuples: int
    chaos_drop_from: int
    chaos_drop_every: int
    chaos_drop_on: str


class WireLoss:
    """Lose ``count`` data messages: numbers ``start``, ``start + every``, ... of an
    emitter's messages, counted from 1. O(1) per message.

    >>> loss = WireLoss(count=2, start=2, every=2)
    >>> [loss.lose() for _ in range(7)]
    [False, True, False, True, False, False, False]
    """

    __slots__ = ("count", "start", "every", "seen", "lost")

    def __init__(self, *, count: int, start: int, every: int = 1) -> None:
        if count < 0 or start < 1 or every < 1:
            raise ValueError(f"need count >= 0, start >= 1, every >= 1: {count}, {start}, {every}")
        self.count, self.start, self.every = count, start, every
        self.seen = 0
        self.lost = 0

    def lose(self) -> bool:
        """Whether the next data message is lost (call once per message)."""
        self.seen += 1
        n = self.seen - self.start
        if n < 0 or self.lost >= self.count or n % self.every:
            return False
        self.lost += 1
        return True


def wire_loss_on(config: ChaosOptions, sender: str) -> WireLoss | None:
    """The loss ``elastorm.chaos.*`` asks of what ``sender`` (``elastorm.chaos.drop_on``:
    "emitter" or "spout") sends, or None when the injection is off or aimed elsewhere."""
    if not config.chaos_drop_tuples or config.chaos_drop_on != sender:
        return None
    return WireLoss(
        count=config.chaos_drop_tuples,
        start=config.chaos_drop_from,
        every=config.chaos_drop_every,
    )
