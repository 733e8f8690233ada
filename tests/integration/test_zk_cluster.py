"""Heartbeats, the cluster watcher and the controller store on a real ZooKeeper.

Talks to: the ZooKeeper 3.8.4 server started by ``elastorm.runtime.services.ensure_zookeeper``
(loopback, ``cfg.zookeeper_port``). Every test works under its own topology root
(``/elastorm/zktest-<random>``) and deletes it afterwards, so it shares the server
with other tests and Storm runs safely.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from elastorm.controller.model import Allocation, Heartbeat, KeyGroupId
from elastorm.core.routing import RoutingTable
from elastorm.runtime.config import load_config
from elastorm.runtime.services import ensure_zookeeper, stop
from elastorm.zk.client import make_client
from elastorm.zk.codec import (
    decode_routing,
    decode_task,
)
from elastorm.zk.heartbeat import HeartbeatPublisher, PublisherState, default_identity
from elastorm.zk.layout import ZkSettings, ZnodeLayout
from elastorm.zk.store import (
    ControllerStore,
    StoreConflictError,
    StoreError,
    StoreStatus,
    StoreUnavailableError,
)
from elastorm.zk.view import NodeLost, TaskJoined, TaskLeft
from elastorm.zk.watcher import ClusterWatcher

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"
SESSION_TIMEOUT = 4.0  # the server's minimum with tickTime=2000
TICK = 2.0


@pytest.fixture(scope="module")
def settings():
    cfg = load_config()
    started = ensure_zookeeper(cfg)
    yield ZkSettings(
        hosts=f"127.0.0.1:{cfg.zookeeper_port}",
        session_timeout=SESSION_TIMEOUT,
        heartbeat_interval=0.5,
    )
    if started:
        stop(cfg, "zookeeper")


@pytest.fixture
def admin(settings):
    client = make_client(settings)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def layout(admin):
    lay = ZnodeLayout(f"zktest-{uuid.uuid4().hex[:8]}")
    yield lay
    admin.delete(lay.base, recursive=True)


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s: {what}")


def collect(loop, into: list):
    into.extend(loop.poll_events())
    return into


def child(script: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


HEARTBEAT_CHILD = """
    import sys, time
    from elastorm.controller.model import Heartbeat
    from elastorm.zk.heartbeat import HeartbeatPublisher, PublisherState, default_identity
    from elastorm.zk.layout import ZkSettings, ZnodeLayout
    hosts, topology, task_id, node = sys.argv[1:5]
    pub = HeartbeatPublisher(
        layout=ZnodeLayout(topology),
        identity=default_identity(task_id=int(task_id), operator="op", node_id=node),
        heartbeat=lambda: Heartbeat(key_groups=(int(task_id),)),
        settings=ZkSettings(hosts=hosts, session_timeout=4.0, heartbeat_interval=0.5),
    )
    pub.start()
    while pub.state() is not PublisherState.REGISTERED:
        time.sleep(0.01)
    print("registered", flush=True)
    time.sleep(600)
"""


def test_task_registers_refreshes_its_load_and_leaves_cleanly(settings, layout, admin) -> None:
    load = {"beat": Heartbeat(key_groups=(0, 1), input_rates={0: 1.0})}
    watcher = ClusterWatcher(layout=layout, client=admin, settings=settings)
    watcher.start()
    pub = HeartbeatPublisher(
        layout=layout,
        identity=default_identity(task_id=5, operator="op", node_id="n1"),
        heartbeat=lambda: load["beat"],
        settings=settings,
    )
    pub.start()
    events: list = []
    wait_for(lambda: TaskJoined in map(type, collect(watcher, events)), 10, "join seen")
    data, stat = admin.get(layout.task(5))
    assert stat.ephemeralOwner != 0 and decode_task(data).heartbeat.key_groups == (0, 1)

    load["beat"] = Heartbeat(key_groups=(0, 1), input_rates={0: 42.0}, queue_length=7)
    wait_for(lambda: watcher.live()[5].heartbeat.queue_length == 7, 3 * 0.5 + 1, "refresh seen")
    seen = watcher.live()[5]
    assert dict(seen.heartbeat.input_rates)[0] == 42.0 and seen.identity.node_id == "n1"

    pub.stop()
    assert pub.state() is PublisherState.STOPPED
    wait_for(lambda: NodeLost in map(type, collect(watcher, events)), 2, "clean leave seen")
    assert [type(e) for e in events[-2:]] == [TaskLeft, NodeLost]
    assert events[-2].task_id == 5 and not watcher.live()
    watcher.stop()


def test_expired_session_re_creates_the_ephemeral_znode(settings, layout, admin) -> None:
    watcher = ClusterWatcher(layout=layout, client=admin, settings=settings)
    watcher.start()
    client = make_client(settings)
    client.start(timeout=10)
    pub = HeartbeatPublisher(
        layout=layout,
        identity=default_identity(task_id=1, operator="op", node_id="n1"),
        heartbeat=lambda: Heartbeat(key_groups=(3,)),
        settings=settings,
        client=client,
    )
    pub.start()
    wait_for(lambda: pub.state() is PublisherState.REGISTERED, 10, "registered")
    first = admin.exists(layout.task(1))
    events: list = []
    wait_for(lambda: TaskJoined in map(type, collect(watcher, events)), 5, "join seen")

    # Expire the publisher's session the standard way: a second client joins the
    # same session and closes it; the server then deletes the session's ephemerals.
    twin = KazooClient(hosts=settings.hosts, client_id=client.client_id, timeout=SESSION_TIMEOUT)
    twin.start(timeout=10)
    twin.stop()
    twin.close()

    seen: list = []
    wait_for(lambda: PublisherState.EXPIRED in [e.state for e in collect(pub, seen)], 10, "expiry")
    wait_for(lambda: pub.state() is PublisherState.REGISTERED, 10, "registered again")
    second = admin.exists(layout.task(1))
    assert second.czxid != first.czxid and second.ephemeralOwner == client.client_id[0]
    del events[:]
    wait_for(lambda: TaskJoined in map(type, collect(watcher, events)), 5, "re-join seen")
    assert type(events[0]) is TaskLeft and events[0].incarnation == first.czxid
    assert events[-1] == TaskJoined(
        task_id=1, operator="op", node_id="n1", incarnation=second.czxid
    )
    pub.stop()
    client.stop()
    client.close()
    watcher.stop()


def test_controller_sees_killed_tasks_leave_within_the_session_timeout(
    settings, layout, admin
) -> None:
    watcher = ClusterWatcher(layout=layout, client=admin, settings=settings)
    watcher.start()
    nodes = ["n1", "n2", "n3"]
    procs = [
        child(HEARTBEAT_CHILD, settings.hosts, layout.topology, str(i), n)
        for i, n in enumerate(nodes)
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "registered"
        wait_for(lambda: len(watcher.live()) == 3, 5, "three tasks seen")
        watcher.poll_events()
        killed_at = time.monotonic()
        for p in procs:
            p.send_signal(signal.SIGKILL)
        lost: dict[str, float] = {}
        left: list[TaskLeft] = []

        def all_lost():
            for e in watcher.poll_events():
                if isinstance(e, TaskLeft):
                    left.append(e)
                if isinstance(e, NodeLost):
                    lost[e.node_id] = time.monotonic() - killed_at
            return len(lost) == 3

        wait_for(all_lost, SESSION_TIMEOUT + TICK + 3, "every killed node lost")
    finally:
        for p in procs:
            p.kill()
            p.wait()
    latencies = sorted(lost.values())
    print(f"failure detection (session timeout {SESSION_TIMEOUT} s): {latencies}")
    # Detection comes from session expiry: not before the timeout, at most a tick late.
    assert SESSION_TIMEOUT - 0.5 <= latencies[0]
    assert latencies[-1] <= SESSION_TIMEOUT + TICK + 1.0
    assert sorted(e.task_id for e in left) == [0, 1, 2]
    assert [e.task_id for e in left if e.node_id == "n2"] == [1]  # the lost node's task
    watcher.stop()


CONTROLLER_CHILD = """
    import sys, time
    from elastorm.controller.model import Allocation, KeyGroupId
    from elastorm.zk.layout import ZkSettings, ZnodeLayout
    from elastorm.zk.store import ControllerStore
    from elastorm.core.routing import RoutingTable
    hosts, topology = sys.argv[1:3]
    store = ControllerStore(layout=ZnodeLayout(topology), controller_id="ctl",
                            settings=ZkSettings(hosts=hosts, session_timeout=4.0,
                                                heartbeat_interval=0.5))
    store.start()
    store.load(10)
    store.set_routing(
        "op", RoutingTable(epoch=3, owners=(1, 2, 1, 2)), issued=7, copies={0: {2: (3, 5)}}
    )
    store.set_checkpoints(Allocation({KeyGroupId("op", 0): ("n2",)}))
    assert store.flush(10)
    print("ready", flush=True)
    time.sleep(600)
"""


def test_restarted_controller_resumes_its_decisions(settings, layout) -> None:
    proc = child(CONTROLLER_CHILD, settings.hosts, layout.topology)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash: its leader znode lingers
        proc.wait()
    store = ControllerStore(layout=layout, controller_id="ctl", settings=settings)
    store.start()
    started = time.monotonic()
    decisions = store.load(10)
    took = time.monotonic() - started
    print(f"restarted controller loaded its decisions in {took:.2f} s")
    assert took < SESSION_TIMEOUT  # took over its predecessor's lead, did not wait it out
    assert decisions.routing == {"op": RoutingTable(epoch=3, owners=(1, 2, 1, 2))}
    assert decisions.issued == {"op": 7}  # a replica's start had bumped it past the table's
    assert decisions.copies == {"op": {0: {2: (3, 5)}}}  # where group 0's state survives
    assert decisions.checkpoints == Allocation({KeyGroupId("op", 0): ("n2",)})
    with pytest.raises(StoreError, match="epoch"):
        store.set_routing("op", RoutingTable(epoch=3, owners=(2, 2, 2, 2)))
    store.set_routing("op", RoutingTable(epoch=4, owners=(2, 2, 2, 2)))
    assert store.flush(5)
    store.stop()


def test_two_controllers_cannot_both_write(settings, layout, admin) -> None:
    first = ControllerStore(layout=layout, controller_id="c1", settings=settings)
    first.start()
    first.load(10)
    first.set_routing("op", RoutingTable(epoch=1, owners=(1, 2)))
    assert first.flush(5)

    other = ControllerStore(layout=layout, controller_id="c2", settings=settings)
    other.start()
    with pytest.raises(StoreUnavailableError, match="c1 leads"):
        other.load(2)
    assert other.status() is StoreStatus.STANDBY
    other.stop()

    # A second process with the same id (a restart while the old one still runs)
    # takes over and bumps the term: the old one's next write is refused.
    second = ControllerStore(layout=layout, controller_id="c1", settings=settings)
    second.start()
    assert second.load(10).routing["op"].epoch == 1
    second.set_routing("op", RoutingTable(epoch=2, owners=(2, 2)))
    assert second.flush(5)
    first.set_routing("op", RoutingTable(epoch=5, owners=(1, 1)))
    wait_for(lambda: first.status() is StoreStatus.CONFLICT, 5, "old controller fenced")
    with pytest.raises(StoreConflictError):
        first.set_routing("op", RoutingTable(epoch=6, owners=(1, 1)))
    _, table = decode_routing(admin.get(layout.routing("op"))[0])
    assert table == RoutingTable(epoch=2, owners=(2, 2))
    first.stop()
    second.stop()


def test_a_standby_takes_over_when_the_leaders_session_ends_and_the_old_one_is_deposed(
    settings, layout, admin
) -> None:
    """Two controller tasks (elastorm.controller.standbys = 1): c2 stands by while c1
    leads; c1's session ends (its client closes, as a dead process's session would
    expire); c2, woken by its watch, leads at once, loads what c1 decided and bumps the
    term; c1, back with a new session, finds c2 leading and is deposed (CONFLICT),
    never a second leader."""
    client = make_client(settings)
    client.start(timeout=10)
    first = ControllerStore(layout=layout, controller_id="c1", client=client, settings=settings)
    first.start()
    first.load(10)
    first.set_routing("op", RoutingTable(epoch=3, owners=(1, 2)), issued=5)
    assert first.flush(5)
    standby = ControllerStore(layout=layout, controller_id="c2", settings=settings)
    standby.start()
    with pytest.raises(StoreUnavailableError, match="c1 leads"):
        standby.load(5)
    assert standby.status() is StoreStatus.STANDBY and standby.leader().controller == "c1"

    expired = time.monotonic()
    client.stop()  # c1's session ends: its ephemeral leader znode goes
    wait_for(lambda: standby.status() is StoreStatus.ONLINE, SESSION_TIMEOUT + 5, "takeover")
    took = time.monotonic() - expired
    decisions = standby.load(1)
    assert decisions.routing["op"].epoch == 3 and decisions.issued["op"] == 5
    assert took < 2.0, f"the standby led {took:.2f} s after the leader's znode went"
    standby.set_routing("op", RoutingTable(epoch=6, owners=(2, 2)))
    assert standby.flush(5)
    client.start(timeout=10)  # c1 back, in a new session
    wait_for(lambda: first.status() is StoreStatus.CONFLICT, 10, "old leader deposed")
    _, table = decode_routing(admin.get(layout.routing("op"))[0])
    assert table == RoutingTable(epoch=6, owners=(2, 2))
    standby.stop()
    first.stop()
    client.stop()
    client.close()


class _LostReply:
    """What a call returns when it reached ZooKeeper but its reply never arrived."""

    def get(self, timeout=None):
        raise KazooTimeoutError("reply lost")


def _lands_without_reply(call):
    """``call`` made to do its work in ZooKeeper and then lose the reply."""

    def lossy(*args, **kwargs):
        call(*args, **kwargs).get(timeout=5)  # it did land
        return _LostReply()

    return lossy


class _ReplyLost:
    """A transaction whose commit lands but whose reply is lost."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def commit_async(self):
        return _lands_without_reply(self._real.commit_async)()


def test_a_superseded_write_whose_reply_was_lost_is_adopted_not_a_conflict(
    settings, layout, admin, monkeypatch
) -> None:
    store = ControllerStore(layout=layout, controller_id="ctl", client=admin, settings=settings)
    store.start()
    store.load(10)
    store.set_routing("op", RoutingTable(epoch=1, owners=(1, 2)))
    assert store.flush(5)
    real = admin.transaction
    monkeypatch.setattr(admin, "transaction", lambda: _ReplyLost(real()))
    store.set_routing("op", RoutingTable(epoch=2, owners=(2, 2)))
    landed = lambda: decode_routing(admin.get(layout.routing("op"))[0])[1].epoch == 2  # noqa: E731
    wait_for(landed, 5, "epoch 2 landed")
    assert store.pending() == 1  # the store never heard that it landed
    monkeypatch.setattr(admin, "transaction", real)
    # Epoch 3 is written against the version the store last saw, so the transaction
    # fails; the znode holds epoch 2, which the store sent: its own, not someone else's.
    store.set_routing("op", RoutingTable(epoch=3, owners=(1, 1)))
    assert store.flush(5), store.status()
    assert store.status() is StoreStatus.ONLINE
    assert decode_routing(admin.get(layout.routing("op"))[0])[1].epoch == 3
    store.stop()


def test_a_term_bump_whose_reply_was_lost_is_not_taken_for_a_rival(settings, layout) -> None:
    client = make_client(settings)
    client.start(timeout=10)
    store = ControllerStore(layout=layout, controller_id="ctl", client=client, settings=settings)
    store.start()
    store.load(10)
    real = client.set_async
    lost: list[str] = []

    def set_async(path, *args, **kwargs):
        if path == layout.term and not lost:
            lost.append(path)
            return _lands_without_reply(real)(path, *args, **kwargs)
        return real(path, *args, **kwargs)

    client.set_async = set_async
    # The session expires (as after a long ZooKeeper outage): the store re-takes the
    # lead in a new session and bumps the term, but never hears that the bump landed.
    twin = KazooClient(hosts=settings.hosts, client_id=client.client_id, timeout=SESSION_TIMEOUT)
    twin.start(timeout=10)
    twin.stop()
    twin.close()
    wait_for(lambda: lost, 15, "the term bump's reply lost")
    store.set_routing("op", RoutingTable(epoch=1, owners=(1,)))
    assert store.flush(15), (store.status(), store.pending())
    assert store.status() is StoreStatus.ONLINE
    store.stop()
    client.stop()
    client.close()


def test_malformed_task_znode_is_reported_not_fatal(settings, layout, admin) -> None:
    admin.create(layout.task(8), b"{broken", makepath=True, ephemeral=True)
    admin.create(layout.tasks + "/stray", json.dumps({"x": 1}).encode())
    watcher = ClusterWatcher(layout=layout, client=admin, settings=settings)
    watcher.start()
    events = wait_for(lambda: collect(watcher, []), 5, "malformed reported")
    assert sorted(e.name for e in events) == ["8", "stray"]
    assert watcher.malformed == 2 and watcher.live() == {}
    watcher.stop()


def _taken(inbox, count: int, timeout: float = 15.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += inbox.take()
        time.sleep(0.02)
    return got


def test_commands_reach_each_task_in_order_once_and_a_restart_drops_the_old_ones(
    settings, layout, admin
) -> None:
    """The controller's channel (``elastorm.zk.commands``): per task, the order sent;
    a command written twice (a create retried after a lost answer) taken once; a
    malformed one dropped; what waits for a task's earlier life cleared at its start."""
    from elastorm.core.messages import PeerDown
    from elastorm.zk.commands import CommandInbox, CommandOutbox, clear_mailbox, encode_command

    outbox = CommandOutbox(admin, layout, 2)
    outbox.start()
    inboxes = {t: CommandInbox(layout=layout, task=t, settings=settings) for t in (5, 6)}
    for inbox in inboxes.values():
        inbox.start()
    sent: dict[int, list] = {5: [], 6: []}
    for n in range(60):
        task = 5 if n % 3 else 6
        sent[task].append(PeerDown(key_group=n % 4, task=n))
        outbox.post(task, sent[task][-1])
    for task, inbox in inboxes.items():
        assert _taken(inbox, len(sent[task])) == sent[task]
    assert outbox.written == 60
    deadline = time.monotonic() + 10
    while admin.get_children(layout.command_dir(5)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert admin.get_children(layout.command_dir(5)) == []  # read ones are deleted

    box = f"{layout.command_dir(5)}/c-"
    first, second = PeerDown(key_group=0, task=100), PeerDown(key_group=0, task=101)
    admin.create(box, encode_command("other", 1, first), sequence=True)
    admin.create(box, encode_command("other", 1, first), sequence=True)  # the retry
    admin.create(box, b"not a command", sequence=True)
    admin.create(box, encode_command("other", 2, second), sequence=True)
    assert _taken(inboxes[5], 2) == [first, second]
    time.sleep(0.5)
    assert inboxes[5].take() == [] and inboxes[5].malformed == 1

    inboxes[6].stop()  # task 6 dies; a command to it waits
    outbox.post(6, PeerDown(key_group=0, task=7))
    deadline = time.monotonic() + 10
    while outbox.written < 61 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert clear_mailbox(admin, layout, 6, 1) == 0  # a first start keeps it: for it
    assert len(admin.get_children(layout.command_dir(6))) == 1
    assert clear_mailbox(admin, layout, 6, 2) == 1  # a restart drops it
    assert admin.get_children(layout.command_dir(6)) == []
    outbox.stop()
    inboxes[5].stop()
