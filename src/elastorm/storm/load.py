"""What a keyed task measures about its own load, for its heartbeat.

The load statistics of Kumbhare et al. 2015, section VI (adaptive load balancing and
elasticity) and Madsen & Zhou 2015, section 4 (the adaptation manager's statistics).

Per heartbeat interval: the input rate of each key group (tuples applied per
second), the process's CPU share (``time.process_time`` over wall time, as a
share of one core), the mean latency from the upstream's emit to applied (below),
the service time (seconds the task worked per tuple applied), and an estimate of
its input queue. A ShellBolt's Python
process cannot see Storm's receive queue, so the queue comes from Little's law:
``L = lambda * W`` with ``lambda`` the input rate and ``W`` the mean time from the
upstream's emit (the tuple's ``ts``) to its processing. That needs ``ts`` to be a
wall-clock emit stamp; a tuple whose ``ts`` is more than ``MAX_LATENCY`` away from
now (an event time, like the flights job's ``time_hour``) is left out of ``W``.

**External load.** Madsen & Zhou 2015, section 7.2 (the experiment in which load shifts
between nodes: checkpoint allocation and load balancing), put some nodes under an external
load that takes 70% of their CPU. All our nodes share one machine, so the load is
emulated where it bites: a task on a node with external share ``s`` idles
``s / (1 - s)`` of every second it worked (it gets ``1 - s`` of the CPU it
wants), so its throughput, queue and latency really suffer; its node's CPU as the
controller sees it is the measured share plus ``s`` (``elastorm.external_load``).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

_MIN_SLEEP = 0.005  # pay the idle debt in slices of at least 5 ms
MAX_LATENCY = 600.0  # s: a larger gap means ts is not an emit stamp


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadSample:
    """One interval's measurements."""

    rates: dict[int, float]
    queue: float
    cpu: float
    seconds: float
    latency: float | None = None  # mean s from the upstream's emit to applied (stamped tuples)
    service: float | None = None  # s of work per applied tuple


class LoadMeter:
    """Counts what a task applies and how long it works; ``sample()`` ends an interval."""

    def __init__(
        self,
        *,
        external: float = 0.0,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 <= external < 1:
            raise ValueError(f"external load must be in [0, 1), got {external}")
        self.external = external
        self._wall, self._mono, self._cpu, self._sleep = wall, mono, cpu, sleep
        self._counts: Counter[int] = Counter()
        self._latency = 0.0
        self._stamped = 0
        self._since = mono()
        self._cpu_since = cpu()
        self._debt = 0.0
        self._busy = 0.0
        self.idled = 0.0

    def applied(self, key_group: int, ts: float) -> None:
        """One tuple of ``key_group``, emitted upstream at wall time ``ts``, was applied."""
        self._counts[key_group] += 1
        waited = self._wall() - ts
        if -1.0 <= waited <= MAX_LATENCY:
            self._latency += max(0.0, waited)
            self._stamped += 1

    def worked(self, seconds: float) -> None:
        """The task just worked ``seconds``; under external load, idle its share."""
        self._busy += seconds
        if not self.external:
            return
        self._debt += seconds * self.external / (1.0 - self.external)
        if self._debt >= _MIN_SLEEP:
            start = self._mono()
            self._sleep(self._debt)
            slept = self._mono() - start
            self.idled += slept
            self._debt = max(0.0, self._debt - slept)

    def sample(self) -> LoadSample:
        """Rates, queue estimate and CPU share since the last sample; starts a new interval."""
        now, cpu_now = self._mono(), self._cpu()
        dt = max(now - self._since, 1e-6)
        n = sum(self._counts.values())
        rates = {g: c / dt for g, c in sorted(self._counts.items())}
        latency = self._latency / self._stamped if self._stamped else None
        queue = (n / dt) * latency if latency is not None else 0.0
        service = self._busy / n if n else None
        cpu = max(0.0, cpu_now - self._cpu_since) / dt
        self._counts.clear()
        self._latency = 0.0
        self._stamped = 0
        self._busy = 0.0
        self._since, self._cpu_since = now, cpu_now
        return LoadSample(
            rates=rates, queue=queue, cpu=cpu, seconds=dt, latency=latency, service=service
        )


def resident_bytes() -> float | None:
    """This process's resident memory (Linux ``/proc/self/statm``), or ``None``."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return float(pages * os.sysconf("SC_PAGE_SIZE"))


def start_liveness(publisher, task: int):
    """Hold a liveness connection to the controller (``elastorm.storm.liveness``) under
    the incarnation ``publisher`` registered; a ``fenced`` answer fences the publisher
    (the task then stops, ``KeyedOperator.stop_if_fenced``)."""
    from elastorm.storm.liveness import LivenessClient
    from elastorm.zk.client import client_keyring
    from elastorm.zk.requests import ZK_ERRORS

    # The published address, kept by a watch (set on the client's own thread, once
    # ZooKeeper answers): the client looks at it every second and must not wait for
    # ZooKeeper to do so (a beat waits behind it).
    published: dict[str, str | None] = {}

    def on_address(data, _stat) -> None:
        published["address"] = data.decode() if data else None

    def address() -> str | None:
        if not published:
            try:
                publisher.client.DataWatch(publisher.layout.liveness, on_address)
            except ZK_ERRORS:
                return None
        return published.get("address")

    return LivenessClient(
        task,
        address=address,
        incarnation=lambda: publisher.incarnation,
        on_fenced=lambda: publisher.fence("declared lost while its liveness connection was down"),
        keyring=client_keyring(publisher.client),
    ).start()


def start_heartbeats(conf, task: int, operator: str, node: str, heartbeat):
    """Start a ``HeartbeatPublisher`` for a keyed task in the topology's ZooKeeper.

    Returns it, or ``None`` (logged) if the conf names no ZooKeeper: processing
    never depends on heartbeats. ``heartbeat`` is called on the publisher's thread.
    """
    from elastorm.zk.heartbeat import HeartbeatPublisher, default_identity
    from elastorm.zk.layout import ZnodeLayout, ZnodeLayoutError, zk_settings

    try:
        settings = zk_settings(conf)
        layout = ZnodeLayout(str(conf["topology.name"]))
    except (KeyError, ZnodeLayoutError) as exc:
        log.error("task %s: no heartbeats (%s)", task, exc)
        return None
    publisher = HeartbeatPublisher(
        layout=layout,
        identity=default_identity(task_id=task, operator=operator, node_id=node),
        heartbeat=heartbeat,
        settings=settings,
    )
    publisher.start()
    return publisher


def start_queries(heartbeats, task: int):
    """Start a keyed task's ``QueryInbox`` on its heartbeat publisher's client and
    topology (the state queries of ``elastorm state``); returns it."""
    from elastorm.zk.queries import QueryInbox

    inbox = QueryInbox(layout=heartbeats.layout, task=task, client=heartbeats.client)
    inbox.start()
    return inbox
