"""A tuple lost between two live tasks is asked for again and applied once (issue 14).

The keyed task that parks tuples behind a sequence gap asks the emitter that sent
them (``Resend``) after ``resend_after`` seconds, and again while the gap lasts; the
emitter re-sends from its output buffer to the group's current owner; duplicates
are dropped by sequence. When the buffer no longer holds the tuple, the emitter
rejects the request and the stall is still reported.
"""

from __future__ import annotations

from sim import Cluster

from elastorm.config import TopologyConfig
from elastorm.core.actions import Rejected, Send, TuplesStalled
from elastorm.core.chaos import WireLoss, wire_loss_on
from elastorm.core.keygroups import key_group
from elastorm.core.messages import Data, DataTuple, Migrate, Protocol, Resend, Trim
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.emitter import Emitter
from elastorm.core.routing import RoutingTable

G = 2
KEY0 = next(f"k{i}" for i in range(100) if key_group(f"k{i}", G) == 0)


def resends(actions) -> list[Send]:
    return [a for a in actions if isinstance(a, Send) and isinstance(a.message, Resend)]


def owner_of_0(c: Cluster) -> int:
    return c.owner(0)


def test_a_tuple_lost_on_the_wire_is_resent_and_applied_once() -> None:
    c = Cluster(num_key_groups=G, tasks=[0, 1], emitters=[10])
    c.emit(10, KEY0, 1)
    c.emit_lost(10, KEY0, 10)  # seq 2 never arrives
    c.emit(10, KEY0, 100)
    c.emit(10, KEY0, 1000)
    c.run_until_quiet()
    owner = c.coordinators[owner_of_0(c)]
    assert owner.machine(0).parked == 2 and owner.state(0).items() == {KEY0: 1}
    c.tick(0.0)
    c.tick(1.4)
    assert not c.pending()  # not yet: a gap younger than resend_after may still fill
    c.tick(1.5)
    [request] = c.channels[(owner.task, 10)]
    assert request == Resend(key_group=0, source="u10", first=2, last=4)
    c.run_until_quiet()
    assert owner.machine(0).parked == 0
    assert owner.state(0).items() == {KEY0: 1111}  # each once: the parked ones came twice
    assert [a.item.seq for _, a in c.applied] == [1, 2, 3, 4]
    assert c.emitters[10].stats["resent"] == 3


def test_no_request_while_the_gap_is_a_cpal_to_state_still_in_chunks() -> None:
    """A CPAL target gets new tuples (duplicated) before the last chunks of the
    upstream's toState: they park behind the chunks, which are on their way. Asking
    for them would re-send a whole buffer for nothing."""
    c = Cluster(num_key_groups=G, tasks=[0, 1], emitters=[10])
    c.emit(10, KEY0, 1)
    c.run_until_quiet()
    owner, holder = c.owner(0), c.holders[0]
    c.checkpoint(owner, 0)
    c.run_until_quiet()
    for value in (2, 3, 4):
        c.emit(10, KEY0, value)
    c.run_until_quiet()
    emitter = c.emitters[10]
    emitter.to_state_chunk, emitter.to_state_window = 1, 1
    c.migrate(0, holder, Protocol.CPAL)
    c.deliver((-1, 10))  # the command: the first chunk (seq 2) goes to the target
    c.emit(10, KEY0, 5)  # duplicated to both
    c.deliver((10, holder))
    c.deliver((10, holder))
    target = c.coordinators[holder]
    assert target.machine(0).parked == 1 and target.machine(0).awaits_to_state(10)
    for now in (0.0, 1.5, 3.0, 4.5):
        c.tick(now)
    assert target.stats["resend_requests"] == 0
    c.run_until_quiet()  # the acks bring the other chunks
    assert target.machine(0).parked == 0 and c.owner(0) == holder
    assert target.state(0).items() == {KEY0: 15}


def test_a_loss_at_the_end_of_a_lane_is_found_by_the_emitters_probe() -> None:
    """Nothing follows the lost tuple, so no gap shows until the emitter re-sends the
    newest tuple of its idle lane; that one parks, and the gap is resent. While no trim
    covers it, it is probed again after 2, 4, 8 ... rounds (duplicates, dropped)."""
    c = Cluster(num_key_groups=G, tasks=[0, 1], emitters=[10])
    c.emit(10, KEY0, 1)
    c.emit_lost(10, KEY0, 10)
    c.emit_lost(10, KEY0, 100)
    c.run_until_quiet()
    owner = c.coordinators[c.owner(0)]
    assert owner.state(0).items() == {KEY0: 1} and owner.machine(0).parked == 0
    now = 0.0
    while owner.state(0).items() != {KEY0: 111}:
        assert now < 10, "the lost tail never came"
        c.tick(now)
        c.run_until_quiet()
        now += 0.5
    assert c.emitters[10].stats["probes"] == 1
    for _ in range(14):  # idle from now on: the same tuple again after 2, 4, 8 rounds
        now += 1.5
        c.tick(now)
        c.run_until_quiet()
    assert c.emitters[10].stats["probes"] == 4
    assert [a.item.seq for _, a in c.applied] == [1, 2, 3]


def test_a_lane_that_keeps_growing_or_was_trimmed_is_not_probed() -> None:
    emitter = Emitter(task=10, routing=RoutingTable.round_robin(G, [0, 1]), source="u")
    emitter.emit(KEY0, 1, 0.0)
    assert emitter.on_tick(0.0) == []
    emitter.emit(KEY0, 2, 0.0)
    assert emitter.on_tick(1.5) == []  # it grew
    emitter.receive(0, Trim(key_group=0, watermarks={"u": 2}))
    assert emitter.on_tick(3.0) == [] and emitter.on_tick(4.5) == []  # covered


def test_the_request_is_repeated_while_the_gap_lasts() -> None:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0], resend_after=2)

    def data(seq: int) -> Data:
        return Data(key_group=0, item=DataTuple(source="u", seq=seq, key=KEY0, value=1, ts=0))

    coord.receive(10, data(1))
    coord.receive(10, data(3))
    assert coord.on_tick(10.0) == []
    assert [a.to_task for a in resends(coord.on_tick(12.0))] == [10]
    assert resends(coord.on_tick(13.0)) == []
    assert len(resends(coord.on_tick(14.0))) == 1  # the first answer was lost too
    coord.receive(10, data(5))  # the gap is the same; what it asks for grows
    [again] = resends(coord.on_tick(16.0))
    assert again.message == Resend(key_group=0, source="u", first=2, last=5)
    assert coord.stats["resend_requests"] == 3
    coord.receive(10, data(2))  # 2 came: the next gap (4) is a new one, timed afresh
    assert resends(coord.on_tick(17.0)) == []
    assert resends(coord.on_tick(19.0))[0].message.first == 4


def test_a_gap_the_buffer_no_longer_holds_is_rejected_and_still_reported() -> None:
    """Resending cannot help once a trim passed the tuple: the emitter says so, and
    the keyed task's stall report stays the loud signal."""
    emitter = Emitter(task=10, routing=RoutingTable.round_robin(G, [0, 1]), source="u")
    for value in range(5):
        emitter.emit(KEY0, value, 0.0)
    emitter.receive(0, Trim(key_group=0, watermarks={"u": 3}))
    [rejected] = emitter.receive(0, Resend(key_group=0, source="u", first=2, last=5))
    assert isinstance(rejected, Rejected) and "trimmed past it" in rejected.reason
    coord = TaskCoordinator(
        task=0, num_key_groups=G, upstreams=[10], owned=[0], resend_after=1, stall_after=5
    )
    coord.receive(10, Data(key_group=0, item=DataTuple("u", 1, KEY0, 1, 0)))
    coord.receive(10, Data(key_group=0, item=DataTuple("u", 3, KEY0, 1, 0)))
    coord.on_tick(0.0)
    stalled = [a for t in (1.0, 2.0, 3.0, 4.0, 5.0) for a in coord.on_tick(t)]
    assert len(resends(stalled)) == 5
    [report] = [a for a in stalled if isinstance(a, TuplesStalled)]
    assert (report.awaited, report.parked, report.seconds) == (2, 1, 5.0)


def test_a_span_not_numbered_yet_is_not_an_error() -> None:
    """A restarted emitter rebuilding its buffer by replay has not reached the tuple:
    it will come anyway, so the request is answered with nothing, not rejected."""
    emitter = Emitter(task=10, routing=RoutingTable.round_robin(G, [0, 1]), source="u")
    emitter.emit(KEY0, 1, 0.0)
    assert emitter.receive(0, Resend(key_group=0, source="u", first=2, last=3)) == []
    assert emitter.receive(0, Resend(key_group=0, source="u", first=5, last=9)) == []
    fresh = Emitter(task=11, routing=RoutingTable.round_robin(G, [0, 1]), source="v")
    assert fresh.receive(0, Resend(key_group=0, source="v", first=1, last=2)) == []


def test_resent_tuples_go_to_both_ends_while_cpal_duplicates() -> None:
    emitter = Emitter(task=10, routing=RoutingTable.round_robin(G, [0, 1]), source="u")
    for value in range(3):
        emitter.emit(KEY0, value, 0.0)
    emitter.command(Migrate(key_group=0, epoch=1, protocol=Protocol.CPAL, source=0, target=1))
    actions = emitter.receive(0, Resend(key_group=0, source="u", first=2, last=3))
    assert sorted((a.to_task, a.message.item.seq) for a in actions) == [
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
    ]


def test_wire_loss_loses_the_chosen_messages_only() -> None:
    loss = WireLoss(count=3, start=5, every=3)
    lost = [n for n in range(1, 30) if loss.lose()]
    assert lost == [5, 8, 11] and loss.lost == 3
    off = WireLoss(count=0, start=1)
    assert not any(off.lose() for _ in range(10))


def test_the_injection_is_aimed_at_one_sender_by_its_option() -> None:
    config = TopologyConfig.from_conf(
        {
            "elastorm.chaos.drop_tuples": 4,
            "elastorm.chaos.drop_from": 2,
            "elastorm.chaos.drop_on": "spout",
        }
    )
    assert wire_loss_on(config, "emitter") is None
    spout = wire_loss_on(config, "spout")
    assert (spout.count, spout.start, spout.every) == (4, 2, 1)
    assert wire_loss_on(TopologyConfig.from_conf({}), "emitter") is None  # off by default
