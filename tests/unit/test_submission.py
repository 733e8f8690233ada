"""A resubmission under an old topology name (issue 32): the znodes of a name belong to
one Storm submission (``storm.id``); a restart of it resumes them, a new submission
sets them aside under ``archive/<old storm id>`` and starts clean. Against the
in-memory ZooKeeper of ``tests/memory_zk.py``."""

from __future__ import annotations

import logging

import pytest
from kazoo.exceptions import BadVersionError
from memory_zk import MemoryZk

from elastorm.core.replay import RestartPoint
from elastorm.core.routing import RoutingTable
from elastorm.zk.codec import (
    decode_routing,
    decode_submission,
    encode_restart_point,
    encode_routing,
)
from elastorm.zk.layout import ZnodeLayout, ZnodeLayoutError, submission_id
from elastorm.zk.requests import ever_started, read_routing, register_incarnation
from elastorm.zk.submission import (
    Verdict,
    Znode,
    claim_submission,
    plan_set_aside,
    read_submission,
    read_tree,
    verdict,
)

LAYOUT = ZnodeLayout("wc")
OLD, NEW = "wc-3-1795849642", "wc-4-1795850000"
TABLE = RoutingTable(epoch=7, owners=(5, 6, 5, 6))


def run_of(zk: MemoryZk, storm_id: str) -> None:
    """What a submission leaves behind: its claim, a routing table, a keyed task's
    incarnation, an emitter's restart point, a drained node set, a live task's
    ephemeral znode and the scheduler's placement."""
    claim_submission(zk, LAYOUT, storm_id, clock=lambda: 100.0)
    zk.create(
        LAYOUT.routing("count"), encode_routing("count", TABLE, controller="c"), makepath=True
    )
    zk.create(LAYOUT.checkpoints, b'{"x":1}', makepath=True)
    register_incarnation(zk, LAYOUT, "count", 5)
    register_incarnation(zk, LAYOUT, "count", 5)  # restarted once
    point = encode_restart_point(RestartPoint(positions={"words": 41}))
    zk.create(LAYOUT.restart_point("router", 3), point, makepath=True)
    zk.create(LAYOUT.scheduler_nodes, b'{"draining":["n2"]}', makepath=True)
    zk.create(LAYOUT.scheduler_placement, b'{"binding":[]}', makepath=True)
    zk.create(LAYOUT.task(5), b"live", ephemeral=True, makepath=True)


def test_a_restart_of_the_same_submission_resumes_everything() -> None:
    zk = MemoryZk()
    run_of(zk, OLD)
    before = dict(zk.nodes)
    record = claim_submission(zk, LAYOUT, OLD, clock=lambda: 200.0)
    assert record.storm_id == OLD and record.since == 100.0 and record.set_aside is None
    assert zk.nodes == before  # nothing moved
    assert read_routing(zk, LAYOUT, "count") == TABLE
    assert register_incarnation(zk, LAYOUT, "count", 5) == 3  # a restart, as before


def test_a_new_submission_under_an_old_name_starts_clean_and_archives_the_old(
    caplog,
) -> None:
    zk = MemoryZk()
    run_of(zk, OLD)
    old_tree = read_tree(zk, LAYOUT.base)
    with caplog.at_level(logging.INFO, logger="elastorm.zk.submission"):
        record = claim_submission(zk, LAYOUT, NEW, clock=lambda: 300.0)
    archive = f"{LAYOUT.base}/archive/{OLD}"
    assert record.storm_id == NEW and record.since == 300.0
    aside = record.set_aside
    assert (aside.storm_id, aside.key_groups, aside.path, aside.at) == (OLD, 4, archive, 300.0)
    # routing, checkpoints, incarnation, restart point, node set, and the 4 parents
    # (controller, controller/routing, incarnations, restart) that only they had
    assert aside.znodes == 9
    assert decode_submission(zk.get(LAYOUT.submission)[0]) == record == read_submission(zk, LAYOUT)
    # Starts clean: no routing table to resume, a first start of every task.
    assert read_routing(zk, LAYOUT, "count") is None
    assert not ever_started(zk, LAYOUT, "count", 5)  # a take-over does not suspect it
    assert register_incarnation(zk, LAYOUT, "count", 5) == 1
    assert ever_started(zk, LAYOUT, "count", 5) and not ever_started(zk, LAYOUT, "count", 6)
    assert not zk.exists(LAYOUT.restart_point("router", 3))
    assert not zk.exists(LAYOUT.scheduler_nodes) and not zk.exists(LAYOUT.controller)
    # Kept in place: the scheduler's placement (Nimbus placed the new submission) and
    # the live session's ephemeral znode (it ends with its session).
    assert zk.get(LAYOUT.scheduler_placement)[0] == b'{"binding":[]}'
    assert zk.get(LAYOUT.task(5))[0] == b"live"
    # The old state, byte for byte, under the archive (not its ephemeral znodes).
    for rel in ("controller/routing/count", "incarnations/count-5", "restart/router-3"):
        assert zk.get(f"{archive}/{rel}")[0] == old_tree[rel].data
    assert decode_routing(zk.get(f"{archive}/controller/routing/count")[0])[1] == TABLE
    assert not zk.exists(f"{archive}/tasks/5")
    assert not zk.exists(f"{archive}/scheduler/placement")
    assert not zk.exists(f"{archive}/submission")
    # One line, at the component that did it, naming the old submission.
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and OLD in lines[0] and "4 key groups" in lines[0]
    # Every later component of the new submission resumes; a third submission sets
    # the second aside beside the first.
    assert claim_submission(zk, LAYOUT, NEW).set_aside == aside
    zk.create(
        LAYOUT.routing("count"), encode_routing("count", TABLE, controller="c"), makepath=True
    )
    third = claim_submission(zk, LAYOUT, "wc-5-1795851111")
    assert third.set_aside.storm_id == NEW and third.set_aside.key_groups == 4
    assert zk.exists(f"{archive}/controller/routing/count")  # the first archive stays


def test_state_left_by_an_elastorm_that_recorded_no_submission_is_set_aside_too() -> None:
    zk = MemoryZk()
    zk.create(
        LAYOUT.routing("count"), encode_routing("count", TABLE, controller="c"), makepath=True
    )
    record = claim_submission(zk, LAYOUT, NEW)
    assert record.set_aside.storm_id == "unrecorded"
    assert zk.exists(f"{LAYOUT.base}/archive/unrecorded/controller/routing/count")
    assert read_routing(zk, LAYOUT, "count") is None


def test_a_first_submission_records_itself_and_moves_nothing() -> None:
    zk = MemoryZk()
    zk.create(LAYOUT.scheduler_placement, b"{}", makepath=True)  # Nimbus placed it first
    zk.create(LAYOUT.task(9), b"live", ephemeral=True, makepath=True)
    record = claim_submission(zk, LAYOUT, NEW, clock=lambda: 5.0)
    assert record.storm_id == NEW and record.set_aside is None
    assert set(read_tree(zk, LAYOUT.base)) == {
        "scheduler",
        "scheduler/placement",
        "tasks",
        "tasks/9",
        "submission",
    }


class RacedZk(MemoryZk):
    """A rival writes a znode of the old submission between the claim's read and its
    transaction, once."""

    raced = False

    def transaction(self):
        if not self.raced:
            self.raced = True
            self.set(LAYOUT.checkpoints, b'{"x":2}')
        return super().transaction()


def test_a_write_racing_the_set_aside_fails_it_whole_and_the_retry_archives_it() -> None:
    zk = RacedZk()
    run_of(zk, OLD)
    record = claim_submission(zk, LAYOUT, NEW)
    assert zk.raced and record.set_aside.storm_id == OLD
    assert not zk.exists(LAYOUT.checkpoints)
    assert zk.get(f"{LAYOUT.base}/archive/{OLD}/controller/checkpoints")[0] == b'{"x":2}'


def test_a_claim_that_keeps_losing_races_raises_for_its_caller_to_retry() -> None:
    class AlwaysRaced(MemoryZk):
        def transaction(self):
            self.set(LAYOUT.checkpoints, b"{}")
            return super().transaction()

    zk = AlwaysRaced()
    run_of(zk, OLD)
    with pytest.raises(BadVersionError):  # a kazoo error: at_start and the store retry it
        claim_submission(zk, LAYOUT, NEW)
    assert decode_submission(zk.get(LAYOUT.submission)[0]).storm_id == OLD  # nothing half-done


@pytest.mark.parametrize(
    ("recorded", "has_state", "expected"),
    [
        (NEW, True, Verdict.RESUME),
        (NEW, False, Verdict.RESUME),
        (OLD, True, Verdict.SET_ASIDE),
        (None, True, Verdict.SET_ASIDE),
        (OLD, False, Verdict.FIRST),
        (None, False, Verdict.FIRST),
    ],
)
def test_the_verdict_table(recorded, has_state, expected) -> None:
    assert verdict(recorded, NEW, has_state) is expected


def test_the_plan_copies_ancestors_of_what_it_deletes_and_deletes_bottom_up() -> None:
    tree = {
        "scheduler": Znode(data=b"", version=0),
        "scheduler/nodes": Znode(data=b"n", version=3),
        "scheduler/placement": Znode(data=b"p", version=1),
        "tasks": Znode(data=b"", version=0),
        "tasks/5": Znode(data=b"t", version=0, ephemeral=True),
        "requests": Znode(data=b"", version=0),
        "requests/req-1": Znode(data=b"r", version=2),
    }
    plan = plan_set_aside(tree, OLD)
    a = f"archive/{OLD}"
    assert plan.creates == (
        ("archive", b""),
        (a, b""),
        (f"{a}/requests", b""),
        (f"{a}/scheduler", b""),
        (f"{a}/requests/req-1", b"r"),
        (f"{a}/scheduler/nodes", b"n"),
    )
    assert plan.deletes == (("requests/req-1", 2), ("scheduler/nodes", 3), ("requests", 0))
    assert plan.moved == 3 and plan.key_groups == 0 and not plan.empty
    assert plan_set_aside({"tasks": tree["tasks"], "tasks/5": tree["tasks/5"]}, OLD).empty


def test_the_storm_id_comes_from_the_workers_conf() -> None:
    assert submission_id({"storm.id": OLD}) == OLD
    with pytest.raises(ZnodeLayoutError, match=r"storm\.id"):
        submission_id({"topology.name": "wc"})


class ClientZk(MemoryZk):
    """The in-memory ZooKeeper as the client ``at_start`` makes (start, stop, close)."""

    def start(self, timeout: float) -> None:
        pass

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_keyed_task_of_a_new_submission_starts_first_not_as_a_restart(monkeypatch) -> None:
    """The issue's run: the resubmission's tasks took themselves for restarts of the old
    one and the controller resumed its routing: every group lost, tuples refused as
    "not the owner". Now a task of the new storm id is a first start with no epoch."""
    import elastorm.zk.requests as rzk

    zk = ClientZk()
    monkeypatch.setattr(rzk, "make_client", lambda settings: zk)
    conf = {"topology.name": "wc", "storm.zookeeper.servers": ["127.0.0.1"]}
    assert rzk.task_start({**conf, "storm.id": OLD}, "count", 5, "count") == (1, -1)
    zk.create(
        LAYOUT.routing("count"), encode_routing("count", TABLE, controller="c"), makepath=True
    )
    assert rzk.task_start({**conf, "storm.id": OLD}, "count", 5, "count") == (2, 7)  # restart
    assert rzk.task_start({**conf, "storm.id": NEW}, "count", 5, "count") == (1, -1)  # new
    assert zk.exists(f"{LAYOUT.base}/archive/{OLD}/controller/routing/count")


def test_the_controller_claims_the_name_before_anything_else_and_gets_the_record(
    monkeypatch,
) -> None:
    import elastorm.zk.requests as rzk

    zk = ClientZk()
    run_of(zk, OLD)
    monkeypatch.setattr(rzk, "make_client", lambda settings: zk)
    conf = {"topology.name": "wc", "storm.zookeeper.servers": ["127.0.0.1"], "storm.id": NEW}
    record = rzk.controller_start(conf, "controller", 2)
    assert record.storm_id == NEW and record.set_aside.storm_id == OLD
    assert record.set_aside.key_groups == 4 and read_routing(zk, LAYOUT, "count") is None
    again = rzk.controller_start(conf, "controller", 2)  # Storm restarted the controller
    assert again == record and register_incarnation(zk, LAYOUT, "controller", 2) == 3
