"""Failure detection and the controller bolt's reaction to a lost task, with a fake
ZooKeeper side: a task whose znode is gone is declared lost once, after the grace that
follows the controller's own (re)connection, and its key groups are restored at once
on the tasks holding their checkpoints, without waiting for Storm to restart it."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

import elastorm.storm.controller_bolt as bolt_module
from elastorm.controller.failures import (
    UNSEEN,
    Bounds,
    Evidence,
    FailureDetector,
    Reason,
    verdict,
)
from elastorm.controller.requests import RequestEvent
from elastorm.core.actions import CheckpointStored
from elastorm.core.messages import Migrate, PeerDown, Protocol, SetHolder
from elastorm.storm.controller_bolt import MigrationControllerBolt
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.view import TaskJoined, TaskLeft

# -- the detector -------------------------------------------------------------------

GRACE, ANSWER = 5.0, 4.0


def _ev(closed=False, own=60.0, leading=60.0, silent=None, liveness=True) -> Evidence:
    return Evidence(
        closed=closed, own_connection=own, leading=leading, silent=silent, liveness=liveness
    )


@pytest.mark.parametrize(
    ("evidence", "reason"),
    [
        # the fast path: a closed connection is a dead process, no grace of any kind
        (_ev(closed=True, own=0.1, leading=0.1, silent=0.0), Reason.PROCESS_DEAD),
        (_ev(closed=True, own=None), Reason.PROCESS_DEAD),
        # the controller's own ZooKeeper connection down, or just back: no leave counts
        (_ev(own=None), None),
        (_ev(own=GRACE - 0.1), None),
        # without liveness connections the session decides
        (_ev(liveness=False), Reason.SESSION),
        (_ev(liveness=False, leading=0.1), Reason.SESSION),
        # a loaded machine: the session lapsed, the liveness connection still answers
        (_ev(silent=0.0), None),
        (_ev(silent=ANSWER - 0.1), None),
        # both gone: lost
        (_ev(silent=ANSWER), Reason.SILENT),
        (_ev(silent=30.0), Reason.SILENT),
        # a standby that just took over has heard nobody yet: a grace to connect
        (_ev(leading=0.0), None),
        (_ev(leading=GRACE - 0.1), None),
        (_ev(leading=None), None),
        (_ev(leading=GRACE), Reason.UNHEARD),
        # ... but a task heard since and silent again is lost without waiting for it
        (_ev(leading=1.0, silent=ANSWER + 0.5), Reason.SILENT),
    ],
)
def test_the_verdict_table(evidence: Evidence, reason: Reason | None) -> None:
    text, got = verdict(evidence, Bounds(grace=GRACE, answer_secs=ANSWER))
    assert got is reason, text


def _detector(**kw) -> FailureDetector:
    d = FailureDetector(grace=GRACE, answer_secs=ANSWER, **kw)
    d.observe(0.0, connected=True)
    d.lead(0.0)
    return d


def _declared(out) -> dict[str, list[tuple[int, int, Reason]]]:
    return {op: [(x.task, x.incarnation, x.reason) for x in lost] for op, lost in out.items()}


def test_a_lapsed_session_while_the_task_beats_is_no_failure() -> None:
    """The elastic-flights stall, replayed: ZooKeeper expired a live task's session
    under load; it kept beating on its liveness connection, re-registered, and is not
    declared."""
    d = _detector()
    for t in range(0, 60):
        d.heard(12, 612, float(t))
    d.left(12, "op", 612)  # session expired at 60.2
    for now in (60.2, 61.0, 62.0, 63.5):
        d.heard(12, 612, now - 0.5)  # beats still arrive (late, under load)
        assert d.due(now, connected=True) == {}
    d.joined(12, 700)  # re-registered: a new znode
    assert d.due(100.0, connected=True) == {} and d.declared == frozenset()


def test_both_gone_is_declared_once_with_its_reason() -> None:
    d = _detector()
    d.heard(7, 70, 59.0)  # last beat: then the process froze (or the network was cut)
    d.left(7, "op", 70)  # its session ended at 63
    # silent for ANSWER s and the session gone
    assert _declared(d.due(63.0, connected=True)) == {"op": [(7, 70, Reason.SILENT)]}
    assert d.declared == {7}
    d.left(7, "op", 70)  # the same loss seen again (a resync): not declared twice
    assert d.due(70.0, connected=True) == {}


def test_a_silent_task_is_declared_when_its_beats_stop() -> None:
    d = _detector()
    d.heard(7, 70, 60.0)
    d.left(7, "op", 70)
    assert d.due(62.0, connected=True) == {}  # heard 2 s ago: answers
    assert _declared(d.due(64.5, connected=True)) == {"op": [(7, 70, Reason.SILENT)]}


def test_a_closed_connection_is_declared_at_once_even_within_every_grace() -> None:
    d = FailureDetector(grace=GRACE, answer_secs=ANSWER)
    d.observe(100.0, connected=True)
    d.lead(100.0)
    d.heard(9, 90, 100.05)
    d.closed(9, "op", 90)  # kill -9: the kernel closed the connection
    assert _declared(d.due(100.1, connected=True)) == {"op": [(9, 90, Reason.PROCESS_DEAD)]}
    assert d.declared_as(9, 90) and not d.declared_as(9, 91)


def test_a_standby_that_takes_over_waits_for_each_task_to_connect() -> None:
    d = FailureDetector(grace=GRACE, answer_secs=ANSWER)
    d.observe(0.0, connected=True)  # standing by since 0: its connection is old
    d.left(12, "op", 612)  # a live task's session lapses as the leader changes
    d.left(5, "op", 50)  # a task that died with the old leader
    d.lead(53.8)
    assert d.due(54.7, connected=True) == {}  # the first look: nobody heard yet
    d.heard(12, 612, 55.0)  # task 12 follows the new address and connects
    assert d.due(58.0, connected=True) == {}
    assert _declared(d.due(58.8, connected=True)) == {"op": [(5, 50, Reason.UNHEARD)]}
    d.heard(12, 612, 60.0)
    d.joined(12, 700)  # re-registered
    assert d.due(70.0, connected=True) == {} and d.declared == {5}


def test_tasks_back_within_the_grace_after_an_outage_are_no_failure() -> None:
    d = FailureDetector(grace=3.0, answer_secs=ANSWER, liveness=False)
    d.lead(0.0)
    assert d.due(0.0, connected=True) == {}
    assert d.due(5.0, connected=False) == {}  # ZooKeeper away: every session may expire
    d.left(1, "op", 10)  # the resync after reconnecting misses tasks not re-registered yet
    d.left(2, "op", 20)
    assert d.due(20.0, connected=True) == {}  # reconnected now: grace starts
    d.joined(1, 11)  # re-registered
    assert _declared(d.due(23.5, connected=True)) == {"op": [(2, 20, Reason.SESSION)]}


def test_an_older_incarnations_news_says_nothing_of_a_newer_one() -> None:
    d = _detector()
    d.heard(4, 41, 60.0)  # re-registered as 41 and connected under it
    d.closed(4, "op", 40)  # then its connection of 40 closes: not a death
    d.left(4, "op", 40)
    assert d.due(60.1, connected=True) == {}
    d.left(3, "op", 30)
    assert d.due(60.2, connected=True, live={3: 31}) == {}  # back under 31 already
    assert d.declared == frozenset()


def test_a_declared_task_is_usable_again_once_its_restart_is_recovered() -> None:
    """After a declaration and a restart, ``elastorm migrate`` must accept the task: the
    join of a newer znode, or the recovery of its ``TaskStarted``, forgets it."""
    d = _detector()
    d.closed(4, "op", 40)
    assert d.due(60.0, connected=True) and d.declared == {4}
    d.joined(4, 40)  # a late view of the old znode: still declared
    assert d.declared == {4}
    d.joined(4, 44)
    assert d.declared == frozenset()
    d.closed(4, "op", 44)
    assert d.due(90.0, connected=True) and d.declared == {4}
    d.forget(4)  # its new incarnation reported TaskStarted; recovered
    assert d.declared == frozenset()
    d.left(4, "op", 44)  # and it can be lost again
    assert d.due(95.0, connected=True) and d.declared == {4}


def test_several_operators_are_declared_together() -> None:
    d = _detector(liveness=False)
    d.left(5, "op2", 50)
    d.left(9, "op3", 90)
    d.left(4, "op2", 40)
    assert _declared(d.due(60.0, connected=True)) == {
        "op2": [(4, 40, Reason.SESSION), (5, 50, Reason.SESSION)],
        "op3": [(9, 90, Reason.SESSION)],
    }


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
    "storm.id": "t-1-1",
}


class FakeRuntime:
    """What the bolt uses of ``ControllerRuntime``: decisions loaded, commands durable."""

    def __init__(self) -> None:
        self.znodes: dict[str, bytes] = {}
        self.never_started: set[int] = set()  # keyed tasks that counted no start yet
        self.layout = ZnodeLayout("t")
        self.client = SimpleNamespace(
            connected=True,
            DataWatch=lambda path, func: None,
            set=self.znodes.__setitem__,
            exists=lambda path: (
                None
                if any(path == self.layout.incarnation("op", t) for t in self.never_started)
                else object()
            ),
        )
        self.incarnations: dict[int, int] = {10: 1, 11: 1, 12: 1}  # every keyed task's znode
        self.watcher = SimpleNamespace(
            events=[],
            poll_events=self._poll,
            live=dict,
            incarnations=lambda: dict(self.incarnations),
            synced=lambda: True,
        )
        self.loaded = True  # this task leads (False: another one does)
        self.resumed = True  # it took over an earlier controller's decisions
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
    monkeypatch.setattr(bolt_module, "CommandOutbox", lambda *a: SimpleNamespace(start=dict))
    bolt = MigrationControllerBolt(
        input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None
    )
    sent = []
    monkeypatch.setattr(bolt, "send", sent.append, raising=False)
    bolt.initialize(CONF, CONTEXT)
    return bolt, runtime, sent, fenced


def test_the_controller_commands_through_the_tasks_mailboxes_never_on_a_storm_stream(
    monkeypatch,
) -> None:
    """A Storm 2 bolt reads no input while one of its emits waits on a task in
    backpressure: a controller that emitted its commands starved behind a router
    (docs/failures.md). Its commands go to ZooKeeper mailboxes instead."""
    posted = []
    outbox = SimpleNamespace(start=dict, post=lambda task, message: posted.append((task, message)))
    bolt, runtime, _, fenced = make_controller(monkeypatch)
    bolt.commands = outbox
    monkeypatch.setattr(bolt, "send", type(bolt).send.__get__(bolt))  # its own, not a recorder
    emitted = []
    monkeypatch.setattr(bolt, "emit", lambda *a, **kw: emitted.append((a, kw)))
    runtime.watcher.events = [TaskLeft(task_id=11, operator="op", node_id="node1", incarnation=5)]
    bolt.detect_failures(100.0)
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [(11, 5)]
    restores = [(t, m) for t, m in posted if isinstance(m, Migrate)]
    assert restores and {t for t, _ in restores} == {1}  # to the emitter, by its mailbox
    assert any(isinstance(m, PeerDown) for _, m in posted)
    assert emitted == []  # nothing on a Storm stream


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


def test_a_restarted_holder_is_named_again_after_the_peer_down_so_its_groups_keep_a_copy(
    controller,
) -> None:
    """Task 11 restarts empty: it held the checkpoints of task 10's groups 0 and 3 and
    stays their holder. Task 10 must end with 11 as their holder: the ``PeerDown`` that
    forgets the old copies comes first, then ``SetHolder`` names 11 again. (Sent the
    other way round, or the unchanged holder not sent at all, the survivor kept no
    holder: chained lose-1 at session 28, 12 groups with no copy for minutes.)"""
    from elastorm.core.migration.coordinator import TaskCoordinator

    bolt, _, sent, _ = controller
    control = bolt.controls["op"]
    held_at_11 = [g for g in range(6) if control.owner(g) == 10 and control.holders[g] == 11]
    assert held_at_11  # the fixture's placement: 10 owns 0 and 3, checkpointed on 11
    survivor = TaskCoordinator(
        task=10,
        num_key_groups=6,
        upstreams=[1],
        owned=held_at_11,
        holders={g: 11 for g in held_at_11},
    )
    bolt.recover("op", [11], rejoined=True)
    for s in sent:
        if s.to_task == 10:
            survivor.receive(0, s.message)
    assert {g: survivor.machine(g).holder for g in held_at_11} == {g: 11 for g in held_at_11}
    assert {g: control.holders[g] for g in held_at_11} == {g: 11 for g in held_at_11}


def test_an_owner_that_forgot_a_live_holder_is_told_it_again_not_a_down_one(controller) -> None:
    """``HolderLost`` (the owner cleared its holder at a ``PeerDown``) is answered: a
    holder that is back (restarted) is named again; a down one is left to the recovery
    of its restart; a report about a holder the group no longer has changes nothing.
    Before, the controller only logged the report, and the group kept no copy."""
    import json

    from elastorm.core.actions import HolderLost, encode_report
    from elastorm.storm.elastic import REPORTS

    bolt, _, sent, _ = controller
    control = bolt.controls["op"]
    g = next(g for g in range(6) if control.owner(g) == 10 and control.holders[g] == 11)

    def report(holder: int) -> list:
        sent.clear()
        lost = HolderLost(key_group=g, holder=holder)
        bolt.process_report(
            SimpleNamespace(stream=REPORTS, task=10, values=[json.dumps(encode_report(lost))])
        )
        return [(s.to_task, s.message) for s in sent]

    assert report(11) == [(10, SetHolder(key_group=g, holder=11))]
    assert report(12) == []  # not this group's holder
    bolt.loop.declare_lost([11])
    assert report(11) == []  # down: its restart's recovery places the copy


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


def test_a_task_gone_before_this_controller_watched_is_declared_after_the_grace(
    controller,
) -> None:
    """lose-1-ctl at df1ca41 (docs/raw/chaos_df1ca41.jsonl): the leader and task 9 were
    killed while the standby was still starting; its watcher never saw 9's znode leave,
    so nothing was restored until Storm restarted 9 (76 s after the kill). Now a keyed
    task with no znode at the first look after taking over is suspected, and declared
    once the grace has passed without a znode or a liveness connection of it."""
    bolt, runtime, sent, fenced = controller
    del runtime.incarnations[11]  # gone before this controller's watcher read tasks/
    control = bolt.controls["op"]
    lost = [g for g in range(6) if control.owner(g) == 11]
    for g in range(6):
        control.on_checkpoint_stored(
            control.holders[g], CheckpointStored(key_group=g, checkpoint=(0, 1))
        )
    bolt.detect_failures(100.0)  # the first look: suspected, within the grace
    assert sent == [] and fenced == []
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [(11, UNSEEN)]
    restores = [s for s in sent if isinstance(s.message, Migrate)]
    assert {s.message.key_group for s in restores} == set(lost)
    assert all(control.owner(g) != 11 for g in lost)


def test_an_absent_task_whose_znode_appears_within_the_grace_is_not_declared(
    controller,
) -> None:
    bolt, runtime, sent, fenced = controller
    del runtime.incarnations[11]  # e.g. re-registering after a lapsed session
    bolt.detect_failures(100.0)
    runtime.incarnations[11] = 7  # back
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [] and not [s for s in sent if isinstance(s.message, Migrate)]
    assert bolt.detector.declared == frozenset()


def test_after_a_take_over_a_task_that_never_started_is_not_suspected(controller) -> None:
    """join lose-1-ctl at 58535de (docs/benchmarks.md, "Session 27"): the leader was
    killed while two tasks' workers were still starting (57 s after the submission, 2
    cores); the new leader found no znode of them and declared them lost 5 s later, as
    they came up. A task that never counted a start is being launched, not lost; one
    that did and has no znode is suspected as before."""
    bolt, runtime, sent, fenced = controller
    del runtime.incarnations[11]
    del runtime.incarnations[12]
    runtime.never_started = {11}
    bolt.detect_failures(100.0)
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [(12, UNSEEN)]
    assert bolt.detector.declared == frozenset({12})


def test_absent_tasks_are_not_suspected_before_the_task_znodes_were_read(controller) -> None:
    bolt, runtime, sent, fenced = controller
    synced = False
    runtime.watcher.synced = lambda: synced
    runtime.incarnations.clear()  # nothing read yet: not "every task is gone"
    bolt.detect_failures(100.0)
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [] and bolt.detector.declared == frozenset()


def test_on_a_first_start_a_task_not_registered_yet_is_not_suspected(controller) -> None:
    """cc09e88's chaos run: the first controller of a topology found task 12 not yet
    registered (a slow start under load) and declared it lost 5 s later. A first start
    (nothing resumed from a predecessor) suspects no absent task."""
    bolt, runtime, sent, fenced = controller
    runtime.resumed = False
    del runtime.incarnations[11]
    bolt.detect_failures(100.0)
    bolt.detect_failures(100.0 + bolt.detector.grace)
    assert fenced == [] and bolt.detector.declared == frozenset()
