"""Outputs of a keyed operator that sends each key's current value (a running total).

``Applied.emit_output`` says whether a tuple's own output is this task's to send:
False for CPA/CPAL replays and CPAL shadow processing, because the source already
applied those tuples and sent their outputs. That is right for outputs that depend
on the tuple alone. It is not enough when the output is the key's *current value*
(the flights job's op2 sends ``tailnum -> {year: [delay sum, flights]}``): the value
depends on which other tuples of the key the task had applied, and a CPA target
applies them in another order than the source did.

The case that lost a flight (issue 3, once in five runs on the 2-worker cluster):
op1 tasks A and B feed a key group that moves by CPA (or DIRECT, which ends in CPA).
A's toState reaches the target first; a new tuple ``c`` of key ``k`` from A follows
and is applied with outputs on, so the target sends ``k`` = checkpoint + ``c``. B's
toState comes later (B is slower to reach its ``Migrate``: a backlog, another
worker) and brings an older tuple ``b`` of ``k``, which the target replays quietly.
The source had applied ``b`` but never saw ``c``. Each end sent a value of ``k``
missing one tuple, and no one ever sent the value reflecting both. Nothing is lost
from the state: only the last update of a key with no later tuples is wrong.

:class:`LatestValues` fixes it on the target: keys applied quietly are remembered
per key group, and when the task takes the group over (``MigrationDone`` as
target) their current values are sent. After a RESTORE every key of the group is
sent (the dead owner's unsent updates died with it). A receiver that keeps, per
key, the value reflecting the most tuples (the flights sink keeps the larger
flight count) then ends with the exact value: the target's final state includes
every tuple the source applied.
"""

from __future__ import annotations

from typing import Any

from elastorm.core.actions import Action, Applied, MigrationDone, Role
from elastorm.core.messages import Protocol
from elastorm.core.state import KeyGroupState


class LatestValues:
    """The ``key -> current value`` updates a keyed task owes downstream.

    Call :meth:`applied` for every ``Applied`` and :meth:`reported` for every report
    (with the group's live state), in the order the core returned them; :meth:`take`
    returns the updates to send and forgets them.
    """

    __slots__ = ("pending", "_quiet")

    def __init__(self) -> None:
        self.pending: dict[str, Any] = {}
        self._quiet: dict[int, set[str]] = {}  # key group -> keys applied without output

    def applied(self, applied: Applied) -> None:
        if applied.emit_output:
            self.pending[applied.item.key] = applied.result
        else:
            self._quiet.setdefault(applied.key_group, set()).add(applied.item.key)

    def reported(self, report: Action | Any, state: KeyGroupState | None) -> None:
        if not isinstance(report, MigrationDone) or report.role is not Role.TARGET:
            return
        if report.protocol is Protocol.REPLICATE:
            return  # a replica sends nothing; its quiet keys wait for a promotion
        quiet = self._quiet.pop(report.key_group, set())
        if state is None:
            return
        if report.protocol is Protocol.RESTORE:
            self.pending.update(state.items())
        else:
            for key in quiet:
                self.pending[key] = state.get(key)

    def take(self) -> dict[str, Any]:
        out, self.pending = self.pending, {}
        return out

    def __bool__(self) -> bool:
        return bool(self.pending)
