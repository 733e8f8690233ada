"""HeartbeatPublisher against an in-memory fake of kazoo (no ZooKeeper).

The real-server behaviour is in tests/integration/test_zk_*.py; here each step of
the publisher's loop is driven by hand so the state machine is checked exactly.
"""

from __future__ import annotations

from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from elastorm.controller.model import Heartbeat, TaskIdentity
from elastorm.zk.codec import decode_task
from elastorm.zk.heartbeat import HeartbeatPublisher, PublisherState
from elastorm.zk.layout import ZnodeLayout


class _Result:
    def __init__(self, value=None, exc=None):
        self.value, self.exc = value, exc

    def get(self, timeout=None):
        if self.exc is not None:
            raise self.exc
        return self.value


class _Stat:
    def __init__(self, owner):
        self.ephemeralOwner = owner


class FakeKazoo:
    """Just enough of KazooClient: one session id, ephemeral znodes per session."""

    def __init__(self):
        self.nodes: dict[str, tuple[bytes, int]] = {}  # path -> (data, owner session)
        self.session = 1
        self.connected = True
        self.listeners = []

    @property
    def client_id(self):
        return (self.session, b"")

    def add_listener(self, fn):
        self.listeners.append(fn)

    def remove_listener(self, fn):
        self.listeners.remove(fn)

    def start_async(self):
        pass

    def stop(self):
        pass

    def close(self):
        pass

    def _call(self, fn):
        if not self.connected:
            return _Result(exc=ConnectionLoss())
        try:
            return _Result(fn())
        except Exception as exc:
            return _Result(exc=exc)

    def create_async(self, path, data, ephemeral=False, makepath=False):
        def create():
            if path in self.nodes:
                raise NodeExistsError()
            self.nodes[path] = (data, self.session if ephemeral else 0)
            return path

        return self._call(create)

    def set_async(self, path, data):
        def set_():
            if path not in self.nodes:
                raise NoNodeError()
            self.nodes[path] = (data, self.nodes[path][1])

        return self._call(set_)

    def exists_async(self, path):
        return self._call(lambda: _Stat(self.nodes[path][1]) if path in self.nodes else None)

    def delete_async(self, path):
        return self._call(lambda: self.nodes.pop(path))

    def expire(self):
        """The server ends the session: its ephemerals vanish, a new session starts."""
        self.nodes = {p: v for p, v in self.nodes.items() if v[1] != self.session}
        for fn in list(self.listeners):
            fn(KazooState.LOST)
        self.session += 1


LAYOUT = ZnodeLayout("t")
IDENT = TaskIdentity(task_id=4, operator="op", node_id="n1", host="h", pid=10)


def make(fake, heartbeat):
    clock = iter(range(1000, 100000))
    pub = HeartbeatPublisher(
        layout=LAYOUT, identity=IDENT, heartbeat=heartbeat, client=fake, clock=lambda: next(clock)
    )
    fake.add_listener(pub._on_state)  # what start() does, without the thread
    return pub


def published(fake) -> Heartbeat:
    return decode_task(fake.nodes[LAYOUT.task(4)][0]).heartbeat


def states(pub):
    return [(e.previous, e.state) for e in pub.poll_events()]


def test_registers_refreshes_and_republishes_the_last_heartbeat_when_the_callback_fails():
    fake = FakeKazoo()
    beats = iter([Heartbeat(key_groups=(1,)), Heartbeat(key_groups=(2,))])

    def heartbeat():
        return next(beats)  # StopIteration on the third call: a failing callback

    pub = make(fake, heartbeat)
    pub._step()
    assert pub.state() is PublisherState.REGISTERED
    assert fake.nodes[LAYOUT.task(4)][1] == 1  # ephemeral of our session
    pub._step()
    assert published(fake).key_groups == (2,)
    pub._step()
    assert published(fake).key_groups == (2,)
    assert decode_task(fake.nodes[LAYOUT.task(4)][0]).seq == 3
    health = {"published": 3, "failures": 0, "callback_errors": 1, "step_errors": 0}
    assert pub.health() == health
    assert states(pub) == [(PublisherState.STARTING, PublisherState.REGISTERED)]


def test_outage_is_an_event_and_expiry_re_creates_the_znode():
    fake = FakeKazoo()
    pub = make(fake, lambda: Heartbeat(key_groups=(1,)))
    pub._step()
    fake.connected = False
    pub._step()
    assert pub.state() is PublisherState.DISCONNECTED
    fake.expire()
    assert LAYOUT.task(4) not in fake.nodes
    fake.connected = True
    pub._step()
    assert pub.state() is PublisherState.REGISTERED
    assert fake.nodes[LAYOUT.task(4)][1] == 2  # re-created in the new session
    assert states(pub) == [
        (PublisherState.STARTING, PublisherState.REGISTERED),
        (PublisherState.REGISTERED, PublisherState.DISCONNECTED),
        (PublisherState.DISCONNECTED, PublisherState.EXPIRED),
        (PublisherState.EXPIRED, PublisherState.REGISTERED),
    ]


def test_a_new_session_without_a_lost_event_is_still_seen_as_expiry():
    fake = FakeKazoo()
    pub = make(fake, lambda: Heartbeat())
    pub._step()
    fake.remove_listener(pub._on_state)
    fake.expire()
    pub._step()
    assert pub.state() is PublisherState.REGISTERED
    assert [s for _, s in states(pub)][-2:] == [PublisherState.EXPIRED, PublisherState.REGISTERED]


def test_waits_for_a_previous_incarnations_znode_instead_of_deleting_it():
    fake = FakeKazoo()
    fake.nodes[LAYOUT.task(4)] = (b"old", 99)  # held by another (dead or alive) session
    pub = make(fake, lambda: Heartbeat())
    pub._step()
    pub._step()
    assert pub.state() is PublisherState.STARTING and fake.nodes[LAYOUT.task(4)][0] == b"old"
    del fake.nodes[LAYOUT.task(4)]  # its session expired
    pub._step()
    assert pub.state() is PublisherState.REGISTERED


def test_stop_deletes_the_znode_for_a_clean_leave():
    fake = FakeKazoo()
    pub = make(fake, lambda: Heartbeat())
    pub._step()
    pub.stop()
    assert LAYOUT.task(4) not in fake.nodes
    assert pub.state() is PublisherState.STOPPED
