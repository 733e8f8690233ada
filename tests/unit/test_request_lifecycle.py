"""The migration request's lifecycle: one table changes its state, the request board
writes only through it and everything it writes reads back, and a request left
``started`` by a leader that died is re-driven or closed by the one taking over."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from memory_zk import MemoryZk
from test_failures import make_controller

from elastorm.controller.requests import (
    FINAL,
    IN_FLIGHT,
    TRANSITIONS,
    MigrationRequest,
    RequestError,
    RequestEvent,
    RequestState,
    RequestTransitionError,
    UnreadableRequest,
    after_leader_lost,
    decode_record,
    decode_request,
    encode_request,
    next_state,
)
from elastorm.controller.standby import TookOver
from elastorm.core.messages import Protocol
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import RequestBoard, read_request, submit_request, withdraw_request

LAYOUT = ZnodeLayout("t")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "controller.md"


def request(**kw) -> MigrationRequest:
    return MigrationRequest(
        **{"operator": "op", "key_group": 1, "target": "holder", "protocol": Protocol.CPA, **kw}
    )


# -- the table ------------------------------------------------------------------------


def test_every_pair_outside_the_table_is_illegal_and_final_states_stay_final() -> None:
    for state, event in itertools.product(RequestState, RequestEvent):
        if (state, event) in TRANSITIONS:
            assert next_state(state, event) is TRANSITIONS[(state, event)]
        else:
            with pytest.raises(RequestTransitionError, match=event.value):
                next_state(state, event)
    assert FINAL == {RequestState.DONE, RequestState.REFUSED, RequestState.ABANDONED}
    assert IN_FLIGHT == {RequestState.STARTED, RequestState.STUCK}
    # Every state is reachable from pending.
    reached, frontier = {RequestState.PENDING}, [RequestState.PENDING]
    while frontier:
        s = frontier.pop()
        for (a, _), b in TRANSITIONS.items():
            if a is s and b not in reached:
                reached.add(b)
                frontier.append(b)
    assert reached == set(RequestState)


def test_a_request_changes_state_only_through_the_table() -> None:
    r = request()
    with pytest.raises(RequestError, match="table"):
        r.advance(RequestEvent.START, 1.0, state=RequestState.DONE)
    with pytest.raises(RequestTransitionError):
        r.advance(RequestEvent.FINISH, 1.0)
    started = r.advance(RequestEvent.START, 1.0, epoch=3, source=0, protocol_used=Protocol.CPA)
    back = started.advance(RequestEvent.REDRIVE, 2.0)
    assert back.state is RequestState.PENDING
    assert (back.epoch, back.source, back.protocol_used) == (None, None, None)
    assert set(back.times) == {"pending"} and back.times["pending"] == 2.0


def test_the_docs_show_the_table_of_the_code() -> None:
    """docs/controller.md renders ``TRANSITIONS``: states down, events across."""
    events = list(RequestEvent)
    lines = [
        "| state | " + " | ".join(e.value for e in events) + " |",
        "|---|" + "---|" * len(events),
    ]
    for s in RequestState:
        cells = [TRANSITIONS[(s, e)].value if (s, e) in TRANSITIONS else "" for e in events]
        lines.append(f"| {s.value} | " + " | ".join(cells) + " |")
    assert "\n".join(lines) in DOCS.read_text(), "\n".join(lines)


# -- the board writes through the table, and what it writes reads back -------------------


def board() -> tuple[MemoryZk, RequestBoard]:
    zk = MemoryZk()
    zk.ensure_path(LAYOUT.requests)
    return zk, RequestBoard(zk, LAYOUT, "op")


def test_every_record_the_board_writes_decodes_back() -> None:
    zk, b = board()
    name = submit_request(zk, LAYOUT, request())
    path = LAYOUT.request(name)
    ((seen, pending),) = b.pending()
    assert seen == name and pending == request()
    events = [
        (
            RequestEvent.START,
            {"protocol_used": Protocol.DIRECT, "epoch": 4, "source": 0, "target": 2},
        ),
        (RequestEvent.OVERDUE, {"detail": "stuck: waiting for MigrationDone"}),
        (RequestEvent.FINISH, {"pause": 0.02}),
    ]
    for event, changes in events:
        before = decode_request(zk.nodes[path])
        b.apply(name, event, **changes)
        after = decode_request(zk.nodes[path])
        assert after.state is next_state(before.state, event)
        assert decode_request(encode_request(after)) == after
    assert read_request(zk, LAYOUT, name).pause == 0.02
    # An event the record's state does not allow is dropped, not written.
    written = zk.nodes[path]
    b.apply(name, RequestEvent.START)
    assert zk.nodes[path] == written and not b.unwritten


def test_an_unreadable_request_is_refused_in_a_record_that_reads_back() -> None:
    zk, b = board()
    path = zk.create(
        f"{LAYOUT.requests}/req-", b'{"operator": "op", "key_group": -1}', sequence=True
    )
    name = path.rsplit("/", 1)[1]
    assert b.pending() == []
    record = decode_record(zk.nodes[path])
    assert isinstance(record, UnreadableRequest) and record.state is RequestState.REFUSED
    assert "protocol" in record.detail and json.loads(record.raw)["key_group"] == -1
    with pytest.raises(RequestError, match="unreadable"):
        read_request(zk, LAYOUT, name)
    # A later controller reads it as refused and leaves it alone.
    written = zk.nodes[path]
    assert RequestBoard(zk, LAYOUT, "op").pending() == [] and zk.nodes[path] == written
    assert not withdraw_request(zk, LAYOUT, name) and path in zk.nodes  # not pending: kept


# -- the leader dies while a request is started -------------------------------------------


def test_after_leader_lost_redrives_an_order_that_never_reached_the_routing() -> None:
    started = request().advance(RequestEvent.START, 1.0, epoch=7, source=0, target=2)
    assert after_leader_lost(started, 6) is RequestEvent.REDRIVE
    assert after_leader_lost(started, 7) is RequestEvent.ABANDON
    stuck = started.advance(RequestEvent.OVERDUE, 9.0, detail="stuck")
    assert after_leader_lost(stuck, 8) is RequestEvent.ABANDON
    with pytest.raises(RequestTransitionError):
        after_leader_lost(request(), 7)  # a pending request had no leader yet


@pytest.mark.parametrize(
    ("claims", "event"),
    [
        ({0: False, 2: True, 1: False}, RequestEvent.FINISH),  # the end, seen
        ({0: True, 2: True}, None),  # both own it: the source has not handed it off
        ({2: True}, None),  # the source not heard since the order
        ({0: False, 2: False}, None),  # the target does not own it yet
        ({0: False, 2: True, 1: True}, None),  # a third claims it: not this move's end
    ],
)
def test_a_successor_finishes_an_adopted_request_only_on_its_end_in_the_heartbeats(
    claims, event
) -> None:
    started = request().advance(RequestEvent.START, 1.0, epoch=7, source=0, target=2)
    assert after_leader_lost(started, 7, claims=claims, expired=False) is event
    expired = after_leader_lost(started, 7, claims=claims)
    assert expired is (event or RequestEvent.ABANDON)


def beat(task: int, groups: tuple[int, ...], at: float):
    from elastorm.controller.model import Heartbeat, TaskIdentity, TaskRecord

    identity = TaskIdentity(task_id=task, operator="op", node_id=f"node{task}", host="h", pid=task)
    return TaskRecord(identity=identity, heartbeat=Heartbeat(key_groups=groups), time=at)


@pytest.mark.parametrize("end", ["persisted-seen", "persisted-unseen", "lost"])
def test_the_controller_taking_over_never_leaves_a_request_started(monkeypatch, end) -> None:
    """A leader ordered a request (``started``, epoch 5) and died. Its successor loads
    the routing: epoch 4 (the order never reached ZooKeeper, so no command went out)
    re-drives the request, which the successor then orders itself; epoch 5 (ordered)
    adopts it: done once the heartbeats show its end (its ``MigrationDone`` reports went
    to the dead leader: session 33's join/cpal-source closed such a finished move as
    abandoned), abandoned if they have not ``migration_timeout_secs`` after the
    takeover. Never ordered twice."""
    bolt, runtime, sent, _ = make_controller(monkeypatch)
    zk, b = board()
    bolt.boards["op"] = b
    name = submit_request(zk, LAYOUT, request(key_group=1, target=12, protocol=Protocol.DIRECT))
    old = decode_request(zk.nodes[LAYOUT.request(name)])
    zk.set(
        LAYOUT.request(name),
        encode_request(old.advance(RequestEvent.START, 1.0, epoch=5, source=10, target=12)),
    )
    persisted = end != "lost"
    runtime.epochs = {"op": 5 if persisted else 4}
    bolt.take_over(TookOver(at=10.0, standby_since=2.0))
    assert bolt.orphans == {"op"}
    bolt.close_orphans("op", b)
    assert bolt.orphans == set()
    if persisted:
        assert read_request(zk, LAYOUT, name).state is RequestState.STARTED
        old_beats = {10: beat(10, (1,), 0.5), 12: beat(12, (), 0.5)}  # before the order
        runtime.watcher.live = lambda: dict(old_beats)
        bolt.settle_adopted("op", b, 11.0)
        assert read_request(zk, LAYOUT, name).state is RequestState.STARTED  # waits
        if end == "persisted-seen":
            runtime.watcher.live = lambda: {10: beat(10, (), 11.5), 12: beat(12, (1,), 11.5)}
            bolt.settle_adopted("op", b, 12.0)
            closed = read_request(zk, LAYOUT, name)
            assert closed.state is RequestState.DONE and "seen in the heartbeats" in closed.detail
        else:
            bolt.settle_adopted("op", b, 10.0 + bolt.migration_timeout)
            closed = read_request(zk, LAYOUT, name)
            assert closed.state is RequestState.ABANDONED and "not seen" in closed.detail
        assert bolt.adopted["op"] == {}
    else:
        closed = read_request(zk, LAYOUT, name)
        assert closed.state is RequestState.PENDING
    assert "controller died" in closed.detail
    sent.clear()
    bolt.carry_out_requests("op", b)
    now = read_request(zk, LAYOUT, name)
    if persisted:
        assert now.state is closed.state and sent == []
    else:
        assert now.state is RequestState.STARTED and now.epoch == bolt.controls["op"].epoch
        assert sent and bolt.loop.requested
    assert now.state is not RequestState.STARTED or now.epoch != 5


def test_a_request_that_must_wait_is_asked_again_until_it_is_ordered(monkeypatch) -> None:
    """A CPA to a holder that has not reported the newest checkpoint waits (``waiting``)
    and is asked again on later rounds, then runs direct after ``defer_secs``. The board
    marked a request seen on its first read, so a request that waited once was never
    read again and stayed pending until its submitter withdrew it (the hosts test after
    a takeover re-placed every holder: "not picked up by the controller in 180 s")."""
    bolt, runtime, sent, _ = make_controller(monkeypatch)
    zk, b = board()
    bolt.boards["op"] = b
    control = bolt.controls["op"]
    group = next(iter(control.holders))
    holder = control.holders[group]
    name = submit_request(zk, LAYOUT, request(key_group=group, protocol=Protocol.CPA))
    monkeypatch.setattr(
        control, "choose", lambda *a, **kw: real_choose(*a, **{**kw, "waited": waited[0]})
    )
    real_choose = type(control).choose.__get__(control)
    waited = [0.0]
    bolt.carry_out_requests("op", b)
    assert read_request(zk, LAYOUT, name).state is RequestState.PENDING and sent == []
    waited[0] = bolt.loop.options.defer_secs + 1.0
    bolt.carry_out_requests("op", b)
    started = read_request(zk, LAYOUT, name)
    assert started.state is RequestState.STARTED and started.target == holder
    assert started.protocol_used is Protocol.DIRECT and sent
