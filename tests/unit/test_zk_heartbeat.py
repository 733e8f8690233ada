"""HeartbeatPublisher against an in-memory fake of kazoo (no ZooKeeper).

The real-server behaviour is in tests/integration/test_zk_*.py; here each step of
the publisher's loop is driven by hand so the state machine is checked exactly.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from elastorm.controller.model import Heartbeat, TaskIdentity
from elastorm.core.errors import StateTransitionError
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
    def __init__(self, owner, czxid=0, mzxid=0):
        self.ephemeralOwner = owner
        self.czxid = czxid
        self.mzxid = mzxid


class FakeKazoo:
    """Just enough of KazooClient: one session id, ephemeral znodes per session."""

    def __init__(self):
        self.nodes: dict[str, tuple[bytes, int]] = {}  # path -> (data, owner session)
        self.created: dict[str, int] = {}  # path -> creation zxid
        self.zxid = 0
        self.session = 1
        self.connected = True
        self.listeners = []
        self.watches: dict[str, list] = {}
        self.modified: dict[str, int] = {}  # path -> last write's zxid (write())

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
            self.zxid += 1
            self.created[path] = self.zxid
            return path

        return self._call(create)

    def set_async(self, path, data):
        def set_():
            if path not in self.nodes:
                raise NoNodeError()
            self.nodes[path] = (data, self.nodes[path][1])

        return self._call(set_)

    def exists_async(self, path):
        return self._call(
            lambda: (
                _Stat(self.nodes[path][1], self.created.get(path, 0))
                if path in self.nodes
                else None
            )
        )

    def get_async(self, path):
        def get():
            if path not in self.nodes:
                raise NoNodeError()
            created = self.created.get(path, 0)
            return self.nodes[path][0], _Stat(self.nodes[path][1], created, created)

        return self._call(get)

    def delete_async(self, path):
        return self._call(lambda: self.nodes.pop(path))

    def DataWatch(self, path, func):  # noqa: N802 (kazoo's name)
        """Calls ``func(data, stat)`` now and after every :meth:`write` of ``path``."""
        self.watches.setdefault(path, []).append(func)
        self._fire(path)

    def write(self, path, data: bytes) -> None:
        """A persistent znode written by another client (the controller), watchers told."""
        self.zxid += 1
        self.nodes[path] = (data, 0)
        self.created.setdefault(path, self.zxid)
        self.modified[path] = self.zxid
        self._fire(path)

    def _fire(self, path):
        for func in self.watches.get(path, []):
            if path in self.nodes:
                created = self.created.get(path, 0)
                stat = _Stat(0, created, self.modified.get(path, created))
                func(self.nodes[path][0], stat)
            else:
                func(None, None)

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


def test_a_process_declared_lost_while_away_is_fenced_and_a_new_one_is_not():
    """The controller fences the znode it saw leave (its creation zxid); this process
    finds that fence when it is back, and stops registering: its state is stale."""
    fake = FakeKazoo()
    pub = make(fake, Heartbeat)
    pub._step()
    lost = fake.created[LAYOUT.task(4)]
    fake.expire()  # cut off for longer than the session
    fake.nodes[LAYOUT.fence("op", 4)] = (str(lost).encode(), 0)  # the controller's fence
    pub._step()
    assert pub.state() is PublisherState.FENCED and LAYOUT.task(4) not in fake.nodes
    pub._step()
    assert pub.state() is PublisherState.FENCED  # for good
    # A new process (Storm restarted the task) has a znode of its own: never fenced.
    fresh = make(fake, Heartbeat)
    fresh._step()
    fake.expire()
    fresh._step()
    assert fresh.state() is PublisherState.REGISTERED


def test_an_expiry_without_a_fence_just_registers_again():
    fake = FakeKazoo()
    pub = make(fake, Heartbeat)
    pub._step()
    fake.expire()  # a ZooKeeper outage: nobody declared this task lost
    pub._step()
    assert pub.state() is PublisherState.REGISTERED and LAYOUT.task(4) in fake.nodes


def test_fenced_while_a_step_was_under_way_it_stays_fenced() -> None:
    """fence() comes from another thread (the liveness link): a step already past its
    FENCED check then finds its znode refreshed, and the registration's table refuses
    that input (the loop logs and counts it) instead of registering a fenced task."""
    fake = FakeKazoo()
    calls = []

    def heartbeat():
        calls.append(1)
        if len(calls) == 2:
            pub.fence("told over the liveness link")
        return Heartbeat()

    pub = make(fake, heartbeat)
    pub._step()
    with pytest.raises(StateTransitionError, match="registered not allowed in state fenced"):
        pub._step()
    assert pub.state() is PublisherState.FENCED
    assert states(pub)[-1] == (PublisherState.REGISTERED, PublisherState.FENCED)
    pub._step()  # and takes no step again
    assert pub.state() is PublisherState.FENCED and len(calls) == 2


def test_a_fence_of_an_unseen_incarnation_stops_older_znodes_only() -> None:
    """A controller that never saw the task's znode fences ``UNSEEN``: the process whose
    znode predates the fence stops; one started after it (Storm's restart) does not."""
    from elastorm.controller.failures import UNSEEN

    fake = FakeKazoo()
    pub = make(fake, Heartbeat)
    pub._step()
    fake.expire()
    fence = LAYOUT.fence("op", 4)
    fake.zxid += 1
    fake.nodes[fence], fake.created[fence] = (str(UNSEEN).encode(), 0), fake.zxid
    pub._step()
    assert pub.state() is PublisherState.FENCED
    fresh = make(fake, Heartbeat)
    fresh._step()
    fake.expire()
    fresh._step()
    assert fresh.state() is PublisherState.REGISTERED


def test_a_fence_written_after_the_task_registered_again_still_stops_it() -> None:
    """The controller, its view behind, declares the znode a task had before its session
    lapsed only after the task registered a new one (so its check on the way back found
    no fence): the task must stop all the same, its groups being restored elsewhere
    (chaos ``join/cpal-source`` at 8ed8a6b: task 12 went on applying them for 44 s). A
    fence naming another process's znode leaves it alone."""
    fake = FakeKazoo()
    pub = make(fake, Heartbeat)
    pub._step()
    before = fake.created[LAYOUT.task(4)]
    fake.expire()
    pub._step()  # back, no fence yet: registers a new znode
    assert pub.state() is PublisherState.REGISTERED and pub.incarnation != before
    fake.write(LAYOUT.fence("op", 4), b"999")  # some older process's znode
    assert pub.state() is PublisherState.REGISTERED
    fake.write(LAYOUT.fence("op", 4), str(before).encode())  # the late declaration
    assert pub.state() is PublisherState.FENCED
