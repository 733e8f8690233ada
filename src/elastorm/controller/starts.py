"""Which live keyed tasks the controller may give work: not a restart it has not recovered.

Sans-IO. A task that Storm restarts comes back with a new ZooKeeper registration (a
new *incarnation*: its znode's creation zxid) and, a little later, reports
``TaskStarted(restarted=True)`` on the reports stream; only then does the controller
recover it (restore what the dead incarnation owned, ``MigrationController.crash``).
The two arrive by different ways, so a round can see the new incarnation's
heartbeat first: it then looks like an idle task, and a balancing or rescale round
moved key groups onto it. The recovery that followed treated those groups as the
dead incarnation's, restored one from a checkpoint while its live owner still had it
and declared another lost (seen in the ``freeze-10`` chaos run at fde8296: the job
then stalled). :class:`StartGate` keeps such a task out of the rounds until its
restart is recovered, or for at most ``patience`` seconds (then it says so, loudly).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger(__name__)


class StartGate:
    """The live tasks a round may see: every one whose incarnation the controller has
    accounted for. A task's first incarnation is accounted for when first seen (a
    first start is no restart); a later one when :meth:`recovered` is called for it,
    or when :meth:`accept_all` is (a controller taking over, which recovers the
    restarts it knows of itself). O(tasks) per call.

    >>> gate = StartGate(patience=30.0)
    >>> sorted(gate.waiting({5: 100, 6: 101}, now=0.0))
    []
    >>> sorted(gate.waiting({5: 100, 6: 207}, now=1.0))  # task 6 restarted
    [6]
    >>> gate.recovered(6, 207)
    >>> sorted(gate.waiting({5: 100, 6: 207}, now=2.0))
    []
    """

    __slots__ = ("patience", "_known", "_since", "_credit")

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self._known: dict[int, int] = {}  # task -> incarnation accounted for
        self._since: dict[int, float] = {}  # task -> when its unaccounted one was seen
        self._credit: set[int] = set()  # restarts recovered before their znode was seen

    def waiting(self, incarnations: Mapping[int, int], now: float) -> set[int]:
        """The live tasks (``task -> incarnation``) a round must not see yet."""
        out = set()
        for task, incarnation in incarnations.items():
            known = self._known.setdefault(task, incarnation)
            if known == incarnation:
                self._since.pop(task, None)
                continue
            if task in self._credit:  # its start report came first
                self._credit.discard(task)
                self._known[task] = incarnation
                continue
            since = self._since.setdefault(task, now)
            if now - since >= self.patience:
                log.error(
                    "controller: task %s restarted %.0f s ago and never reported its start; "
                    "giving it work anyway",
                    task,
                    now - since,
                )
                self._known[task] = incarnation
                del self._since[task]
                continue
            out.add(task)
        return out

    def recovered(self, task: int, incarnation: int | None) -> None:
        """``task``'s restart was recovered; ``incarnation``: its live one now (None, or
        still the old one, if its new registration is not seen yet: then the next new
        one is taken as this restart's)."""
        if incarnation is None or incarnation == self._known.get(task):
            self._credit.add(task)
        else:
            self._known[task] = incarnation
            self._since.pop(task, None)

    def accept_all(self, incarnations: Mapping[int, int]) -> None:
        """Account for every live incarnation now (a controller that starts leading)."""
        self._known.update(incarnations)
        self._since.clear()
        self._credit.clear()
