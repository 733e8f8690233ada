"""A migration or restore that cannot complete ends in a bounded time with a clear
status: the controller reports it stuck once, naming the tasks it waits for, and the
request board records that (and every other state) even across ZooKeeper hiccups;
and a keyed task whose start finds ZooKeeper slow retries, never guessing that it
starts for the first time."""

from __future__ import annotations

import json

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError
from memory_zk import MemoryZk
from sim import Cluster

from elastorm.controller.requests import (
    MigrationRequest,
    RequestEvent,
    RequestState,
    decode_request,
    encode_request,
)
from elastorm.core.keygroups import key_group
from elastorm.core.messages import Protocol
from elastorm.core.routing import RoutingTable
from elastorm.zk.codec import encode_routing
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import RequestBoard

G = 2
KEY0 = next(f"k{i}" for i in range(100) if key_group(f"k{i}", G) == 0)


def deliver_all_but(c: Cluster, silent: int, rounds: int = 200) -> None:
    """Deliver every message except those to task ``silent`` (which never answers)."""
    for _ in range(rounds):
        open_channels = [ch for ch, q in c.channels.items() if q and ch[1] != silent]
        if not open_channels:
            return
        for ch in open_channels:
            c.deliver(ch)


def cluster_checkpointed_at_1() -> Cluster:
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11])
    c.emit(10, KEY0, 1)
    c.run_until_quiet()
    c.checkpoint(0, 0)
    c.run_until_quiet()
    assert c.holders[0] == 1 and c.has_newest(1, 0)
    return c


def test_a_migration_whose_target_never_answers_is_reported_stuck_once() -> None:
    c = cluster_checkpointed_at_1()
    c.tick(100.0)
    assert c.migrate(0, 1, Protocol.CPA) is Protocol.CPA
    deliver_all_but(c, silent=1)
    control = c.control
    assert control.overdue(now=159.0, limit=60.0) == []  # not yet
    (stuck,) = control.overdue(now=160.5, limit=60.0)
    assert (stuck.key_group, stuck.protocol, stuck.source, stuck.target) == (0, Protocol.CPA, 0, 1)
    assert stuck.waiting_for == {"target": 1}  # the source finished its part
    assert stuck.age == pytest.approx(60.5)
    assert "waiting for MigrationDone from the target (task 1)" in stuck.describe()
    assert control.overdue(now=500.0, limit=60.0) == []  # reported once
    # The target answers late after all: the migration completes, nothing is lost.
    c.run_until_quiet()
    assert not control.moving and c.owner(0) == 1


def test_a_migration_that_completes_in_time_is_never_reported() -> None:
    c = cluster_checkpointed_at_1()
    c.tick(10.0)
    c.migrate(0, 1, Protocol.CPAL)
    c.run_until_quiet()
    assert c.control.overdue(now=10_000.0, limit=1.0) == []


def test_a_restore_whose_target_never_answers_is_reported_too() -> None:
    c = cluster_checkpointed_at_1()
    c.tick(5.0)
    c.crash(0)  # group 0 is restored on its holder, task 1
    deliver_all_but(c, silent=1)
    (stuck,) = c.control.overdue(now=70.0, limit=60.0)
    assert stuck.protocol is Protocol.RESTORE and stuck.waiting_for == {"target": 1}


# -- the request board (a fake kazoo client: unit test of the adapter's logic) ----------


class FlakyZk(MemoryZk):
    """The in-memory kazoo client whose next ``fail`` reads and writes raise
    ConnectionLoss (ZooKeeper away for a while)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0

    def _maybe_fail(self) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionLoss()

    def get(self, path: str):
        self._maybe_fail()
        return super().get(path)

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        self._maybe_fail()
        super().set(path, data, version)


def board_with_request() -> tuple[FlakyZk, RequestBoard, str]:
    zk = FlakyZk()
    board = RequestBoard(zk, ZnodeLayout("t"), "op")
    name = "req-0000000001"
    request = MigrationRequest(operator="op", key_group=3, target="holder", protocol=Protocol.CPA)
    zk.nodes[f"{board.path}/{name}"] = encode_request(request)
    zk.versions[f"{board.path}/{name}"] = 0
    return zk, board, name


def state_of(zk: FlakyZk, board: RequestBoard, name: str) -> MigrationRequest:
    return decode_request(zk.nodes[f"{board.path}/{name}"])


def test_a_state_change_zookeeper_missed_is_written_on_the_next_tick_in_order() -> None:
    zk, board, name = board_with_request()
    zk.fail = 1
    board.apply(name, RequestEvent.START, protocol_used=Protocol.CPA, epoch=4, source=0, target=1)
    zk.fail = 1  # still away: both changes wait, in order
    board.apply(name, RequestEvent.FINISH)
    assert state_of(zk, board, name).state is RequestState.PENDING
    assert len(board.unwritten) == 2
    board.retry_unwritten()  # the next tick, ZooKeeper back
    done = state_of(zk, board, name)
    assert done.state is RequestState.DONE and done.epoch == 4 and done.source == 0
    assert set(done.times) == {"started", "done"} and not board.unwritten


def test_stuck_is_recorded_with_its_reason_and_done_may_follow() -> None:
    zk, board, name = board_with_request()
    board.apply(name, RequestEvent.START, protocol_used=Protocol.CPA, epoch=4, source=0, target=1)
    board.apply(
        name,
        RequestEvent.OVERDUE,
        detail="stuck: waiting for MigrationDone from the target (task 1)",
    )
    stuck = state_of(zk, board, name)
    assert stuck.state is RequestState.STUCK and "target (task 1)" in stuck.detail
    board.apply(name, RequestEvent.FINISH)
    assert state_of(zk, board, name).state is RequestState.DONE


def test_withdraw_deletes_only_a_request_nobody_picked_up() -> None:
    from elastorm.zk.requests import withdraw_request

    zk, board, name = board_with_request()
    assert withdraw_request(zk, ZnodeLayout("t"), name) and f"{board.path}/{name}" not in zk.nodes
    zk, board, name = board_with_request()
    board.apply(name, RequestEvent.START, protocol_used=Protocol.CPA, epoch=1, source=0, target=1)
    assert not withdraw_request(zk, ZnodeLayout("t"), name)
    assert json.loads(zk.nodes[f"{board.path}/{name}"])["state"] == "started"


# -- a keyed task's start never guesses "first start" ------------------------------------


class StartZk:
    """A kazoo client whose first ``failures`` starts time out."""

    failures = 0
    starts = 0
    store: dict[str, bytes] = {}

    def __init__(self, settings) -> None:
        pass

    def start(self, timeout) -> None:
        StartZk.starts += 1
        if StartZk.starts <= StartZk.failures:
            from kazoo.handlers.threading import KazooTimeoutError

            raise KazooTimeoutError("Connection time-out")

    def create(self, path, data, makepath=False):
        from kazoo.exceptions import NodeExistsError

        if path in self.store:
            raise NodeExistsError()
        self.store[path] = data

    def get(self, path):
        if path not in self.store:
            raise NoNodeError()
        return self.store[path], type("Stat", (), {"version": 0})()

    def set(self, path, data, version=-1):
        self.store[path] = data

    def get_children(self, path):
        prefix = path + "/"
        return sorted({p[len(prefix) :].split("/")[0] for p in self.store if p.startswith(prefix)})

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


CONF = {
    "topology.name": "t",
    "storm.id": "t-1-1",
    "storm.zookeeper.servers": ["127.0.0.1"],
    "storm.zookeeper.port": 1,
}


def test_a_restart_while_zookeeper_is_slow_is_still_a_restart(monkeypatch) -> None:
    import elastorm.zk.requests as rzk

    monkeypatch.setattr(rzk, "make_client", StartZk)
    StartZk.store, StartZk.starts, StartZk.failures = {}, 0, 0
    assert rzk.task_start(CONF, "op", 7, "op") == (1, -1)
    table = RoutingTable(epoch=12, owners=(7, 7))
    StartZk.store[ZnodeLayout("t").routing("op")] = encode_routing("op", table, controller="c")
    StartZk.failures = StartZk.starts + 2  # the restart's first two tries time out
    assert rzk.task_start(CONF, "op", 7, "op") == (2, 12)


def test_no_zookeeper_at_start_is_an_error_not_a_first_start(monkeypatch) -> None:
    import elastorm.zk.requests as rzk

    monkeypatch.setattr(rzk, "make_client", StartZk)
    monkeypatch.setattr(rzk, "START_DEADLINE", 1.2)
    StartZk.store, StartZk.starts, StartZk.failures = {}, 0, 10**6
    with pytest.raises(rzk.StartUnknownError, match="cannot tell a first start from a restart"):
        rzk.task_start(CONF, "op", 7, "op")
    assert StartZk.starts >= 2  # it retried before giving up


def test_migrate_against_a_killed_topology_refuses_at_once_and_requests_nothing() -> None:
    from elastorm.errors import UserError
    from elastorm.runtime.migrate import request_migration

    class DeadTopologyZk(FlakyZk):
        created: list[str] = []

        def exists(self, path):
            return None  # no controller/leader znode: its session ended with the topology

        def ensure_path(self, path):
            self.created.append(path)

        def create(self, path, data=b"", **kwargs):
            self.created.append(path)

    zk = DeadTopologyZk()
    with pytest.raises(UserError, match="controller of t/op is not running"):
        request_migration(zk, "t", "op", 3, "holder", Protocol.CPA, timeout=60)
    assert zk.created == []


def test_migrate_without_operator_takes_the_only_keyed_one_or_names_them() -> None:
    from elastorm.errors import UserError
    from elastorm.runtime.migrate import keyed_operator, only_operator

    class RoutingZk(FlakyZk):
        def get_children(self, path):
            prefix = path + "/"
            children = [p[len(prefix) :] for p in self.nodes if p.startswith(prefix)]
            if not children:
                raise NoNodeError()
            return children

    layout = ZnodeLayout("t")
    zk = RoutingZk()
    with pytest.raises(UserError, match="t has no keyed operator"):
        keyed_operator(zk, "t", timeout=0)
    zk.nodes[layout.routing("counts")] = b""
    assert keyed_operator(zk, "t", timeout=0) == "counts"
    zk.nodes[layout.routing("op2")] = b""
    with pytest.raises(UserError, match="keyed operators counts, op2: pass --operator"):
        keyed_operator(zk, "t", timeout=0)
    assert only_operator("t", ["sum_delays"]) == "sum_delays"
