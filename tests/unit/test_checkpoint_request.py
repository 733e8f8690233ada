"""Checkpoints by volume (issue 15): an emitter whose buffer of one key group passes
its high-water mark asks the owner for a checkpoint, so the trim comes while the
buffer still has room. On a quiet machine the router filled its 200,000-tuple
buffer within a second of each 5 s checkpoint, and the job stalled 40 s per episode.
"""

from __future__ import annotations

from elastorm.core.actions import Send
from elastorm.core.holdback import checkpoint_request_at
from elastorm.core.keygroups import key_group
from elastorm.core.messages import (
    CheckpointAck,
    CheckpointDelta,
    CheckpointRequest,
    Migrate,
    Protocol,
    Trim,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.emitter import Emitter
from elastorm.core.routing import RoutingTable

G = 4


def requests(actions) -> list[tuple[int, int]]:
    return [
        (a.to_task, a.message.key_group)
        for a in actions
        if isinstance(a, Send) and isinstance(a.message, CheckpointRequest)
    ]


def key_in(group: int) -> str:
    return next(k for k in (f"k{i}" for i in range(1000)) if key_group(k, G) == group)


def test_the_threshold_is_half_the_bound_shared_over_the_groups() -> None:
    assert checkpoint_request_at(200_000, 20) == 5_000
    assert checkpoint_request_at(10, 20) == 1  # never 0 while bounded
    assert checkpoint_request_at(0, 20) == 0  # unbounded: never asks


def test_the_emitter_asks_the_owner_once_until_a_trim_comes() -> None:
    routing = RoutingTable.round_robin(G, [0, 1])
    emitter = Emitter(task=10, routing=routing, source="u", request_at=3)
    key = key_in(1)
    owner = routing.owner(1)
    asked = [requests(emitter.emit(key, i, 0.0)) for i in range(6)]
    assert asked == [[], [], [(owner, 1)], [], [], []]  # at the 3rd tuple, once
    emitter.receive(owner, Trim(key_group=1, watermarks={"u": 2}))  # 4 left: still over
    assert requests(emitter.emit(key, 6, 0.0)) == [(owner, 1)]  # asked again
    assert emitter.stats["checkpoint_requests"] == 2
    other = key_in(2)
    assert [requests(emitter.emit(other, i, 0.0)) for i in range(3)][-1] == [
        (routing.owner(2), 2)
    ]  # each group on its own count


def test_after_a_move_the_new_owner_is_asked() -> None:
    routing = RoutingTable.round_robin(G, [0, 1])
    emitter = Emitter(task=10, routing=routing, source="u", request_at=2)
    key = key_in(0)
    old = routing.owner(0)
    new = 1 - old
    assert requests(emitter.emit(key, 0, 0.0) + emitter.emit(key, 1, 0.0)) == [(old, 0)]
    emitter.command(Migrate(key_group=0, epoch=1, protocol=Protocol.CPA, source=old, target=new))
    assert requests(emitter.emit(key, 2, 0.0)) == [(new, 0)]


def test_without_a_bound_the_emitter_never_asks() -> None:
    emitter = Emitter(task=10, routing=RoutingTable.round_robin(G, [0]), source="u")
    assert not any(requests(emitter.emit(key_in(0), i, 0.0)) for i in range(100))


def test_the_owner_checkpoints_on_request_unless_one_is_unacknowledged() -> None:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0], holders={0: 1})
    (send,) = coord.receive(10, CheckpointRequest(key_group=0))
    assert send.to_task == 1 and isinstance(send.message, CheckpointDelta)
    assert coord.receive(11, CheckpointRequest(key_group=0)) == []  # a second emitter's
    assert coord.stats["checkpoint_requests_skipped"] == 1
    ack = CheckpointAck(key_group=0, checkpoint=send.message.checkpoint, watermarks={})
    coord.receive(1, ack)
    (again,) = coord.receive(10, CheckpointRequest(key_group=0))
    assert isinstance(again.message, CheckpointDelta)
    assert coord.stats["checkpoints_requested"] == 2


def test_a_request_for_a_group_not_owned_here_does_nothing() -> None:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0], holders={0: 1})
    assert coord.receive(10, CheckpointRequest(key_group=2)) == []
    assert coord.phase(2).value == "idle"  # no machine made active by it


def test_a_requested_checkpoint_restarts_the_groups_clock() -> None:
    coord = TaskCoordinator(
        task=0, num_key_groups=G, upstreams=[10], owned=[0], holders={0: 1}, checkpoint_interval=5
    )
    coord.on_tick(0.0)  # the periodic one, at 0
    coord.receive(1, CheckpointAck(key_group=0, checkpoint=(0, 1), watermarks={}))
    coord.on_tick(3.0)
    assert coord.receive(10, CheckpointRequest(key_group=0))  # taken at (the tick of) 3
    coord.receive(1, CheckpointAck(key_group=0, checkpoint=(0, 2), watermarks={}))
    assert coord.on_tick(5.0) == []  # not due again until 8
    assert coord.on_tick(8.0)


def test_every_copy_carries_the_groups_unconfirmed_outputs_when_they_changed() -> None:
    """The adapter's unconfirmed outputs of a group (``pending_outputs``) go into its
    reserved ``PENDING`` entry before a copy is taken; none recorded without an
    adapter's."""
    from elastorm.core.outbox import PENDING

    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0], holders={0: 1})
    [plain] = coord.checkpoint(0, full=True)
    assert PENDING not in plain.message.entries
    pending = {"default\x1fr:1\x1f1": ["default", ["a", 1, 0, "r:1", 1, "final"]]}
    coord.pending_outputs = lambda g: dict(pending) if g == 0 else {}
    first = coord.checkpoint(0)
    assert first and first[0].message.entries[PENDING] == pending
    assert coord.state(0).get(PENDING) == pending
