"""Spout -> first emitter loss through the real adapters (no Storm, no ZooKeeper):
``LinkedFlightsSpout`` numbers its links and, under fault injection, loses a row;
an emitter (``KeyedEmitting.replay_admit``) sees the skip, asks for a rewind, admits
nothing from the spout until the marker, and then admits the lost row once.
"""

from __future__ import annotations

import io

import pytest
from pystorm.component import Tuple
from test_flights_harness import flight_row, write_csv

import elastorm.zk.replay
from elastorm.storm.elastic import KeyedEmitting
from elastorm.storm.replay import REWIND_STREAM
from elastorm.zk.codec import RewindRequest
from elastorm.zk.replay import EmitterStart
from spouts.flights import LinkedFlightsSpout

SPOUT, OP1, OP2 = "flights_spout", "extract_delays", "sum_delays"
SPOUT_TASK, OP1_TASKS = 9, (5, 6)
NAMES = {SPOUT_TASK: SPOUT, 5: OP1, 6: OP1, 20: OP2, 21: OP2, 2: "controller"}


def context(task: int) -> dict:
    return {
        "taskid": task,
        "componentid": NAMES[task],
        "task->component": {str(t): c for t, c in NAMES.items()},
    }


class Board:
    """Stands in for ``RewindBoard``: the requests under ``rewinds/<spout>``."""

    requests_now: dict = {}

    def __init__(self, *_) -> None:
        pass

    def start(self) -> None:
        pass

    def requests(self) -> dict:
        return dict(Board.requests_now)


class Writer:
    """Stands in for ``RestartPointWriter`` and ``RewindAsker``."""

    asked: list = []
    writes = 0

    def __init__(self, *_) -> None:
        pass

    def start(self) -> None:
        pass

    def offer(self, point) -> None:
        pass

    def ask(self, ask) -> None:
        Writer.asked.append(ask)


class Op1(KeyedEmitting):
    def __init__(self) -> None:
        self.sent = []

    def send(self, action) -> None:
        self.sent.append(action)


@pytest.fixture
def conf(tmp_path, monkeypatch) -> dict:
    Board.requests_now, Writer.asked = {}, []
    monkeypatch.setattr(elastorm.zk.replay, "spout_start", lambda *a: (1, [], set()))
    monkeypatch.setattr(elastorm.zk.replay, "RewindBoard", Board)
    monkeypatch.setattr(elastorm.zk.replay, "RestartPointWriter", Writer)
    monkeypatch.setattr(elastorm.zk.replay, "RewindAsker", Writer)
    monkeypatch.setattr(
        elastorm.zk.replay,
        "emitter_start",
        lambda *a: EmitterStart(incarnation=1, routing={}, point=None),
    )
    return {
        "elastorm.output_dir": str(tmp_path / "out"),
        "elastorm.flights.path": write_csv(
            tmp_path / "f.csv", [flight_row(tailnum=f"N{i}") for i in range(8)]
        ),
        "elastorm.key_groups": 4,
        "elastorm.operators": {OP2: [OP1]},
        "elastorm.replay_sources": {OP1: [SPOUT]},
        "elastorm.replay_links": {SPOUT: OP1},
        "elastorm.chaos.drop_tuples": 1,
        "elastorm.chaos.drop_from": 4,
        "elastorm.chaos.drop_on": "spout",
    }


def spout_of(conf) -> LinkedFlightsSpout:
    spout = LinkedFlightsSpout(
        input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None
    )
    spout.emitted = []
    spout.emit = lambda values, stream=None, **_: spout.emitted.append(
        (stream or "default", list(values))
    )
    spout.initialize(conf, context(SPOUT_TASK))
    return spout


def to_task(spout, task: int) -> list[Tuple]:
    """What the spout emitted that reaches ``task``: its rows (by the task field) and
    every marker (all grouping), in order; then forgotten."""
    out = [
        Tuple(None, SPOUT, stream, SPOUT_TASK, values)
        for stream, values in spout.emitted
        if stream == REWIND_STREAM or stream == "default" and values[-1] == task
    ]
    return out


def test_a_row_lost_to_a_live_emitter_is_asked_for_and_admitted_once(conf) -> None:
    spout = spout_of(conf)
    op1 = {t: Op1() for t in OP1_TASKS}
    for t, e in op1.items():
        e.setup_emitting(conf, context(t))
    spout.next_tuple()
    rows = [v for s, v in spout.emitted if s == "default"]
    # The spout picks each row's task (row id mod 2) and numbers each link; row 3, the
    # 4th emit, is numbered (link 2 of task 6) and lost.
    assert [(v[0], v[-2], v[-1]) for v in rows] == [
        (0, 1, 5), (1, 1, 6), (2, 2, 5), (4, 3, 5), (5, 3, 6), (6, 4, 5), (7, 4, 6),
    ]  # fmt: skip
    admitted = {t: [] for t in OP1_TASKS}

    def deliver(task: int) -> None:
        for tup in to_task(spout, task):
            kept = op1[task].replay_admit(tup)
            if kept is not None:
                assert len(kept.values) == 4  # the link fields are elastorm's
                admitted[task].append(kept.values[0])

    for t in OP1_TASKS:
        deliver(t)
    spout.emitted.clear()
    assert admitted == {5: [0, 2, 4, 6], 6: [1]}  # nothing after the skip
    (ask,) = Writer.asked
    upstream = f"{SPOUT}:{SPOUT_TASK}"
    assert (ask.token, ask.upstream, dict(ask.positions)) == ("6#1.1", upstream, {upstream: 1})
    health = op1[6].emitter_health()
    assert (health["link_lost"], health["link_rewinds"], health["link_waits"]) == (
        1, 1, [f"{SPOUT}:9"],
    )  # fmt: skip

    # The spout finds the request, sends the marker naming it and seeks back to row 2.
    Board.requests_now = {"6": RewindRequest(token=ask.token, positions=ask.positions)}
    spout.next_tuple()
    assert spout.emitted[0] == (REWIND_STREAM, [["6#1.1"], [[5, 4], [6, 4]]])
    for t in OP1_TASKS:
        deliver(t)
    assert admitted == {5: [0, 2, 4, 6], 6: [1, 3, 5, 7]}  # each row once, in order
    assert op1[6].emitter_health()["link_waits"] == [] and len(Writer.asked) == 1
    assert spout.stats()["replay"] == {"rewinds": 1, "rows_rewound": 6, "wire_lost": 1}


def test_a_lost_last_row_is_found_by_the_spouts_probe(conf) -> None:
    conf["elastorm.chaos.drop_from"] = 8  # row 7: nothing comes behind it
    spout = spout_of(conf)
    op1 = Op1()
    op1.setup_emitting(conf, context(6))
    spout.next_tuple()
    for tup in to_task(spout, 6):
        op1.replay_admit(tup)
    spout.emitted.clear()
    assert Writer.asked == []
    spout._probe_at = 0.0  # the probe is due
    spout.next_tuple()
    assert spout.emitted == [(REWIND_STREAM, [[], [[5, 4], [6, 4]]])]
    for tup in to_task(spout, 6):
        assert op1.replay_admit(tup) is None
    (ask,) = Writer.asked
    assert ask.missing == 1 and dict(ask.positions) == {f"{SPOUT}:9": 5}
