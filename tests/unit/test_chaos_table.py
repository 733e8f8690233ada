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


def test_the_load_column_spans_every_runs_start_and_end_and_old_records_have_none() -> None:
    runs = [_run("sup-1", 0.2), _run("sup-1", 0.3), _run("lose-1", 0.4)]
    runs[0]["loadavg_1m"] = {"start": 12.4, "end": 30.6}
    runs[1]["loadavg_1m"] = {"start": 8.0, "end": 19.0}
    rows = scenario_rows(runs)  # lose-1's record predates the load field
    table = markdown(rows).splitlines()
    assert "| load (1 min) |" in table[0]
    assert "| 8-31 |" in table[2] and "| - |" in table[3]


def test_several_files_make_one_row_per_scenario_and_a_line_per_run(tmp_path) -> None:
    import json

    import chaos_table

    first, second = _run("spout", 0.0), _run("spout", 0.0)
    first |= {"commit": "aaa", "run": 0, "seconds": 200.0, "error": None,
              "op2": {"checked": 10, "lost": 1, "twice": 0},
              "op3": {"checked": 5, "lost": 0, "twice": 2}}  # fmt: skip
    second |= {"commit": "bbb", "run": 0, "ok": False, "seconds": 480.4,
               "error": "UserError: a | b", "faults": None}  # fmt: skip
    paths = []
    for i, record in enumerate((first, second)):
        paths.append(tmp_path / f"chaos_{i}.jsonl")
        paths[-1].write_text(json.dumps(record) + "\n")
    rows = scenario_rows([first, second])
    assert [(r["runs"], r["ok"], r["checked"], r["lost"], r["twice"]) for r in rows] == [
        (2, 1, 15, 1, 2)
    ]
    lines = chaos_table.per_run([first, second]).splitlines()
    assert lines[2].startswith(
        "| spout | 0 | aaa | yes | 200 | - | 0.00 | 15 | 1 | 0 | 2 | 0 | 0 |"
    )
    assert lines[3].endswith(
        "| bbb | no | 480 | - | - | 0 | 0 | 0 | 0 | 0 | 0 | UserError: a / b |"
    )
    assert chaos_table.main([str(p) for p in paths] + ["--per-run"]) == 0


def test_the_per_run_doctest() -> None:
    import doctest

    import chaos_table

    assert doctest.testmod(chaos_table).failed == 0


def test_what_a_run_that_gave_up_had_not_committed_is_short_not_lost() -> None:
    import chaos_table

    stalled = _run("join/zk-stop", 28.0) | {
        "ok": False,
        "commit": "abc",
        "run": 0,
        "seconds": 160.0,
        "error": "UserError: stall",
    }
    stalled["sink"] = {"checked": 100, "lost": 40, "twice": 0, "at_error": True}
    finished = _run("join/zk-stop", 29.0) | {
        "ok": False,
        "commit": "abc",
        "run": 1,
        "seconds": 80.0,
        "error": None,
    }
    finished["sink"] = {"checked": 100, "lost": 3, "twice": 1}
    (row,) = scenario_rows([stalled, finished])
    assert (row["checked"], row["lost"], row["short"], row["twice"]) == (200, 3, 40, 1)
    assert "| 200 | 3 | 40 | 1 |" in markdown([row]).splitlines()[2]
    lines = chaos_table.per_run([stalled, finished]).splitlines()
    assert "| 100 | 0 | 40 | 0 |" in lines[2] and "| 100 | 3 | 0 | 1 |" in lines[3]
