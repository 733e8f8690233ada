"""Failure detection: which keyed tasks the controller declares lost, each once.

Sans-IO. Fed what the :class:`~elastorm.zk.watcher.ClusterWatcher` saw (a task's
ephemeral znode gone: ``left``; back: ``joined``), the liveness connections that
closed (``elastorm.storm.liveness``: also ``left``, milliseconds after the process
died), and whether the controller's own
ZooKeeper connection is up; :meth:`FailureDetector.due` returns the tasks to declare
lost now, grouped by operator. A task's znode disappears one session timeout after
its process stopped talking (kill -9, a dead node, a cut network), so that is the
detection time; nothing waits for Storm to notice or to restart anything.

Not declared: leaves seen within ``grace`` seconds of the controller's own
(re)connection. After a ZooKeeper outage every session may have expired, and the
live tasks re-register within a session timeout; a task back within the grace is no
failure. A task declared lost stays declared until it joins again (a new process,
which starts empty: Storm restarted it). Each declaration names the *incarnation* of
the znode that left (its creation zxid): the fence the controller writes for it
stops that process, should it be alive and cut off, and never a newer one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FailureDetector:
    """Declares each lost task once; see the module doc. ``grace`` (s) should exceed
    the tasks' ZooKeeper session timeout."""

    grace: float
    _absent: dict[int, tuple[str, int]] = field(default_factory=dict)  # task -> (op, incarnation)
    _declared: dict[int, int] = field(default_factory=dict)  # task -> incarnation declared
    _connected_at: float | None = None

    def left(self, task: int, operator: str, incarnation: int) -> None:
        """``task``'s znode of ``incarnation`` is gone."""
        if task not in self._declared:
            self._absent[task] = (operator, incarnation)

    def joined(self, task: int) -> None:
        """``task``'s znode is back: a re-registration, or a restarted (empty) task."""
        self._absent.pop(task, None)
        self._declared.pop(task, None)

    def observe(self, now: float, *, connected: bool) -> None:
        """Whether the controller's own ZooKeeper connection is up at ``now``: the grace
        runs from the last (re)connection. A standby calls this without :meth:`due`, so
        that on taking over it declares at once what left while it watched."""
        if not connected:
            self._connected_at = None
        elif self._connected_at is None:
            self._connected_at = now

    def due(self, now: float, *, connected: bool) -> dict[str, list[tuple[int, int]]]:
        """The ``(task, incarnation)`` to declare lost now, by operator (each task
        once). O(absent)."""
        self.observe(now, connected=connected)
        if self._connected_at is None:
            return {}
        if now - self._connected_at < self.grace or not self._absent:
            return {}
        out: dict[str, list[tuple[int, int]]] = {}
        for task, (operator, incarnation) in sorted(self._absent.items()):
            out.setdefault(operator, []).append((task, incarnation))
        self._declared.update((t, inc) for t, (_, inc) in self._absent.items())
        self._absent.clear()
        return out

    @property
    def declared(self) -> frozenset[int]:
        """Tasks declared lost and not back yet."""
        return frozenset(self._declared)

    def declared_as(self, task: int, incarnation: int) -> bool:
        """Whether ``task``'s ``incarnation`` is the one declared lost (a newer one is not)."""
        return self._declared.get(task) == incarnation
