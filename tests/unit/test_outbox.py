"""A keyed task keeps its outputs to a sink until the sink confirms their commit
(``elastorm.core.outbox``): a sink task that dies with outputs in flight or in its
batch gets them again, and commits each once."""

from __future__ import annotations

import io
import sqlite3
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st
from streamparse import Bolt, Grouping
from test_keyed_api import Words, _bolt, _data, _Tup

from elastorm import ElasticTopology, KeyedBolt, Sink, ValueState, keyed, output_id_fields
from elastorm.config import SinkConfig
from elastorm.core.outbox import Outbox, confirmation, confirmed_keys
from elastorm.storm.elastic import COMMITTED


class Counts(KeyedBolt):
    outputs = output_id_fields(["word", "n"])
    n = ValueState(default=0)

    def process_keyed(self, key, values):
        self.n.update(self.n.value() + 1)
        self.emit([key, self.n.value()])


class CountsSink(Sink):
    schema = "CREATE TABLE IF NOT EXISTS counts (word TEXT, n INTEGER, kind TEXT)"
    table = "counts"
    columns = ("word", "n")


def test_kept_until_confirmed_and_resent_when_overdue() -> None:
    box = Outbox(resend_after=30.0)
    box.sent("default", ["a", 1, 5, "r:1", 1, "final"], now=0.0)
    box.sent("default", ["b", 1, 5, "r:1", 2, "final"], now=10.0)
    box.sent("default", ["x", 9, -1, "", 0, "rectified"], now=10.0)  # no id: not kept
    assert len(box) == 2 and box.due(29.0) == []
    assert box.due(31.0) == [("default", ["a", 1, 5, "r:1", 1, "final"])]
    assert box.due(45.0) == [("default", ["b", 1, 5, "r:1", 2, "final"])]
    assert box.confirmed([("default", 5, "r:1", 1), ("default", 5, "r:1", 9)]) == 1
    assert box.due(100.0) == [("default", ["b", 1, 5, "r:1", 2, "final"])]
    assert box.resent == 3 and box.oldest_age(101.0) == 1.0


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40), st.floats(0, 100)), max_size=40),
    st.floats(0, 200),
)
def test_due_sends_each_overdue_output_once_and_keeps_the_rest(sends, now) -> None:
    box = Outbox(resend_after=10.0)
    last: dict = {}
    for group, seq, at in sorted(sends, key=lambda s: s[2]):
        box.sent("s", ["v", group, "src", seq, "final"], now=at)
        last[("s", group, "src", seq)] = at
    due = box.due(now)
    want = {k for k, at in last.items() if at <= now - 10.0}
    assert {("s", v[1], v[2], v[3]) for _, v in due} == want and len(due) == len(want)
    assert len(box) == len(last)  # resent outputs stay kept until confirmed


def test_the_wire_form_round_trips_and_refuses_garbage() -> None:
    keys = [("default", 3, "r:1", 7), ("totals", 0, "counts:4", 1)]
    assert confirmed_keys(confirmation(keys)) == keys
    for bad in ([["default", "3", "r:1", 7]], [["default", 3, 7]]):
        try:
            confirmed_keys(bad)
        except (ValueError, TypeError):
            continue
        raise AssertionError(f"accepted {bad!r}")


def test_the_wiring_sends_a_sinks_confirmations_back_to_the_keyed_bolt() -> None:
    class Job(ElasticTopology):
        words = Words.spec()
        counts = Counts.spec(inputs={words: keyed("word")}, par=2)
        sink = CountsSink.spec(inputs={counts: Grouping.SHUFFLE})
        plain = Bolt.spec(inputs={counts: Grouping.SHUFFLE})

    topology = Job.thrift_topology
    counts = topology.bolts["counts"].common.inputs
    assert any(s.componentId == "sink" and s.streamId == COMMITTED for s in counts)
    assert not any(s.componentId == "plain" for s in counts)
    assert COMMITTED in topology.bolts["sink"].common.streams
    assert Job.config[SinkConfig.key("committed_streams")] == {"counts": ["default"]}


def _sink(path, committed=True):
    sink = CountsSink(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    conf = {"elastorm.sinks.sqlite_path": str(path)}
    if committed:
        conf["elastorm.sinks.committed_streams"] = {"counts": ["default"]}
    sink.initialize(conf, {"componentid": "sink", "taskid": 7})
    return sink


def _deliver(sink: Sink, outputs: list) -> None:
    for values in outputs:
        sink.process(SimpleNamespace(values=values, component="counts", stream="default", task=3))


def test_outputs_a_dead_sink_task_lost_are_sent_again_and_committed_once(
    monkeypatch, tmp_path
) -> None:
    """Before the outbox a keyed task sent each output once: the sink task killed with
    outputs in its batch (or in flight) never got them (chaos ``wordcount/sink``)."""
    wire: list = []  # what the keyed task emitted: (stream, values)
    confirms: list = []  # what the sinks sent back: (stream, values, direct_task)

    def emit(self, values, stream=None, direct_task=None, **kw):
        if isinstance(self, Sink):
            confirms.append((stream, values, direct_task))
        elif stream in (None, "default"):  # its outputs, not its reports
            wire.append(values)

    monkeypatch.setattr(Bolt, "emit", emit)
    bolt = _bolt(monkeypatch, Counts, elastorm__sinks__committed_streams={"counts": ["default"]})
    now = [0.0]
    monkeypatch.setattr("elastorm.storm.keyed_bolt.time.monotonic", lambda: now[0])
    for seq, word in enumerate(["a", "b", "a", "c", "a", "b"], start=1):
        bolt.process(_Tup(_data(word, "t", seq)))
    path = tmp_path / "sink.sqlite"
    first = _sink(path)
    _deliver(first, wire[:3])  # the first three reach a sink task and commit
    first.process_tick(None)
    _deliver(_sink(path), wire[3:])  # another gets the rest in its batch and is killed
    assert [(s, t) for s, _, t in confirms] == [(COMMITTED, 3)]
    bolt.process(SimpleNamespace(stream=COMMITTED, values=confirms[0][1], task=7))
    assert len(bolt._outbox) == 3  # the dead task's three, unconfirmed
    sent = len(wire)
    for t in (10.0, 29.0, 31.0, 40.0):  # ticks: past resend_after_secs (30) once
        now[0] = t
        bolt.process_tick(None)
    assert [v[:2] for v in wire[sent:]] == [["c", 1], ["a", 3], ["b", 2]]
    restarted = _sink(path)
    _deliver(restarted, wire)  # every output, the resends among them, reaches it
    restarted.process_tick(None)
    bolt.process(SimpleNamespace(stream=COMMITTED, values=confirms[-1][1], task=7))
    with sqlite3.connect(path) as conn:
        rows = sorted(conn.execute("SELECT word, n FROM counts"))
    assert rows == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("c", 1)]
    assert len(bolt._outbox) == 0


def test_a_sink_not_wired_back_confirms_nothing(tmp_path) -> None:
    sink = _sink(tmp_path / "s.sqlite", committed=False)
    sent = []
    sink.emit = lambda *a, **kw: sent.append(a)
    sink.process(
        SimpleNamespace(
            values=["a", 1, 0, "r:1", 1, "final"], component="counts", stream="default", task=3
        )
    )
    sink.process_tick(None)
    assert sent == []
