"""Routing tables, messages, state fragments, holder and buffers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastorm.core.buffers import OutputBuffer, SequenceCounters
from elastorm.core.checkpoint import CheckpointHolder, checkpoint_to_state, state_to_checkpoint
from elastorm.core.errors import CheckpointOrderError, Hint
from elastorm.core.messages import (
    MESSAGE_TYPES,
    CheckpointDelta,
    CheckpointRequest,
    Data,
    DataTuple,
    DurableLoaded,
    DurableWritten,
    Migrate,
    Protocol,
    Resend,
    StandIn,
    ToState,
    UpstreamRestarted,
    decode,
    encode,
)
from elastorm.core.routing import Move, RoutingTable
from elastorm.core.state import KeyGroupState, StateError


def item(seq: int, source: str = "s", key: str = "k", value: int = 1) -> DataTuple:
    return DataTuple(source=source, seq=seq, key=key, value=value, ts=0.0)


# -- routing -----------------------------------------------------------------------
def test_routing_diff_and_moves_bump_epoch() -> None:
    table = RoutingTable.round_robin(4, [0, 1])
    assert table.owners == (0, 1, 0, 1) and table.epoch == 0
    moved = table.with_moves({2: 1})
    assert moved.epoch == 1 and moved.key_groups_of(1) == (1, 2, 3)
    assert table.diff(moved) == (Move(key_group=2, source=0, target=1),)


def test_routing_rejects_unowned_or_out_of_range_groups() -> None:
    with pytest.raises(ValueError, match="not owned"):
        RoutingTable.from_mapping({0: 1, 2: 1}, 3)
    with pytest.raises(IndexError):
        RoutingTable.round_robin(2, [0]).owner(2)
    with pytest.raises(ValueError):
        RoutingTable.round_robin(2, [0]).with_moves({0: 1}, epoch=0)
    with pytest.raises(ValueError):
        RoutingTable(epoch=0, owners=(0, -1))


# -- messages ------------------------------------------------------------------------
items = st.builds(
    DataTuple,
    source=st.sampled_from(["u1", "op/3/u1"]),
    seq=st.integers(1, 10**9),
    key=st.text(max_size=5),
    value=st.one_of(st.integers(), st.text(max_size=3)),
    ts=st.floats(allow_nan=False, allow_infinity=False),
)
marks = st.dictionaries(st.sampled_from(["u1", "u2"]), st.integers(0, 99))
messages = st.one_of(
    st.builds(Data, key_group=st.integers(0, 9), item=items),
    st.builds(CheckpointRequest, key_group=st.integers(0, 9)),
    st.integers(1, 9).flatmap(
        lambda first: st.builds(
            Resend,
            key_group=st.integers(0, 9),
            source=st.sampled_from(["u1", "op1:3"]),
            first=st.just(first),
            last=st.integers(first, 20),
        )
    ),
    st.builds(
        ToState,
        key_group=st.integers(0, 9),
        epoch=st.integers(0, 9),
        protocol=st.sampled_from([Protocol.CPA, Protocol.CPAL, Protocol.RESTORE]),
        items=st.lists(items, max_size=3).map(tuple),
    ),
    st.builds(
        CheckpointDelta,
        key_group=st.integers(0, 9),
        checkpoint=st.tuples(st.integers(0, 5), st.integers(2, 9)),
        base=st.one_of(st.none(), st.just((0, 1))),
        entries=st.dictionaries(st.text(max_size=3), st.integers()),
        watermarks=marks,
        out_seq=st.dictionaries(
            st.tuples(st.sampled_from(["u1"]), st.integers(0, 9)), st.integers()
        ),
    ),
    st.builds(
        Migrate,
        key_group=st.integers(0, 9),
        epoch=st.integers(0, 9),
        protocol=st.just(Protocol.CPA),
        source=st.just(1),
        target=st.just(2),
    ),
    st.builds(UpstreamRestarted, key_group=st.just(0), epoch=st.integers(0, 9)),
    st.builds(
        StandIn,
        key_group=st.integers(0, 9),
        epoch=st.integers(0, 9),
        protocol=st.sampled_from([Protocol.CPA, Protocol.CPAL, Protocol.DIRECT]),
        source=st.just(1),
        target=st.just(2),
    ),
    st.builds(
        DurableWritten,
        key_group=st.integers(0, 9),
        checkpoint=st.tuples(st.integers(0, 5), st.integers(1, 9)),
        watermarks=marks,
    ),
    st.builds(
        DurableLoaded,
        key_group=st.integers(0, 9),
        epoch=st.integers(0, 9),
        checkpoint=st.tuples(st.integers(0, 5), st.integers(1, 9)),
        entries=st.dictionaries(st.text(max_size=3), st.integers()),
        watermarks=marks,
        out_seq=st.dictionaries(
            st.tuples(st.sampled_from(["u1"]), st.integers(0, 9)), st.integers()
        ),
    ),
    st.builds(
        DurableLoaded,
        key_group=st.integers(0, 9),
        epoch=st.integers(0, 9),
        checkpoint=st.none(),
        entries=st.just({}),
        watermarks=st.just({}),
        out_seq=st.just({}),
    ),
)


@given(messages)
def test_messages_round_trip_through_json(message) -> None:
    assert decode(json.loads(json.dumps(encode(message)))) == message


def test_every_message_type_is_registered_for_decoding() -> None:
    assert len(MESSAGE_TYPES) == 21


def test_messages_are_validated_on_construction() -> None:
    with pytest.raises(ValueError):
        DataTuple(source="s", seq=0, key="k", value=1, ts=0)
    with pytest.raises(ValueError):
        Migrate(key_group=0, epoch=1, protocol=Protocol.RESTORE, source=1, target=2)
    with pytest.raises(ValueError):
        ToState(key_group=0, epoch=1, protocol=Protocol.DIRECT, items=())
    with pytest.raises(ValueError):
        decode({"type": "Nope"})
    with pytest.raises(ValueError, match="for a move"):
        StandIn(key_group=0, epoch=1, protocol=Protocol.RESTORE, source=1, target=2)
    with pytest.raises(ValueError):
        Migrate(key_group=0, epoch=1, protocol=Protocol.DURABLE, source=1, target=2)
    with pytest.raises(ValueError, match="no contents"):
        DurableLoaded(
            key_group=0, epoch=1, checkpoint=None, entries={"k": 1}, watermarks={}, out_seq={}
        )


# -- state fragments and checkpoints --------------------------------------------------
def test_reads_see_active_then_inactive_then_master() -> None:
    state = KeyGroupState(0)
    state.apply(item(1, value=5))
    delta = state.begin_checkpoint()  # k=5 now in the inactive fragment
    assert delta.full and delta.entries == {"k": 5} and delta.watermarks == {"s": 1}
    state.apply(item(2, value=2))  # goes to active, reading 5 from inactive
    assert state.get("k") == 7 and state.inactive == {"k": 5}
    state.finish_checkpoint()
    assert state.master == {"k": 5} and delta.entries == {"k": 5}
    delta2 = state.begin_checkpoint()
    assert not delta2.full and delta2.base == delta.checkpoint and delta2.entries == {"k": 7}
    with pytest.raises(StateError):
        state.begin_checkpoint()


def test_admission_drops_duplicates_and_flags_gaps() -> None:
    state = KeyGroupState(0)
    state.apply(item(1))
    assert state.admission(item(1)).value == "duplicate"
    assert state.admission(item(3)).value == "early"
    with pytest.raises(StateError):
        state.apply(item(3))


def test_holder_applies_deltas_in_order_and_refuses_the_rest() -> None:
    state = KeyGroupState(0)
    holder = CheckpointHolder()
    state.apply(item(1, value=3))
    d1 = state.begin_checkpoint()
    state.finish_checkpoint()
    state.apply(item(2, key="j", value=4))
    d2 = state.begin_checkpoint()
    state.finish_checkpoint()
    with pytest.raises(CheckpointOrderError) as gap:
        holder.apply(d2)  # no base held
    assert gap.value.hint is Hint.SEND_FULL_CHECKPOINT
    holder.apply(d1)
    copy = holder.apply(d2)
    assert copy.entries == {"k": 3, "j": 4} and copy.watermarks == {"s": 2}
    with pytest.raises(CheckpointOrderError, match="duplicate"):
        holder.apply(d2)
    with pytest.raises(CheckpointOrderError):
        holder.apply(d1)  # an older full checkpoint never replaces a newer copy
    restored = checkpoint_to_state(holder.take(0), epoch=5)
    assert restored.items() == state.items() and restored.needs_full
    assert restored.checkpoint == (5, 0)
    assert state_to_checkpoint(restored, epoch=6).entries == {"k": 3, "j": 4}


# -- buffers ------------------------------------------------------------------------
def test_buffer_trims_per_source_and_replays_in_order() -> None:
    buf = OutputBuffer()
    counters = SequenceCounters()
    for source in ("a", "b", "a", "a", "b"):
        buf.append(7, item(counters.next(source, 7), source=source))
    assert buf.size(7) == 5
    assert buf.trim(7, {"a": 2}) == 2
    assert [(i.source, i.seq) for i in buf.replay(7)] == [("a", 3), ("b", 1), ("b", 2)]
    assert [(i.source, i.seq) for i in buf.replay(7, {"b": 1})] == [("a", 3), ("b", 2)]
    with pytest.raises(ValueError):
        buf.append(7, item(1, source="a"))
    assert len(buf) == 3  # the refused append left the count alone


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 12)), max_size=60))
def test_buffer_length_is_its_groups_sizes(steps) -> None:
    buf = OutputBuffer()
    counters = SequenceCounters()
    for append, group, upto in steps:
        if append:
            buf.append(group, item(counters.next("a", group), source="a"))
        else:
            buf.trim(group, {"a": upto})
        assert len(buf) == sum(buf.size(g) for g in buf)
