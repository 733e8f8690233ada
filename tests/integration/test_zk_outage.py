"""ZooKeeper stopped for 20 s: tasks keep processing, the controller holds its
decisions and flushes them afterwards, nothing is lost.

Talks to: a private ZooKeeper 3.8.4 server that this module starts and stops with
``elastorm.runtime.services`` (its own daemon name, port and data dir, built from the
project's ``zoo.cfg``), so stopping it does not disturb the shared server on
``cfg.zookeeper_port``.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest

from elastorm.controller.model import Allocation, Heartbeat, KeyGroupId
from elastorm.core.routing import RoutingTable
from elastorm.runtime import services
from elastorm.runtime.config import load_config
from elastorm.zk.client import make_client
from elastorm.zk.codec import (
    decode_checkpoints,
    decode_routing,
    decode_task,
)
from elastorm.zk.heartbeat import HeartbeatPublisher, PublisherState, default_identity
from elastorm.zk.layout import ZkSettings, ZnodeLayout
from elastorm.zk.store import ControllerStore, StoreStatus
from elastorm.zk.view import TaskLeft
from elastorm.zk.watcher import ClusterWatcher

pytestmark = pytest.mark.integration

NAME = "zookeeper-zktest-outage"
OUTAGE = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((services.LOOPBACK, 0))
        return s.getsockname()[1]


def private_zookeeper(cfg, name: str = NAME) -> services.Daemon:
    """A second ZooKeeper daemon with its own port and a fresh data dir."""
    data = cfg.home / name
    shutil.rmtree(data, ignore_errors=True)
    return services.zookeeper_daemon(cfg, name=name, port=_free_port(), data_dir=data)


def start_zookeeper(cfg, daemon: services.Daemon) -> None:
    pid = services.start(cfg, daemon)
    services.wait_until(
        lambda: services.zookeeper_ok(daemon.port),
        daemon.name,
        30,
        pid,
        cfg.logs / f"{daemon.name}.log",
    )


class Caller:
    """Stands for a task's processing loop: counts, and asks the publisher for its
    state and events every iteration, recording the longest gap between iterations."""

    def __init__(self, pub: HeartbeatPublisher) -> None:
        self.pub, self.count, self.max_gap, self.events = pub, 0, 0.0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            self.pub.state()
            self.events.extend(self.pub.poll_events())
            self.count += 1
            now = time.monotonic()
            self.max_gap = max(self.max_gap, now - last)
            last = now
            time.sleep(0.001)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


@pytest.fixture
def zookeeper():
    cfg = load_config()
    services.stop(cfg, NAME)  # a leftover from an interrupted run
    daemon = private_zookeeper(cfg)
    start_zookeeper(cfg, daemon)
    yield cfg, daemon
    services.stop(cfg, NAME)


def test_zookeeper_down_for_20_s_loses_nothing(zookeeper) -> None:
    cfg, daemon = zookeeper
    settings = ZkSettings(
        hosts=f"127.0.0.1:{daemon.port}", session_timeout=4.0, heartbeat_interval=0.5
    )
    layout = ZnodeLayout("outage")
    pubs = [
        HeartbeatPublisher(
            layout=layout,
            identity=default_identity(task_id=i, operator="op", node_id=f"n{i}"),
            heartbeat=lambda i=i: Heartbeat(key_groups=(i,)),
            settings=settings,
        )
        for i in (1, 2)
    ]
    callers = [Caller(p) for p in pubs]
    ctl = make_client(settings)
    ctl.start(timeout=10)
    watcher = ClusterWatcher(layout=layout, client=ctl, settings=settings)
    store = ControllerStore(layout=layout, controller_id="ctl", client=ctl, settings=settings)
    for part in (*pubs, *callers, watcher, store):
        part.start()
    store.load(10)
    store.set_routing("op", RoutingTable(epoch=1, owners=(1, 2, 1)))
    wait_for(lambda: len(watcher.live()) == 2, 10, "both tasks seen")
    seq_before = {t: r.seq for t, r in watcher.live().items()}
    watcher.poll_events()

    # ---- outage
    down_at = time.monotonic()
    assert services.stop(cfg, NAME)
    wait_for(lambda: store.status() is StoreStatus.OFFLINE, 10, "store offline")
    wait_for(
        lambda: all(p.state() is PublisherState.DISCONNECTED for p in pubs), 10, "tasks see it"
    )
    counts_down = [c.count for c in callers]
    store.set_routing("op", RoutingTable(epoch=2, owners=(2, 2, 1)))
    store.set_checkpoints(Allocation({KeyGroupId("op", 0): ("n1",)}))
    asked = time.monotonic()
    durable = store.flush(0.05)
    flush_wait = time.monotonic() - asked
    assert not durable and flush_wait < 0.2  # nothing acted on: its commands stay held
    assert store.pending() == 2
    time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_at)))
    counts_up = [c.count for c in callers]
    assert store.decisions().routing["op"].epoch == 2  # held in memory all along

    # ---- back
    start_zookeeper(cfg, daemon)
    back_at = time.monotonic()
    assert store.flush(30), (store.status(), store.pending())
    flushed = time.monotonic() - back_at
    wait_for(lambda: all(p.state() is PublisherState.REGISTERED for p in pubs), 30, "re-registered")
    registered = time.monotonic() - back_at
    wait_for(
        lambda: (
            all(r.seq > seq_before[t] for t, r in watcher.live().items())
            and len(watcher.live()) == 2
        ),
        10,
        "fresh heartbeats seen",
    )
    for part in callers:
        part.stop()

    expired = [any(e.state is PublisherState.EXPIRED for e in c.events) for c in callers]
    lost = [e for e in watcher.poll_events() if isinstance(e, TaskLeft)]
    during = [u - d for u, d in zip(counts_up, counts_down, strict=True)]
    print(
        f"outage {OUTAGE:.0f} s: caller iterations during outage {during}, "
        f"max caller gap {max(c.max_gap for c in callers) * 1000:.1f} ms, flush answered "
        f"{flush_wait * 1000:.2f} ms, decisions flushed {flushed:.2f} s and tasks registered "
        f"{registered:.2f} s after restart, sessions expired {expired}, TaskLeft seen {len(lost)}"
    )
    # The callers never blocked: they kept iterating (~1 ms sleep each) all along. A
    # call that waited on ZooKeeper would stall them for its request timeout (2 s) or
    # the whole outage; below that, a gap is the scheduler of a loaded 2-core machine
    # (up to ~1 s seen while Storm workers ran beside this test).
    assert all(n > 1000 for n in during)
    assert max(c.max_gap for c in callers) < settings.request_timeout
    # Every held decision reached ZooKeeper.
    assert store.status() is StoreStatus.ONLINE and store.pending() == 0
    _, table = decode_routing(ctl.get(layout.routing("op"))[0])
    assert table == RoutingTable(epoch=2, owners=(2, 2, 1))
    alloc = decode_checkpoints(ctl.get(layout.checkpoints)[0])
    assert alloc == Allocation({KeyGroupId("op", 0): ("n1",)})
    # Both ephemeral znodes exist (kept or re-created) with fresh heartbeats.
    for pub in pubs:
        data, stat = ctl.get(pub.path)
        assert stat.ephemeralOwner != 0 and decode_task(data).seq > 0
    # And new decisions go through again.
    store.set_routing("op", RoutingTable(epoch=3, owners=(1, 1, 1)))
    assert store.flush(5)

    for part in (*pubs, watcher, store):
        part.stop()
    ctl.stop()
    ctl.close()
