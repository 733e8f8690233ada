"""The chaos harness's split-brain check: did any key group ever have two owners at one
routing epoch?

While a run goes on, ``OwnerSampler`` reads every live keyed task's heartbeat
(``tasks/<task-id>`` in ZooKeeper) several times a second. A heartbeat says which key
groups the task owns outright (its coordinator's ``ACTIVE`` groups, i.e. the groups it
is applying tuples of) and the newest routing epoch the task has seen, both taken at
the same moment (``ElasticBolt.measure``). Each (task, operator, group, epoch) seen is
a ``Claim``. ``two_owners`` then finds every (operator, group, epoch) claimed by more
than one task: the design promises one owner per key group per routing epoch
(docs/failures.md, "Fencing"), so the harness's target is none, ever.

A task cut off from ZooKeeper cannot publish, so what it claims meanwhile is not
seen; when it comes back it is fenced before it publishes again. Claims at different
epochs (an old owner's last heartbeat, a new owner's first) are a handover, not two
owners.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """Task ``task`` said it owned ``group`` of ``operator`` with routing ``epoch``."""

    task: int
    operator: str
    group: int
    epoch: int

    def __post_init__(self) -> None:
        if min(self.task, self.group, self.epoch) < 0:
            raise ValueError(f"task, group and epoch must be >= 0: {self}")


def two_owners(claims: Iterable[Claim]) -> list[dict]:
    """Every ``(operator, group, epoch)`` claimed by two tasks or more, sorted.

    >>> two_owners([Claim(task=1, operator="op", group=3, epoch=5),
    ...             Claim(task=2, operator="op", group=3, epoch=6)])
    []
    >>> two_owners([Claim(task=1, operator="op", group=3, epoch=5),
    ...             Claim(task=2, operator="op", group=3, epoch=5)])
    [{'operator': 'op', 'group': 3, 'epoch': 5, 'tasks': [1, 2]}]
    """
    owners: dict[tuple[str, int, int], set[int]] = {}
    for c in claims:
        owners.setdefault((c.operator, c.group, c.epoch), set()).add(c.task)
    return [
        {"operator": op, "group": g, "epoch": e, "tasks": sorted(tasks)}
        for (op, g, e), tasks in sorted(owners.items())
        if len(tasks) > 1
    ]


class OwnerSampler:
    """Samples the keyed tasks' heartbeats of one topology every ``every`` s on a
    thread of its own, from ``start()`` until ``stop()``; ``summary()`` reports them.

    ``driver.topology`` names the topology once the run has submitted it (empty
    before). A ZooKeeper outage (the ``zk-stop`` scenario) only costs samples:
    they are counted as ``failed``.
    """

    def __init__(self, hosts: str, driver: Any, every: float = 0.2) -> None:
        self.hosts, self.driver, self.every = hosts, driver, every
        self.claims: set[Claim] = set()
        self.samples = self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="owner-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def summary(self) -> dict:
        """What the run's record keeps: samples, claims seen, and the two-owner cases."""
        return {
            "samples": self.samples,
            "failed_samples": self.failed,
            "claims": len(self.claims),
            "two_owners": two_owners(self.claims),
        }

    def _run(self) -> None:
        from elastorm.zk.client import make_client
        from elastorm.zk.layout import ZkSettings

        client = make_client(ZkSettings(hosts=self.hosts))
        client.start_async()  # connects (and reconnects) in the background
        try:
            while not self._stop.wait(self.every):
                name = self.driver.topology
                if not name or not client.connected:
                    self.failed += bool(name)
                    continue
                try:
                    self.claims |= set(_claims(client, name))
                    self.samples += 1
                except Exception:  # ZooKeeper went away mid-sample: a lost sample
                    self.failed += 1
        finally:
            client.stop()
            client.close()


def _claims(client, topology: str) -> Iterable[Claim]:
    """The claims in the live tasks' heartbeats now (a task that left meanwhile is
    skipped; a malformed znode raises, which the caller counts as a failed sample)."""
    from kazoo.exceptions import NoNodeError

    from elastorm.zk.codec import decode_task
    from elastorm.zk.layout import ZnodeLayout

    layout = ZnodeLayout(topology)
    try:
        children = client.get_children(layout.tasks)
    except NoNodeError:
        return
    for child in children:
        try:
            data, _ = client.get(f"{layout.tasks}/{child}")
        except NoNodeError:
            continue
        record = decode_task(data)
        for g in record.heartbeat.key_groups:
            yield Claim(
                task=record.task_id,
                operator=record.identity.operator,
                group=g,
                epoch=record.heartbeat.epoch,
            )
