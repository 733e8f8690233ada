"""FlightsSpout and its row rules, by direct calls and through pystorm's multilang loop."""

from __future__ import annotations

import io
import json

import pytest
from test_flights_harness import FakeClock, flight_row, make, write_csv

from demos.flights_schema import FlightsConfigError, column_index, parse_row
from elastorm.config import ConfigError
from spouts.flights import FlightsSpout
from spouts.flights_join import SplitFlightsSpout

HEADER = ["year", "arr_delay", "air_time", "tailnum", "time_hour"]
INDEX = column_index(HEADER)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (["2013", "11", "227", "N14228", "2013-01-01T10:00:00Z"], (None, 1357034400)),
        (["2013", "NA", "NA", "N1", "2013-01-01T10:00:00Z"], (None, None)),
        (["2013", "", "", "N1", "2013-01-01T10:00:00Z"], (None, None)),
        (["2013", "1", "2", "NA", "2013-01-01T10:00:00Z"], ("missing_tailnum", None)),
        (["2013", "1", "2", "", "2013-01-01T10:00:00Z"], ("missing_tailnum", None)),
        (["NA", "1", "2", "N1", "2013-01-01T10:00:00Z"], ("bad_year", None)),
        (["2013", "1.0", "2", "N1", "2013-01-01T10:00:00Z"], ("bad_arr_delay", None)),
        (["2013", "1", "x", "N1", "2013-01-01T10:00:00Z"], ("bad_air_time", None)),
        (["2013", "1", "2", "N1", "2013-01-01 10h"], ("bad_time_hour", None)),
        (["2013", "1", "2", "N1", "2013-01-01T10:00:00"], ("bad_time_hour", None)),
        (["2013", "1", "2", "N1"], ("bad_row_length", None)),
        (["2013", "x", "y", "NA", "z", "extra"], ("bad_row_length", None)),
    ],
)
def test_parse_row_reasons_in_order(row, expected):
    reason, parsed = parse_row(row, INDEX, len(HEADER))
    assert reason == expected[0]
    if reason is None:
        tailnum, year, arr_delay, air_time, ts = parsed
        assert year == 2013 and tailnum.startswith("N")
        if expected[1] is None:
            assert arr_delay is None and air_time is None
        else:
            assert (arr_delay, air_time, ts) == (11, 227, expected[1])
    else:
        assert parsed is None


def test_column_index_names_missing_columns():
    with pytest.raises(FlightsConfigError, match="air_time"):
        column_index(["year", "arr_delay", "tailnum", "time_hour"])


def test_missing_output_dir_is_a_clear_error():
    with pytest.raises(ConfigError, match="elastorm.output_dir is not set"):
        make(FlightsSpout, {})


def test_missing_file_is_a_clear_error(tmp_path):
    conf = {"elastorm.output_dir": str(tmp_path), "elastorm.flights.path": str(tmp_path / "no")}
    with pytest.raises(FlightsConfigError, match="flights file not found"):
        make(FlightsSpout, conf)


def test_bad_limit_is_a_clear_error(tmp_path):
    conf = {"elastorm.output_dir": str(tmp_path), "elastorm.flights.limit": "ten"}
    with pytest.raises(ConfigError, match="elastorm.flights.limit = 'ten': expected an integer"):
        make(FlightsSpout, conf)


def test_streams_real_file_in_order_with_limit(tmp_path):
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.limit": "250",
        "elastorm.flights.batch": "100",
    }
    spout = make(FlightsSpout, conf, task=7)
    spout.next_tuple()
    spout.next_tuple()
    assert not spout.exhausted
    spout.next_tuple()  # rows 200-249, then the limit
    assert spout.exhausted
    emitted = [v for s, v in spout.emitted if s == "default"]
    assert len(emitted) == 250  # the first 250 rows have a tailnum
    assert emitted[0] == [0, "N14228", [2013, 11, 227], 1357034400]
    assert [v[0] for v in emitted] == list(range(250))
    stats = json.loads((tmp_path / "spout-7.json").read_text())
    assert stats["exhausted"] is True
    assert (stats["rows_read"], stats["emitted"], stats["malformed"]) == (250, 250, 0)
    assert stats["started_at"] <= stats["exhausted_at"] <= stats["written_at"]
    counts = json.loads((tmp_path / "counts" / "spout-7.json").read_text())
    assert counts["tuples_in"] == 250 and counts["out"] == {"default": 250, "errors": 0}


def test_malformed_rows_are_reported_on_errors_not_emitted(tmp_path):
    lines = [
        flight_row(tailnum="N1"),
        flight_row(tailnum="NA"),
        "",
        flight_row(tailnum="N2", arr_delay="late"),
        "2013,1",
        flight_row(tailnum="N3", arr_delay="NA"),
    ]
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", lines),
    }
    spout = make(FlightsSpout, conf)
    spout.next_tuple()
    assert spout.exhausted
    default = [v for s, v in spout.emitted if s == "default"]
    errors = [v for s, v in spout.emitted if s == "errors"]
    assert [v[1] for v in default] == ["N1", "N3"]
    assert default[1][2] == [2013, None, 227]  # NA arr_delay is op1's business
    assert [(v[0], v[1], v[2]) for v in errors] == [
        (1, "spout", "missing_tailnum"),
        (2, "spout", "bad_arr_delay"),
        (3, "spout", "bad_row_length"),
    ]
    assert errors[2][3] == "2013,1"
    stats = spout.stats()
    assert stats["malformed_by_reason"] == {
        "missing_tailnum": 1,
        "bad_arr_delay": 1,
        "bad_row_length": 1,
    }
    assert (stats["rows_read"], stats["blank_lines"], stats["emitted"]) == (5, 1, 2)


def test_exhausted_spout_idles_politely(tmp_path):
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", [flight_row()]),
        "elastorm.flights.idle_sleep_ms": "20",
    }
    spout = make(FlightsSpout, conf)
    slept = []
    spout.sleep = slept.append
    spout.next_tuple()
    spout.next_tuple()
    spout.next_tuple()
    assert len(spout.emitted) == 1
    assert slept == [0.02, 0.02]


def test_stats_written_periodically_not_per_row(tmp_path):
    clock = FakeClock()
    lines = [flight_row(tailnum=f"N{i}") for i in range(30)]
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", lines),
        "elastorm.flights.batch": "10",
    }
    spout = make(FlightsSpout, conf, clock=clock)
    stats_file = tmp_path / "spout-1.json"
    spout.next_tuple()
    assert json.loads(stats_file.read_text())["rows_read"] == 0  # interval not yet passed
    clock.advance(1.5)
    spout.next_tuple()
    assert json.loads(stats_file.read_text())["rows_read"] == 20


def test_spout_speaks_multilang(tmp_path):
    """One ``next`` command through pystorm's JSON protocol gives emits then sync."""
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(
            tmp_path / "f.csv", [flight_row(tailnum="N1", arr_delay="NA"), flight_row(tailnum="")]
        ),
    }
    stdin = io.BytesIO(b'{"command": "next"}\nend\n')
    stdout = io.BytesIO()
    spout = FlightsSpout(input_stream=stdin, output_stream=stdout, rdb_signal=None)
    spout.initialize(conf, {"taskid": 3, "componentid": "flights_spout"})
    spout._run()
    spout.serializer.output_stream.flush()
    messages = [json.loads(m) for m in stdout.getvalue().decode().split("\nend\n") if m]
    assert messages[0] == {
        "command": "emit",
        "tuple": [0, "N1", [2013, None, 227], 1357034400],
        "need_task_ids": False,
    }
    assert messages[1]["stream"] == "errors"
    assert messages[1]["tuple"][:3] == [1, "spout", "missing_tailnum"]
    assert messages[-1] == {"command": "sync"}


def test_max_rate_paces_the_spout(tmp_path):
    path = write_csv(tmp_path / "f.csv", [flight_row(tailnum=f"N{i}") for i in range(500)])
    clock = FakeClock()
    spout = make(
        FlightsSpout,
        {
            "elastorm.output_dir": str(tmp_path),
            "elastorm.flights.path": path,
            "elastorm.flights.max_rate": "100",
            "elastorm.flights.batch": 10,
        },
        clock=clock,
    )
    spout.sleep = lambda seconds: None
    for _ in range(50):  # one second of calls, 20 ms apart
        spout.next_tuple()
        clock.advance(0.02)
    # 100 rows/s for 1 s, give or take the batch that crossed the limit
    assert 100 <= spout.row_no <= 110


def test_a_rewind_sends_rows_again_but_counts_each_once(tmp_path):
    lines = [
        flight_row(tailnum="N1"),
        flight_row(tailnum="NA"),
        "",
        flight_row(tailnum="N2"),
        flight_row(tailnum="N3"),
    ]
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", lines),
    }
    spout = make(FlightsSpout, conf)
    spout.next_tuple()
    before = spout.stats()
    asked = [1]
    spout.poll_rewind = lambda position: asked.pop() if asked else None  # a restarted op1
    spout.emitted.clear()
    spout.next_tuple()
    again = [(s, v[0]) for s, v in spout.emitted]
    assert again == [("errors", 1), ("default", 2), ("default", 3)]  # from row 1 on, in order
    after = spout.stats()
    for key in ("rows_read", "emitted", "malformed", "blank_lines"):
        assert after[key] == before[key], key
    assert spout.counters.errors == {"missing_tailnum": 1}


def test_a_restarted_spout_counts_the_rows_before_its_start(tmp_path):
    lines = [flight_row(tailnum="N1"), flight_row(tailnum="NA"), "", flight_row(tailnum="N2")]
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", lines),
    }
    whole = make(FlightsSpout, conf)
    whole.next_tuple()
    resumed = make(FlightsSpout, conf)
    resumed._seek(2)  # where the emitters' restart points say it must start
    resumed.next_tuple()
    assert [v[0] for s, v in resumed.emitted if s == "default"] == [2]
    for key in ("rows_read", "emitted", "malformed", "malformed_by_reason", "blank_lines"):
        assert resumed.stats()[key] == whole.stats()[key], key


def test_the_join_spout_sends_each_side_at_its_own_position_and_rewinds_to_a_side(tmp_path):
    """Positions 2 * row (arrival) and 2 * row + 1 (air time) grow with every tuple, as a
    replay into the router needs; a rewind to an air time's position starts again at its
    row (the arrival there goes out again, and the router drops it)."""
    lines = [
        flight_row(tailnum="N1", arr_delay="4", air_time="100"),
        flight_row(tailnum="N2", arr_delay="NA", air_time="90"),
        flight_row(tailnum="N3", arr_delay="-2", air_time="NA"),
    ]
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", lines),
    }
    spout = make(SplitFlightsSpout, conf)
    spout.next_tuple()
    sent = [(s, v[:4]) for s, v in spout.emitted]
    assert sent == [
        ("arrivals", [0, "N1", 0, 4]),
        ("airtimes", [1, "N1", 0, 100]),
        ("airtimes", [3, "N2", 1, 90]),
        ("arrivals", [4, "N3", 2, -2]),
    ]
    assert spout.stats()["emitted"] == 3  # rows, not sides
    asked = [3]
    spout.poll_rewind = lambda position: asked.pop() if asked else None
    spout.emitted.clear()
    spout.next_tuple()
    assert [v[0] for _, v in spout.emitted] == [3, 4]  # from row 1: position 2 was NA
