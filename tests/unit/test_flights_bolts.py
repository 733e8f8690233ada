"""The flights operators and sink, with fake tuples, a fake clock and captured emits."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from test_flights_harness import TICK, FakeClock, drain, make, tup

from bolts.flights import (
    AirShare,
    ExtractDelays,
    ResultsSink,
    SampledDelayShare,
    SumDelays,
)


@pytest.fixture
def conf(tmp_path):
    return {"elastorm.output_dir": str(tmp_path)}


def row(i, key="N1", arr_delay=10, air_time=100, year=2013):
    return [i, key, [year, arr_delay, air_time], 1357034400 + i]


# -- op1 ExtractDelays --------------------------------------------------------


def test_op1_forwards_valid_and_reports_na_delay(conf):
    op1 = make(ExtractDelays, conf, clock=FakeClock())
    op1.process(tup(row(0)))
    op1.process(tup(row(1, key="N9", arr_delay=None)))
    out = drain(op1)
    assert out == [("default", row(0)), ("errors", [1, "op1", "na_arr_delay", "N9"])]
    assert op1.counters.errors == {"na_arr_delay": 1}
    assert op1.counters.out == {"default": 1, "sample": 0, "errors": 1}


def test_op1_bad_tuple_goes_to_errors_without_crashing(conf):
    op1 = make(ExtractDelays, conf, clock=FakeClock())
    op1.process(tup([5, "N1", None, 0]))
    op1.process(tup([]))
    out = drain(op1)
    assert [(s, v[0], v[2]) for s, v in out] == [
        ("errors", 5, "bad_tuple"),
        ("errors", None, "bad_tuple"),
    ]
    assert op1.counters.tuples_in == 2 and op1.counters.errors == {"bad_tuple": 2}


def test_op1_samples_at_most_once_per_interval_from_recent_tuples(conf):
    clock = FakeClock()
    op1 = make(ExtractDelays, conf, clock=clock)
    sampled = []
    for i in range(1000):
        op1.process(tup(row(i)))
        sampled += [v[0] for s, v in drain(op1) if s == "sample"]
        clock.advance(0.01)  # 10 ms per tuple: a sample every 20 tuples
    assert 45 <= len(sampled) <= 50
    # each sample comes from the tuples since the previous sample
    bounds = [0, *sampled]
    assert all(b > a for a, b in zip(bounds, bounds[1:], strict=False))
    assert all(b - a <= 40 for a, b in zip(bounds, bounds[1:], strict=False))
    # and is random within them, not always the newest
    gaps = [b % 20 for b in sampled]
    assert len(set(gaps)) > 5


def test_op1_sampling_is_seeded(conf):
    def run(seed, task):
        clock = FakeClock()
        op1 = make(
            ExtractDelays, {**conf, "elastorm.flights.sample_seed": seed}, task=task, clock=clock
        )
        for i in range(400):
            op1.process(tup(row(i)))
            clock.advance(0.01)
        return [v[0] for s, v in drain(op1) if s == "sample"]

    assert run(1, 1) == run(1, 1)
    assert run(1, 1) != run(2, 1)
    assert run(1, 1) != run(1, 2)


def test_op1_tick_sends_a_pending_sample_after_input_stops(conf, tmp_path):
    clock = FakeClock()
    op1 = make(ExtractDelays, conf, clock=clock)
    op1.process(tup(row(0)))
    op1.process_tick(TICK)
    assert [s for s, _ in drain(op1)] == ["default"]
    counts = json.loads((tmp_path / "counts" / "op1-1.json").read_text())
    assert counts["extra"]["pending_sample"] is True
    clock.advance(0.2)
    op1.process_tick(TICK)
    assert drain(op1) == [("sample", row(0))]
    counts = json.loads((tmp_path / "counts" / "op1-1.json").read_text())
    assert counts["extra"]["pending_sample"] is False
    assert counts["out"]["sample"] == 1 and counts["tuples_in"] == 1


# -- op2/op3/op4 ------------------------------------------------------------


def test_op2_sums_per_plane_year_and_batches_updates(conf):
    op2 = make(SumDelays, {**conf, "elastorm.flights.flush_every": "3"})
    op2.process(tup(row(0, "N1", 10)))
    op2.process(tup(row(1, "N1", -4)))
    assert drain(op2) == []
    op2.process(tup(row(2, "N2", 7, year=2014)))
    (stream, (role, seen, updates, ids, tentative)), *rest = drain(op2)
    assert (stream, role, seen, ids, tentative, rest) == ("default", "op2", 3, [], [], [])
    assert sorted(updates) == [["N1", 2013, 6, 2], ["N2", 2014, 7, 1]]
    op2.process(tup(row(3, "N2", 1, year=2014)))
    op2.process_tick(TICK)
    assert drain(op2) == [("default", ["op2", 4, [["N2", 2014, 8, 2]], [], []])]
    op2.process_tick(TICK)  # nothing new: no empty update
    assert drain(op2) == []


def test_op3_counts_na_air_time_and_sums_minutes(conf):
    op3 = make(AirShare, conf)
    op3.process(tup(row(0, "N1", air_time=100)))
    op3.process(tup(row(1, "N1", air_time=None)))
    op3.process(tup(row(2, "N1", air_time=50)))
    op3.process(tup(row(3, "N2", air_time=None)))
    op3.process_tick(TICK)
    [(_, (_, seen, updates, _, _))] = drain(op3)
    assert seen == 4
    assert sorted(updates) == [["N1", 2013, 150, 2, 1], ["N2", 2013, 0, 0, 1]]


def test_op3_garbage_air_time_is_an_error_not_a_phantom_plane(conf):
    op3 = make(AirShare, conf)
    op3.process(tup(row(0, "N7", air_time="lots")))
    op3.process_tick(TICK)
    out = drain(op3)
    assert out[0][0] == "errors" and out[0][1][2] == "bad_tuple"
    assert out[1] == ("default", ["op3", 1, [], [], []])  # seen advances, no totals
    assert op3.totals == {}


def test_op2_garbage_delay_is_an_error(conf):
    op2 = make(SumDelays, conf)
    op2.process(tup(row(0, "N1", arr_delay=None)))
    op2.process(tup(row(1, "N1", arr_delay=5)))
    op2.process(tup(row(2, "N1", arr_delay="x")))
    assert op2.totals == {("N1", 2013): [5, 1]}
    assert op2.counters.errors == {"bad_tuple": 2}


def test_op4_counts_delayed_samples_and_sends_ids(conf):
    op4 = make(SampledDelayShare, conf)
    op4.process(tup(row(10, arr_delay=5), stream="sample"))
    op4.process(tup(row(11, arr_delay=0), stream="sample"))
    op4.process(tup(row(12, arr_delay=-3), stream="sample"))
    out = [v for _, v in drain(op4)]
    assert out == [
        ["op4", 1, [["*", 2013, 1, 1]], [10], []],
        ["op4", 2, [["*", 2013, 2, 1]], [11], []],
        ["op4", 3, [["*", 2013, 3, 1]], [12], []],
    ]


# -- sink -------------------------------------------------------------------


def test_sink_keeps_latest_totals_errors_and_writes_atomically(conf, tmp_path):
    sink = make(ResultsSink, {**conf, "elastorm.sink.write_every": "1000"}, task=9)
    sink.process(tup(["op2", 2, [["N1", 2013, 6, 2]], [], []], component="sum_delays", task=3))
    sink.process(tup(["op2", 5, [["N1", 2013, 9, 5], ["N2", 2013, 1, 1]], [], []], task=3))
    sink.process(tup(["op2", 4, [["N1", 2013, 8, 4]], [], []], task=3))  # stale: skipped
    sink.process(tup(["op2", 1, [["N3", 2013, 2, 1]], [], []], task=4))
    sink.process(tup(["op4", 1, [["*", 2013, 1, 0]], [77], []], task=5))
    for i in range(7):
        sink.process(tup([i, "spout", "missing_tailnum", f"row {i}"], stream="errors"))
    sink.process(tup(["only", "two"]))  # bad input: counted, not fatal
    path = tmp_path / "sink-9.json"
    assert json.loads(path.read_text())["tuples_in"] == 0  # written at start only
    sink.process_tick(TICK)
    data = json.loads(path.read_text())
    assert data["totals"]["op2"] == {
        "N1": {"2013": [9, 5]},
        "N2": {"2013": [1, 1]},
        "N3": {"2013": [2, 1]},
    }
    assert data["seen"] == {"op2": {"3": 5, "4": 1}, "op4": {"5": 1}}
    assert data["sample_ids"] == [77]
    assert data["errors"] == {"spout": {"missing_tailnum": 7}}
    assert len(data["error_examples"]["spout"]["missing_tailnum"]) == 5
    assert sink.counters.errors == {"stale_update": 1, "bad_tuple": 1}
    assert not list(tmp_path.glob("*.tmp-*"))


def test_sink_writes_every_n_tuples(conf, tmp_path):
    sink = make(ResultsSink, {**conf, "elastorm.sink.write_every": "2"})
    sink.process(tup(["op2", 1, [["N1", 2013, 1, 1]], [], []]))
    sink.process(tup(["op2", 2, [["N1", 2013, 2, 2]], [], []]))
    data = json.loads((tmp_path / "sink-1.json").read_text())
    assert data["totals"]["op2"]["N1"]["2013"] == [2, 2]


def test_sink_shows_which_totals_are_tentative_until_a_final_update_wins(conf, tmp_path):
    sink = make(ResultsSink, {**conf, "elastorm.sink.write_every": "1"})
    sink.process(tup(["op2", 1, [["N1", 2013, 5, 2], ["N2", 2013, 2, 1]], [], ["N1"]], task=3))
    sink.process(tup(["op2", 2, [["N1", 2013, 4, 1]], [], []], task=4))  # fewer flights: loses
    data = json.loads((tmp_path / "sink-1.json").read_text())
    assert data["tentative"] == {"op2": ["N1"]} and data["tentative_updates"] == {"op2": 1}
    sink.process(tup(["op2", 3, [["N1", 2013, 5, 2]], [], []], task=3))  # the rectified total
    data = json.loads((tmp_path / "sink-1.json").read_text())
    assert data["tentative"] == {} and data["totals"]["op2"]["N1"]["2013"] == [5, 2]
    assert data["tentative_updates"] == {"op2": 1}
    # A late tentative update from a dead restore target, with the same flights: the
    # total it carries is the one held (same tuples), and it stays final.
    sink.process(tup(["op2", 9, [["N1", 2013, 5, 2]], [], ["N1"]], task=5))
    data = json.loads((tmp_path / "sink-1.json").read_text())
    assert data["tentative"] == {} and data["tentative_updates"] == {"op2": 2}


def test_counts_file_written_on_tick_not_per_tuple(conf, tmp_path):
    op2 = make(SumDelays, conf)
    path = tmp_path / "counts" / "op2-1.json"
    for i in range(10):
        op2.process(tup(row(i)))
    assert json.loads(path.read_text())["tuples_in"] == 0
    op2.process_tick(TICK)
    counts = json.loads(path.read_text())
    assert (counts["role"], counts["component"], counts["task"]) == ("op2", "op2", 1)
    assert counts["tuples_in"] == 10 and counts["out"] == {"default": 1, "errors": 0}


def test_bolt_speaks_multilang(conf):
    """A tuple and a tick through pystorm's JSON protocol: emit, ack, ack."""
    messages_in = [
        {"id": "a", "comp": "extract_delays", "stream": "default", "task": 4, "tuple": row(0)},
        {"id": "b", "comp": "__system", "stream": "__tick", "task": -1, "tuple": [1]},
    ]
    stdin = io.BytesIO("".join(json.dumps(m) + "\nend\n" for m in messages_in).encode())
    stdout = io.BytesIO()
    op2 = SumDelays(input_stream=stdin, output_stream=stdout, rdb_signal=None)
    op2.initialize(conf, {"taskid": 6, "componentid": "sum_delays"})
    op2._run()
    op2._run()
    op2.serializer.output_stream.flush()
    out = [json.loads(m) for m in stdout.getvalue().decode().split("\nend\n") if m]
    assert out == [
        {"command": "ack", "id": "a"},
        {
            "command": "emit",
            "tuple": ["op2", 1, [["N1", 2013, 10, 1]], [], []],
            "anchors": [],
            "need_task_ids": False,
        },
        {"command": "ack", "id": "b"},
    ]


def test_sink_records_when_each_sender_incarnation_delivered_and_what_it_replaced(
    conf, tmp_path, monkeypatch
):
    """The chaos harness's network cut counts a cut-off owner's late outputs from this."""
    from bolts import flights
    from bolts.flights import SEEN_PER_INCARNATION

    now = [0.0]
    monkeypatch.setattr(flights, "time", SimpleNamespace(time=lambda: now[0]))
    sink = make(ResultsSink, {**conf, "elastorm.sink.write_every": "1000"}, task=9)
    first, restarted = SEEN_PER_INCARNATION + 5, 2 * SEEN_PER_INCARNATION + 1
    for at, values, task in [
        (100.2, ["op2", first, [["N1", 2013, 9, 5], ["N2", 2013, 1, 1]], [], []], 3),
        (100.9, ["op2", first - 1, [["N1", 2013, 8, 4]], [], []], 3),  # stale
        (101.5, ["op2", 7, [["N1", 2013, 8, 4], ["N3", 2013, 2, 1]], [], []], 4),
        (130.0, ["op2", restarted, [["N1", 2013, 9, 5]], [], []], 3),
    ]:
        now[0] = at
        sink.process(tup(values, task=task))
    sink.write()
    data = json.loads((tmp_path / "sink-9.json").read_text())
    # [updates, totals replaced]: the stale update arrived but replaced nothing; task 4's
    # N1 total has fewer flights than the one held (op2 keeps the larger), only N3 counts.
    assert data["arrivals"] == {
        "op2": {"3.1": {"100": [2, 2]}, "4.0": {"101": [1, 1]}, "3.2": {"130": [1, 1]}}
    }
