"""The wire codec (``to_json`` / ``from_json``, the Storm adapter's ``to_wire`` /
``from_wire``): compact Data, round trips, and malformed input refused."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastorm.core.messages import (
    CheckpointAck,
    CheckpointDelta,
    Data,
    DataRun,
    DataTuple,
    Migrate,
    ProcessedAllReplay,
    Protocol,
    SyncGroup,
    ToCheckpoint,
    ToState,
    Trim,
    decode,
    decode_runs,
    encode,
    encode_runs,
    from_json,
    is_runs,
    to_json,
)
from elastorm.storm.elastic import from_wire, to_wire

values = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(-99, 99), max_size=3),
    st.text(max_size=4),
)
items = st.builds(
    DataTuple,
    source=st.sampled_from(["u1", "extract_delays:4", "op/3/u1", 'q"\\é']),
    seq=st.integers(1, 2**40),
    key=st.text(max_size=6),
    value=values,
    ts=st.floats(0, 2e9),
)
messages = st.one_of(
    st.builds(Data, key_group=st.integers(0, 99), item=items),
    st.builds(
        ToState,
        key_group=st.integers(0, 9),
        epoch=st.integers(0, 9),
        protocol=st.sampled_from([Protocol.CPA, Protocol.CPAL, Protocol.RESTORE]),
        items=st.lists(items, max_size=5).map(tuple),
    ),
    st.builds(
        CheckpointDelta,
        key_group=st.integers(0, 9),
        checkpoint=st.just((1, 2)),
        base=st.one_of(st.none(), st.just((1, 1))),
        entries=st.dictionaries(st.text(max_size=3), values),
        watermarks=st.dictionaries(st.sampled_from(["u1", "u2"]), st.integers(0, 9)),
        out_seq=st.dictionaries(st.tuples(st.just("u1"), st.integers(0, 9)), st.integers(0, 9)),
    ),
    st.builds(Trim, key_group=st.integers(0, 9), watermarks=st.just({"u1": 3})),
    st.builds(ProcessedAllReplay, key_group=st.integers(0, 9), epoch=st.integers(0, 9)),
)


@given(messages)
def test_every_message_round_trips_through_the_wire(message) -> None:
    text = to_wire(message)
    # a Data is its flat list (encoded once, with the tuple); the rest JSON text
    assert isinstance(text, list if isinstance(message, Data) else str)
    assert from_wire(text) == message == from_json(to_json(message))
    # the adapter's string survives the multilang JSON around it
    assert from_wire(json.loads(json.dumps([text, 3]))[0]) == message


def test_data_is_a_flat_array_and_the_rest_objects_type_first() -> None:
    data = Data(key_group=6, item=DataTuple(source="op1:4", seq=1, key="N1", value=[0, 11], ts=5))
    assert to_json(data) == '[6,"op1:4",1,"N1",[0,11],5]'
    assert to_wire(data) == [6, "op1:4", 1, "N1", [0, 11], 5]
    trim = to_wire(Trim(key_group=7, watermarks={"u": 2}))
    assert trim.startswith('{"type":"Trim","key_group":7,')


def test_trusted_constructors_build_the_same_values() -> None:
    item = DataTuple(source="s", seq=3, key="k", value=1, ts=0.5)
    assert DataTuple.trusted("s", 3, "k", 1, 0.5) == item
    assert Data.trusted(2, item) == Data(key_group=2, item=item)
    # ... and skip the checks (for values the emitter computed itself only)
    assert DataTuple.trusted("s", 0, "k", 1, 0).seq == 0
    with pytest.raises(ValueError, match="seq"):
        DataTuple(source="s", seq=0, key="k", value=1, ts=0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "not an elastorm message"),
        ("[1,2", "not an elastorm message"),
        ("7", "not an elastorm message: a int"),
        ("[1,2,3]", r"a Data message is \[key_group, source, seq, key, value, ts\]"),
        ('[-1,"u",1,"k",0,0]', "key_group must be an int >= 0"),
        ('[1.5,"u",1,"k",0,0]', "key_group must be an int >= 0"),
        ('[true,"u",1,"k",0,0]', "key_group must be an int >= 0"),
        ('[1,"",1,"k",0,0]', "source must be a non-empty str"),
        ('[1,5,1,"k",0,0]', "source must be a non-empty str"),
        ('[1,"u",0,"k",0,0]', "seq must be an int >= 1"),
        ('[1,"u","1","k",0,0]', "seq must be an int >= 1"),
        ('[1,"u",true,"k",0,0]', "bad data tuple"),
        ('[1,"u",1,7,0,0]', "key must be str"),
        ('{"type":"Nope"}', "unknown message type"),
        ('{"type":"Trim","key_group":1}', "not an elastorm message: KeyError"),
        ('{"type":"Trim","key_group":-1,"watermarks":{}}', "key_group must be"),
        (
            '{"type":"ToState","key_group":1,"epoch":1,"protocol":"cpa","items":[["u",0,"k",1,0]]}',
            "seq must be an int >= 1",
        ),  # fmt: skip
        (
            '{"type":"ToState","key_group":1,"epoch":1,"protocol":"cpa","items":[["u",1,"k"]]}',
            "a data tuple has 5 fields",
        ),  # fmt: skip
        (
            '{"type":"ToState","key_group":1,"epoch":1,"protocol":"cpa","items":{}}',
            "items must be a list",
        ),  # fmt: skip
        ('{"type":"ToState","key_group":1,"epoch":1,"protocol":"x","items":[]}', "'x'"),
    ],
)
def test_malformed_wire_text_is_refused_with_a_reason(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        from_wire(text)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ([1, 2, 3], r"a Data message is \[key_group, source, seq, key, value, ts\]"),
        ([-1, "u", 1, "k", 0, 0], "key_group must be an int >= 0"),
        ([1, "u", 0, "k", 0, 0], "seq must be an int >= 1"),
    ],
)
def test_a_malformed_data_list_is_refused_with_a_reason(value: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        from_wire(value)


def test_non_text_is_refused() -> None:
    with pytest.raises(ValueError, match="not an elastorm message"):
        from_wire(None)  # type: ignore[arg-type]


def test_the_dict_codec_still_round_trips_a_to_state() -> None:
    items = tuple(DataTuple(source="u", seq=i, key="k", value=[i], ts=0.0) for i in range(1, 4))
    for message in (
        ToState(key_group=1, epoch=2, protocol=Protocol.CPAL, items=items),
        Migrate(key_group=1, epoch=2, protocol=Protocol.CPA, source=3, target=4),
        ToCheckpoint(key_group=1, epoch=2),
        ToCheckpoint(key_group=1, epoch=2, protocol=Protocol.CPAL, items=items),
        SyncGroup(key_group=1, epoch=2),
        SyncGroup(key_group=1, epoch=2, items=items),
        CheckpointAck(key_group=1, checkpoint=(2, 3), watermarks={"u": 3}),
    ):
        assert decode(json.loads(json.dumps(encode(message)))) == message


# -- data runs (issue 34, stage 1) -----------------------------------------------------
run_items = st.lists(
    st.tuples(st.text(max_size=6), values, st.floats(0, 2e9)), min_size=1, max_size=5
)
runs = st.lists(
    st.builds(
        DataRun,
        key_group=st.integers(0, 99),
        source=st.sampled_from(["u1", "counter_router:4", 'q"\\é']),
        first=st.integers(1, 2**40),
        items=run_items,
    ),
    min_size=1,
    max_size=4,
)


@given(runs)
def test_runs_round_trip_through_the_multilang_encodings(sent: list[DataRun]) -> None:
    field = encode_runs(sent)
    assert is_runs(field)
    for wire in (json.loads(json.dumps(field)), msgpack.unpackb(msgpack.packb(field))):
        got = decode_runs(wire)
        assert [(r.key_group, r.source, r.first) for r in got] == [
            (r.key_group, r.source, r.first) for r in sent
        ]
        assert [[tuple(i) for i in r.items] for r in got] == [list(r.items) for r in sent]
        assert [list(r.data()) for r in got] == [list(r.data()) for r in sent]


def test_runs_are_told_apart_from_a_flat_data_and_from_texts() -> None:
    data = Data(key_group=6, item=DataTuple(source="u", seq=1, key="k", value=[0], ts=5))
    assert not is_runs(to_wire(data))
    assert not is_runs(to_wire(Trim(key_group=1, watermarks={})))
    assert not is_runs([]) and is_runs([[6, "u", 1, [["k", [0], 5]]]])
    (run,) = decode_runs([[6, "u", 1, [["k", [0], 5]]]])
    assert list(run.data()) == [data] and run.last == 1


def test_a_run_is_checked_when_built() -> None:
    with pytest.raises(ValueError, match="at least one tuple"):
        DataRun(key_group=1, source="u", first=1, items=[])
    with pytest.raises(ValueError, match="seq must be an int >= 1"):
        DataRun(key_group=1, source="u", first=0, items=[("k", 1, 0.0)])
    with pytest.raises(TypeError, match="key must be str"):
        DataRun(key_group=1, source="u", first=1, items=[(3, 1, 0.0)])


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ([], "data runs are a non-empty list"),
        ([[1, "u", 1]], r"a data run is \[key_group, source, first, items\]"),
        ([[-1, "u", 1, [["k", 0, 0]]]], "key_group must be an int >= 0"),
        ([[True, "u", 1, [["k", 0, 0]]]], "key_group must be an int >= 0"),
        ([[1, "", 1, [["k", 0, 0]]]], "a data run needs a source and first >= 1"),
        ([[1, "u", 0, [["k", 0, 0]]]], "a data run needs a source and first >= 1"),
        ([[1, "u", 1, []]], "a data run's items are a non-empty list"),
        ([[1, "u", 1, [["k", 0]]]], r"a run's tuple is \[key, value, ts\]"),
        ([[1, "u", 1, [[7, 0, 0]]]], "key must be str"),
        ([[1, "u", 1, [["k", 0, 0]]], "x"], r"a data run is \[key_group"),
    ],
)
def test_malformed_runs_are_refused_with_a_reason(value: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_runs(value)
