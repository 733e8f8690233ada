"""What a topology's status reports: the facts from Nimbus and ZooKeeper (thin reads),
decided on by ``elastorm.controller.problems`` (``elastorm status``, ``cluster status``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from elastorm.controller.model import TaskRecord
from elastorm.controller.problems import TopologyFacts
from elastorm.errors import UserError
from elastorm.runtime.migrate import connected
from elastorm.runtime.nimbus import storm_facts
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.problems import read_tasks, zk_facts


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
