"""Active replicas in the sans-IO core (Su & Zhou 2016): feeding, shadowing,
trimming, promotion, dropping, and tentative outputs."""

from __future__ import annotations

import pytest
from sim import Cluster

from elastorm.core.control import MigrationRefused
from elastorm.core.keygroups import key_group
from elastorm.core.messages import (
    CheckpointAck,
    Data,
    DropReplica,
    Protocol,
    ToState,
    Trim,
    UpstreamRecovery,
)
from elastorm.core.migration.emitter import Route
from elastorm.core.migration.table import Phase

G = 2
KEY0 = next(f"k{i}" for i in range(100) if key_group(f"k{i}", G) == 0)


def replicated() -> Cluster:
    """Group 0 on task 0, its active replica on its holder, task 1, fed one tuple per
    emitter before the checkpoint and one after."""
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11])
    c.emit(10, KEY0, 1)
    c.emit(11, KEY0, 2)
    c.run_until_quiet()
    c.checkpoint(0, 0)
    c.run_until_quiet()
    c.emit(10, KEY0, 4)  # not in the checkpoint: reaches the replica with the buffer
    c.run_until_quiet()
    c.replicate(0, 1)
    c.run_until_quiet()
    return c


def test_replica_starts_from_the_holders_copy_and_the_buffers_and_reports_once() -> None:
    c = replicated()
    replica = c.coordinators[1]
    assert replica.phase(0) is Phase.REPLICA and replica.replicas() == (0,)
    assert replica.state(0).items() == {KEY0: 7} and 0 not in replica.held
    assert c.control.replicas == {0: 1} and not c.moving  # its MigrationDone came
    assert c.stats["MigrationDone"] == 1
    assert all(e.route(0) is Route.REPLICATED for e in c.emitters.values())


def test_every_tuple_goes_to_owner_and_replica_with_one_sequence_number() -> None:
    c = replicated()
    c.emit(11, KEY0, 10)
    to_owner = [m for m in c.channels[(11, 0)] if isinstance(m, Data)]
    to_replica = [m for m in c.channels[(11, 1)] if isinstance(m, Data)]
    assert to_owner == to_replica and to_owner[0].item.seq == 2
    c.applied.clear()
    c.run_until_quiet()
    assert [(t, a.emit_output) for t, a in c.applied] == [(0, True), (1, False)]
    assert c.coordinators[1].state(0).items() == c.coordinators[0].state(0).items()


def test_replica_acks_the_primarys_checkpoint_only_as_far_as_it_has_kept_up() -> None:
    c = replicated()
    c.emit(10, KEY0, 1)
    c.deliver((10, 0))  # the owner has it, the replica not yet
    c.checkpoint(0, 0)
    c.deliver((0, 1))  # the delta reaches the replica
    ack = c.channels[(1, 0)][-1]
    assert isinstance(ack, CheckpointAck)
    assert ack.watermarks == {"u10": 2, "u11": 1}  # the owner's delta says u10: 3
    c.run_until_quiet()
    assert c.trimmed(0) == {"u10": 2, "u11": 1}
    assert not c.coordinators[1].held.get(0)  # nothing stored: the shadow is the copy


def test_owner_loss_promotes_the_replica_which_replays_nothing_twice() -> None:
    c = replicated()
    c.emit(10, KEY0, 5)
    c.emit(11, KEY0, 6)
    c.run_until_quiet()
    c.applied.clear()
    c.outputs.clear()
    assert c.crash(0) == [0]
    assert c.stats["promoted"] == 1 and c.owner(0) == 1 and not c.control.replicas
    c.run_until_quiet()
    m = c.coordinators[1].machine(0)
    assert m.phase is Phase.ACTIVE and m.state.items() == {KEY0: 18}
    assert not c.applied  # the RESTORE replay held nothing the replica lacked
    assert c.outputs == [(1, KEY0, 18)]  # the promoted replica sends the group's values
    c.emit(10, KEY0, 1)
    c.run_until_quiet()
    assert c.outputs[-1] == (1, KEY0, 19)


def test_a_restarted_emitter_feeds_the_replica_again() -> None:
    """An emitter's new life knows the routing table, which names no replica: the
    controller orders the replica again (``redrive``) and the new life sends it its
    buffer and every later tuple, so a promotion after that finds nothing missing.
    Before: the new life fed the owner only and the replica lagged until promoted."""
    c = replicated()
    c.restart_emitter(10)
    c.run_until_quiet()
    assert c.emitters[10].route(0) is Route.REPLICATED
    assert not c.moving and c.control.replicas == {0: 1}
    c.emit(10, KEY0, 5)  # after the restart: to the owner and the replica
    c.run_until_quiet()
    owner, replica = c.coordinators[0].state(0), c.coordinators[1].state(0)
    assert replica.items() == owner.items() == {KEY0: 12}
    assert replica.applied == owner.applied
    assert c.crash(0) == [0] and c.stats["promoted"] == 1
    c.run_until_quiet()
    assert c.coordinators[1].state(0).items() == {KEY0: 12}


def test_replica_loss_stops_the_feed_and_replaces_the_holder() -> None:
    c = replicated()
    c.checkpoint(1, 1)  # task 1's own group, held on 2
    c.run_until_quiet()
    plan_restored = c.crash(1)
    assert plan_restored == [1] and not c.control.replicas
    assert c.stats["HolderLost"] == 1 and c.holders[0] == 2
    c.run_until_quiet()
    assert all(e.route(0) is Route.OWNER for e in c.emitters.values())
    c.emit(10, KEY0, 1)
    assert not c.channels.get((10, 1))  # no longer fed


def test_a_dropped_replica_keeps_its_shadow_as_the_held_copy() -> None:
    c = replicated()
    c.drop_replica(0)
    c.run_until_quiet()
    assert c.coordinators[1].phase(0) is Phase.IDLE
    assert c.coordinators[1].held.get(0).entries == {KEY0: 7}
    c.checkpoint(0, 0)  # incremental on a base the copy is not: refused, then full
    c.run_until_quiet()
    c.checkpoint(0, 0)
    c.run_until_quiet()
    assert c.has_newest(1, 0)
    c.crash(0)
    c.run_until_quiet()
    assert c.coordinators[1].state(0).items() == {KEY0: 7}


def test_a_replicated_group_is_neither_migrated_nor_given_another_holder() -> None:
    c = replicated()
    with pytest.raises(MigrationRefused, match="replica"):
        c.migrate(0, 2, Protocol.DIRECT)
    assert c.control.set_holder(0, 2) == []
    with pytest.raises(MigrationRefused):
        c.control.replicate(0, 1, now=0.0)  # already replicated
    assert not c.control.can_replicate(1, 2)  # 2 holds no checkpoint of group 1 yet


def test_stale_drop_is_ignored_by_an_emitter_and_a_drop_first_stops_a_late_start() -> None:
    c = replicated()
    emitter = c.emitters[10]
    assert emitter.receive(-1, DropReplica(key_group=0, epoch=0, replica=1)) == []
    assert emitter.stats["stale_commands"] == 1
    idle = c.coordinators[2]
    assert idle.receive(-1, DropReplica(key_group=1, epoch=9, replica=2)) == []
    late = ToState(key_group=1, epoch=8, protocol=Protocol.REPLICATE, items=())
    assert idle.receive(10, late) == [] and idle.phase(1) is Phase.IDLE


def restoring_on_1() -> Cluster:
    """Group 0's owner, task 0, crashed after a checkpoint held on task 1 and one
    tuple: the group is being restored on 1 (the emitters' toStates in flight)."""
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11])
    c.emit(10, KEY0, 1)
    c.run_until_quiet()
    c.checkpoint(0, 0)
    c.run_until_quiet()
    c.crash(0)
    return c


def test_outputs_are_tentative_while_restoring_or_while_upstream_recovers() -> None:
    c = restoring_on_1()
    drain_one = c.channels[(-1, 10)]
    assert drain_one
    c.deliver((-1, 10))
    c.deliver((10, 1))  # emitter 10's toState: 11's is still to come
    c.applied.clear()
    c.emit(10, KEY0, 2)
    c.deliver((10, 1))
    assert [a.tentative for _, a in c.applied] == [True]
    c.run_until_quiet()
    c.applied.clear()
    c.emit(10, KEY0, 3)
    c.run_until_quiet()
    assert [a.tentative for _, a in c.applied] == [False]
    owner = c.coordinators[1]
    owner.receive(-1, UpstreamRecovery(key_group=0, recovering=True))
    c.applied.clear()
    c.emit(10, KEY0, 4)
    c.run_until_quiet()
    assert [a.tentative for _, a in c.applied] == [True]
    owner.receive(-1, UpstreamRecovery(key_group=0, recovering=False))
    assert not owner.machine(0).tentative and not owner.machine(1).tentative


def test_tentative_updates_are_marked_then_rectified_with_final_values() -> None:
    """What a sink sees (``Cluster.tentative``: whether a key's newest update is
    tentative): updates made while the group restores are marked, the restore's end
    re-sends the key final; updates made while state upstream recovers are marked,
    and once told it is over the task re-sends each such key's value, final, even
    with no new tuple of the key; after a RESTORE that ends while upstream still
    recovers, the group's values stay tentative until then."""
    c = restoring_on_1()
    c.deliver((-1, 10))
    c.deliver((10, 1))  # emitter 10's toState: 11's is still to come
    c.emit(10, KEY0, 2)
    c.deliver((10, 1))
    assert c.outputs[-1] == (1, KEY0, 3) and c.tentative[KEY0]
    c.run_until_quiet()  # 11's toState: the restore ends, every key re-sent final
    assert c.outputs[-1] == (1, KEY0, 3) and not c.tentative[KEY0]
    owner = c.coordinators[1]
    c.perform(1, owner.receive(-1, UpstreamRecovery(key_group=0, recovering=True)))
    c.emit(10, KEY0, 4)
    c.run_until_quiet()
    assert c.outputs[-1] == (1, KEY0, 7) and c.tentative[KEY0]
    sent = len(c.outputs)
    c.perform(1, owner.receive(-1, UpstreamRecovery(key_group=0, recovering=False)))
    assert c.outputs[sent:] == [(1, KEY0, 7)] and not c.tentative[KEY0]
    # A restore that completes while upstream still recovers: tentative until it ends.
    c.perform(1, owner.receive(-1, UpstreamRecovery(key_group=0, recovering=True)))
    c.checkpoint(1, 0)
    c.checkpoint(1, 1)
    c.run_until_quiet()
    c.crash(1)
    c.perform(2, c.coordinators[2].receive(-1, UpstreamRecovery(key_group=0, recovering=True)))
    c.run_until_quiet()
    assert c.owner(0) == 2 and c.outputs[-1] == (2, KEY0, 7) and c.tentative[KEY0]
    sent = len(c.outputs)
    c.perform(2, c.coordinators[2].receive(-1, UpstreamRecovery(key_group=0, recovering=False)))
    assert c.outputs[sent:] == [(2, KEY0, 7)] and not c.tentative[KEY0]


def test_a_group_moved_while_upstream_recovers_is_rectified_by_its_new_owner() -> None:
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11])
    recovering = [UpstreamRecovery(key_group=0, recovering=r) for r in (True, False)]
    for t in c.tasks:
        c.perform(t, c.coordinators[t].receive(-1, recovering[0]))
    c.emit(10, KEY0, 1)
    c.run_until_quiet()
    assert c.outputs[-1] == (0, KEY0, 1) and c.tentative[KEY0]
    c.migrate(0, 1, Protocol.DIRECT)
    c.run_until_quiet()
    assert c.owner(0) == 1 and c.tentative[KEY0]
    sent = len(c.outputs)
    for t in c.tasks:
        c.perform(t, c.coordinators[t].receive(-1, recovering[1]))
    assert c.outputs[sent:] == [(1, KEY0, 1)] and not c.tentative[KEY0]


def test_trims_reach_every_emitter() -> None:
    c = replicated()
    c.checkpoint(0, 0)
    c.run_until_quiet()
    assert {type(m) for m in c.channels.get((0, 10), ())} <= {Trim}
    assert c.trimmed(0) == {"u10": 2, "u11": 1}
    assert len(c.emitters[10].buffer) == 0 and len(c.emitters[11].buffer) == 0


def test_a_cpa_to_a_dropped_replica_before_its_drop_arrives_starts_from_the_shadow() -> None:
    """The drop comes on the controller's channel, the CPA's toState on the emitters':
    either may arrive first (found by the state machine)."""
    c = replicated()
    c.drop_replica(0)
    for ch in [(-1, 10), (-1, 11)]:  # the emitters get the drop, the replica not yet
        c.deliver(ch)
    assert c.control.has_newest(1, 0)
    c.migrate(0, 1, Protocol.CPA)
    for ch in [(-1, 10), (-1, 11), (10, 1), (11, 1)]:
        while c.channels.get(ch):
            c.deliver(ch)
    m = c.coordinators[1].machine(0)
    assert m.phase is Phase.ACTIVE and m.state.checkpoint[0] == m.epoch  # its own lineage
    c.run_until_quiet()  # the late drop is stale
    assert c.owner(0) == 1 and not c.moving and c.coordinators[1].phase(0) is Phase.ACTIVE
    c.migrate(0, 0, Protocol.CPAL)  # back, checkpoint-assisted or direct: it completes
    c.run_until_quiet()
    assert not c.moving and c.coordinators[0].state(0).items() == {KEY0: 7}


def test_a_replica_dropped_and_started_again_before_the_drop_arrives_keeps_shadowing() -> None:
    c = replicated()
    c.drop_replica(0)
    for ch in [(-1, 10), (-1, 11)]:
        c.deliver(ch)
    c.replicate(0, 1)
    for ch in [(-1, 10), (-1, 11), (10, 1), (11, 1)]:
        while c.channels.get(ch):
            c.deliver(ch)
    assert c.coordinators[1].phase(0) is Phase.REPLICA
    c.run_until_quiet()
    assert c.coordinators[1].phase(0) is Phase.REPLICA and c.control.replicas == {0: 1}
    c.emit(10, KEY0, 3)
    c.run_until_quiet()
    assert c.coordinators[1].state(0).items() == {KEY0: 10}


def test_a_direct_moves_cpa_that_overtakes_the_replicas_drop_at_the_emitters_completes() -> None:
    """The replica dies, the controller drops it (on its channel to the emitters) and
    then moves the group directly; the direct source's request for a CPA (on its own
    channels to the emitters) arrives first. Before: "cpa for group 0 not allowed while
    replicated" and the group failed at every emitter (found by the stateful property
    test in session 24). Now the newer move stands for the drop; the late drop is
    stale."""
    c = replicated()
    c.checkpoint(1, 1)  # task 1's own group, held on 2
    c.run_until_quiet()
    c.crash(1)  # the replica: dropped (DropReplica to the emitters), holder now task 2
    assert not c.control.replicas
    assert c.migrate(0, 2, Protocol.CPA) is Protocol.DIRECT  # task 2 holds no copy yet
    held_back = [(-1, 10), (-1, 11)]  # the drop waits on the controller's channels
    while not all(c.channels.get((0, e)) for e in (10, 11)):  # the source's CPA asks
        c.deliver(next(ch for ch in c.pending() if ch not in held_back))
    for e in (10, 11):
        assert c.emitters[e].route(0) is Route.REPLICATED  # the drop has not arrived
        while c.channels.get((0, e)):
            c.deliver((0, e))
        assert c.emitters[e].route(0) is Route.OWNER
    c.run_until_quiet()  # the late drop: stale
    assert not c.moving and c.owner(0) == 2
    assert c.coordinators[2].state(0).items() == {KEY0: 7}
