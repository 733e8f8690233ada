"""What a topology's status reports: the facts from Nimbus and ZooKeeper (thin reads),
decided on by ``elastorm.controller.problems`` (``elastorm status``, ``cluster status``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from elastorm.controller.model import TaskRecord
from elastorm.controller.problems import TopologyFacts, problems
from elastorm.errors import UserError
from elastorm.runtime.migrate import connected
from elastorm.runtime.nimbus import storm_facts
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.problems import read_tasks, zk_facts

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Gathered:
    """The facts of one topology, its live tasks, and why Nimbus was not asked (if not)."""

    facts: TopologyFacts
    tasks: Mapping[int, TaskRecord] = field(default_factory=dict)
    nimbus_note: str | None = None


def gather(topology: str, zookeeper: str, nimbus: tuple[str, int] | None) -> Gathered:
    """Read ``topology``'s facts from Nimbus (if given and answering) and ZooKeeper
    (``UserError`` if ZooKeeper does not answer)."""
    facts = TopologyFacts(topology=topology, now=time.time())
    note = None if nimbus else "Nimbus not asked"
    if nimbus is not None:
        try:
            facts = storm_facts(*nimbus, facts)
        except UserError as exc:
            note = str(exc)
    with connected(zookeeper) as client:
        facts = zk_facts(client, facts)
        tasks = read_tasks(client, ZnodeLayout(topology))
    return Gathered(facts=facts, tasks=tasks, nimbus_note=note)


def busiest_task(tasks: Mapping[int, TaskRecord], operator: str) -> TaskRecord | None:
    """``operator``'s live task owning the most key groups (ties: the lowest task id), or
    None: the task whose process a crash test kills."""
    mine = [r for r in tasks.values() if r.identity.operator == operator]
    if not mine:
        return None
    return min(mine, key=lambda r: (-len(r.heartbeat.key_groups), r.identity.task_id))


class ProblemWatch:
    """While a run waits on its topology: Nimbus's problems with it (a component that
    keeps dying, with its error; the scheduler's refusal), each component's logged once
    when it first appears, asked at most every ``every`` s. A run whose components
    all died at their start said only "no spout stats file yet" for 900 s (the hosts
    test, session 35); now the first line of the reason is in the run's log."""

    def __init__(self, nimbus: tuple[str, int], topology: str, every: float = 30.0) -> None:
        self.nimbus = nimbus
        self.topology = topology
        self.every = every
        self.reported: set[str] = set()
        self._asked = -float("inf")

    def poll(self, now: float) -> list[str]:
        """The problems first seen now (already logged); [] between asks, or if Nimbus
        does not answer (the run's own wait reports a dead cluster)."""
        if now - self._asked < self.every:
            return []
        self._asked = now
        try:
            blank = TopologyFacts(topology=self.topology, now=time.time())
            facts = storm_facts(*self.nimbus, blank)
        except UserError:
            return []
        new = [p for p in problems(facts) if p.current and p.where not in self.reported]
        for p in new:
            self.reported.add(p.where)
            log.warning("%s: %s", self.topology, p.line)
        return [p.line for p in new]
