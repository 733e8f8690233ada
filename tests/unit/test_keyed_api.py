"""The user's API: per-key state handles, KeyedBolt's outputs, and the one-call wiring."""

from __future__ import annotations

import io
import logging

import pytest
from streamparse import Bolt, Grouping, Spout, Stream
from streamparse.dsl.topology import TopologyType

import elastorm.zk.requests
from elastorm import ElasticTopology, GeneratedSpout, KeyedBolt, MapState, ValueState, keyed
from elastorm.core.keyed_state import KeyState, StateAccessError
from elastorm.core.messages import Data, DataTuple
from elastorm.core.state import KeyGroupState
from elastorm.storm.elastic import MESSAGE_STREAM, STREAM, KeyedEmitting, by_task, to_wire
from elastorm.storm.replay import REWIND, REWIND_STREAM, ReplayableSpout, linked_fields
from elastorm.storm.topology import WiringError


class Words(GeneratedSpout):
    fields = ["word", "n"]


class Sink(Bolt):
    outputs = []


class CountWords(KeyedBolt):
    outputs = ["word", "count"]
    count = ValueState(default=0)
    seen = MapState()

    def process_keyed(self, key, values):
        n = self.count.value() + 1
        self.count.update(n)
        self.seen.put(str(values[1]), n)
        if values[1] == "boom":
            raise RuntimeError("user code failed")
        self.emit([key, n])


# -- state handles -----------------------------------------------------------


class _Holder:
    count = ValueState(default=[])
    seen = MapState()
    current_key_state = None


def test_value_and_map_state_copy_on_write_and_clear() -> None:
    h = _Holder()
    base = {"count": [1], "seen": {"a": 1}}
    h.current_key_state = KeyState("k", base)
    assert h.count.value() == [1] and h.seen.get("a") == 1 and h.seen.contains("a")
    h.count.update([1, 2])
    h.seen.put("b", 2)
    h.seen.remove("a")
    record = h.current_key_state.record()
    assert record == {"count": [1, 2], "seen": {"b": 2}}
    assert base == {"count": [1], "seen": {"a": 1}}  # never changed in place
    h.current_key_state = KeyState("k", record)
    h.count.clear()
    h.seen.clear()
    assert h.current_key_state.record() is None
    h.current_key_state = KeyState("new", None)
    d = h.count.value()
    d.append(9)
    assert h.count.value() == []  # a mutable default is copied, never shared


def test_map_state_reads_and_rejects_non_string_keys() -> None:
    h = _Holder()
    h.current_key_state = KeyState("k", {"seen": {"x": 1, "y": 2}})
    assert sorted(h.seen.keys()) == ["x", "y"] and sorted(h.seen.values()) == [1, 2]
    assert dict(h.seen.items()) == {"x": 1, "y": 2} and not h.seen.is_empty()
    with pytest.raises(TypeError, match="keys must be str"):
        h.seen.put(3, "a")


def test_state_outside_a_keyed_tuple_is_a_clear_error() -> None:
    with pytest.raises(StateAccessError, match="per key"):
        _Holder().count.value()


# -- KeyedBolt ----------------------------------------------------------------


def _bolt(monkeypatch, cls=CountWords, task=3, **options):
    """A started ``cls`` as task ``task`` (3 or 4) of "counts" (one key group, owned by 3,
    held on 4); ``options``: more of its conf (elastorm's dotted keys, ``.`` written
    ``__``)."""
    monkeypatch.setattr(elastorm.zk.requests, "task_start", lambda *a: (1, -1))
    bolt = cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    context = {
        "taskid": task,
        "componentid": "counts",
        "task->component": {"1": "counts_router", "2": "controller", "3": "counts", "4": "counts"},
    }
    conf = {
        "elastorm.key_groups": 1,  # one group, owned by task 3 (round robin), held on 4
        "elastorm.operators": {"counts": ["counts_router"]},
        "storm.id": "t-1-1",
        "elastorm.heartbeats": False,
        **{k.replace("__", "."): v for k, v in options.items()},
    }
    bolt.initialize(conf, context)
    return bolt


def _data(word: str, tag: str, seq: int) -> Data:
    return Data(key_group=0, item=DataTuple("r:1", seq, word, [word, tag], 0.0))


class _Tup:
    def __init__(self, message, sender=1) -> None:
        self.values = [to_wire(message), sender]
        self.stream = STREAM
        self.task = sender
        self.component = "counts_router"


def test_keyed_bolt_keeps_state_per_key_and_emits_each_tuples_output(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    out = []
    monkeypatch.setattr(
        Bolt, "emit", lambda self, values, stream=None, **kw: out.append((stream, values))
    )
    for seq, (word, tag) in enumerate([("a", "x"), ("b", "y"), ("a", "z")], start=1):
        bolt.process(_Tup(_data(word, tag, seq)))
    assert [v for s, v in out if s is None] == [["a", 1], ["b", 1], ["a", 2]]
    state = bolt.coordinator.state(0)
    assert state.get("a") == {"count": 2, "seen": {"x": 1, "z": 2}}


def test_a_failing_process_keyed_keeps_the_keys_state_and_goes_on(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    out = []
    monkeypatch.setattr(
        Bolt, "emit", lambda self, values, stream=None, **kw: out.append((stream, values))
    )
    tuples = [("a", "x"), ("a", "boom"), ("a", "y")]
    for seq, (word, tag) in enumerate(tuples, start=1):
        bolt.process(_Tup(_data(word, tag, seq)))
    assert [v for s, v in out if s is None] == [["a", 1], ["a", 2]]
    assert bolt.failed == 1


def test_the_step_returns_the_record_and_the_tuples_outputs(monkeypatch) -> None:
    # The core stores the record and hands the outputs over in ``Applied.result``;
    # the bolt emits them only if ``Applied.emit_output`` (Output Fidelity).
    state = KeyGroupState(0, step=_bolt(monkeypatch)._step)
    assert state.apply(_data("a", "x", 1).item) == [(["a", 1], None)]
    assert state.get("a") == {"count": 1, "seen": {"x": 1}}


# -- wiring ---------------------------------------------------------------------


def _word_count():
    class WordCount(ElasticTopology):
        config = {"elastorm.key_groups": 12}
        words = Words.spec(par=2)
        counts = CountWords.spec(inputs={words: keyed("word")}, par=3)
        sink = Sink.spec(inputs={counts: Grouping.SHUFFLE})

    return WordCount


def test_wiring_adds_router_relay_controller_and_direct_streams() -> None:
    topology = _word_count()
    assert isinstance(topology, TopologyType) and topology.__name__ == "WordCount"
    bolts = topology.thrift_bolts
    assert set(bolts) == {"counts", "counts_router", "relay", "controller", "sink"}

    def inputs(name):
        return {(k.componentId, k.streamId): g for k, g in bolts[name].common.inputs.items()}

    # The controller commands through ZooKeeper (elastorm.zk.commands), not on a stream.
    assert set(inputs("counts")) == {("counts_router", STREAM), ("relay", STREAM)}
    router = inputs("counts_router")
    assert router[("words", "default")].fields == ["word"]
    assert ("relay", STREAM) in set(router) and ("controller", STREAM) not in set(router)
    assert not bolts["controller"].common.streams
    assert set(inputs("relay")) == {("counts", "elastorm_relay")}
    # The JVM relay: one lane per sender (its FIFO kept), one task unless configured.
    assert inputs("relay")[("counts", "elastorm_relay")].fields == ["sender"]
    assert bolts["relay"].common.parallelism_hint == 1
    assert bolts["relay"].bolt_object.java_object.full_class_name == "elastorm.jvm.RelayBolt"
    assert set(inputs("controller")) == {("counts", "elastorm_reports")}
    assert bolts["counts_router"].common.parallelism_hint == 2
    assert topology.config["elastorm.operators"] == {"counts": ["counts_router"]}
    assert '"elastorm.router.keys": {"words:default": 1}' in bolts["counts_router"].common.json_conf
    assert topology.config["elastorm.key_groups"] == 12


def test_the_relay_tasks_option_sets_the_relays_parallelism() -> None:
    class Narrow(ElasticTopology):
        config = {"elastorm.relay_tasks": 3}
        words = Words.spec()
        counts = CountWords.spec(inputs={words: keyed("word")}, par=3)

    assert Narrow.thrift_bolts["relay"].common.parallelism_hint == 3
    with pytest.raises(WiringError, match="elastorm.relay_tasks"):

        class Bad(ElasticTopology):
            config = {"elastorm.relay_tasks": 0}
            words = Words.spec()
            counts = CountWords.spec(inputs={words: keyed("word")}, par=2)


def test_a_secret_file_that_cannot_be_read_fails_at_submit(tmp_path) -> None:
    (tmp_path / "secret").write_text("s3cret\n")

    class Secured(ElasticTopology):
        config = {"elastorm.auth.secret_file": str(tmp_path / "secret")}
        words = Words.spec()
        counts = CountWords.spec(inputs={words: keyed("word")}, par=2)

    assert Secured.config["elastorm.auth.secret_file"] == str(tmp_path / "secret")
    assert "s3cret" not in str(Secured.config)  # the conf carries the path only
    with pytest.raises(WiringError, match="secret file .*missing is unreadable"):

        class Unreadable(ElasticTopology):
            config = {"elastorm.auth.secret_file": str(tmp_path / "missing")}
            words = Words.spec()
            counts = CountWords.spec(inputs={words: keyed("word")}, par=2)


def test_sparse_finds_the_users_topology_not_the_base(tmp_path) -> None:
    from streamparse.util import get_topology_from_file

    (tmp_path / "wc_topology.py").write_text(
        "from test_keyed_api import _word_count\n"
        "from elastorm import ElasticTopology\n"
        "WordCount = _word_count()\n"
    )
    assert get_topology_from_file(str(tmp_path / "wc_topology.py")).__name__ == "WordCount"


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (lambda w: {w: keyed()}, "needs a key selector"),
        (lambda w: {w: keyed("nope")}, "has no field 'nope'"),
        (lambda w: {w: Grouping.SHUFFLE}, "has no keyed"),
    ],
)
def test_wiring_errors_name_the_component(inputs, message) -> None:
    with pytest.raises(WiringError, match=message):

        class Bad(ElasticTopology):
            words = Words.spec()
            counts = CountWords.spec(inputs=inputs(words), par=2)


def test_a_keyed_bolt_at_par_1_runs_two_tasks_and_says_so(caplog) -> None:
    """Its key groups' checkpoints are held by another of its tasks, on another node."""
    with caplog.at_level(logging.WARNING, logger="elastorm.storm.topology"):

        class One(ElasticTopology):
            words = Words.spec()
            counts = CountWords.spec(inputs={words: keyed("word")}, par=1)

    assert One.thrift_bolts["counts"].common.parallelism_hint == 2
    assert [r.getMessage() for r in caplog.records] == [
        "counts: par=1 runs 2 tasks: a keyed bolt's key groups are checkpointed on "
        "another task of it, on another node"
    ]


def test_keyed_bolts_keep_their_own_task_counts(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="elastorm.storm.topology"):

        class WordCount(ElasticTopology):
            words = Words.spec()
            counts = CountWords.spec(inputs={words: keyed("word")}, par=3)
            again = CountWords.spec(inputs={counts: keyed("word")}, par=2)

    assert WordCount.thrift_bolts["counts"].common.parallelism_hint == 3
    assert WordCount.thrift_bolts["again"].common.parallelism_hint == 2
    assert caplog.records == []


def test_task_counts_are_raised_per_streamparse_environment() -> None:
    class Small(ElasticTopology):
        words = Words.spec()
        counts = CountWords.spec(inputs={words: keyed("word")}, par={"prod": 4, "dev": 1})
        again = CountWords.spec(inputs={counts: keyed("word")}, par={"prod": 1, "dev": 3})

    assert Small.thrift_bolts["counts"].common.parallelism_hint == {"prod": 4, "dev": 2}
    assert Small.thrift_bolts["again"].common.parallelism_hint == {"prod": 2, "dev": 3}


def test_a_bad_elastorm_option_fails_when_the_topology_is_declared() -> None:
    with pytest.raises(WiringError, match=r"Bad: elastorm.key_groups = 0: expected an integer"):

        class Bad(ElasticTopology):
            config = {"elastorm.key_groups": 0}
            words = Words.spec()
            counts = CountWords.spec(inputs={words: keyed("word")}, par=2)

    with pytest.raises(WiringError, match="did you mean elastorm.key_groups"):

        class Typo(ElasticTopology):
            config = {"elastorm.key_group": 8}
            words = Words.spec()
            counts = CountWords.spec(inputs={words: keyed("word")}, par=2)


class Rows(ReplayableSpout, Spout):
    outputs = [Stream(fields=["id", "word"]), REWIND]


class Unmarked(ReplayableSpout, Spout):
    outputs = ["id", "word"]


class Forward(KeyedEmitting, Bolt):
    outputs = [MESSAGE_STREAM]


def test_an_emitter_behind_a_replayable_spout_gets_its_rewind_stream() -> None:
    class Replayed(ElasticTopology):
        rows = Rows.spec()
        forward = Forward.spec(inputs={rows: Grouping.fields("id")}, par=2)
        counts = CountWords.spec(inputs={forward[STREAM]: keyed()}, par=2)

    inputs = {
        (k.componentId, k.streamId): g
        for k, g in Replayed.thrift_bolts["forward"].common.inputs.items()
    }
    assert ("rows", REWIND_STREAM) in inputs
    assert Replayed.config["elastorm.replay_sources"] == {"forward": ["rows"]}


def test_a_replayable_spout_must_not_feed_an_emitter_by_shuffle() -> None:
    with pytest.raises(WiringError, match="forward: rows is a replayable spout"):

        class Shuffled(ElasticTopology):
            rows = Rows.spec()
            forward = Forward.spec(inputs={rows: Grouping.SHUFFLE}, par=2)
            counts = CountWords.spec(inputs={forward[STREAM]: keyed()}, par=2)


def test_a_replayable_spout_must_declare_its_rewind_stream() -> None:
    with pytest.raises(WiringError, match="rows: a ReplayableSpout declares"):

        class Unmarked_(ElasticTopology):
            rows = Unmarked.spec()
            forward = Forward.spec(inputs={rows: Grouping.fields("id")}, par=2)
            counts = CountWords.spec(inputs={forward[STREAM]: keyed()}, par=2)


class LinkedRows(ReplayableSpout, Spout):
    outputs = [Stream(fields=linked_fields(["id", "word"])), REWIND]


def test_a_linked_spout_feeds_its_emitter_by_task_and_the_pair_is_recorded() -> None:
    class Linked(ElasticTopology):
        rows = LinkedRows.spec()
        forward = Forward.spec(inputs={rows: by_task()}, par=2)
        counts = CountWords.spec(inputs={forward[STREAM]: keyed()}, par=2)

    assert Linked.config["elastorm.replay_links"] == {"rows": "forward"}
    assert Linked.config["elastorm.replay_sources"] == {"forward": ["rows"]}


@pytest.mark.parametrize(
    ("spout", "grouping", "message"),
    [
        (LinkedRows, Grouping.fields("id"), "rows:default is linked .* subscribe with by_task"),
        (Rows, by_task(), "rows:default is not linked: by_task.. needs a stream declared"),
    ],
)
def test_by_task_and_a_linked_stream_go_together(spout, grouping, message) -> None:
    with pytest.raises(WiringError, match=message):

        class Mismatched(ElasticTopology):
            rows = spout.spec()
            forward = Forward.spec(inputs={rows: grouping}, par=2)
            counts = CountWords.spec(inputs={forward[STREAM]: keyed()}, par=2)


def test_a_linked_spout_links_to_one_emitter() -> None:
    with pytest.raises(WiringError, match="rows already feeds forward by task"):

        class Twice(ElasticTopology):
            rows = LinkedRows.spec()
            forward = Forward.spec(inputs={rows: by_task()}, par=2)
            other = Forward.spec(inputs={rows: by_task()}, par=2)
            counts = CountWords.spec(
                inputs={forward[STREAM]: keyed(), other[STREAM]: keyed()}, par=2
            )


def test_losing_a_spouts_rows_needs_a_linked_spout() -> None:
    with pytest.raises(WiringError, match="drop_on = 'spout' .* no spout here does"):

        class Unlinked(ElasticTopology):
            config = {"elastorm.chaos.drop_tuples": 5, "elastorm.chaos.drop_on": "spout"}
            rows = Rows.spec()
            forward = Forward.spec(inputs={rows: Grouping.fields("id")}, par=2)
            counts = CountWords.spec(inputs={forward[STREAM]: keyed()}, par=2)

    with pytest.raises(WiringError, match="elastorm.chaos.drop_on = 'wire'"):

        class Bad(ElasticTopology):
            config = {"elastorm.chaos.drop_on": "wire"}
            rows = LinkedRows.spec()
            forward = Forward.spec(inputs={rows: by_task()}, par=2)
            counts = CountWords.spec(inputs={forward[STREAM]: keyed()}, par=2)
