"""Which controller task acts: the one that leads; every other one stands by.

Sans-IO. A topology runs ``1 + elastorm.controller.standbys`` controller tasks. Their
stores (``elastorm.zk.store``) elect the leader through the ephemeral
``controller/leader`` znode; the others see ``STANDBY`` and try again until that
znode goes, one ZooKeeper session after the leader's process died. A standby sends
no command, writes no decision or status, declares nobody lost and takes no liveness
connection: it only watches. :class:`Leadership` turns what a task's store says into
its role and reports the one moment it starts leading, when it does what a
restarted controller does (load the decisions, resume past the ``issued`` epoch,
publish its liveness address, declare the tasks that died meanwhile lost, including
those that died with the old leader, and recover them).

Two decisions a successor makes from what it saw while standing by are here too:
which restarted tasks it still has to recover (:func:`restarted_to_recover`), and
whether it shares its leader's worker, which would make it useless against the loss
of that worker (:func:`shared_worker`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class Role(enum.Enum):
    """``STARTING``: decisions not loaded, no other leader seen. ``STANDBY``: another
    controller task leads. ``LEADING``: this one leads and has loaded the decisions."""

    STARTING = "starting"
    STANDBY = "standby"
    LEADING = "leading"


@dataclass(frozen=True, kw_only=True, slots=True)
class TookOver:
    """This task started leading at ``at``; it had stood by since ``standby_since``
    (None: it led from its start, or from a restart with the same controller id)."""

    at: float
    standby_since: float | None

    def __post_init__(self) -> None:
        if self.standby_since is not None and self.standby_since > self.at:
            raise ValueError(f"standby since {self.standby_since} after the takeover {self.at}")


@dataclass
class Leadership:
    """One controller task's role, from what its store says on each look."""

    role: Role = Role.STARTING
    standby_since: float | None = None

    def observe(self, *, standby: bool, loaded: bool, now: float) -> TookOver | None:
        """Feed one look: ``loaded`` (this task leads and has its decisions), else
        ``standby`` (another task leads). Returns :class:`TookOver` exactly once, on
        the look it starts leading. A leader stays leading: losing the lead later is
        the store's ``CONFLICT``, which releases no command (``ControllerRuntime``)."""
        if self.role is Role.LEADING:
            return None
        if loaded:
            self.role = Role.LEADING
            return TookOver(at=now, standby_since=self.standby_since)
        if standby and self.role is not Role.STANDBY:
            self.role = Role.STANDBY
            if self.standby_since is None:
                self.standby_since = now
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Restarted:
    """A keyed task's ``TaskStarted(restarted=True)`` seen before this controller task
    led: it came back empty, having read routing epoch ``stale_through`` at its start
    (it ignores commands at or below it)."""

    operator: str
    task: int
    stale_through: int


def restarted_to_recover(
    seen: Iterable[Restarted], routing_epochs: Mapping[str, int]
) -> list[Restarted]:
    """The restarted tasks a new leader must recover, of those reported before it led
    (each report kept: its ``stale_through`` goes to the recovery).

    A leader recovers a restarted task on its report, restoring the task's groups
    elsewhere (a routing change, past the task's ``stale_through``, the routing epoch
    it read at its start), and may give it work afterwards. A successor that recovered
    such a task again would take that work away and lose its state. So only a task
    whose operator's routing has not changed since its start (``routing_epochs``: the
    loaded tables' epochs; an operator without one counts as -1) is recovered: its
    predecessor never acted on its restart. (A routing change made for another reason
    between the restart and the predecessor's death leaves the task to its stall
    reports; the report reaches every controller task within milliseconds of the
    restart, so that window is narrow.) In report order, each task once. O(reports).

    >>> seen = [Restarted(operator="op", task=3, stale_through=7),
    ...         Restarted(operator="op", task=4, stale_through=5)]
    >>> [(r.operator, r.task) for r in restarted_to_recover(seen, {"op": 7})]
    [('op', 3)]
    """
    out: list[Restarted] = []
    for r in seen:
        fresh = routing_epochs.get(r.operator, -1) <= r.stale_through
        if fresh and all((o.operator, o.task) != (r.operator, r.task) for o in out):
            out.append(r)
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerId:
    """A controller task's Storm worker: its host and the worker's process id (the
    parent of the task's Python process)."""

    host: str
    worker_pid: int


def shared_worker(me: WorkerId, leader: WorkerId | None, workers: int) -> str | None:
    """Why this standby cannot take over after its leader's worker dies, or None: it
    runs in that same worker while the topology has more than one (with one worker,
    nothing can be placed apart).

    >>> shared_worker(WorkerId(host="h", worker_pid=9), WorkerId(host="h", worker_pid=9), 4)[:29]
    'standby and leader share work'
    >>> shared_worker(WorkerId(host="h", worker_pid=9), WorkerId(host="h", worker_pid=8), 4)
    """
    if leader is None or workers <= 1 or leader != me:
        return None
    return (
        f"standby and leader share worker {me.worker_pid} on {me.host} out of {workers} "
        "workers: losing that worker loses both (no takeover until Storm restarts it)"
    )
