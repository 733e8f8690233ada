"""A keyed task keeps its outputs to a sink until the sink confirms their commit
(``elastorm.core.outbox``): a sink task that dies with outputs in flight or in its
batch gets them again, and commits each once."""

from __future__ import annotations

import io
import sqlite3
import time
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from streamparse import Bolt, Grouping
from test_keyed_api import Words, _bolt, _data, _Tup

from elastorm import ElasticTopology, KeyedBolt, Sink, ValueState, keyed, output_id_fields
from elastorm.config import TopologyConfig
from elastorm.core.messages import (
    CheckpointAck,
    Data,
    DataTuple,
    DurableWritten,
    Protocol,
    ToState,
    Trim,
)
from elastorm.core.migration.table import Phase
from elastorm.core.outbox import Outbox, confirmation, confirmed_keys
from elastorm.storm.elastic import COMMITTED, STREAM, to_wire
from elastorm.storm.keyed_bolt import ROUTER_KEYS, KeyRouter


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
    box.sent("default", ["a", 1, 5, "r:1", 1, "final"], now=0.0, consumers=["sink"])
    box.sent("default", ["b", 1, 5, "r:1", 2, "final"], now=10.0, consumers=["sink", "r"])
    box.sent("default", ["x", 9, -1, "", 0, "rectified"], now=10.0, consumers=["sink"])
    assert len(box) == 3 and box.due(29.0) == []  # the rectified one has no id: not kept
    assert box.due(31.0) == [("default", ["a", 1, 5, "r:1", 1, "final"])]
    b = ("default", ["b", 1, 5, "r:1", 2, "final"])
    assert box.due(45.0) == [b]  # once, though two consumers wait for it
    ids = [("default", 5, "r:1", 1), ("default", 5, "r:1", 2), ("default", 5, "r:1", 9)]
    assert box.confirmed("sink", ids) == 2
    assert box.due(100.0) == []  # sent again at 45: next after two periods
    assert box.due(105.0) == [b]  # the router "r" has not confirmed it
    assert box.confirmed("r", ids) == 1 and len(box) == 0
    assert box.resent == 3 and box.oldest_age(106.0) == 0.0


def test_an_output_sent_again_backs_off_to_eight_periods_and_a_fresh_send_resets_it() -> None:
    """A consumer behind on its input (not dead) is not sent it again every period:
    the join's windows got 58,452 resends from one task in two minutes (session 25)."""
    box = Outbox(resend_after=10.0)
    out = ["a", 1, 5, "r:1", 1, "final"]
    box.sent("default", out, now=0.0, consumers=["sink"])
    resent_at = [t for t in range(0, 400) if box.due(float(t))]
    assert resent_at == [10, 30, 70, 150, 230, 310, 390]  # 1, 2, 4, then 8 periods
    assert box.oldest_age(395.0) == 5.0
    box.sent("default", out, now=395.0, consumers=["sink"])  # made again by a replay
    assert [t for t in range(395, 430) if box.due(float(t))] == [405, 425]
    assert box.confirmed("sink", [("default", 5, "r:1", 1)]) == 1
    assert len(box) == 0 and box.due(1000.0) == []


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40), st.floats(0, 100)), max_size=40),
    st.floats(0, 200),
)
def test_due_sends_each_overdue_output_once_and_keeps_the_rest(sends, now) -> None:
    box = Outbox(resend_after=10.0)
    last: dict = {}
    for group, seq, at in sorted(sends, key=lambda s: s[2]):
        box.sent("s", ["v", group, "src", seq, "final"], now=at, consumers=["a", "b"])
        last[("s", group, "src", seq)] = at
    due = box.due(now)
    want = {k for k, at in last.items() if at <= now - 10.0}
    assert {("s", v[1], v[2], v[3]) for _, v in due} == want and len(due) == len(want)
    assert len(box) == 2 * len(last)  # resent outputs stay kept until confirmed


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
    assert Job.config[TopologyConfig.key("confirmed_outputs")] == {"counts": ["sink:default"]}


def _sink(path, committed=True):
    sink = CountsSink(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    conf = {"elastorm.sinks.sqlite_path": str(path)}
    if committed:
        conf["elastorm.confirmed_outputs"] = {"counts": ["sink:default"]}
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
    bolt = _bolt(monkeypatch, Counts, elastorm__confirmed_outputs={"counts": ["sink:default"]})
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
    bolt.process(SimpleNamespace(stream=COMMITTED, component="sink", values=confirms[0][1], task=7))
    assert len(bolt._outbox) == 3  # the dead task's three, unconfirmed
    sent = len(wire)
    for t in (4.0, 9.0, 11.0, 14.0):  # ticks: past unconfirmed_resend_secs (10) once
        now[0] = t
        bolt.process_tick(None)
    assert [v[:2] for v in wire[sent:]] == [["c", 1], ["a", 3], ["b", 2]]
    restarted = _sink(path)
    _deliver(restarted, wire)  # every output, the resends among them, reaches it
    restarted.process_tick(None)
    bolt.process(
        SimpleNamespace(stream=COMMITTED, component="sink", values=confirms[-1][1], task=7)
    )
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


# -- between two keyed bolts: the router confirms once the second checkpointed them -----


@pytest.mark.usefixtures("emitter_first_start")
def test_the_router_before_a_second_keyed_bolt_confirms_on_its_trim(monkeypatch) -> None:
    """Before: outputs the router held or had in flight when it was killed were lost
    (chaos ``chained/router``: 1,036 of 4,000 rows); now their sender keeps them until
    the second bolt's checkpoint covers them (the trim), and sends them again else."""
    router = KeyRouter(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    monkeypatch.setattr(KeyRouter, "send", lambda self, action: None)
    confirms: list = []
    monkeypatch.setattr(
        KeyRouter,
        "emit",
        lambda self, v, stream=None, direct_task=None, **kw: confirms.append(
            (stream, direct_task, v)
        ),
    )
    context = {
        "taskid": 1,
        "componentid": "letters_router",
        "task->component": {"1": "letters_router", "2": "controller", "3": "letters"},
    }
    conf = {
        "elastorm.key_groups": 1,
        "elastorm.operators": {"letters": ["letters_router"]},
        "elastorm.confirmed_outputs": {"counts": ["letters_router:default"]},
        "storm.id": "t-1-1",
        ROUTER_KEYS: {"counts:default": 0},
    }
    router.initialize(conf, context)
    for seq, word in enumerate(["apple", "avocado", "banana"], start=1):
        router.process(
            SimpleNamespace(
                stream="default",
                component="counts",
                task=5 + seq % 2,
                values=[word, 1, 0, "counts_router:1", seq, "final"],
            )
        )
    trim = Trim(key_group=0, watermarks={router.emitter.source: 2})
    router.process(SimpleNamespace(stream=STREAM, values=[to_wire(trim), 3], task=3))
    assert sorted((s, t, confirmed_keys(v[0])) for s, t, v in confirms) == [
        (COMMITTED, 5, [("default", 0, "counts_router:1", 2)]),
        (COMMITTED, 6, [("default", 0, "counts_router:1", 1)]),
    ]


def test_chained_keyed_bolts_confirm_through_the_router() -> None:
    class Letters(KeyedBolt):
        def process_keyed(self, key, values):
            pass

    class Chained(ElasticTopology):
        words = Words.spec()
        counts = Counts.spec(inputs={words: keyed("word")}, par=2)
        letters = Letters.spec(inputs={counts: keyed("word")}, par=2)
        sink = CountsSink.spec(inputs={counts: Grouping.SHUFFLE})

    topology = Chained.thrift_topology
    inputs = {(s.componentId, s.streamId) for s in topology.bolts["counts"].common.inputs}
    assert {("letters_router", COMMITTED), ("sink", COMMITTED)} <= inputs
    assert Chained.config[TopologyConfig.key("confirmed_outputs")] == {
        "counts": ["letters_router:default", "sink:default"]
    }


def test_a_groups_unconfirmed_outputs_go_with_its_copy_to_the_next_owner() -> None:
    """``pending`` names a group's kept outputs once each; a new owner that ``adopt``s
    them (its copy's ``PENDING`` entry) sends them at its next ``due``, for every
    consumer that confirms their stream, and keeps them until those confirm."""
    box = Outbox(resend_after=10.0)
    a = ["a", 1, 5, "r:1", 1, "final"]
    box.sent("default", a, now=0.0, consumers=["sink", "r"])
    box.sent("default", ["z", 1, 6, "r:1", 1, "final"], now=0.0, consumers=["sink"])
    entry = box.pending(5)
    assert entry == {"default\x1fr:1\x1f1": ["default", a]}
    heir = Outbox(resend_after=10.0)
    assert heir.adopt(entry, lambda stream: ("sink",), now=100.0) == 1
    assert heir.due(100.0) == [("default", a)]  # at once, not resend_after later
    assert heir.adopt(entry, lambda stream: ("sink",), now=101.0) == 0  # kept already
    assert heir.confirmed("sink", [("default", 5, "r:1", 1)]) == 1 and len(heir) == 0


def test_a_copy_taken_over_sends_the_outputs_its_producer_never_had_confirmed(
    monkeypatch, tmp_path
) -> None:
    """Before: an output lost on the way had its only copy in its producer's outbox; the
    producer killed before its resend (its group moved away, or restored from a copy
    that covered the output's tuple) lost it for good (the windowed user-project test,
    sink hole 2-2). Now the group's copy carries it (``PENDING``) and the task that
    starts from the copy sends it again."""
    wire: list = []
    confirms: list = []

    def emit(self, values, stream=None, direct_task=None, **kw):
        if isinstance(self, Sink):
            confirms.append((stream, values, direct_task))
        elif stream in (None, "default"):
            wire.append(values)

    monkeypatch.setattr(Bolt, "emit", emit)
    options = {"elastorm__confirmed_outputs": {"counts": ["sink:default"]}}
    producer = _bolt(monkeypatch, Counts, **options)
    for seq, word in enumerate(["a", "b", "a"], start=1):
        producer.process(_Tup(_data(word, "t", seq)))
    assert len(wire) == 3  # all three lost on the way: the sink never gets them
    [send] = producer.coordinator.checkpoint(0, full=True)
    copy = producer.coordinator.held.__class__().apply(send.message)
    wire.clear()
    heir = _bolt(monkeypatch, Counts, **options)  # the producer is gone; this one restores
    assert heir.coordinator.start_from({0: copy}, epoch=5) == [0]
    heir.on_taken_over(0)
    heir.process_tick(None)
    assert sorted(v[:2] for v in wire) == [["a", 1], ["a", 2], ["b", 1]]
    sink = _sink(tmp_path / "sink.sqlite")
    _deliver(sink, wire)
    sink.process_tick(None)
    with sqlite3.connect(tmp_path / "sink.sqlite") as conn:
        rows = sorted(conn.execute("SELECT word, n FROM counts"))
    assert rows == [("a", 1), ("a", 2), ("b", 1)]


def test_a_moves_target_sends_what_its_dead_source_made_after_the_copy(
    monkeypatch, tmp_path
) -> None:
    """Before: a CPA or CPAL target starts from the held copy and replays the tuples
    after it quietly (its source sent their outputs); an output the source made after
    the copy, lost on the way, was lost for good if the source died before resending
    it. Now the target keeps the outputs of its quiet replay as if it had sent them,
    and sends again those no consumer confirmed to it; the sink drops what it has."""
    wire: list = []

    def emit(self, values, stream=None, direct_task=None, **kw):
        if not isinstance(self, Sink) and stream in (None, "default"):
            wire.append((self._task, values))

    monkeypatch.setattr(Bolt, "emit", emit)
    options = {
        "elastorm__confirmed_outputs": {"counts": ["sink:default"]},
        "elastorm__unconfirmed_resend_secs": 1,
    }
    source = _bolt(monkeypatch, Counts, task=3, **options)
    target = _bolt(monkeypatch, Counts, task=4, **options)  # holds group 0's checkpoints
    source.process(_Tup(_data("a", "t", 1)))
    [send] = source.coordinator.checkpoint(0, full=True)
    target._receive(3, send.message, time.monotonic())
    for seq, word in enumerate(["b", "a"], start=2):  # after the copy
        source.process(_Tup(_data(word, "t", seq)))
    assert [v[:2] for _, v in wire] == [["a", 1], ["b", 1], ["a", 2]]  # all lost on the way
    wire.clear()
    items = tuple(_data(w, "t", seq).item for seq, w in enumerate(["b", "a"], start=2))
    move = ToState(key_group=0, epoch=1, protocol=Protocol.CPA, items=items)
    target._receive(1, move, time.monotonic())  # the router's toState: the replay
    assert target.coordinator.phase(0) is Phase.ACTIVE and wire == []  # quiet
    target.resend_unconfirmed(time.monotonic() + 1.5)  # the source died: nothing confirmed
    assert sorted(v[:2] for _, v in wire) == [["a", 1], ["a", 2], ["b", 1]]
    sink = _sink(tmp_path / "sink.sqlite")
    _deliver(sink, [v for _, v in wire] * 2)  # and the source's, had they arrived
    sink.process_tick(None)
    with sqlite3.connect(tmp_path / "sink.sqlite") as conn:
        rows = sorted(conn.execute("SELECT word, n FROM counts"))
    assert rows == [("a", 1), ("a", 2), ("b", 1)]


def test_unreleased_outputs_go_when_a_trim_covers_their_inputs_and_travel_in_copies() -> None:
    from elastorm.core.outbox import Unreleased

    held = Unreleased()
    a1, b1 = ["a", 1, 0, "r:1", 1, "final"], ["b", 1, 0, "r:1", 2, "final"]
    a2 = ["a", 2, 0, "s", 1, "final"]
    held.hold(0, "r:1", 1, "default", a1, now=100.0)
    held.hold(0, "r:1", 2, "default", b1, now=101.0)
    held.hold(0, "s", 1, "default", a2, now=102.0)
    assert held.stalled(130.0, after=30.0) == {} and held.stalled(131.0, after=30.0) == {0: 31.0}
    assert held.release(0, {"r:1": 1}, now=140.0) == [("default", a1)]
    assert held.stalled(165.0, after=30.0) == {}  # a release is progress: counted anew
    assert held.pending(0) == {
        "default\x1fr:1\x1f2": ["default", b1],
        "default\x1fs\x1f1": ["default", a2],
    }
    assert held.release(0, {"r:1": 5}, now=150.0) == [("default", b1)] and len(held) == 1
    assert held.drop(0) == 1 and held.release(0, {"s": 9}, now=151.0) == [] and len(held) == 0
    assert held.stalled(500.0, after=30.0) == {}


@pytest.mark.parametrize("release_on_copy", [True, False])
def test_a_restore_from_an_older_copy_with_its_input_renamed_commits_each_count_once(
    monkeypatch, tmp_path, release_on_copy
) -> None:
    """chaos chained/zk-stop, session 28: every task restarted; the second keyed stage
    came back from a copy older than what it had sent the sink, and the router before
    it restarted under a new source name, so the tuples after the copy came again
    numbered afresh: the stage's outputs for them got new ids and the sink committed
    each count twice. With ``elastorm.release_outputs_on_copy`` an output leaves only
    once a copy any restore starts from covers its input, so the outputs made again
    were never seen: each count once. Without it (the default) the duplicate shows,
    as the guarantees table says (at least once)."""
    wire: list = []

    def emit(self, values, stream=None, direct_task=None, **kw):
        if not isinstance(self, Sink) and stream in (None, "default"):
            wire.append(values)

    monkeypatch.setattr(Bolt, "emit", emit)
    options = {
        "elastorm__confirmed_outputs": {"counts": ["sink:default"]},
        "elastorm__release_outputs_on_copy": release_on_copy,
    }
    producer = _bolt(monkeypatch, Counts, **options)
    for seq, word in enumerate(["a", "b"], start=1):
        producer.process(_Tup(_data(word, "t", seq)))
    [send] = producer.coordinator.checkpoint(0, full=True)
    copy = producer.coordinator.held.__class__().apply(send.message)  # held on task 4
    ack = CheckpointAck(key_group=0, checkpoint=send.message.checkpoint, watermarks={"r:1": 2})
    producer._receive(4, ack, time.monotonic())  # the holder has it
    taken = send.message.checkpoint
    written = DurableWritten(key_group=0, checkpoint=taken, watermarks={"r:1": 2})
    producer._receive(3, written, time.monotonic())  # and the store: upstream trims to it
    producer.process(_Tup(_data("a", "t", 3)))  # after the copy: a's count 2
    sent = list(wire)
    assert sorted(v[:2] for v in sent) == (
        [["a", 1], ["b", 1]] if release_on_copy else [["a", 1], ["a", 2], ["b", 1]]
    )
    # The producer is gone; its group comes back from the copy on another task, and
    # the restarted router numbers the tuple after the copy under a new name.
    wire.clear()
    heir = _bolt(monkeypatch, Counts, **options)
    assert heir.coordinator.start_from({0: copy}, epoch=5) == [0]
    heir.on_taken_over(0)
    again = Data(key_group=0, item=DataTuple("r:1@2", 1, "a", ["a", "t"], 0.0))
    heir.process(_Tup(again))
    heir.process_tick(None)  # what the copy says was never confirmed goes again
    [send] = heir.coordinator.checkpoint(0, full=True)
    marks = {"r:1": 2, "r:1@2": 1}
    taken = send.message.checkpoint
    heir._receive(4, CheckpointAck(key_group=0, checkpoint=taken, watermarks=marks), 0.0)
    heir._receive(3, DurableWritten(key_group=0, checkpoint=taken, watermarks=marks), 0.0)
    sink = _sink(tmp_path / "sink.sqlite")
    _deliver(sink, sent + wire)
    sink.process_tick(None)
    with sqlite3.connect(tmp_path / "sink.sqlite") as conn:
        rows = sorted(conn.execute("SELECT word, n FROM counts"))
    if release_on_copy:
        assert rows == [("a", 1), ("a", 2), ("b", 1)]
    else:
        assert rows == [("a", 1), ("a", 2), ("a", 2), ("b", 1)]  # at least once


def test_outputs_held_past_the_stall_bound_are_reported_not_waited_out(monkeypatch, caplog) -> None:
    """No trim comes (no holder acknowledges a copy): the held outputs are reported
    once ``elastorm.stall_secs`` has passed, and again only a bound later."""
    monkeypatch.setattr(Bolt, "emit", lambda self, *a, **kw: None)
    options = {
        "elastorm__confirmed_outputs": {"counts": ["sink:default"]},
        "elastorm__release_outputs_on_copy": True,
        "elastorm__stall_secs": 5.0,
    }
    producer = _bolt(monkeypatch, Counts, **options)
    producer.process(_Tup(_data("a", "t", 1)))
    start = time.monotonic()
    with caplog.at_level("ERROR", logger="elastorm.storm.keyed_bolt"):
        producer.report_held(start + 4.0)
        assert not _held_reports(caplog)
        producer.report_held(start + 6.0)
        producer.report_held(start + 7.0)  # within a bound of the last report
    [record] = _held_reports(caplog)
    assert "outputs held for a copy" in record.getMessage() and "1 outputs held" in (
        record.getMessage()
    )


def _held_reports(caplog) -> list:
    return [r for r in caplog.records if r.name == "elastorm.storm.keyed_bolt"]
