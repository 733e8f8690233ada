"""Stable output ids (``KeyedBolt`` + ``core.outputs.next_output``): every output on a
stream declared with ``output_id_fields`` carries (key group, source, sequence, kind),
counted in the group's state, so a restored group replaying, another task, another
interleaving of the sources or a quiet replay gives each output the id it had."""

from __future__ import annotations

import io

from streamparse import Bolt, Stream

import elastorm.zk.requests
from elastorm import KeyedBolt, ValueState, output_id_fields
from elastorm.core.actions import Applied
from elastorm.core.checkpoint import CheckpointHolder, checkpoint_to_state
from elastorm.core.messages import Data, DataTuple
from elastorm.storm.elastic import STREAM, to_wire


class Counts(KeyedBolt):
    outputs = [Stream(fields=output_id_fields(["word", "n"])), Stream(["word"], name="plain")]
    count = ValueState(default=0)

    def process_keyed(self, key, values):
        n = self.count.value() + 1
        self.count.update(n)
        self.emit([key, n])
        self.emit([key], stream="plain")
        if values[1] == "twice":
            self.emit([key, -n])


def _bolt(monkeypatch):
    monkeypatch.setattr(elastorm.zk.requests, "task_start", lambda *a: (1, -1))
    bolt = Counts(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    context = {
        "taskid": 3,
        "componentid": "counts",
        "task->component": {"1": "router", "2": "controller", "3": "counts", "4": "counts"},
    }
    conf = {
        "elastorm.key_groups": 1,
        "elastorm.operators": {"counts": ["router"]},
        "storm.id": "t-1-1",
        "elastorm.heartbeats": False,
    }
    bolt.initialize(conf, context)
    return bolt


class _Tup:
    def __init__(self, message, sender=1) -> None:
        self.values = [to_wire(message), sender]
        self.stream = STREAM
        self.task = sender
        self.component = "router"


def _item(source: str, seq: int, word: str, tag: str = "") -> DataTuple:
    return DataTuple(source, seq, word, [word, tag], 0.0)


def _capture(monkeypatch) -> list:
    out: list = []
    monkeypatch.setattr(
        Bolt, "emit", lambda self, values, stream=None, **kw: out.append((stream, values))
    )
    return out


def _feed(bolt, items) -> None:
    for item in items:
        bolt.process(_Tup(Data(key_group=0, item=item)))


def test_outputs_carry_group_source_sequence_and_kind_and_plain_streams_do_not(
    monkeypatch,
) -> None:
    out = _capture(monkeypatch)
    bolt = _bolt(monkeypatch)
    assert Counts.identified == frozenset({"default"})
    _feed(bolt, [_item("r:1", 1, "a"), _item("r:2", 1, "b", "twice"), _item("r:1", 2, "a")])
    assert [v for s, v in out if s is None] == [
        ["a", 1, 0, "r:1", 1, "final"],
        ["b", 1, 0, "r:2", 1, "final"],
        ["b", -1, 0, "r:2", 2, "final"],
        ["a", 2, 0, "r:1", 2, "final"],
    ]
    assert [v for s, v in out if s == "plain"] == [["a"], ["b"], ["a"]]


def test_a_restore_from_a_checkpoint_replays_its_outputs_with_the_same_ids(monkeypatch) -> None:
    out = _capture(monkeypatch)
    items = [_item("r:1", i, w, "twice" if i == 4 else "") for i, w in enumerate("abaab", 1)]
    first = _bolt(monkeypatch)
    _feed(first, items[:2])
    delta = first.coordinator.state(0).begin_checkpoint()
    first.coordinator.state(0).finish_checkpoint()
    _feed(first, items[2:])
    sent_first = [v for s, v in out if s is None][2:]

    out.clear()
    holder = CheckpointHolder()
    holder.apply(delta)
    second = _bolt(monkeypatch)  # a new process: the group restored from its copy
    second.coordinator.machine(0).state = checkpoint_to_state(
        holder.take(0), epoch=1, step=second._step
    )
    _feed(second, items[2:])
    assert [v for s, v in out if s is None] == sent_first


def test_ids_follow_the_input_tuple_whatever_the_sources_interleaving(monkeypatch) -> None:
    out = _capture(monkeypatch)
    a = [_item("r:1", i, f"a{i}") for i in (1, 2, 3)]
    b = [_item("r:2", i, f"b{i}") for i in (1, 2)]
    _feed(_bolt(monkeypatch), [a[0], b[0], a[1], b[1], a[2]])
    one = {tuple(v[2:5]): v[0] for s, v in out if s is None}
    out.clear()
    _feed(_bolt(monkeypatch), [b[0], b[1], a[0], a[1], a[2]])
    other = {tuple(v[2:5]): v[0] for s, v in out if s is None}
    assert one == other and len(one) == 5


def test_a_quiet_replay_counts_the_outputs_it_does_not_send(monkeypatch) -> None:
    # A CPA target replays what its source already applied and sent: nothing goes
    # out, but the counters move, so its first own output gets the next id.
    out = _capture(monkeypatch)
    bolt = _bolt(monkeypatch)
    state = bolt.coordinator.state(0)
    for seq in (1, 2):
        item = _item("r:1", seq, "a")
        result = state.apply(item)
        bolt.perform([Applied(key_group=0, item=item, result=result, emit_output=False)])
    assert out == []
    _feed(bolt, [_item("r:1", 3, "a")])
    assert [v for s, v in out if s is None] == [["a", 3, 0, "r:1", 3, "final"]]


def test_tentative_outputs_are_marked_and_rectifications_have_no_sequence(monkeypatch) -> None:
    out = _capture(monkeypatch)
    bolt = _bolt(monkeypatch)
    state = bolt.coordinator.state(0)
    item = _item("r:1", 1, "a")
    result = state.apply(item)
    bolt.perform([Applied(key_group=0, item=item, result=result, emit_output=True, tentative=True)])
    bolt._rectifying = 0  # as inside rectify_keyed for a key of group 0
    bolt.emit(["a", 1])
    bolt._rectifying = None
    bolt.emit(["total", 9])  # outside any key: no group, no sequence
    assert [v for s, v in out if s is None] == [
        ["a", 1, 0, "r:1", 1, "tentative"],
        ["a", 1, 0, "", 0, "rectified"],
        ["total", 9, -1, "", 0, "final"],
    ]
