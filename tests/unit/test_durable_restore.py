"""A DURABLE restore in the core: the target loads the store's copy while toStates and
data arrive, promotes it like a held copy, and replays the emitters' buffers; owners
trim upstream no further than the durable copy; the controller orders it."""

from __future__ import annotations

import pytest
from sim import STORE, Cluster

from elastorm.core.actions import LoadDurable, MigrationDone, Role, Send
from elastorm.core.control import MigrationController, MigrationRefused
from elastorm.core.errors import MigrationProtocolError
from elastorm.core.keygroups import key_group
from elastorm.core.messages import (
    CheckpointAck,
    Data,
    DataTuple,
    DurableLoaded,
    DurableWritten,
    Migrate,
    Protocol,
    ToState,
    Trim,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.emitter import Emitter
from elastorm.core.migration.table import Phase
from elastorm.core.routing import RoutingTable

G = 2
KEY0 = next(f"k{i}" for i in range(100) if key_group(f"k{i}", G) == 0)


def item(source: str, seq: int, value: int = 1) -> DataTuple:
    return DataTuple(source=source, seq=seq, key=KEY0, value=value, ts=0.0)


def loaded(epoch: int, upto: dict[str, int] | None, value: int = 0) -> DurableLoaded:
    """The store's copy of group 0: ``KEY0 = value`` as of ``upto`` (None: no copy)."""
    if upto is None:
        return DurableLoaded(
            key_group=0, epoch=epoch, checkpoint=None, entries={}, watermarks={}, out_seq={}
        )
    return DurableLoaded(
        key_group=0,
        epoch=epoch,
        checkpoint=(0, 3),
        entries={KEY0: value},
        watermarks=upto,
        out_seq={},
    )


def target() -> TaskCoordinator:
    return TaskCoordinator(task=2, num_key_groups=G, upstreams=[10, 11])


def to_state(epoch: int, *items: DataTuple) -> ToState:
    return ToState(key_group=0, epoch=epoch, protocol=Protocol.DURABLE, items=items)


def test_the_target_keeps_to_states_and_data_until_the_copy_is_in_then_replays_them() -> None:
    coord = target()
    # u10's buffer reaches back to its seq 2: the store's copy reflects u10#1, u11#1.
    assert coord.receive(10, to_state(5, item("u10", 1), item("u10", 2, 10))) == [
        LoadDurable(key_group=0, epoch=5)
    ]
    assert coord.phase(0) is Phase.LOADING and coord.state(0) is None
    assert coord.receive(10, Data(key_group=0, item=item("u10", 3, 100))) == []
    assert coord.receive(11, to_state(5, item("u11", 2, 1000))) == []
    actions = coord.receive(-2, loaded(5, {"u10": 1, "u11": 1}, value=2))
    applied = [(a.item.source, a.item.seq, a.emit_output, a.tentative) for a in actions[:-1]]
    assert applied == [
        ("u10", 2, True, True),  # replayed: a restore's outputs go out, tentative
        ("u10", 3, True, True),
        ("u11", 2, True, True),
    ]
    assert actions[-1] == MigrationDone(
        key_group=0, epoch=5, protocol=Protocol.DURABLE, role=Role.TARGET
    )
    assert coord.phase(0) is Phase.ACTIVE
    state = coord.state(0)
    assert state.get(KEY0) == 2 + 10 + 100 + 1000
    assert dict(state.applied) == {"u10": 3, "u11": 2}
    assert state.needs_full  # a new lineage: its first checkpoint is full


def test_a_store_without_a_copy_starts_the_group_empty() -> None:
    coord = target()
    coord.receive(10, to_state(1, item("u10", 1, 7)))
    coord.receive(11, to_state(1))
    actions = coord.receive(-2, loaded(1, None))
    assert isinstance(actions[-1], MigrationDone) and coord.state(0).get(KEY0) == 7


def test_a_stale_or_foreign_copy_is_no_copy_of_this_restore() -> None:
    coord = target()
    coord.receive(10, to_state(4))
    assert coord.receive(-2, loaded(3, {"u10": 1})) == []  # an older restore's: stale
    assert coord.phase(0) is Phase.LOADING
    with pytest.raises(MigrationProtocolError, match="not allowed in phase idle"):
        target().receive(-2, loaded(4, {"u10": 1}))  # nobody asked


def test_a_durable_to_state_at_a_live_owner_keeps_its_state() -> None:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0])
    coord.receive(10, Data(key_group=0, item=item("u10", 1, 5)))
    actions = coord.receive(10, to_state(2, item("u10", 1, 5), item("u10", 2, 6)))
    assert not any(isinstance(a, LoadDurable) for a in actions)
    assert coord.phase(0) is Phase.ACTIVE and coord.state(0).get(KEY0) == 11


def owner(durable: bool) -> TaskCoordinator:
    return TaskCoordinator(
        task=0,
        num_key_groups=G,
        upstreams=[10, 11],
        owned=[0],
        holders={0: 1},
        durable_trim=durable,
    )


def trims(actions) -> list[dict[str, int]]:
    marks = [dict(a.message.watermarks) for a in actions if isinstance(a.message, Trim)]
    assert all(isinstance(a, Send) for a in actions)
    return marks[:1] if len(set(map(str, marks))) == 1 else marks


def ack(upto: dict[str, int], n: int = 1) -> CheckpointAck:
    return CheckpointAck(key_group=0, checkpoint=(0, n), watermarks=upto)


def written(upto: dict[str, int], n: int = 1) -> DurableWritten:
    return DurableWritten(key_group=0, checkpoint=(0, n), watermarks=upto)


@pytest.mark.parametrize(
    ("durable", "events", "expected"),
    [
        # The durable tier off: trim to the held copy, as ever.
        (False, [ack({"u": 5, "v": 2})], [[{"u": 5, "v": 2}]]),
        (False, [written({"u": 1})], [[]]),
        # On: nothing until the store has a copy, then the elementwise minimum.
        (True, [ack({"u": 5, "v": 2})], [[]]),
        (True, [ack({"u": 5, "v": 2}), written({"u": 3})], [[], [{"u": 3}]]),
        (True, [written({"u": 3, "v": 9}), ack({"u": 5, "v": 2})], [[], [{"u": 3, "v": 2}]]),
        # A repeat is not sent; progress of either copy is.
        (
            True,
            [ack({"u": 5}), written({"u": 3}), ack({"u": 6}, 2), written({"u": 6}, 2)],
            [[], [{"u": 3}], [], [{"u": 6}]],
        ),
    ],
)
def test_owners_trim_no_further_than_the_durable_copy(durable, events, expected) -> None:
    coord = owner(durable)
    got = [trims(coord.receive(1 if isinstance(e, CheckpointAck) else 0, e)) for e in events]
    assert got == expected


def test_the_emitter_replays_its_buffer_to_a_durable_restore_and_redirects() -> None:
    e = Emitter(task=10, routing=RoutingTable.round_robin(G, [0, 1]), source="u10")
    e.emit(KEY0, 1, 0.0)
    e.emit(KEY0, 2, 0.0)
    actions = e.command(
        Migrate(key_group=0, epoch=3, protocol=Protocol.DURABLE, source=None, target=2)
    )
    (send,) = actions
    assert send.to_task == 2 and send.message.protocol is Protocol.DURABLE
    assert [i.seq for i in send.message.items] == [1, 2]
    assert [a.to_task for a in e.emit(KEY0, 3, 0.0)] == [2]


def test_the_controller_orders_durable_restores_only_for_restored_groups() -> None:
    control = MigrationController(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11])
    plan = control.recover([0, 1], restores={0: 2}, holders={}, now=0.0, from_store={0})
    assert {s.message.protocol for s in plan.sends if isinstance(s.message, Migrate)} == {
        Protocol.DURABLE
    }
    assert control.moving[0].protocol is Protocol.DURABLE and control.owner(0) == 2
    with pytest.raises(MigrationRefused, match="no target"):
        control.recover([0], restores={}, holders={}, now=0.0, from_store={1})


def test_owner_and_holder_lost_together_restored_from_the_store_exactly() -> None:
    """The simulator end to end: group 0's owner (0) and holder (1) die together after
    a durable write; the store's copy and the emitters' buffers rebuild it exactly."""
    routing = RoutingTable.from_mapping({0: 0, 1: 2}, G)
    c = Cluster(
        num_key_groups=G, tasks=[0, 1, 2, 3], emitters=[10, 11], routing=routing, durable=True
    )
    assert c.holders[0] == 1
    c.emit(10, KEY0, 1)
    c.emit(11, KEY0, 2)
    c.run_until_quiet()
    c.checkpoint(0, 0)
    c.run_until_quiet()
    assert c.persist(0, 0)
    c.emit(10, KEY0, 4)  # after the durable copy: comes back by replay
    c.checkpoint(0, 0)
    c.run_until_quiet()  # the held copy has it, the store does not: buffers keep it
    assert c.trimmed(0) == {"u10": 1, "u11": 1}
    c.crash(0, 1)
    assert c.stats["durable_restores"] == 1 and c.moving[0].protocol is Protocol.DURABLE
    c.run_until_quiet()
    assert (STORE, 2) in c.channels and not c.moving
    assert c.owner(0) == 2 and c.coordinators[2].state(0).get(KEY0) == 7
