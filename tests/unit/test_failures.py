"""Failure detection and the controller bolt's reaction to a lost task, with a fake
ZooKeeper side: a task whose znode is gone is declared lost once, after the grace that
follows the controller's own (re)connection, and its key groups are restored at once
on the tasks holding their checkpoints, without waiting for Storm to restart it."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

import elastorm.storm.controller_bolt as bolt_module
from elastorm.controller.failures import FailureDetector
from elastorm.controller.requests import RequestEvent
from elastorm.core.actions import CheckpointStored
from elastorm.core.messages import Migrate, PeerDown, Protocol, SetHolder
from elastorm.storm.controller_bolt import MigrationControllerBolt
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.view import TaskJoined, TaskLeft

# -- the detector -------------------------------------------------------------------


def test_a_leave_is_declared_once_after_the_grace_and_a_join_clears_it() -> None:
    d = FailureDetector(grace=3.0)
    d.left(7, "op", 70)
    assert d.due(10.0, connected=True) == {}  # just connected: within the grace
    assert d.due(13.0, connected=True) == {"op": [(7, 70)]}
    assert d.due(14.0, connected=True) == {} and d.declared == {7}
    d.left(7, "op", 70)  # the same loss seen again (a resync): not declared twice
    assert d.due(15.0, connected=True) == {}
    d.joined(7)  # Storm restarted it, empty
    assert d.declared == frozenset()
    d.left(7, "op", 70)  # and it can be lost again
    assert d.due(16.0, connected=True) == {"op": [(7, 70)]}


def test_tasks_back_within_the_grace_after_an_outage_are_no_failure() -> None:
    d = FailureDetector(grace=3.0)
    assert d.due(0.0, connected=True) == {}
    assert d.due(5.0, connected=False) == {}  # ZooKeeper away: every session may expire
    d.left(1, "op", 10)  # the resync after reconnecting misses tasks not re-registered yet
    d.left(2, "op", 20)
    assert d.due(20.0, connected=True) == {}  # reconnected now: grace starts
    d.joined(1)  # re-registered
    assert d.due(23.5, connected=True) == {"op": [(2, 20)]}  # 2 really is gone


def test_several_operators_are_declared_together() -> None:
    d = FailureDetector(grace=0.0)
    d.left(5, "op2", 50)
    d.left(9, "op3", 90)
    d.left(4, "op2", 40)
    assert d.due(1.0, connected=True) == {"op2": [(4, 40), (5, 50)], "op3": [(9, 90)]}


# -- the controller bolt --------------------------------------------------------------

CONTEXT = {
    "taskid": 2,
    "componentid": "controller",
    "task->component": {
        "1": "router",
        "2": "controller",
        "10": "op",
        "11": "op",
        "12": "op",
    },
}
CONF = {
    "topology.name": "t",
    "elastorm.key_groups": 6,
    "elastorm.operators": {"op": ["router"]},
}


class FakeRuntime:
    """What the bolt uses of ``ControllerRuntime``: decisions loaded, commands durable."""

    def __init__(self) -> None:
        self.znodes: dict[str, bytes] = {}
        self.client = SimpleNamespace(
            connected=True, DataWatch=lambda path, func: None, set=self.znodes.__setitem__
        )
        self.layout = ZnodeLayout("t")
        self.incarnations: dict[int, int] = {}
        self.watcher = SimpleNamespace(
            events=[], poll_events=self._poll, live=dict, incarnations=self.incarnations.copy
        )
        self.loaded = True  # this task leads (False: another one does)
        self.epochs: dict[str, int] = {}
        self.leading = SimpleNamespace(controller="controller-3", host="h", pid=9, worker=8)

    def _poll(self) -> list:
        out, self.watcher.events = self.watcher.events, []
        return out

    def ready(self, now: float) -> bool:
        return self.loaded

    def standing_by(self) -> bool:
        return not self.loaded

    def leader(self):
        return None if self.loaded else self.leading

    def routing_epochs(self) -> dict[str, int]:
        return dict(self.epochs)

    def order(self, sends):
        return list(sends)

    def tick(self, now: float):
        return []


@pytest.fixture
def controller(monkeypatch):
    return make_controller(monkeypatch)


def make_controller(monkeypatch):
    """A controller bolt on a :class:`FakeRuntime`, leading: (bolt, runtime, commands
    sent, fences written)."""
    runtime = FakeRuntime()
    fenced = []
    monkeypatch.setattr(bolt_module.ControllerRuntime, "start", lambda *a: runtime)
    monkeypatch.setattr(
        bolt_module, "write_fence", lambda client, layout, op, t, inc: fenced.append((t, inc))
    )
    monkeypatch.setattr(bolt_module.threading, "Thread", lambda **kw: SimpleNamespace(start=dict))
    bolt = MigrationControllerBolt(
        input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None
    )
    sent = []
    monkeypatch.setattr(bolt, "send", sent.append, raising=False)
    bolt.initialize(CONF, CONTEXT)
    return bolt, runtime, sent, fenced


def test_a_lost_task_is_fenced_and_its_groups_restored_on_their_holders(controller) -> None:
    bolt, runtime, sent, fenced = controller
    control = bolt.controls["op"]
    lost = [g for g in range(6) if control.owner(g) == 11]
    for g in range(6):  # every holder has the newest checkpoint of its group
        control.on_checkpoint_stored(
            control.holders[g], CheckpointStored(key_group=g, checkpoint=(0, 1))
        )
    holders = {g: control.holders[g] for g in lost}
    runtime.watcher.events = [TaskLeft(task_id=11, operator="op", node_id="node1", incarnation=5)]
    bolt.detect_failures(100.0)  # first look after connecting: within the grace
    assert sent == [] and fenced == []
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [(11, 5)]
    restores = [s for s in sent if isinstance(s.message, Migrate)]
    assert {(s.message.key_group, s.message.target) for s in restores} == {
        (g, holders[g]) for g in lost
    }
    assert {s.to_task for s in restores} == {1}  # announced to the emitter
    assert all(s.message.protocol is Protocol.RESTORE for s in restores)
    assert all(control.owner(g) == holders[g] for g in lost)
    assert 11 not in {control.holders[g] for g in range(6)}  # its checkpoints re-placed
    assert any(isinstance(s.message, SetHolder) for s in sent)
    downs = {s.to_task for s in sent if isinstance(s.message, PeerDown)}
    assert downs == {10, 12}
    # Storm restarts it later: it joins empty, nothing is restored twice.
    sent.clear()
    runtime.watcher.events = [TaskJoined(task_id=11, operator="op", node_id="node1", incarnation=2)]
    bolt.detect_failures(200.0)
    bolt.recover("op", [11], rejoined=True)
    assert not [s for s in sent if isinstance(s.message, Migrate)]


def test_with_recover_lost_off_a_lost_task_waits_for_its_restart(controller) -> None:
    bolt, runtime, sent, fenced = controller
    bolt.recover_lost = False  # elastorm.controller.recover_lost = false
    runtime.watcher.events = [TaskLeft(task_id=11, operator="op", node_id="node1", incarnation=5)]
    bolt.detect_failures(100.0)
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert sent == [] and fenced == []
    assert 11 in bolt.detector.declared  # still declared, so the status shows it lost


def test_a_request_to_migrate_onto_a_lost_task_is_refused(controller) -> None:
    from elastorm.controller.requests import MigrationRequest

    bolt, runtime, sent, _ = controller
    runtime.watcher.events = [TaskLeft(task_id=11, operator="op", node_id="node1", incarnation=5)]
    bolt.detect_failures(100.0)
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert bolt.detector.declared == {11}
    group = next(g for g in range(6) if bolt.controls["op"].owner(g) == 10)
    request = MigrationRequest(operator="op", key_group=group, target=11, protocol=Protocol.DIRECT)
    applied = []
    board = SimpleNamespace(
        pending=lambda: [("req-1", request)],
        apply=lambda name, event, **kw: applied.append((event, kw)),
    )
    sent.clear()
    bolt.carry_out_requests("op", board)
    assert applied == [
        (RequestEvent.REFUSE, {"detail": "task 11 is lost (declared by the controller)"})
    ]
    assert sent == []
    assert bolt.controls["op"].owner(group) == 10


def test_a_closed_liveness_connection_declares_the_task_lost_without_its_znode_leaving(
    controller,
) -> None:
    """kill -9 closes the task's liveness connection at once; its znode stays until its
    session expires. The controller declares it lost on the connection alone (after the
    grace that follows its own start), fences that incarnation and restores its groups."""
    bolt, runtime, sent, fenced = controller
    bolt.detect_failures(100.0)  # leads from the first look: takes the connections
    assert runtime.znodes[runtime.layout.liveness] == bolt.liveness.address.encode()
    control = bolt.controls["op"]
    for g in range(6):  # every holder has the newest checkpoint of its group
        control.on_checkpoint_stored(
            control.holders[g], CheckpointStored(key_group=g, checkpoint=(0, 1))
        )
    runtime.incarnations.update({10: 3, 11: 5, 12: 7})  # every znode still there
    bolt.detect_failures(100.0)  # starts the grace
    bolt.drops.append((11, 5))
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [(11, 5)]
    assert any(isinstance(s.message, Migrate) for s in sent)
    assert 11 not in {control.owner(g) for g in range(6)}
    assert bolt.detector.declared == {11}
    # That incarnation is turned away if it connects again (it was only cut off) ...
    assert bolt._fenced(11, 5) and not bolt._fenced(11, 6) and not bolt._fenced(10, 3)
    # ... and its znode leaving later declares nothing twice.
    fenced.clear()
    runtime.watcher.events = [TaskLeft(task_id=11, operator="op", node_id="node1", incarnation=5)]
    bolt.detect_failures(200.0)
    assert fenced == []


def test_a_connection_of_an_older_incarnation_or_of_a_blip_declares_nothing(controller) -> None:
    bolt, runtime, sent, fenced = controller
    runtime.incarnations.update({10: 3, 11: 9, 12: 7})  # 11 re-registered as zxid 9
    bolt.detect_failures(100.0)
    bolt.drops.append((11, 5))  # its old connection closing
    bolt.drops.append((99, 1))  # not a keyed task
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [] and bolt.detector.declared == frozenset()


def test_a_requested_migration_is_finished_with_the_pause_its_target_reported(controller) -> None:
    """The target's ``MigrationDone`` carries its pause; the source may report last: the
    request is finished, with that pause, once both have."""
    import json

    from elastorm.controller.requests import MigrationRequest
    from elastorm.core.actions import MigrationDone, Role, encode_report
    from elastorm.storm.elastic import REPORTS

    bolt, _, _, _ = controller
    control = bolt.controls["op"]
    group = next(g for g in range(6) if control.owner(g) == 10)
    request = MigrationRequest(operator="op", key_group=group, target=12, protocol=Protocol.DIRECT)
    finished = []
    board = SimpleNamespace(
        pending=lambda: [("req-1", request)],
        apply=lambda name, event, **kw: (
            finished.append((name, kw["pause"])) if event is RequestEvent.FINISH else None
        ),
    )
    bolt.boards["op"] = board
    bolt.carry_out_requests("op", board)
    epoch = control.moving[group].epoch

    def report(task: int, role: Role, pause=None):
        done = MigrationDone(
            key_group=group, epoch=epoch, protocol=Protocol.DIRECT, role=role, pause=pause
        )
        tup = SimpleNamespace(stream=REPORTS, task=task, values=[json.dumps(encode_report(done))])
        bolt.process_report(tup)

    report(12, Role.TARGET, pause=0.031)
    assert finished == []
    report(10, Role.SOURCE)
    assert finished == [("req-1", 0.031)]
    (ended,) = bolt.loop.ended["op"]  # the same record the status publishes
    assert (ended.pause, ended.by, ended.key_group) == (0.031, "request", group)
