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

**Tentative outputs and their rectification** (Su & Zhou 2016, and the issue's
"beyond the paper"). An ``Applied`` made while its group restores, or while state
upstream of it does, is ``tentative``: the value may miss tuples that recovery has
not replayed yet. :class:`LatestValues` marks such updates (:meth:`take_marked`) and
remembers, per key group, the keys whose last update was tentative. Once the group
is no longer tentative, :meth:`rectify` queues each such key's current value again,
this time final, so a receiver that lets the latest update of a key win ends with
final values only. A RESTORE's completion sends every key of the group, final. A group
taken over by a migration while state upstream recovers gets every key rectified by
its new owner (its old owner no longer has it to rectify).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elastorm.core.actions import Action, Applied, MigrationDone, Role
from elastorm.core.messages import Protocol
from elastorm.core.state import KeyGroupState

if TYPE_CHECKING:
    from elastorm.core.migration.coordinator import TaskCoordinator


class LatestValues:
    """The ``key -> current value`` updates a keyed task owes downstream.

    Call :meth:`applied` for every ``Applied`` and :meth:`reported` for every report
    (with the group's live state), in the order the core returned them; :meth:`take`
    returns the updates to send and forgets them.
    """

    __slots__ = ("pending", "pending_tentative", "_quiet", "_tentative")

    def __init__(self) -> None:
        self.pending: dict[str, Any] = {}
        self.pending_tentative: set[str] = set()  # keys of ``pending`` that are tentative
        self._quiet: dict[int, set[str]] = {}  # key group -> keys applied without output
        self._tentative: dict[int, set[str]] = {}  # key group -> keys last sent tentative

    def applied(self, applied: Applied) -> None:
        key = applied.item.key
        if not applied.emit_output:
            self._quiet.setdefault(applied.key_group, set()).add(key)
            return
        self.pending[key] = applied.result
        if applied.tentative:
            self.pending_tentative.add(key)
            self._tentative.setdefault(applied.key_group, set()).add(key)
        else:
            self._final(applied.key_group, (key,))

    def _final(self, key_group: int, keys) -> None:
        """``keys`` of ``key_group`` now have a final update pending."""
        self.pending_tentative.difference_update(keys)
        marked = self._tentative.get(key_group)
        if marked:
            marked.difference_update(keys)
            if not marked:
                del self._tentative[key_group]

    def reported(
        self, report: Action | Any, state: KeyGroupState | None, *, tentative: bool = False
    ) -> None:
        """A report of the task's; a ``MigrationDone`` as target queues the values owed
        (see the module docstring). ``tentative``: the group's outputs still are (state
        upstream recovers), so a RESTORE's values go out tentative."""
        if not isinstance(report, MigrationDone) or report.role is not Role.TARGET:
            return
        if report.protocol is Protocol.REPLICATE:
            return  # a replica sends nothing; its quiet keys wait for a promotion
        quiet = self._quiet.pop(report.key_group, set())
        if state is None:
            return
        if report.protocol.restores:
            values = dict(state.items())
            self.pending.update(values)
            if tentative:  # state upstream still recovers: rectified later
                self._tentative.setdefault(report.key_group, set()).update(values)
                self.pending_tentative.update(values)
            else:
                self._final(report.key_group, values)
            return
        for key in quiet:
            self.pending[key] = state.get(key)
        if tentative:
            # Taken over while state upstream recovers: the old owner may have sent
            # tentative values of any key, and it will not rectify a group it no longer
            # has; this task does, for every key, once recovery ends.
            self._tentative.setdefault(report.key_group, set()).update(state.items())

    def rectify(self, key_group: int, state: KeyGroupState | None) -> None:
        """``key_group``'s outputs are no longer tentative (its restore and every
        recovery upstream of it are over): queue the current value of each key whose
        last update was tentative, final. ``state`` None (the group left this task):
        its new owner sends its values, nothing is owed here. O(keys marked)."""
        keys = self._tentative.pop(key_group, None)
        if not keys:
            return
        self.pending_tentative.difference_update(keys)
        if state is not None:
            for key in keys:
                self.pending[key] = state.get(key)

    def settle(self, coordinator: TaskCoordinator) -> None:
        """:meth:`rectify` every group with tentative keys whose outputs are no longer
        tentative at ``coordinator`` (the task's). Call it before :meth:`take_marked`;
        O(groups marked)."""
        for g in sorted(self._tentative):
            machine = coordinator.machine(g)
            if not machine.tentative:
                self.rectify(g, machine.state)

    def take_marked(self) -> tuple[dict[str, Any], frozenset[str]]:
        """The updates to send and which of them are tentative; forgets both."""
        out, marked = self.pending, frozenset(self.pending_tentative & self.pending.keys())
        self.pending, self.pending_tentative = {}, set()
        return out, marked

    def take(self) -> dict[str, Any]:
        return self.take_marked()[0]

    def __bool__(self) -> bool:
        return bool(self.pending)


OUTPUT_KINDS = ("final", "tentative", "rectified")
"""What an identified output is (the last of its id fields): ``final``; ``tentative``
(made while its group, or state upstream of it, recovers: Su & Zhou 2016); or
``rectified`` (a final value sent for a key whose last output was tentative)."""


def output_channel(stream: str, source: str) -> str:
    """The counter name of a keyed operator's outputs on ``stream`` caused by input
    from ``source`` (an upstream emitter's sequence space), kept in the group's
    ``out_seq`` (``SequenceCounters``, keyed ``(channel, key group)``)."""
    return f"{stream}<{source}"


def next_output(state: KeyGroupState, stream: str, source: str) -> int:
    """The output sequence of the next output of ``state``'s key group on ``stream``
    caused by a tuple of ``source``: 1, 2, 3, ...

    The counters live in the group's state (``out_seq``), so they are checkpointed,
    migrated, restored and replicated with it. A key group applies each source's
    tuples in that source's sequence order wherever it runs (``admission``), so the
    n-th output caused by ``source`` is the same output on every task that applies
    the tuple (the owner, a migration target replaying quietly, a restore replaying,
    an active replica): ``(key group, source, sequence)`` is a stable id, whichever
    task emits it, however the sources interleave. Counters must advance for
    outputs that are not sent too (a quiet replay), so every task counts alike.
    O(1).

    >>> state = KeyGroupState(3)
    >>> next_output(state, "default", "words:4"), next_output(state, "default", "words:4")
    (1, 2)
    >>> next_output(state, "default", "words:5")
    1
    """
    return state.out_seq.next(output_channel(stream, source), state.key_group)
