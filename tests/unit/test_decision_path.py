"""One decision path (issue 28): one function chooses every move's protocol, an
operator's request is decided by the loop like its own moves, and the lazy move
places the checkpoint on its target before running CPA (Madsen & Zhou 2015)."""

from __future__ import annotations

import pytest
from test_controller_loop import BACKGROUND, G, make_loop, records, report_checkpoints

from elastorm.controller.adaptation import MoveReason, Thresholds
from elastorm.controller.loop import RequestOutcome
from elastorm.controller.model import ControllerModelError
from elastorm.controller.requests import MigrationRequest
from elastorm.core.actions import CheckpointStored, MigrationDone, Role
from elastorm.core.control import MigrationRefused
from elastorm.core.messages import Migrate, Protocol, SetHolder
from elastorm.core.protocol_choice import Verdict, choose_protocol

# -- the one choice -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wanted", "facts", "verdict", "protocol", "changed"),
    [
        (
            Protocol.DIRECT,
            {"target_is_holder": False, "holder_ready": False},
            "order",
            "direct",
            False,
        ),
        (Protocol.CPA, {"target_is_holder": True, "holder_ready": True}, "order", "cpa", False),
        (Protocol.CPAL, {"target_is_holder": True, "holder_ready": True}, "order", "cpal", False),
        (Protocol.CPA, {"target_is_holder": True, "holder_ready": False}, "order", "direct", True),
        (
            Protocol.CPA,
            {"target_is_holder": True, "holder_ready": False, "waited": 1, "defer_secs": 3},
            "wait",
            "cpa",
            False,
        ),
        (
            Protocol.CPA,
            {"target_is_holder": True, "holder_ready": False, "waited": 3, "defer_secs": 3},
            "order",
            "direct",
            True,
        ),
        (
            Protocol.CPAL,
            {"target_is_holder": False, "holder_ready": False},
            "order",
            "direct",
            True,
        ),
        (
            Protocol.CPA,
            {
                "target_is_holder": False,
                "holder_ready": False,
                "lazy": True,
                "waited": 0,
                "defer_secs": 3,
            },
            "relocate",
            "cpa",
            False,
        ),
        (
            Protocol.CPA,
            {
                "target_is_holder": False,
                "holder_ready": False,
                "lazy": True,
                "waited": 5,
                "defer_secs": 3,
            },
            "order",
            "direct",
            True,
        ),
        (
            None,
            {"target_is_holder": True, "holder_ready": True, "replay": 5},
            "order",
            "cpal",
            False,
        ),
        (
            None,
            {"target_is_holder": True, "holder_ready": True, "replay": 0},
            "order",
            "cpa",
            False,
        ),
        (None, {"target_is_holder": False, "holder_ready": False}, "order", "direct", False),
    ],
)
def test_choose_protocol(wanted, facts, verdict, protocol, changed) -> None:
    choice = choose_protocol(wanted, **facts)
    assert (choice.verdict.value, choice.protocol.value, choice.changed) == (
        verdict,
        protocol,
        changed,
    )
    # Anything but "order what was asked" says why.
    assert bool(choice.reason) == (
        changed or choice.verdict is not Verdict.ORDER or (wanted is None and protocol == "direct")
    )


def test_a_protocol_that_moves_nothing_is_not_chosen() -> None:
    with pytest.raises(ValueError, match="restore"):
        choose_protocol(Protocol.RESTORE, target_is_holder=True, holder_ready=True)


# -- an operator's request goes through the loop ----------------------------------------


def test_a_request_is_ordered_by_the_loop_and_a_fallback_says_why() -> None:
    loop = make_loop(adapt=False)
    control = loop.controls["op1"]
    request = MigrationRequest(operator="op1", key_group=0, target="holder", protocol=Protocol.CPA)
    # The holder reported no checkpoint yet: the request waits for its first one, as the
    # loop's own moves do, for defer_secs from when it was first asked ...
    defer = loop.options.defer_secs
    for now in (1.0, 1.0 + defer / 2):
        waiting = loop.request("req-1", request, now)
        assert waiting.ordered is None and not waiting.refused
        assert waiting.waiting == "waiting for the target's first checkpoint"
    assert not control.moving and not loop.requested
    # ... then CPA cannot run, and the loop says so.
    outcome = loop.request("req-1", request, 1.0 + defer)
    ordered = outcome.ordered
    assert ordered is not None and not outcome.refused and not outcome.waiting
    assert ordered.choice.changed and ordered.move.protocol is Protocol.DIRECT
    assert ordered.choice.reason == f"the target holds no newest checkpoint after {defer:g} s"
    assert ordered.move.reason is MoveReason.REQUEST and ordered.epoch == control.epoch
    assert [s.to_task for s in ordered.sends if isinstance(s.message, Migrate)] == [ordered.source]
    assert loop.orders == []  # metrics count the loop's own moves only
    # A second request for the moving group is refused, not raised.
    direct = MigrationRequest(operator="op1", key_group=0, target=12, protocol=Protocol.DIRECT)
    again = loop.request("req-2", direct, 1.5 + defer)
    assert again.ordered is None and "already moving" in again.refused
    # Both ends report: the request it carried out is named.
    ends = [
        loop.on_migration_done(
            "op1",
            MigrationDone(key_group=0, epoch=ordered.epoch, protocol=Protocol.DIRECT, role=role),
            2.0 + defer,
        )
        for role in (Role.SOURCE, Role.TARGET)
    ]
    assert ends[0] is None and not loop.controls["op1"].moving
    ended = ends[1]
    assert ended is not None and ended.request == "req-1" and ended.by == "request"


def test_a_request_with_the_newest_checkpoint_runs_cpa() -> None:
    loop = make_loop(adapt=False)
    report_checkpoints(loop)
    request = MigrationRequest(operator="op2", key_group=1, target="holder", protocol=Protocol.CPAL)
    ordered = loop.request("req-1", request, 1.0).ordered
    assert ordered is not None and ordered.move.protocol is Protocol.CPAL
    assert not ordered.choice.changed and ordered.choice.reason == ""


@pytest.mark.parametrize(
    ("request_", "lost", "why"),
    [
        (
            MigrationRequest(operator="op1", key_group=0, target=12, protocol=Protocol.DIRECT),
            {12},
            "lost",
        ),
        (
            MigrationRequest(operator="op1", key_group=0, target=11, protocol=Protocol.DIRECT),
            (),
            "owns",
        ),
        (
            MigrationRequest(operator="op1", key_group=0, target=99, protocol=Protocol.DIRECT),
            (),
            "not a task",
        ),
        (
            MigrationRequest(operator="op1", key_group=G, target=12, protocol=Protocol.DIRECT),
            (),
            "not in",
        ),
        (
            MigrationRequest(operator="nope", key_group=0, target=12, protocol=Protocol.DIRECT),
            (),
            "keyed",
        ),
    ],
)
def test_a_request_that_cannot_run_is_refused_with_the_reason(request_, lost, why) -> None:
    loop = make_loop(adapt=False)
    outcome = loop.request("req-1", request_, 1.0, lost=lost)
    assert outcome.ordered is None and why in outcome.refused
    assert not loop.requested and all(not c.moving for c in loop.controls.values())


def test_a_requested_group_restored_after_its_target_died_refuses_the_request() -> None:
    loop = make_loop(adapt=False)
    request = MigrationRequest(operator="op1", key_group=0, target=12, protocol=Protocol.DIRECT)
    ordered = loop.request("req-1", request, 1.0).ordered
    assert ordered is not None
    recovery = loop.recover("op1", [12], 2.0, rejoined=True)
    assert [name for name, _ in recovery.refused] == ["req-1"]
    assert "restored instead" in recovery.refused[0][1] and not loop.requested


def test_migrate_refuses_a_protocol_it_cannot_run_instead_of_changing_it() -> None:
    loop = make_loop(adapt=False)
    control = loop.controls["op1"]
    with pytest.raises(MigrationRefused, match="no newest checkpoint"):
        control.migrate(0, control.holders[0], Protocol.CPA, now=0.0)
    assert not control.moving


# -- the lazy move ------------------------------------------------------------------------


def test_the_lazy_move_places_the_checkpoint_on_its_target_then_runs_cpa() -> None:
    """node2 overloads; node1 can take load but holds no checkpoint of op2 (node0 does,
    and cannot take load). Without the lazy move the loop goes direct; with it, it
    makes node1 the holder first (a ``SetHolder`` to the owner, whose next checkpoint
    is full), waits for that checkpoint, then moves by CPA."""

    def loop_with(lazy: bool):
        return make_loop(
            warmup_secs=0,
            settle_secs=0,
            defer_secs=5,
            external_load=BACKGROUND,
            cpu_high=0.8,
            cpu_low=0.5,
            queue_high=50,
            queue_low=20,
            cooldown_secs=30,
            scale_in=False,
            max_moves=1,
            lazy_move=lazy,
        )

    eager = loop_with(False)
    eager.round(records(0.5, hot=False), 0.0)
    (move,) = eager.round(records(0.5, hot=True), 1.0).moves
    assert move.target == "node1" and move.protocol is Protocol.DIRECT

    lazy = loop_with(True)
    control = lazy.controls["op2"]
    lazy.round(records(0.5, hot=False), 0.0)
    first = lazy.round(records(0.5, hot=True), 1.0)
    assert not first.moves
    ((put_off, why),) = first.refused
    assert put_off.target == "node1" and why.startswith("lazy move")
    (holder_change,) = first.sends
    assert isinstance(holder_change.message, SetHolder) and holder_change.to_task == 22
    g = put_off.key_group.index
    assert control.holders[g] == 21
    waiting = lazy.round(records(0.5, hot=True), 2.0)  # the full checkpoint is on its way
    assert not waiting.moves
    assert [w for _, w in waiting.refused] == ["waiting for the target's first checkpoint"]
    control.on_checkpoint_stored(21, CheckpointStored(key_group=g, checkpoint=(0, 1)))
    (moved,) = lazy.round(records(0.5, hot=True), 3.0).moves
    assert moved.target == "node1" and moved.protocol is Protocol.CPA
    assert control.moving[g].protocol is Protocol.CPA


def _fields(thresholds: Thresholds) -> dict:
    return {name: getattr(thresholds, name) for name in thresholds.__slots__}


def test_a_waiting_request_runs_cpa_once_its_holder_reports_the_newest_checkpoint() -> None:
    loop = make_loop(adapt=False)
    request = MigrationRequest(operator="op2", key_group=1, target="holder", protocol=Protocol.CPAL)
    assert loop.request("req-1", request, 1.0).waiting
    report_checkpoints(loop)  # the holder's first checkpoint arrives within defer_secs
    ordered = loop.request("req-1", request, 2.0).ordered
    assert ordered is not None and ordered.move.protocol is Protocol.CPAL
    assert not ordered.choice.changed


def test_a_request_refused_after_waiting_waits_afresh_when_asked_again() -> None:
    loop = make_loop(adapt=False)
    request = MigrationRequest(operator="op1", key_group=0, target="holder", protocol=Protocol.CPA)
    defer = loop.options.defer_secs
    assert loop.request("req-1", request, 1.0).waiting
    holder = loop.controls["op1"].holders[0]
    refused = loop.request("req-1", request, 1.0 + defer, lost={holder})
    assert "lost" in refused.refused
    # Asked again later under the same name: its wait starts now, not at 1.0, so it
    # waits for the first checkpoint again instead of running direct at once.
    again = loop.request("req-1", request, 10.0 + defer)
    assert again.waiting == "waiting for the target's first checkpoint"


def test_a_request_outcome_is_exactly_one_thing() -> None:
    with pytest.raises(ControllerModelError):
        RequestOutcome(refused="no", waiting="not yet")
    with pytest.raises(ControllerModelError):
        RequestOutcome()
