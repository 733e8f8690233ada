"""The chaos table's network-cut column and restore-time ratios (``bench/chaos_table.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos_table import markdown, ratios, scenario_rows  # noqa: E402


def _run(scenario: str, restored: float, late: tuple[int, int] | None = None) -> dict:
    faults = {"losses": [{"restored": restored}]}
    if late is not None:
        faults["cuts"] = [{"stale_outputs": {"updates": late[0], "replaced": late[1]}}]
    return {"scenario": scenario, "ok": True, "faults": faults, "owners": {}}


def test_late_outputs_are_summed_per_scenario_and_absent_elsewhere() -> None:
    rows = scenario_rows(
        [_run("netcut-30", 4.0, (3, 1)), _run("sup-1", 0.2), _run("netcut-30", 5.0, (0, 0))]
    )
    assert [r["late"] for r in rows] == [[3, 1], None]
    table = markdown(rows).splitlines()
    assert table[2].endswith("| 4.50 | 3 (1) |") and table[3].endswith("| 0.20 | - |")


def test_a_cut_whose_run_failed_before_its_outcome_adds_nothing() -> None:
    run = _run("netcut-10", 4.0)
    run["faults"]["cuts"] = [{"tasks": [7]}]  # no stale_outputs: outcome never ran
    assert scenario_rows([run])[0]["late"] is None


def test_ratios_are_medians_over_the_baseline_of_the_same_file() -> None:
    rows = scenario_rows([_run("netcut-30", 4.0), _run("sup-1", 0.25), _run("sup-1", 0.15)])
    assert ratios(rows, "sup-1") == [
        "netcut-30: 4.00 s = 20.0 x sup-1 (0.20 s)",
        "sup-1: 0.20 s = 1.0 x sup-1 (0.20 s)",
    ]
    assert ratios(rows, "zk-stop") == ["no restore time for the baseline zk-stop"]
