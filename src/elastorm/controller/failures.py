"""Failure detection: which keyed tasks the controller declares lost, each once, and why.

Sans-IO. Two channels feed it. The :class:`~elastorm.zk.watcher.ClusterWatcher` says
when a task's ephemeral znode is gone (``left``: its ZooKeeper session ended) or back
(``joined``). The liveness connections (``elastorm.storm.liveness``) say when a task
was last heard (``heard``: its hello and a beat every second) and when its connection
closed (``closed``: the kernel closes it the instant the process dies). Whether the
controller's own ZooKeeper connection is up and since when it leads are fed too;
:meth:`FailureDetector.due` returns the tasks to declare lost now, grouped by
operator, each with its :class:`Reason`.

The decision is :func:`verdict`, one ordered table (:data:`RULES`):

1. A closed liveness connection is a dead process: declared at once (milliseconds
   after a kill -9; no grace, nothing waits for the session).
2. While the controller's own ZooKeeper connection is down, and for ``grace`` s after
   it (re)connects, no leave counts: after an outage every session may have expired,
   and the live tasks re-register within a session timeout.
3. Without liveness connections the session alone decides.
4. A leave counts only if the task's liveness connection does not answer: a task
   heard within ``answer_secs`` is alive (its session lapsed on a loaded machine, or
   ZooKeeper lagged), so it is not declared; it re-registers and its znode is back.
5. A task this controller has not heard yet is given ``grace`` s from the moment it
   began leading to (re)connect: a standby that just took over has no liveness
   connection from anybody, and declaring on its first look what the old leader never
   would have is how a live task was fenced in the elastic-flights stall (docs/failures.md).
6. Otherwise (silent for ``answer_secs``, or never heard within that grace) it is lost.

A controller that begins watching after a task's znode is gone (a standby whose worker
started late, and the leader died with that task) never sees it leave: at its take-over
every keyed task with no znode is suspected as the :data:`UNSEEN` incarnation
(:meth:`FailureDetector.absent`) and goes through the same rows (the grace first).

A declared task stays declared until a newer incarnation of it is live (its znode
joined, or it reported ``TaskStarted`` and its restart was recovered:
:meth:`FailureDetector.forget`). Each declaration names the *incarnation* that was
lost (its znode's creation zxid): the fence the controller writes for it stops that
process, should it be alive and cut off, and never a newer one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

#: The incarnation of a task whose znode this controller never saw: older than every
#: real one (a znode's creation zxid is positive). Its fence stops every process of the
#: task whose znode was created before the fence (``elastorm.zk.heartbeat``).
UNSEEN = 0


class Reason(enum.Enum):
    """Why a task was declared lost (logged, and kept with the declaration)."""

    PROCESS_DEAD = "its liveness connection closed: the process is gone"
    SESSION = "its ZooKeeper session ended (no liveness connections to ask)"
    SILENT = "its ZooKeeper session ended and its liveness connection stopped answering"
    UNHEARD = "its ZooKeeper session ended and it never connected to this controller"


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """What the controller knows of one suspected task at one look, as ages in s.

    ``own_connection``: since the controller's own ZooKeeper (re)connection (None: down).
    ``leading``: since it began leading (None: not yet). ``silent``: since this
    controller last heard the task's liveness connection (None: never)."""

    closed: bool
    own_connection: float | None
    leading: float | None
    silent: float | None
    liveness: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Bounds:
    """``grace``: after a (re)connection or a takeover (s; should exceed the tasks'
    session timeout). ``answer_secs``: how long a liveness connection may stay silent
    and still count as answering."""

    grace: float
    answer_secs: float


Rule = tuple[str, Callable[[Evidence, Bounds], bool], Reason | None]

#: The decision, first matching row wins: (what the row says, when, the declaration
#: or None for "not now").
RULES: tuple[Rule, ...] = (
    ("its liveness connection closed", lambda e, b: e.closed, Reason.PROCESS_DEAD),
    ("own ZooKeeper connection down", lambda e, b: e.own_connection is None, None),
    (
        "within the grace after this controller's own (re)connection",
        lambda e, b: e.own_connection is not None and e.own_connection < b.grace,
        None,
    ),
    ("no liveness connections: the session decides", lambda e, b: not e.liveness, Reason.SESSION),
    (
        "its liveness connection answers",
        lambda e, b: e.silent is not None and e.silent < b.answer_secs,
        None,
    ),
    (
        "not heard yet, within the grace after this controller began leading",
        lambda e, b: e.silent is None and (e.leading is None or e.leading < b.grace),
        None,
    ),
    ("never heard by this controller", lambda e, b: e.silent is None, Reason.UNHEARD),
    ("its liveness connection is silent", lambda e, b: True, Reason.SILENT),
)


def verdict(evidence: Evidence, bounds: Bounds) -> tuple[str, Reason | None]:
    """The first row of :data:`RULES` that matches: its text and its declaration.

    >>> verdict(Evidence(closed=False, own_connection=60.0, leading=0.5, silent=None,
    ...                  liveness=True), Bounds(grace=5.0, answer_secs=4.0))
    ('not heard yet, within the grace after this controller began leading', None)
    """
    for text, matches, reason in RULES:
        if matches(evidence, bounds):
            return text, reason
    raise AssertionError("the last rule matches everything")


@dataclass(frozen=True, kw_only=True, slots=True)
class Declared:
    """``task``'s ``incarnation`` of ``operator`` declared lost, and why."""

    task: int
    operator: str
    incarnation: int
    reason: Reason


@dataclass(frozen=True, kw_only=True, slots=True)
class _Suspect:
    operator: str
    incarnation: int
    closed: bool  # its liveness connection closed (else only its znode left)


@dataclass
class FailureDetector:
    """Declares each lost task once; see the module doc. ``liveness``: whether the
    tasks hold liveness connections to this controller."""

    grace: float
    answer_secs: float
    liveness: bool = True
    _suspects: dict[int, _Suspect] = field(default_factory=dict)
    _heard: dict[int, tuple[int, float]] = field(default_factory=dict)  # task -> (inc, at)
    _declared: dict[int, Declared] = field(default_factory=dict)
    _connected_at: float | None = None
    _leading_since: float | None = None

    def left(self, task: int, operator: str, incarnation: int) -> None:
        """``task``'s znode of ``incarnation`` is gone (its session ended)."""
        self._suspect(task, operator, incarnation, closed=False)

    def absent(self, task: int, operator: str) -> None:
        """``task`` had no znode when this controller took over, and it never saw one: it
        died before this controller watched. Suspected as :data:`UNSEEN` (any znode or
        liveness connection of it clears that)."""
        self._suspect(task, operator, UNSEEN, closed=False)

    def closed(self, task: int, operator: str, incarnation: int) -> None:
        """``task``'s liveness connection of ``incarnation`` closed: its process died."""
        self._suspect(task, operator, incarnation, closed=True)

    def _suspect(self, task: int, operator: str, incarnation: int, *, closed: bool) -> None:
        if task in self._declared or self._newer_heard(task, incarnation):
            return
        old = self._suspects.get(task)
        if old is not None and old.incarnation > incarnation:
            return  # an older incarnation's late news
        was_closed = old is not None and old.incarnation == incarnation and old.closed
        self._suspects[task] = _Suspect(
            operator=operator, incarnation=incarnation, closed=closed or was_closed
        )

    def _newer_heard(self, task: int, incarnation: int) -> bool:
        heard = self._heard.get(task)
        return heard is not None and heard[0] > incarnation

    def heard(self, task: int, incarnation: int, at: float) -> None:
        """``task``'s liveness connection of ``incarnation`` was heard at ``at``. A newer
        incarnation heard clears an older one's suspicion: the process lives on."""
        old = self._heard.get(task)
        if old is None or (incarnation, at) > old:
            self._heard[task] = (incarnation, at)
        suspect = self._suspects.get(task)
        if suspect is not None and suspect.incarnation < incarnation:
            del self._suspects[task]

    def joined(self, task: int, incarnation: int) -> None:
        """``task``'s znode of ``incarnation`` is there: a re-registration, or a
        restarted (empty) task."""
        suspect = self._suspects.get(task)
        if suspect is not None and suspect.incarnation <= incarnation:
            del self._suspects[task]
        declared = self._declared.get(task)
        if declared is not None and declared.incarnation < incarnation:
            del self._declared[task]

    def forget(self, task: int) -> None:
        """``task`` restarted (a new process reported ``TaskStarted``) and its restart was
        recovered: it is usable again, whatever the watcher has shown so far."""
        self._declared.pop(task, None)

    def observe(self, now: float, *, connected: bool) -> None:
        """Whether the controller's own ZooKeeper connection is up at ``now``: the grace
        runs from the last (re)connection."""
        if not connected:
            self._connected_at = None
        elif self._connected_at is None:
            self._connected_at = now

    def lead(self, now: float) -> None:
        """This controller began leading at ``now``: tasks get ``grace`` s to connect."""
        self._leading_since = now

    def evidence(self, task: int, now: float) -> Evidence | None:
        """What is known of suspected ``task`` at ``now`` (None: not suspected)."""
        suspect = self._suspects.get(task)
        if suspect is None:
            return None
        heard = self._heard.get(task)
        fresh = heard is not None and heard[0] >= suspect.incarnation
        return Evidence(
            closed=suspect.closed,
            own_connection=None if self._connected_at is None else now - self._connected_at,
            leading=None if self._leading_since is None else now - self._leading_since,
            silent=now - heard[1] if fresh and heard is not None else None,
            liveness=self.liveness,
        )

    def due(
        self, now: float, *, connected: bool, live: Mapping[int, int] | None = None
    ) -> dict[str, list[Declared]]:
        """The tasks to declare lost now, by operator (each once). ``live``: task ->
        incarnation of every znode there now; a suspect with a newer one is back (it
        re-registered, or Storm restarted it) and is not declared. O(suspects)."""
        self.observe(now, connected=connected)
        out: dict[str, list[Declared]] = {}
        bounds = Bounds(grace=self.grace, answer_secs=self.answer_secs)
        for task in sorted(self._suspects):
            suspect = self._suspects[task]
            if live is not None and live.get(task, suspect.incarnation) > suspect.incarnation:
                del self._suspects[task]
                continue
            evidence = self.evidence(task, now)
            assert evidence is not None
            _, reason = verdict(evidence, bounds)
            if reason is None:
                continue
            declared = Declared(
                task=task, operator=suspect.operator, incarnation=suspect.incarnation, reason=reason
            )
            self._declared[task] = declared
            del self._suspects[task]
            out.setdefault(suspect.operator, []).append(declared)
        return out

    @property
    def declared(self) -> frozenset[int]:
        """Tasks declared lost and not back yet."""
        return frozenset(self._declared)

    def declared_as(self, task: int, incarnation: int) -> bool:
        """Whether ``task``'s ``incarnation`` is the one declared lost (a newer one is not)."""
        declared = self._declared.get(task)
        return declared is not None and declared.incarnation == incarnation
