"""The throughput bench's decisions (issue 34): when a paced window held its rate, a
profile's own-time summary, the regression guard's ratios and verdict."""

from __future__ import annotations

import doctest
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import hot_path_guard  # noqa: E402
import throughput  # noqa: E402


def test_the_doctests() -> None:
    assert doctest.testmod(throughput).failed == 0
    assert doctest.testmod(hot_path_guard).failed == 0


def _line(commit: str, elastic: int, cpu: float) -> dict:
    return {
        "commit": commit,
        "at": "2026-11-29 04:00",
        "load": 1.0,
        "elastic": {"burst": elastic, "sustained": elastic, "cpu_ms_per_ktuple": cpu,
                    "p99_at_50_ms": 9.0},
        "elastorm_plain": {"burst": 160_000, "sustained": 150_000, "cpu_ms_per_ktuple": 11.0,
                           "p99_at_50_ms": 8.0},
    }  # fmt: skip


def test_a_quarter_more_cpu_is_a_regression_and_less_is_not() -> None:
    before = _line("a", 40_000, 48.0)
    assert hot_path_guard.regressions(before, _line("b", 40_000, 61.0), 0.25)
    assert not hot_path_guard.regressions(before, _line("b", 38_000, 59.0), 0.25)


def test_the_table_has_a_row_per_recorded_commit() -> None:
    text = hot_path_guard.table([_line("a", 40_000, 48.0), _line("b", 44_000, 40.0)])
    rows = text.splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| a", "| b"]
    assert "0.29 | 3.64" in rows[1]


def test_a_window_whose_p50_climbs_did_not_hold() -> None:
    assert throughput.held({"rate": 1000.0, "p50_halves_ms": [1.0, 2.4]}, 1000.0)
    assert not throughput.held({"rate": 1000.0, "p50_halves_ms": [1.0, 2.6]}, 1000.0)
    assert not throughput.held({"rate": 1000.0, "p50_halves_ms": [None, 1.0]}, 1000.0)
