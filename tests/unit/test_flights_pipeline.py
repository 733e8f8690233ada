"""End to end in one process: spout -> op1 -> op2/op3/op4 -> sink, checked with pandas."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

from test_flights_harness import Pipeline, flight_row, run_lines

from demos.flights_reference import compute_reference
from demos.flights_results import compare, completeness, format_summary, read_results

ROOT = Path(__file__).resolve().parents[2]


def test_real_rows_match_pandas_exactly(tmp_path):
    limit = 3000
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.limit": str(limit),
        "elastorm.flights.batch": 20,
    }
    pipe = Pipeline(conf, parallelism=2, seconds_per_batch=0.1).run()
    result = read_results(str(tmp_path))
    assert completeness(result) == []
    reference = compute_reference(limit=limit)
    report = compare(result, reference)
    assert report.ok, format_summary(result, report)
    # the checks were judged, not skipped: real malformed rows and samples were seen
    assert reference.malformed == {"missing_tailnum": 4}
    assert result.sink_errors("spout") == {"missing_tailnum": 4}
    assert result.sink_errors("op1") == {"na_arr_delay": reference.na_arr_delay} != {}
    assert all(c.ok is True for c in report.checks), format_summary(result, report)
    # both op1 tasks sampled (each task at most one sample per 200 ms of the fake clock)
    assert all(t.counters.out["sample"] > 0 for t in pipe.op1)
    summary = format_summary(result, report)
    assert "check against pandas: PASS" in summary
    assert "SumDelays" in summary


def test_malformed_file_is_counted_reported_and_matches_pandas(tmp_path):
    lines = [
        flight_row(tailnum="N1", arr_delay="5", air_time="100"),
        flight_row(tailnum="NA"),
        flight_row(tailnum=""),
        flight_row(tailnum="N1", arr_delay="abc"),
        flight_row(tailnum="N2", arr_delay="NA", air_time="NA"),
        flight_row(tailnum="N2", arr_delay="-3", air_time="NA"),
        flight_row(tailnum="N2", air_time="1.5"),
        flight_row(tailnum="N3", year="x"),
        flight_row(tailnum="N3", time_hour="yesterday"),
        "2013,1,1,517",
        flight_row(tailnum="N3", arr_delay="7", air_time="50", year="2012"),
        flight_row(tailnum="N1", arr_delay="0", air_time="20"),
    ]
    out, result, reference = run_lines(tmp_path, lines)
    assert completeness(result) == []
    assert reference.malformed == {
        "missing_tailnum": 2,
        "bad_arr_delay": 1,
        "bad_air_time": 1,
        "bad_year": 1,
        "bad_time_hour": 1,
        "bad_row_length": 1,
    }
    report = compare(result, reference)
    assert report.ok, format_summary(result, report)
    assert result.totals("op2") == {
        ("N1", 2013): (5, 2),
        ("N2", 2013): (-3, 1),
        ("N3", 2012): (7, 1),
    }
    assert result.totals("op3")[("N2", 2013)] == (0, 0, 1)
    examples = json.loads(next(out.glob("sink-*.json")).read_text())
    assert examples["error_examples"]["spout"]["bad_time_hour"][0][0] == 8


def test_topology_converts_to_flux_and_thrift():
    script = (
        "import io, json\n"
        "from flights import FlightsTopology as T\n"
        "flux = T.to_flux_dict('flights')\n"
        "buf = io.BytesIO(); T.write(buf)\n"
        "print(json.dumps({'flux': flux, 'thrift_bytes': len(buf.getvalue()),"
        " 'specs': [s.name for s in T.specs]}))\n"
    )
    env = {"PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'topologies'}", "ELASTORM_PARALLELISM": "3"}
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    data = json.load(io.StringIO(out.stdout))
    flux = data["flux"]
    assert data["thrift_bytes"] > 0
    par = {c["id"]: c["parallelism"] for c in flux["bolts"] + flux["spouts"]}
    assert par == {
        "flights_spout": 1,
        "extract_delays": 3,
        "sum_delays": 3,
        "air_share": 3,
        "sampled_delay_share": 1,
        "results_sink": 1,
    }
    streams = {
        (s["from"], s["to"], s["grouping"]["streamId"]): s["grouping"] for s in flux["streams"]
    }
    assert streams["extract_delays", "sum_delays", "default"] == {
        "streamId": "default",
        "type": "FIELDS",
        "args": ["key"],
    }
    assert streams["extract_delays", "sampled_delay_share", "sample"]["type"] == "GLOBAL"
    errors_into_sink = {src for src, dst, stream in streams if stream == "errors"}
    assert errors_into_sink == set(par) - {"results_sink"}
    spout = next(s for s in flux["spouts"] if s["id"] == "flights_spout")
    assert {"name": "setNamedStream", "args": ["errors", ["id", "role", "reason", "detail"]]} in (
        spout["configMethods"]
    )


def test_seeded_garbage_rows_agree_with_pandas(tmp_path):
    """Spout rules and the pandas reference agree on odd but plausible field values."""
    rng = random.Random(2013)
    numbers = ["12", " 12", "-0", "+7", "1_000", "1.5", "NA", "", "nan", "NULL", "\u0663", "x"]
    tails = ["N1", "N2", "NA", "", " ", "nan", '"N,3"', "\u00d14"]
    times = ["2013-01-01T10:00:00Z", "", "2013-06-01T10:00:00+05:00", "2013-01-01", "bad"]
    lines = []
    for _ in range(400):
        if rng.random() < 0.03:
            lines.append(",".join(["2013"] * rng.choice([3, 20])))
            continue
        lines.append(
            flight_row(
                tailnum=rng.choice(tails),
                arr_delay=rng.choice(numbers[:3] * 4 + numbers),
                air_time=rng.choice(numbers[:3] * 4 + numbers),
                year=rng.choice(["2013", "2013", "2012", "NA", " 2014"]),
                time_hour=rng.choice(times[:1] * 6 + times),
            )
        )
    _, result, reference = run_lines(tmp_path, lines)
    assert completeness(result) == []
    assert len(reference.malformed) >= 5 and reference.forwarded > 50
    report = compare(result, reference)
    assert report.ok, format_summary(result, report)
