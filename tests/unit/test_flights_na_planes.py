"""Planes whose every flight has an NA arr_delay: absent from op2/op3 totals, but
counted and named by the sink, the pandas reference, the check and the summary."""

from __future__ import annotations

import json

import pytest
from test_flights_harness import TICK, flight_row, make, run_lines, tup, write_csv

from bolts.flights import ResultsSink
from demos.flights_reference import compute_reference
from demos.flights_results import FlightsResult, compare, format_summary

# N1: two flights, one NA. N2 and N3: only NA flights. N4: one flight with a delay.
LINES = [
    flight_row(tailnum="N1", arr_delay="5"),
    flight_row(tailnum="N1", arr_delay="NA", air_time="NA"),
    flight_row(tailnum="N2", arr_delay="NA", air_time="NA"),
    flight_row(tailnum="N3", arr_delay="NA", air_time="NA"),
    flight_row(tailnum="N3", arr_delay="NA", air_time="NA", year="2012"),
    flight_row(tailnum="N4", arr_delay="-3"),
    flight_row(tailnum="NA", arr_delay="NA"),  # malformed (no tailnum), not a plane
]


def test_reference_names_the_planes_with_only_na_delays(tmp_path) -> None:
    ref = compute_reference(write_csv(tmp_path / "f.csv", LINES))
    assert ref.na_arr_delay == 4
    assert ref.na_only_planes == ("N2", "N3")
    assert {k for k, _ in ref.delay} == {"N1", "N4"}
    assert ref.summary()["na_only_planes"] == ["N2", "N3"]


@pytest.fixture
def conf(tmp_path):
    return {"elastorm.output_dir": str(tmp_path)}


def test_sink_counts_na_rows_per_plane(conf, tmp_path) -> None:
    sink = make(ResultsSink, conf, task=1)
    for i, plane in enumerate(["N2", "N3", "N3"]):
        sink.process(tup([i, "op1", "na_arr_delay", plane], stream="errors"))
    sink.process(tup([9, "spout", "missing_tailnum", "row 9"], stream="errors"))
    sink.process_tick(TICK)
    data = json.loads((tmp_path / "sink-1.json").read_text())
    assert data["na_arr_delay_by_plane"] == {"N2": 1, "N3": 2}


def test_pipeline_reports_and_checks_them(tmp_path) -> None:
    _, result, reference = run_lines(tmp_path, LINES)
    assert result.na_arr_delay_by_plane() == {"N1": 1, "N2": 1, "N3": 2}
    assert result.na_only_planes() == ["N2", "N3"]
    report = compare(result, reference)
    assert report.ok, format_summary(result, report)
    check = next(c for c in report.checks if c.name.startswith("planes whose every flight"))
    assert check.ok is True and check.detail == "got 2 (N2, N3), expected 2"
    summary = format_summary(result, report)
    assert (
        "NA arr_delay: 4 rows of 3 planes, left out of op2-op4; 2 planes had only such "
        "flights, so they have no op2/op3 totals: N2, N3"
    ) in summary


def _result(na_by_plane: dict[str, int] | None) -> FlightsResult:
    """A hand-made result: op2 totals for N1 only, NA rows as given."""
    sink = {"totals": {"op2": {"N1": {"2013": [5, 1]}}}, "errors": {"op1": {"na_arr_delay": 3}}}
    if na_by_plane is not None:
        sink["na_arr_delay_by_plane"] = na_by_plane
    return FlightsResult(output_dir="out", sinks=[sink])


def test_a_missing_plane_fails_the_check(tmp_path) -> None:
    reference = compute_reference(write_csv(tmp_path / "f.csv", LINES))
    report = compare(_result({"N1": 1, "N2": 2}), reference)  # N3 lost on the way
    check = next(c for c in report.checks if c.name.startswith("planes whose every flight"))
    assert check.ok is False and check.detail == "got 1 (N2), expected 2"


def test_output_without_per_plane_counts_is_not_judged(tmp_path) -> None:
    reference = compute_reference(write_csv(tmp_path / "f.csv", LINES))
    result = _result(None)
    assert result.na_only_planes() is None
    check = next(
        c for c in compare(result, reference).checks if c.name.startswith("planes whose every")
    )
    assert check.ok is None
    assert "NA arr_delay:" not in format_summary(result)
