"""How long a migration paused its key group, measured at the target (pure).

The pause is the time the moved key group's new tuples wait for the protocol
instead of being applied with output (Madsen & Zhou 2015, section 5: a CPA's pause
grows with the replay, a CPAL's is only the sync). At the target that is:

* from the start of handling the first ``toState`` of an idle group (a CPA, direct or
  restore target: its replay is the pause, new tuples queue behind it) or from the
  moment a CPAL target leaves ``SHADOW`` for ``SYNCING`` (its shadow replay ran while
  the source still emitted; from now on new tuples are queued until ``syncGroup``),
* to the end of handling the message that made it the owner (``ACTIVE``), which
  also applied the tuples that waited.

The time a message spent in the task's input queue before it was handled is not
counted. The adapter calls :meth:`PauseMeter.observe` with the group's phase before
and after each control message and the times it began and ended handling it (the
clock is an argument: no I/O here), then :meth:`PauseMeter.take` when the target
reports ``MigrationDone``.
"""

from __future__ import annotations

from elastorm.core.migration.table import Phase

WAITING = frozenset({Phase.REPLAYING, Phase.SYNCING})
"""Target phases in which the group's new tuples wait for the protocol."""

_STARTS = frozenset({Phase.IDLE, Phase.SHADOW})


class PauseMeter:
    """Per key group: when its current pause began, and the last one measured (s).

    >>> m = PauseMeter()
    >>> m.observe(3, Phase.SHADOW, Phase.SYNCING, began=10.0, ended=10.5)
    >>> m.observe(3, Phase.SYNCING, Phase.ACTIVE, began=10.7, ended=10.75)
    >>> m.take(3)
    0.25
    """

    def __init__(self) -> None:
        self._since: dict[int, float] = {}
        self._measured: dict[int, float] = {}

    def observe(
        self, key_group: int, before: Phase, after: Phase, *, began: float, ended: float
    ) -> None:
        """Group ``key_group`` went from ``before`` to ``after`` while one message was
        handled between ``began`` and ``ended``."""
        if ended < began:
            raise ValueError(f"ended ({ended}) before began ({began})")
        if key_group not in self._since and before in _STARTS:
            if after in WAITING or (after is Phase.ACTIVE and before is Phase.IDLE):
                self._since[key_group] = began if before is Phase.IDLE else ended
        if key_group in self._since and after not in WAITING:
            since = self._since.pop(key_group)
            if after is Phase.ACTIVE:
                self._measured[key_group] = max(0.0, ended - since)

    def take(self, key_group: int) -> float | None:
        """The pause measured for ``key_group``'s last takeover, once; None if none."""
        return self._measured.pop(key_group, None)
