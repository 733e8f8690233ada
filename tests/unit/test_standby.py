"""The standby controller: a second controller task that does nothing while another
leads, then takes over at once when the leader's znode goes, declaring lost the
tasks that died meanwhile (with the old leader) without a second grace, and
recovering only the restarted tasks its predecessor left unhandled."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from streamparse import Grouping
from test_failures import make_controller

from elastorm.controller.failures import Reason
from elastorm.controller.standby import (
    Leadership,
    Restarted,
    Role,
    TookOver,
    WorkerId,
    restarted_to_recover,
    shared_worker,
)
from elastorm.core.actions import CheckpointStored, TaskStarted, encode_report
from elastorm.core.messages import Migrate
from elastorm.storm.elastic import REPORTS
from elastorm.zk.codec import LeaderInfo, decode_leader, encode_leader
from elastorm.zk.view import TaskJoined, TaskLeft

# -- the role, sans-IO ---------------------------------------------------------------


def test_a_standby_takes_over_once_when_it_loads_the_decisions() -> None:
    lead = Leadership()
    assert lead.observe(standby=False, loaded=False, now=1.0) is None  # still starting
    assert lead.role is Role.STARTING
    assert lead.observe(standby=True, loaded=False, now=2.0) is None
    assert lead.observe(standby=True, loaded=False, now=9.0) is None
    assert lead.role is Role.STANDBY and lead.standby_since == 2.0
    took = lead.observe(standby=False, loaded=True, now=12.5)
    assert took == TookOver(at=12.5, standby_since=2.0) and lead.role is Role.LEADING
    assert lead.observe(standby=False, loaded=True, now=13.0) is None  # only once
    assert lead.observe(standby=True, loaded=False, now=14.0) is None
    assert lead.role is Role.LEADING


def test_a_controller_that_leads_from_its_start_never_stood_by() -> None:
    lead = Leadership()
    assert lead.observe(standby=False, loaded=True, now=3.0) == TookOver(at=3.0, standby_since=None)
    with pytest.raises(ValueError):
        TookOver(at=1.0, standby_since=2.0)


def test_only_restarts_the_dead_leader_never_acted_on_are_recovered() -> None:
    seen = [
        Restarted(operator="op", task=11, stale_through=4),  # routing moved past it: handled
        Restarted(operator="op", task=12, stale_through=6),  # routing unchanged since
        Restarted(operator="op", task=12, stale_through=6),  # reported twice: once
        Restarted(operator="other", task=20, stale_through=-1),  # no table ever written
    ]
    found = restarted_to_recover(seen, {"op": 6})
    assert [(r.operator, r.task) for r in found] == [("op", 12), ("other", 20)]
    assert restarted_to_recover([], {"op": 6}) == []


def test_a_standby_in_its_leaders_worker_is_reported() -> None:
    me = WorkerId(host="h1", worker_pid=100)
    assert "share worker 100 on h1" in shared_worker(me, WorkerId(host="h1", worker_pid=100), 3)
    assert shared_worker(me, WorkerId(host="h1", worker_pid=101), 3) is None
    assert shared_worker(me, WorkerId(host="h2", worker_pid=100), 3) is None
    assert shared_worker(me, me, 1) is None  # one worker: nothing could be placed apart
    assert shared_worker(me, None, 3) is None  # the leader's worker is unknown


def test_the_leader_znode_names_its_worker_and_older_ones_still_decode() -> None:
    info = LeaderInfo(controller="controller-3", host="h", pid=9, worker=8)
    assert decode_leader(encode_leader(info)) == info
    old = json.loads(encode_leader(info))
    del old["worker"]
    assert decode_leader(json.dumps(old).encode()).worker == 0


# -- wiring ---------------------------------------------------------------------------


def _wired(config: dict):
    from test_keyed_api import CountWords, Words

    from elastorm import ElasticTopology, keyed

    body = {
        "config": dict(config),
        "words": Words.spec(par=2),
    }
    body["counts"] = CountWords.spec(inputs={body["words"]: keyed("word")}, par=3)
    topology = type(ElasticTopology)("WordCount", (ElasticTopology,), body)
    return topology.thrift_bolts["controller"].common


def test_the_controller_runs_with_a_standby_that_gets_every_report() -> None:
    common = _wired({"elastorm.controller.standbys": 1})
    assert common.parallelism_hint == 2
    ((_, grouping),) = common.inputs.items()
    assert grouping == Grouping.ALL  # not GLOBAL: the standby hears every restart
    assert _wired({}).parallelism_hint == 2  # the default: one standby
    assert _wired({"elastorm.controller.standbys": 0}).parallelism_hint == 1
    assert _wired({"elastorm.controller.standbys": 2}).parallelism_hint == 3


# -- the bolt -------------------------------------------------------------------------


@pytest.fixture
def standby(monkeypatch):
    """test_failures' controller bolt, standing by: another task leads."""
    bolt, runtime, sent, fenced = make_controller(monkeypatch)
    runtime.loaded = False
    return bolt, runtime, sent, fenced


def _checkpointed(bolt):
    """The bolt's controller of ``op``, every holder with its group's newest checkpoint."""
    control = bolt.controls["op"]
    for g in range(6):
        control.on_checkpoint_stored(
            control.holders[g], CheckpointStored(key_group=g, checkpoint=(0, 1))
        )
    return control


def _report(task: int, report) -> SimpleNamespace:
    return SimpleNamespace(stream=REPORTS, task=task, values=[json.dumps(encode_report(report))])


def test_a_standby_decides_writes_and_listens_to_nothing_until_it_leads(standby, caplog) -> None:
    bolt, runtime, sent, fenced = standby
    control = _checkpointed(bolt)
    lost = [g for g in range(6) if control.owner(g) == 11]
    published = []
    for board in bolt.boards.values():
        board.publish_status = lambda *a, **kw: published.append(a)
        board.retry_unwritten = lambda: published.append("retry")
    bolt.detect_failures(100.0)
    # Task 11 dies (with the old leader, say): the standby sees its znode go ...
    runtime.watcher.events = [TaskLeft(task_id=11, operator="op", node_id="node1", incarnation=5)]
    for now in (101.0, 100.0 + 10 * bolt.detector.grace):
        bolt.detect_failures(now)
        bolt.tick(now)
    # ... and declares nothing, sends nothing, publishes nothing, listens nowhere.
    assert sent == [] and fenced == [] and published == []
    assert bolt.detector.declared == frozenset() and bolt.liveness is None
    assert runtime.layout.liveness not in runtime.znodes
    assert bolt.leadership.role is Role.STANDBY
    # The leader's znode goes: this task loads the decisions and leads. Task 11 has
    # not connected to it yet, so it gets the grace to (a live task whose session
    # lapsed as the leader changed would connect and not be declared) ...
    runtime.loaded = True
    takeover = 100.0 + 10 * bolt.detector.grace + 0.5
    bolt.detect_failures(takeover)
    assert fenced == [] and sent == []
    # ... and once the grace is over, never heard, it is declared lost, fenced and its
    # groups restored on their holders.
    with caplog.at_level("ERROR", logger="elastorm.storm.controller_bolt"):
        bolt.detect_failures(takeover + bolt.detector.grace)
    assert fenced == [(11, 5)]
    assert any(Reason.UNHEARD.value in r.getMessage() for r in caplog.records)
    restores = {s.message.key_group for s in sent if isinstance(s.message, Migrate)}
    assert restores == set(lost) and lost
    assert runtime.znodes[runtime.layout.liveness] == bolt.liveness.address.encode()
    assert bolt.leadership.role is Role.LEADING


def test_a_live_task_whose_session_lapses_at_the_takeover_is_not_declared(standby) -> None:
    """The elastic-flights stall: the standby took over and, on its first look, declared
    task 12 lost, whose session had lapsed under load while it lived. Now the task
    connects to the new leader's liveness address and beats; it is not declared and
    its znode comes back."""
    bolt, runtime, sent, fenced = standby
    _checkpointed(bolt)
    bolt.detect_failures(100.0)
    runtime.loaded = True
    bolt.detect_failures(134.5)  # takes over: listens, publishes its address
    runtime.watcher.events = [TaskLeft(task_id=11, operator="op", node_id="node1", incarnation=5)]
    beats = {11: (5, 135.0)}
    bolt.liveness.heard = lambda: dict(beats)
    for now in (135.4, 137.0, 139.0, 134.5 + 2 * bolt.detector.grace):
        beats[11] = (5, now - 0.5)
        bolt.detect_failures(now)
    assert fenced == [] and sent == [] and bolt.detector.declared == frozenset()
    runtime.watcher.events = [TaskJoined(task_id=11, operator="op", node_id="node1", incarnation=9)]
    beats[11] = (9, 150.0)
    bolt.detect_failures(150.5)
    assert fenced == [] and bolt.detector.declared == frozenset()


def test_a_successor_recovers_only_the_restarts_its_predecessor_never_handled(standby) -> None:
    bolt, runtime, sent, _ = standby
    control = _checkpointed(bolt)
    owned = {t: [g for g in range(6) if control.owner(g) == t] for t in (10, 11)}
    # Both restarted (empty) while this task stood by; the leader handled 10's restart
    # (its routing moved past 10's start) and died before 11's.
    bolt.process_report(_report(10, TaskStarted(task=10, restarted=True, stale_through=3)))
    bolt.process_report(_report(11, TaskStarted(task=11, restarted=True, stale_through=4)))
    now = time.time()  # reports are stamped by the bolt's own clock
    bolt.tick(now)
    assert sent == [] and bolt.restarted == []
    runtime.loaded, runtime.epochs = True, {"op": 4}
    assert bolt.leads(now + 10.0)
    bolt.recover_restarted()
    restored = {s.message.key_group for s in sent if isinstance(s.message, Migrate)}
    assert restored == set(owned[11]) and owned[11]
    assert not restored & set(owned[10])


def test_a_standby_reports_once_that_it_shares_its_leaders_worker(standby, caplog) -> None:
    import os
    import socket

    bolt, runtime, _, _ = standby
    runtime.leading = SimpleNamespace(
        controller="controller-3", host=socket.gethostname(), pid=1, worker=os.getppid()
    )
    bolt.workers = 4
    with caplog.at_level("ERROR", logger="elastorm.storm.controller_bolt"):
        bolt.tick(1.0)
        bolt.tick(2.0)
    shared = [r for r in caplog.records if "share worker" in r.getMessage()]
    assert len(shared) == 1
