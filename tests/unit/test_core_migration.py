"""Focused tests of the key-group machine, the coordinator and the emitter."""

from __future__ import annotations

import pytest
from sim import CONTROLLER, Cluster

from elastorm.core.actions import (
    CheckpointStored,
    MigrationDone,
    Rejected,
    Role,
    Send,
    TuplesStalled,
)
from elastorm.core.errors import Hint, MigrationProtocolError
from elastorm.core.keygroups import key_group
from elastorm.core.messages import (
    CheckpointAck,
    Data,
    DataTuple,
    Migrate,
    ProcessedAllReplay,
    Protocol,
    SyncGroup,
    ToCheckpoint,
    ToState,
    Trim,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.emitter import Emitter, Route
from elastorm.core.migration.table import TRANSITIONS, Phase
from elastorm.core.routing import RoutingTable

G = 2
KEY0 = next(f"k{i}" for i in range(100) if key_group(f"k{i}", G) == 0)


def sends(actions, kind):
    return [a for a in actions if isinstance(a, Send) and isinstance(a.message, kind)]


def cluster_with_checkpoint(cls: type[Cluster] = Cluster) -> Cluster:
    """Group 0 on task 0 with one tuple per emitter, checkpointed at its holder 1."""
    c = cls(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11])
    c.emit(10, KEY0, 1)
    c.emit(11, KEY0, 2)
    c.run_until_quiet()
    c.checkpoint(0, 0)
    c.run_until_quiet()
    assert c.has_newest(1, 0) and c.holders[0] == 1
    c.emit(10, KEY0, 4)  # after the checkpoint: must come back by replay
    c.run_until_quiet()
    return c


def drain(c: Cluster, *channels) -> None:
    for ch in channels:
        while c.channels.get(ch):
            c.deliver(ch)


def test_cpa_replays_without_outputs_then_owns() -> None:
    c = cluster_with_checkpoint()
    c.applied.clear()
    c.migrate(0, 1, Protocol.CPA)
    c.run_until_quiet()
    c.emit(11, KEY0, 8)
    c.run_until_quiet()
    at_target = [(a.item.seq, a.emit_output) for t, a in c.applied if t == 1]
    assert at_target == [(2, False), (2, True)]  # u10#2 replayed quietly; u11#2 is new
    assert c.coordinators[1].phase(0) is Phase.ACTIVE
    assert c.coordinators[0].phase(0) is Phase.IDLE and 0 in c.coordinators[0].held
    assert c.coordinators[1].state(0).get(KEY0) == 15
    assert not c.moving


def test_cpal_shadows_then_buffers_from_sync_until_all_synced() -> None:
    c = cluster_with_checkpoint()
    c.migrate(0, 1, Protocol.CPAL)
    drain(c, (CONTROLLER, 10), (CONTROLLER, 11), (10, 1), (11, 1))
    target = c.coordinators[1]
    assert target.phase(0) is Phase.SYNCING  # all replays done, processedAllReplay sent
    c.emit(10, KEY0, 16)  # duplicated to source and target
    drain(c, (10, 0), (10, 1), (1, 10))  # upstream 10 syncs, stops duplicating
    c.applied.clear()
    c.emit(10, KEY0, 32)  # only to the target, which buffers it
    drain(c, (10, 1))
    assert not c.applied and target.phase(0) is Phase.SYNCING
    c.run_until_quiet()
    assert [(a.item.seq, a.emit_output) for t, a in c.applied if t == 1] == [(4, True)]
    assert target.phase(0) is Phase.ACTIVE and target.state(0).get(KEY0) == 55
    assert c.coordinators[0].phase(0) is Phase.IDLE


def test_direct_ships_a_full_checkpoint_then_runs_cpa() -> None:
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10])
    c.emit(10, KEY0, 3)
    c.run_until_quiet()
    assert c.migrate(0, 2, Protocol.CPA) is Protocol.DIRECT  # 2 holds nothing
    c.run_until_quiet()
    assert c.stats["migrate.direct"] == 1 and not c.moving
    assert c.coordinators[2].state(0).items() == {KEY0: 3}
    assert c.emitters[10].buffer.size(0) == 0  # trimmed by the direct checkpoint


def test_a_direct_moves_lost_full_checkpoint_is_shipped_again_on_the_redrive() -> None:
    """chaos join/cpal-source at 8b5584d: Storm dropped a direct source's full checkpoint
    to a target whose worker had just restarted (\"Dropping 1 messages\"), and the
    controller's repeat of the command every 10 s found the source awaiting the ack and
    did nothing: the move stayed stuck for 3 min. Now the repeat ships it again."""
    from elastorm.core.messages import CheckpointDelta

    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10])
    c.emit(10, KEY0, 3)
    c.run_until_quiet()
    assert c.migrate(0, 2, Protocol.CPA) is Protocol.DIRECT
    while (0, 2) not in c.pending():
        c.deliver(c.pending()[0])
    lost = c.lose((0, 2))
    assert isinstance(lost, CheckpointDelta) and lost.full
    c.run_until_quiet()
    assert c.moving  # stuck: the source waits for the ack of what never arrived
    c.heal()
    assert not c.moving and c.stats["migrate.direct"] == 1
    assert c.coordinators[2].state(0).items() == {KEY0: 3}
    assert c.owner(0) == 2


def test_a_full_checkpoint_delivered_twice_is_acked_twice_not_refused() -> None:
    """The repeat may cross the first ack (lost, or slow): the holder acks a full
    checkpoint it already holds again, so the source is not left waiting."""
    from elastorm.core.checkpoint import CheckpointHolder
    from elastorm.core.messages import CheckpointDelta

    holder = CheckpointHolder()
    full = CheckpointDelta(
        key_group=0, checkpoint=(3, 1), base=None, entries={"k": 1}, watermarks={"u": 4},
        out_seq={},
    )  # fmt: skip
    first = holder.apply(full)
    assert holder.apply(full) is first  # the same copy, kept


def test_a_direct_source_claims_its_group_at_its_own_epoch_not_the_moves() -> None:
    """join cpal-target at 58535de: the harness saw group 17 claimed by its direct
    move's source and target at one epoch. The source numbers its last checkpoints in
    the move's epoch, but owns the group under the routing it came to own it by; its
    heartbeat's epoch (``owned_epoch``) says so, and the target's is the move's."""
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10])
    c.emit(10, KEY0, 3)
    c.run_until_quiet()
    assert c.migrate(0, 2, Protocol.CPA) is Protocol.DIRECT
    claims: dict[int, set[int]] = {0: set(), 2: set()}
    borrowed = set()  # the source's group epoch while it still owns the group
    while c.pending():
        c.deliver(c.pending()[0])
        for t in claims:
            if c.coordinators[t].phase(0) is Phase.ACTIVE:
                claims[t].add(c.coordinators[t].owned_epoch())
                if t == 0:
                    borrowed.add(c.coordinators[0].machine(0).epoch)
    assert claims[0] == {0} and claims[2] and not claims[0] & claims[2]
    assert borrowed & claims[2]  # what the heartbeat claimed before: the target's epoch
    assert c.coordinators[2].machine(0).owned_epoch == c.coordinators[2].machine(0).epoch > 0


def test_illegal_message_raises_and_the_machine_stays_failed() -> None:
    coord = TaskCoordinator(task=5, num_key_groups=G, upstreams=[10])
    with pytest.raises(MigrationProtocolError):
        coord.receive(10, ToCheckpoint(key_group=0, epoch=1))
    assert coord.phase(0) is Phase.FAILED
    with pytest.raises(MigrationProtocolError, match="failed earlier"):
        coord.receive(
            10, Data(key_group=0, item=DataTuple(source="u", seq=1, key=KEY0, value=1, ts=0))
        )
    assert coord.phase(1) is Phase.IDLE  # other groups are unaffected


def test_cpa_without_a_checkpoint_suggests_direct() -> None:
    coord = TaskCoordinator(task=5, num_key_groups=G, upstreams=[10])
    with pytest.raises(MigrationProtocolError) as err:
        coord.receive(10, ToState(key_group=0, epoch=1, protocol=Protocol.CPA, items=()))
    assert err.value.hint is Hint.FALL_BACK_TO_DIRECT


def test_every_table_entry_names_a_handler() -> None:
    coord = TaskCoordinator(task=0, num_key_groups=1, upstreams=[])
    for (phase, _event), (handler, allowed) in TRANSITIONS.items():
        assert hasattr(coord.machine(0), handler), handler
        assert phase is not Phase.FAILED and allowed


def test_data_for_unowned_or_wrong_group_is_rejected_not_dropped_silently() -> None:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0])
    wrong = Data(key_group=1, item=DataTuple(source="u", seq=1, key=KEY0, value=1, ts=0))
    (action,) = coord.receive(10, wrong)
    assert isinstance(action, Rejected) and "key group" in action.reason
    unowned = TaskCoordinator(task=1, num_key_groups=G, upstreams=[10])
    good = Data(key_group=0, item=DataTuple(source="u", seq=1, key=KEY0, value=1, ts=0))
    (action,) = unowned.receive(10, good)
    assert isinstance(action, Rejected) and action.reason == "not the owner"


def test_restarted_task_ignores_the_ack_of_its_previous_life() -> None:
    coord = TaskCoordinator(task=1, num_key_groups=G, upstreams=[10], stale_through=3)
    ack = CheckpointAck(key_group=0, checkpoint=(0, 4), watermarks={"u10": 9})
    assert coord.receive(0, ack) == []


def test_owner_forwards_acks_as_trims_and_ticks_checkpoints() -> None:
    coord = TaskCoordinator(
        task=0,
        num_key_groups=G,
        upstreams=[10, 11],
        owned=[0],
        holders={0: 1},
        checkpoint_interval=5.0,
    )
    assert len(coord.on_tick(0.0)) == 1
    assert coord.on_tick(4.0) == []
    assert len(coord.on_tick(5.0)) == 1
    actions = coord.receive(1, CheckpointAck(key_group=0, checkpoint=(0, 1), watermarks={"u": 1}))
    assert [a.to_task for a in sends(actions, Trim)] == [10, 11]


def test_source_reports_done_after_all_to_checkpoints() -> None:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10, 11], owned=[0])
    assert coord.receive(10, ToCheckpoint(key_group=0, epoch=1, protocol=Protocol.CPAL)) == []
    assert coord.phase(0) is Phase.DRAINING
    stored, done = coord.receive(11, ToCheckpoint(key_group=0, epoch=1, protocol=Protocol.CPAL))
    assert done == MigrationDone(key_group=0, epoch=1, protocol=Protocol.CPAL, role=Role.SOURCE)
    assert coord.phase(0) is Phase.IDLE and coord.held.get(0) is not None
    # the drained state is reported as a copy, numbered before the new owner's first
    assert stored == CheckpointStored(key_group=0, checkpoint=(1, 0))
    assert coord.held.get(0).checkpoint == (1, 0)


@pytest.mark.parametrize("protocol", [Protocol.CPA, Protocol.CPAL])
def test_a_new_owner_killed_before_its_first_checkpoint_is_restored_from_the_source(
    protocol: Protocol,
) -> None:
    """Before: the controller knew no copy of a group whose new owner died before its
    first checkpoint was acked (the move starts a new lineage) and declared its state
    lost (seen on the cluster: a kill -9 just after a CPAL). The source's drained state
    and the untrimmed upstream buffers are the whole group."""
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11])
    g = key_group(KEY0, G)
    for i in range(5):
        c.emit(10 + i % 2, KEY0, i)
    c.run_until_quiet()
    for group in range(G):  # every group has a copy (the target owns another)
        c.checkpoint(c.owner(group), group)
    c.run_until_quiet()
    source, target = c.owner(g), c.holders[g]
    assert c.migrate(g, target, protocol) is protocol
    c.emit(10, KEY0, 100)
    c.run_until_quiet()
    assert c.owner(g) == target and not c.moving
    assert list(c.control.surviving_copies(g, [target])) == [source]
    assert g in c.crash(target)
    c.emit(11, KEY0, 1000)
    c.run_until_quiet()
    state = c.coordinators[c.owner(g)].state(g)
    assert state.items() == {KEY0: sum(range(5)) + 100 + 1000}


# -- emitter ---------------------------------------------------------------------------
def emitter() -> Emitter:
    return Emitter(task=10, routing=RoutingTable.round_robin(G, [0, 1]), source="u10")


def test_emitter_cpa_sends_buffer_redirects_and_tells_source() -> None:
    e = emitter()
    e.emit(KEY0, 1, 0.0)
    actions = e.command(Migrate(key_group=0, epoch=1, protocol=Protocol.CPA, source=0, target=1))
    (to_state,) = sends(actions, ToState)
    assert to_state.to_task == 1 and len(to_state.message.items) == 1
    assert [a.to_task for a in sends(actions, ToCheckpoint)] == [0]
    assert [a.to_task for a in e.emit(KEY0, 2, 0.0)] == [1]
    assert e.command(Migrate(key_group=0, epoch=1, protocol=Protocol.CPA, source=0, target=1)) == []


def test_emitter_cpal_duplicates_until_processed_all_replay() -> None:
    e = emitter()
    e.command(Migrate(key_group=0, epoch=1, protocol=Protocol.CPAL, source=0, target=1))
    assert e.route(0) is Route.DUPLICATE
    assert sorted(a.to_task for a in e.emit(KEY0, 2, 0.0)) == [0, 1]
    assert e.receive(1, ProcessedAllReplay(key_group=0, epoch=0)) == []  # stale
    actions = e.receive(1, ProcessedAllReplay(key_group=0, epoch=1))
    assert [type(a.message) for a in actions] == [SyncGroup, ToCheckpoint]
    assert [a.to_task for a in e.emit(KEY0, 3, 0.0)] == [1]
    with pytest.raises(MigrationProtocolError):
        e.command(Migrate(key_group=1, epoch=2, protocol=Protocol.CPAL, source=1, target=0))
        e.command(Migrate(key_group=1, epoch=3, protocol=Protocol.CPAL, source=1, target=0))
    assert e.route(1) is Route.FAILED


def test_a_gap_that_never_closes_is_reported_once_after_stall_after() -> None:
    """A lost tuple parks every later one of its source; when resending does not fill
    it, that is reported, not silent (``test_resend.py``: the resending)."""
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0], stall_after=30)

    def data(seq: int) -> Data:
        return Data(key_group=0, item=DataTuple(source="u", seq=seq, key=KEY0, value=1, ts=0))

    def reports(now: float) -> list[TuplesStalled]:
        return [a for a in coord.on_tick(now) if isinstance(a, TuplesStalled)]

    coord.receive(10, data(1))
    assert coord.receive(10, data(3)) == [] and coord.receive(10, data(4)) == []  # 2 is lost
    assert reports(100.0) == []
    assert reports(129.0) == []
    [stalled] = reports(130.0)
    assert stalled == TuplesStalled(key_group=0, source="u", awaited=2, parked=2, seconds=30.0)
    assert reports(200.0) == []  # once per gap
    applied = coord.receive(10, data(2))  # it arrives after all: everything goes on
    assert [a.item.seq for a in applied] == [2, 3, 4]
    assert coord.on_tick(300.0) == []
