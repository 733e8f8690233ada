"""The source contract: a position and a replay from it, or an explicit opt-out.

- the tutorial's shape (a replayable spout behind ``keyed("word")``): elastorm's router
  gets the replay wiring and, restarted, waits for the rewind and drops what it had
  already processed;
- a spout feeding a keyed bolt without a replay is refused at submit in one line,
  unless named in ``elastorm.sources.at_most_once``; every topology of this
  repository loads (each is replayable or opts out);
- an emitter that cannot replay numbers a restart under a new source name, so its
  tuples are not dropped as duplicates of the old watermark;
- the ready sources (``LinesSpout``, ``GeneratedSpout``) replay the same tuples from
  any position.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest
from streamparse import Bolt, Grouping, Spout

import elastorm.zk.replay
from elastorm import ElasticTopology, GeneratedSpout, KeyedBolt, LinesSpout, keyed
from elastorm.core.messages import Data, UpstreamRestarted
from elastorm.core.replay import RestartPoint, emitter_source
from elastorm.core.state import Admission, KeyGroupState
from elastorm.storm.keyed_bolt import ROUTER_KEYS, KeyRouter
from elastorm.storm.replay import REWIND_STREAM
from elastorm.storm.sources import pack, unpack
from elastorm.storm.topology import WiringError
from elastorm.zk.replay import EmitterStart

ROOT = Path(__file__).resolve().parents[2]


class Words(GeneratedSpout):
    fields = ["word"]

    def generate(self, position):
        return [f"w{position % 5}"] if position < 20 else None


class Plain(Spout):
    outputs = ["word"]


class Split(Bolt):
    outputs = ["word"]


class Count(KeyedBolt):
    outputs = ["word", "count"]


def fake_start(monkeypatch, incarnation: int, point: RestartPoint | None = None) -> None:
    monkeypatch.setattr(
        elastorm.zk.replay,
        "emitter_start",
        lambda *a: EmitterStart(incarnation=incarnation, routing={}, point=point),
    )


# -- wiring ----------------------------------------------------------------------------


def test_a_replayable_spout_behind_keyed_gets_its_routers_replay_wiring() -> None:
    class WordCount(ElasticTopology):
        words = Words.spec()
        counts = Count.spec(inputs={words: keyed("word")}, par=2)

    router = WordCount.thrift_bolts["counts_router"].common
    inputs = {(k.componentId, k.streamId): g for k, g in router.inputs.items()}
    assert inputs[("words", REWIND_STREAM)] == Grouping.ALL
    assert inputs[("words", "default")].fields == ["word"]
    assert WordCount.config["elastorm.replay_sources"] == {"counts_router": ["words"]}


def test_the_default_durable_store_is_made_absolute_at_submit(tmp_path, monkeypatch) -> None:
    """A bare ``file://`` resolved in each worker's directory, Storm's copy of the
    topology: one store per supervisor, deleted with the topology (a user's
    ``sparse submit`` found it there, session 24). Wiring makes it the submitting
    project's ``.elastorm/durable``; a store the user names is left as it is."""
    monkeypatch.chdir(tmp_path)

    class WordCount(ElasticTopology):
        words = Words.spec()
        counts = Count.spec(inputs={words: keyed("word")}, par=2)

    assert WordCount.config["elastorm.durable.uri"] == f"file://{tmp_path}/.elastorm/durable"
    for uri in ("hdfs://nn:9870/elastorm", "none", "file:///mnt/shared"):

        class Named(ElasticTopology):
            config = {"elastorm.durable.uri": uri}
            words = Words.spec()
            counts = Count.spec(inputs={words: keyed("word")}, par=2)

        assert Named.config["elastorm.durable.uri"] == uri


def test_a_spout_that_cannot_replay_is_refused_in_one_line_naming_it_and_the_fixes() -> None:
    with pytest.raises(WiringError) as refused:

        class WordCount(ElasticTopology):
            words = Plain.spec()
            counts = Count.spec(inputs={words: keyed("word")}, par=2)

    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("WordCount: spout 'words' feeds keyed bolt 'counts' ")
    for fix in ("ReplayableSpout", "LinesSpout", "GeneratedSpout"):
        assert fix in message
    assert "{'elastorm.sources.at_most_once': ['words']} (no guarantee" in message


def test_the_explicit_opt_out_wires_it_without_replay() -> None:
    class AtMostOnce(ElasticTopology):
        config = {"elastorm.sources.at_most_once": ["words"]}
        words = Plain.spec()
        counts = Count.spec(inputs={words: keyed("word")}, par=2)

    assert "elastorm.replay_sources" not in AtMostOnce.config


def test_an_opt_out_must_name_a_spout_of_the_topology() -> None:
    with pytest.raises(WiringError, match=r"at_most_once names \['wrods'\], not spouts"):

        class Typo(ElasticTopology):
            config = {"elastorm.sources.at_most_once": ["words", "wrods"]}
            words = Plain.spec()
            counts = Count.spec(inputs={words: keyed("word")}, par=2)


def test_a_replayable_spout_behind_a_plain_bolt_is_not_replayed_and_is_refused() -> None:
    with pytest.raises(WiringError, match="spout 'words' feeds keyed bolt 'counts' through "
                       "plain bolt 'split' and cannot replay"):  # fmt: skip

        class Through(ElasticTopology):
            words = Words.spec()
            split = Split.spec(inputs={words: Grouping.fields("word")})
            counts = Count.spec(inputs={split: keyed("word")}, par=2)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"topology_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the wiring (and its refusal) runs here
    return module


@pytest.mark.parametrize("path", sorted((ROOT / "topologies").glob("*.py")), ids=lambda p: p.stem)
def test_every_topology_of_the_repository_replays_or_opts_out(path: Path) -> None:
    _load(path)


def test_the_flights_job_replays_its_spout_without_an_opt_out() -> None:
    (topology,) = [
        v for v in vars(_load(ROOT / "topologies/flights_elastic.py")).values()
        if getattr(v, "__name__", "") == "FlightsElasticTopology"
    ]  # fmt: skip
    assert topology.config["elastorm.replay_sources"] == {"extract_delays": ["flights_spout"]}
    assert not topology.config.get("elastorm.sources.at_most_once")


# -- a restarted emitter ---------------------------------------------------------------


def test_emitter_source_names_each_incarnation_that_cannot_replay() -> None:
    assert emitter_source("r", 3, 1, replayed=False) == "r:3"
    assert emitter_source("r", 3, 2, replayed=False) == "r:3@2"
    assert emitter_source("r", 3, 2, replayed=True) == "r:3"
    with pytest.raises(ValueError, match="incarnation"):
        emitter_source("r", 3, 0, replayed=False)


ROUTER_CONTEXT = {
    "taskid": 1,
    "componentid": "counts_router",
    "task->component": {"1": "counts_router", "2": "controller", "3": "counts", "4": "counts"},
}
ROUTER_CONF = {
    "elastorm.key_groups": 1,
    "elastorm.operators": {"counts": ["counts_router"]},
    ROUTER_KEYS: {"words:default": 1},
}


class Tup:
    def __init__(self, stream: str, values: list, component: str = "words", task: int = 7):
        self.stream, self.values, self.component, self.task = stream, values, component, task


def router(monkeypatch, conf: dict) -> tuple[KeyRouter, list]:
    r = KeyRouter(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    sent: list = []
    monkeypatch.setattr(KeyRouter, "send", lambda self, action: sent.append(action.message))
    r.initialize(conf, ROUTER_CONTEXT)
    return r, sent


def test_a_restarted_router_that_cannot_replay_is_not_dropped_as_a_duplicate(monkeypatch) -> None:
    """Before: the restart numbered from 1 under the old name, and every tuple at or
    below the old watermark (10) was dropped by the receiver, silently."""
    receiver = KeyGroupState(0)
    receiver.applied["counts_router:1"] = 10  # the first incarnation's 10 tuples
    fake_start(monkeypatch, incarnation=2)
    r, sent = router(monkeypatch, ROUTER_CONF)
    notices = [m for m in sent if isinstance(m, UpstreamRestarted)]
    assert notices == [UpstreamRestarted(key_group=0, epoch=0)] * 2  # to counts 3 and 4
    sent.clear()
    r.process(Tup("default", [0, "apple"]))
    (data,) = sent
    assert isinstance(data, Data) and data.item.source == "counts_router:1@2"
    assert receiver.admission(data.item) is Admission.APPLY


def test_a_restarted_router_behind_a_replayable_spout_resumes_by_replay(monkeypatch) -> None:
    point = RestartPoint(positions={"words:7": 4}, counters={"counts": {0: 3}})
    fake_start(monkeypatch, incarnation=2, point=point)

    class Writer:
        writes = 0

        def __init__(self, *_):
            pass

        def start(self):
            pass

        def ask(self, ask):  # a restart's rewind asked again (none within the test)
            pass

    monkeypatch.setattr(elastorm.zk.replay, "RestartPointWriter", Writer)
    monkeypatch.setattr(elastorm.zk.replay, "RewindAsker", Writer)
    conf = {**ROUTER_CONF, "elastorm.replay_sources": {"counts_router": ["words"]}}
    r, sent = router(monkeypatch, conf)
    sent.clear()  # the restart's notices (UpstreamRestarted)
    r.process(Tup("default", [9, "late"]))  # sent before the rewind: not admitted
    assert sent == []
    r.process(Tup(REWIND_STREAM, [["1#2"], []]))  # the spout's marker for this restart
    for position in range(3, 7):
        r.process(Tup("default", [position, f"w{position}"]))
    # positions up to 4 were processed before the crash; the same name goes on from 3
    assert [(d.item.source, d.item.seq, d.item.key) for d in sent] == [
        ("counts_router:1", 4, "w5"),
        ("counts_router:1", 5, "w6"),
    ]


# -- ready sources ---------------------------------------------------------------------


class Capture:
    """Starts a ready source as Storm would (no replay wiring) and records its emits."""

    @staticmethod
    def start(cls, conf: dict | None = None):
        spout = cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
        spout.emitted = []
        spout.emit = lambda values, stream=None, **_: spout.emitted.append(list(values))
        spout.initialize(conf or {}, {"componentid": "src", "taskid": 1, "task->component": {}})
        return spout


def drain(spout) -> list[list]:
    out = []
    while (item := spout.read()) is not None:
        position, values = item
        out.append([position, *values])
    return out


def test_pack_and_unpack_keep_the_order_of_file_then_offset() -> None:
    assert unpack(pack(2, 5)) == (2, 5)
    assert pack(0, 2**40 - 1) < pack(1, 0) < pack(1, 1)
    with pytest.raises(ValueError):
        pack(0, 2**40)


def test_generated_spout_replays_the_same_tuples_from_any_position() -> None:
    spout = Capture.start(Words)
    spout.batch = 7
    spout.next_tuple()
    assert spout.emitted == [[i, f"w{i % 5}"] for i in range(7)]
    everything = drain(spout)
    assert [p for p, _ in everything] == list(range(7, 20))
    spout.seek(12)
    assert drain(spout) == everything[5:]
    assert Words.outputs[0].fields == ["position", "word"]


class Lines(LinesSpout):
    fields = ["word", "n"]
    path_option = "test.input"

    def values(self, line):
        word, n = line.split()
        return [word, int(n)] if word != "skip" else None


def test_lines_spout_reads_a_directory_in_name_order_and_replays_from_any_line(tmp_path) -> None:
    (tmp_path / "b.txt").write_text("c 3\nskip 0\nd 4\n")
    (tmp_path / "a.txt").write_text("a 1\nb 2\n")
    spout = Capture.start(Lines, {"test.input": str(tmp_path)})
    rows = drain(spout)
    assert [r[1:] for r in rows] == [["a", 1], ["b", 2], ["c", 3], ["d", 4]]
    assert [unpack(r[0]) for r in rows] == [(0, 0), (0, 4), (1, 0), (1, 11)]
    for i, row in enumerate(rows):  # replay_start asks from just after a position
        spout.seek(row[0] + 1)
        assert drain(spout) == rows[i + 1 :]
        spout.seek(row[0])
        assert drain(spout) == rows[i:]


def test_lines_spout_waits_for_a_whole_line_and_takes_new_files_in_order(tmp_path) -> None:
    (tmp_path / "1.txt").write_text("a 1\nb ")
    spout = Capture.start(Lines, {"test.input": str(tmp_path)})
    assert drain(spout) == [[0, "a", 1]]  # "b " has no newline yet
    with open(tmp_path / "1.txt", "a") as f:
        f.write("2\n")
    assert drain(spout) == [[4, "b", 2]]
    (tmp_path / "0.txt").write_text("z 9\n")  # sorts before a file already read: refused
    (tmp_path / "2.txt").write_text("c 3")  # sorts last; its last line has no newline
    assert drain(spout) == []
    (tmp_path / "3.txt").write_text("d 4\n")  # a later file completes 2.txt's last line
    assert drain(spout) == [[pack(1, 0), "c", 3], [pack(2, 0), "d", 4]]


def test_lines_spout_without_a_path_says_how_to_give_one() -> None:
    class Nowhere(LinesSpout):
        pass

    with pytest.raises(ValueError, match="Nowhere: no input; set its path or path_option"):
        Capture.start(Nowhere)
