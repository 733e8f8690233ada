"""The chaos harness's split-brain check: did any key group ever have two owners at one
routing epoch?

While a run goes on, ``OwnerSampler`` reads every live keyed task's heartbeat
(``tasks/<task-id>`` in ZooKeeper) several times a second. A heartbeat says which key
groups the task owns outright (its coordinator's ``ACTIVE`` groups, i.e. the groups it
is applying tuples of) and the newest routing epoch under which it came to own one of
them, both taken at the same moment (``ElasticBolt.measure``; until session 27 the
newest epoch the task had seen on any message, so a direct move's source, numbering
its last checkpoints in the move's epoch, claimed the group at the epoch its target
then claimed it at: two owners reported for a handover). Each (task, operator, group, epoch) seen is
a ``Claim``. ``two_owners`` then finds every (operator, group, epoch) claimed by more
than one task: the design promises one owner per key group per routing epoch
(docs/failures.md, "Fencing"), so the harness's target is none, ever.

Claims at different epochs (an old owner's last heartbeat, a new owner's first) are a
handover, not two owners. But a task that was cut off and came back unfenced would
claim its old groups at its old epoch for as long as it runs, beside their new owner:
``stale_owners`` finds a claim still published ``grace`` s after another task first
claimed the same group at a newer epoch. Times are the heartbeats' own publish times,
so a dead task's last znode (kept until its session ends) does not count as claiming
on. A task cut off from ZooKeeper cannot publish, so what it applies meanwhile is not
seen here (the totals check covers it).

A CPA or CPAL source is not stale while it works through its queue: it keeps applying
(and sending the outputs of) the tuples sent to it before the switch until its last
toCheckpoint arrives (docs/protocols.md, "CPA"), so on a loaded machine it claims the
group at its old epoch for as long as it lags (12-15 s in ``join/cpal-source``,
sessions 26-27). The sampler also reads the controller's status, which names each
migration's ends still to report done; ``grace`` then counts from the last time the
controller still waited for that source (a source that never finishes stays flagged:
the controller reports its move stuck).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
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


#: Seconds a live old owner may go on publishing a group after its handover: its next
#: tick measures a new heartbeat, and ticks queue behind data tuples on a busy machine.
GRACE = 5.0


#: ``(task, operator, group)`` of a move's source -> first and last wall-clock time the
#: controller's status still waited for that source to finish handing the group over.
Handing = Mapping[tuple[int, str, int], tuple[float, float]]


def stale_owners(
    seen: Mapping[Claim, tuple[float, float]],
    grace: float = GRACE,
    handing: Handing | None = None,
) -> list[dict]:
    """Every claim of a group published more than ``grace`` s after another task first
    claimed it at a newer epoch (or, for a move's source, after the controller last
    waited for it: ``handing``); ``seen`` maps each claim to the first and last publish
    times (wall clock) it was seen with.

    >>> old = Claim(task=1, operator="op", group=3, epoch=5)
    >>> new = Claim(task=2, operator="op", group=3, epoch=6)
    >>> stale_owners({old: (0.0, 11.0), new: (10.0, 30.0)})
    []
    >>> stale_owners({old: (0.0, 16.0), new: (10.0, 30.0)})
    [{'operator': 'op', 'group': 3, 'task': 1, 'epoch': 5, 'newer': 2, 'seconds': 6.0}]
    >>> stale_owners({old: (0.0, 16.0), new: (10.0, 30.0)}, handing={(1, "op", 3): (9.0, 12.0)})
    []
    >>> stale_owners({old: (0.0, 18.0), new: (10.0, 30.0)}, handing={(1, "op", 3): (9.0, 12.0)})
    [{'operator': 'op', 'group': 3, 'task': 1, 'epoch': 5, 'newer': 2, 'seconds': 6.0}]
    """
    out = []
    for old, (_, last) in sorted(seen.items(), key=lambda kv: _order(kv[0])):
        for new, (first, _) in sorted(seen.items(), key=lambda kv: _order(kv[0])):
            if (new.operator, new.group) != (old.operator, old.group) or new.task == old.task:
                continue
            since = max(first, (handing or {}).get((old.task, old.operator, old.group), (0, 0))[1])
            if new.epoch > old.epoch and last - since > grace:
                out.append(
                    {"operator": old.operator, "group": old.group, "task": old.task,
                     "epoch": old.epoch, "newer": new.task, "seconds": round(last - since, 2)}
                )  # fmt: skip
                break
    return out


def _order(c: Claim) -> tuple:
    """Sort key: by operator, group, epoch, task (deterministic output)."""
    return (c.operator, c.group, c.epoch, c.task)


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


def stale_outputs(
    arrivals: Mapping[str, Mapping[str, Mapping[str, list[int]]]],
    senders: Mapping[str, Iterable[str]],
    restored_at: float,
) -> dict:
    """What the sink received from a cut-off node's tasks (``senders``: per role, each
    task as ``"<task>.<incarnation>"`` at the cut, so its restarted self does not count)
    after every group they owned was restored elsewhere at ``restored_at`` (wall clock):
    ``arrivals`` is the sink's ``arrivals[role][sender][second] = [updates, replaced]``.

    ``updates`` and ``replaced`` (key totals those updates replaced) count whole
    seconds after the restore's own second, a lower bound; ``in_restore_second`` what
    came in that second, before or after the restore; ``last_after`` the seconds from
    the restore to the last one.

    >>> arrivals = {"op2": {"7.1": {"100": [3, 2], "101": [2, 1], "104": [1, 0]},
    ...                     "7.2": {"130": [4, 4]}, "5.1": {"104": [9, 9]}}}
    >>> stale_outputs(arrivals, {"op2": ["7.1"]}, 100.5)
    {'updates': 3, 'replaced': 1, 'in_restore_second': 3, 'last_after': 3.5}
    """
    updates = replaced = during = 0
    last = None
    for role, names in senders.items():
        for sender in names:
            for second, (count, took) in arrivals.get(role, {}).get(sender, {}).items():
                if int(second) > int(restored_at):
                    updates, replaced = updates + count, replaced + took
                    last = max(last or 0, int(second))
                elif int(second) == int(restored_at):
                    during += count
    return {
        "updates": updates,
        "replaced": replaced,
        "in_restore_second": during,
        "last_after": None if last is None else round(last - restored_at, 1),
    }


class OwnerSampler:
    """Samples the keyed tasks' heartbeats of one topology every ``every`` s on a
    thread of its own, from ``start()`` until ``stop()``; ``summary()`` reports them.

    ``driver.topology`` names the topology once the run has submitted it (empty
    before). A ZooKeeper outage (the ``zk-stop`` scenario) only costs samples:
    they are counted as ``failed``.
    """

    def __init__(self, hosts: str, driver: Any, every: float = 0.2) -> None:
        self.hosts, self.driver, self.every = hosts, driver, every
        self.claims: dict[Claim, tuple[float, float]] = {}
        self.handing: dict[tuple[int, str, int], tuple[float, float]] = {}
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
            "stale_owners": stale_owners(self.claims, handing=self.handing),
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
                    for claim, at in _claims(client, name):
                        first, last = self.claims.get(claim, (at, at))
                        self.claims[claim] = (min(first, at), max(last, at))
                    now = time.time()
                    for source in _handing(client, name):
                        first, _ = self.handing.get(source, (now, now))
                        self.handing[source] = (first, now)
                    self.samples += 1
                except Exception:  # ZooKeeper went away mid-sample: a lost sample
                    self.failed += 1
        finally:
            client.stop()
            client.close()


def _claims(client, topology: str) -> Iterable[tuple[Claim, float]]:
    """The claims in the live tasks' heartbeats now, each with the time its heartbeat
    was published (a task that left meanwhile is skipped; a malformed znode raises,
    which the caller counts as a failed sample)."""
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
            claim = Claim(
                task=record.task_id,
                operator=record.identity.operator,
                group=g,
                epoch=record.heartbeat.epoch,
            )
            yield claim, record.time


def _handing(client, topology: str) -> Iterable[tuple[int, str, int]]:
    """``(source task, operator, group)`` of every move the controller's status shows
    in flight with its source still to report done."""
    from elastorm.zk.layout import ZnodeLayout
    from elastorm.zk.requests import read_operators, read_status

    layout = ZnodeLayout(topology)
    for operator in read_operators(client, layout):
        for m in (read_status(client, layout, operator) or {}).get("migrations", []):
            if "source" in m["waiting_for"]:
                yield m["waiting_for"]["source"], operator, m["key_group"]
