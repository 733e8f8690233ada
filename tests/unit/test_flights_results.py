"""Reading, waiting for and checking the flights job's output directory."""

from __future__ import annotations

import json

import pytest
from test_flights_harness import FakeClock, flight_row, run_lines, write_csv

from demos.flights_reference import compute_reference
from demos.flights_results import (
    FlightsResult,
    IncompleteRunError,
    compare,
    completeness,
    format_summary,
    read_results,
    wait_until_complete,
)

LINES = [
    flight_row(tailnum="N1", arr_delay="5", air_time="100"),
    flight_row(tailnum="N2", arr_delay="-1", air_time="50"),
    flight_row(tailnum="NA"),
    flight_row(tailnum="N1", arr_delay="NA", air_time="NA"),
    flight_row(tailnum="N1", arr_delay="2", air_time="30"),
]


@pytest.fixture
def run(tmp_path):
    """A finished in-process run over ``LINES``: (output dir, reference)."""
    out, _, reference = run_lines(tmp_path, LINES)
    return out, reference


def _edit_sink(out, edit):
    path = next(out.glob("sink-*.json"))
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_complete_run_passes(run):
    out, reference = run
    result = read_results(str(out))
    assert completeness(result) == []
    report = compare(result, reference)
    assert report.ok and not report.failed()
    assert result.totals("op2") == {("N1", 2013): (7, 2), ("N2", 2013): (-1, 1)}


def test_a_total_left_tentative_holds_completion_and_fails_the_comparison(run):
    """A total the sink holds from a tentative update (made while state recovered, Su
    & Zhou 2016) and never rectified: the keyed run is not complete, and a comparison
    of such a run fails even when the value happens to be right."""
    out, reference = run
    _edit_sink(out, lambda d: d.setdefault("tentative", {}).update({"op2": ["N1"]}))
    result = read_results(str(out))
    assert "sink holds 1 tentative op2 totals" in completeness(result, frozenset({"op2"}))
    [failed] = compare(result, reference).failed()
    assert failed.name == "no total left tentative at the sink"


def test_compare_catches_a_wrong_total(run):
    out, reference = run
    _edit_sink(out, lambda d: d["totals"]["op2"]["N1"].update({"2013": [8, 2]}))
    report = compare(read_results(str(out)), reference)
    assert not report.ok
    [failed] = report.failed()
    assert failed.name.startswith("op2")
    assert "('N1', 2013): got (8, 2), expected (7, 2)" in failed.detail


def test_compare_catches_missing_and_unexpected_planes(run):
    out, reference = run

    def edit(d):
        del d["totals"]["op3"]["N2"]
        d["totals"]["op3"]["N9"] = {"2013": [1, 1, 0]}

    _edit_sink(out, edit)
    [failed] = compare(read_results(str(out)), reference).failed()
    assert "1 missing, 1 unexpected" in failed.detail


def test_compare_catches_lost_error_reports(run):
    out, reference = run
    _edit_sink(out, lambda d: d["errors"].pop("spout"))
    result = read_results(str(out))
    assert "sink received 0 of 1 spout errors" in completeness(result)
    names = [c.name for c in compare(result, reference).failed()]
    assert names == ["sink got the spout's malformed rows"]


def test_a_keyed_role_may_have_sent_more_errors_than_its_counts_files_show():
    """A killed keyed task's new counts file starts at zero; its earlier errors stay at
    the sink. Waiting on equality never completed; a shortfall is still unmet."""
    counts = [{"role": "op2", "out": {"errors": 3}}]

    def unmet(got, keyed):
        sink = {"errors": {"op2": {"rejected": got}}}
        result = FlightsResult(output_dir="x", counts=counts, sinks=[sink])
        return [u for u in completeness(result, keyed) if "op2 errors" in u]

    assert unmet(5, frozenset({"op2"})) == []
    assert unmet(2, frozenset({"op2"})) == ["sink received 2 of 3 op2 errors"]
    assert unmet(5, frozenset()) == ["sink received 5 of 3 op2 errors"]


def _op4_result(samples, delayed, ids):
    sink = {"totals": {"op4": {"*": {"2013": [samples, delayed]}}}, "sample_ids": ids}
    return FlightsResult(output_dir="x", sinks=[sink])


def _op4_checks(result, reference):
    return {c.name: c for c in compare(result, reference).checks if c.name.startswith("op4")}


def test_op4_statistical_check_judges_share_within_tolerance(tmp_path):
    lines = [flight_row(tailnum=f"N{i}", arr_delay="1" if i % 2 else "-1") for i in range(200)]
    reference = compute_reference(write_csv(tmp_path / "f.csv", lines))  # share 0.5
    close = _op4_checks(_op4_result(100, 55, list(range(100))), reference)
    assert close["op4 sampled delayed share"].ok is True
    far = _op4_checks(_op4_result(100, 80, list(range(100))), reference)
    assert far["op4 sampled delayed share"].ok is False  # 0.8 vs 0.5, 4 sigma = 0.2
    few = _op4_checks(_op4_result(10, 10, list(range(10))), reference)
    assert few["op4 sampled delayed share"].ok is None
    # exact check: rows 0..99 hold 50 delayed (odd ids), so 55 and 80 are wrong
    assert close["op4 samples counted exactly"].ok is False
    exact = _op4_checks(_op4_result(100, 50, list(range(100))), reference)
    assert exact["op4 samples counted exactly"].ok is True
    unknown = _op4_checks(_op4_result(1, 0, [999]), reference)
    assert unknown["op4 samples counted exactly"].ok is False


def test_completeness_names_what_is_missing(run):
    out, _ = run
    counts = out / "counts"
    op1_files = sorted(counts.glob("op1-*.json"))
    data = json.loads(op1_files[0].read_text())
    data["tuples_in"] -= 1
    data["extra"]["pending_sample"] = True
    op1_files[0].write_text(json.dumps(data))
    spout_file = next(out.glob("spout-*.json"))
    stats = json.loads(spout_file.read_text())
    stats["exhausted"] = False
    spout_file.write_text(json.dumps(stats))
    unmet = completeness(read_results(str(out)))
    assert unmet[0] == "spout not exhausted (rows read: 5)"
    assert "op1 received 3 of 4 spout tuples" in unmet
    assert "1 op1 task(s) hold a sample not yet sent" in unmet


def test_empty_dir_is_incomplete_and_wait_times_out(tmp_path):
    clock = FakeClock()
    polls = []

    def sleep(seconds):
        clock.advance(seconds)

    with pytest.raises(IncompleteRunError) as info:
        wait_until_complete(
            str(tmp_path),
            timeout=2,
            poll=0.5,
            progress_callback=lambda r, unmet: polls.append(unmet),
            clock=clock,
            sleep=sleep,
        )
    assert len(polls) == 5
    assert "no spout stats file yet" in str(info.value)
    assert isinstance(info.value, TimeoutError)
    assert info.value.result.spouts == []


def test_wait_returns_complete_result(run):
    out, reference = run
    result = wait_until_complete(str(out), timeout=0)
    assert compare(result, reference).ok


def test_since_ignores_old_files_and_bad_json_is_noted(run):
    out, _ = run
    (out / "sink-99.json").write_text("{not json")
    result = read_results(str(out))
    assert result.unreadable == [str(out / "sink-99.json")]
    assert read_results(str(out), since=4e9).counts == []


def test_format_summary_lists_every_operator_and_the_check(run):
    out, reference = run
    result = read_results(str(out))
    text = format_summary(result, compare(result, reference))
    for name in ("FlightsSpout", "ExtractDelays", "SumDelays", "AirShare", "SampledDelayShare"):
        assert name in text
    assert "missing_tailnum=1" in text and "na_arr_delay=1" in text
    assert "check against pandas: PASS" in text
    assert "[n/a ] op4 sampled delayed share" in text
