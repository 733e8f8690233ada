"""The chaos harness's table, recounted from its raw JSON lines (``bench/chaos.py``
writes one record per run), for docs/benchmarks.md.

    .venv/bin/python bench/chaos_table.py docs/raw/chaos_<commit>.jsonl

One row per scenario, in the order the file first names them: runs, runs whose checks
all passed, tuples checked (op2's flights per plane-year plus op3's, against pandas; a
user job's sink rows against its fold, ``bench/chaos_jobs.py``), lost, short when the
run gave up (a run that gave up is checked against what its sink held then; what was
not in yet may have been on its way, a stall or a loss: not counted as lost), counted
twice, key groups ever seen with two owners at one routing epoch, old owners still
claiming a group 5 s after its handover, the heartbeat samples those checks read, the medians over
the runs' kills of the time from the kill until another controller led (the ``*-ctl``
scenarios) and until every lost group was restored and, for network cuts, the updates
the sink received from the cut-off node's tasks after that restore (and how many key
totals they replaced), and the range of the 1-minute load average at the runs' starts
and ends (records that have it). Several files make one table (e.g. one scenario's runs
from several sessions). With ``--baseline SCENARIO``, each scenario's median restore
time relative to that scenario's in the same file(s). With ``--per-run``, a line per run
too. Then every run that failed, with its error."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

#: What a record checked: the flights job's op2 and op3 totals, a user job's sink rows.
ROLES = ("op2", "op3", "sink")


def _column(check: dict, field: str) -> str:
    """Where a check's ``field`` is counted: what a run that gave up had not committed
    yet is ``short``, not ``lost`` (it may have been on its way).

    >>> _column({"lost": 3, "at_error": True}, "lost"), _column({"lost": 3}, "lost")
    ('short', 'lost')
    """
    return "short" if field == "lost" and check.get("at_error") else field


def scenario_rows(records: list[dict]) -> list[dict]:
    """Per scenario: the sums over its runs (a run that never finished checks nothing)."""
    rows: dict[str, dict] = {}
    for r in records:
        row = rows.setdefault(
            r["scenario"],
            {"scenario": r["scenario"], "runs": 0, "ok": 0, "checked": 0, "lost": 0,
             "short": 0, "twice": 0, "two_owners": 0, "stale": 0, "samples": 0, "restored": [],
             "leading": [], "late": None, "load": []},
        )  # fmt: skip
        row["runs"] += 1
        row["ok"] += bool(r["ok"])
        for role in ROLES:
            for field in ("checked", "lost", "twice"):
                row[_column(r.get(role, {}), field)] += r.get(role, {}).get(field, 0)
        owners = r.get("owners") or {}
        row["two_owners"] += len(owners.get("two_owners", []))
        row["stale"] += len(owners.get("stale_owners", []))
        row["samples"] += owners.get("samples", 0)
        row["load"] += (r.get("loadavg_1m") or {}).values()
        for loss in (r.get("faults") or {}).get("losses") or []:
            row["restored"].append(loss["restored"])
            if "leading" in loss:
                row["leading"].append(loss["leading"])
        for cut in (r.get("faults") or {}).get("cuts") or []:
            if "stale_outputs" in cut:  # a run that failed before its outcome has none
                late = row["late"] or [0, 0]
                row["late"] = [late[0] + cut["stale_outputs"]["updates"],
                               late[1] + cut["stale_outputs"]["replaced"]]  # fmt: skip
    return list(rows.values())


def markdown(rows: list[dict]) -> str:
    """The table as docs/benchmarks.md shows it."""
    lines = [
        "| scenario | runs | passed | tuples checked | lost | short when it gave up "
        "| counted twice | two owners "
        "| stale owners | owner samples | load (1 min) | new controller after (median s) "
        "| restored after (median s) "
        "| cut-off owner's updates after the restore (totals replaced) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        restored, leading = (
            f"{statistics.median(row[k]):.2f}" if row[k] else "-" for k in ("restored", "leading")
        )
        late = f"{row['late'][0]} ({row['late'][1]})" if row["late"] else "-"
        load = f"{min(row['load']):.0f}-{max(row['load']):.0f}" if row["load"] else "-"
        lines.append(
            f"| {row['scenario']} | {row['runs']} | {row['ok']} | {row['checked']:,} "
            f"| {row['lost']} | {row['short']} | {row['twice']} | {row['two_owners']} "
            f"| {row['stale']} "
            f"| {row['samples']:,} | {load} "
            f"| {leading} | {restored} | {late} |"
        )
    return "\n".join(lines)


def per_run(records: list[dict]) -> str:
    """A line per run, in the files' order: its commit, whether it passed, how long it
    took, the load average at its start and end, when its lost groups were restored
    (one figure per kill) and what its checks found; a failed run's error, cut short.

    >>> print(per_run([{"commit": "abc", "scenario": "sup-1", "run": 0, "ok": False,
    ...                 "seconds": 900.2, "error": "UserError: incomplete after 900s"}]))
    | scenario | run | commit | passed | seconds | load (1 min) at start, end | restored after (s) | tuples checked | lost | short when it gave up | counted twice | two owners | stale owners | error |
    |---|---|---|---|---|---|---|---|---|---|---|---|---|---|
    | sup-1 | 0 | abc | no | 900 | - | - | 0 | 0 | 0 | 0 | 0 | 0 | UserError: incomplete after 900s |
    """  # noqa: E501
    lines = [
        "| scenario | run | commit | passed | seconds | load (1 min) at start, end "
        "| restored after (s) | tuples checked | lost | short when it gave up "
        "| counted twice | two owners | stale owners | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        load = r.get("loadavg_1m")
        restored = [loss["restored"] for loss in (r.get("faults") or {}).get("losses") or []]
        owners = r.get("owners") or {}
        checks = [r.get(role, {}) for role in ROLES]
        error = (r.get("error") or ("" if r["ok"] else "checks failed")).replace("|", "/")
        cells = [
            r["scenario"], r["run"], r.get("commit", "?"), "yes" if r["ok"] else "no",
            f"{r['seconds']:.0f}", f"{load['start']}, {load['end']}" if load else "-",
            ", ".join(f"{x:.2f}" for x in restored) or "-",
            f"{sum(r.get(role, {}).get('checked', 0) for role in ROLES):,}",
            *(
                sum(c.get(f, 0) for c in checks if _column(c, f) == column)
                for f, column in (("lost", "lost"), ("lost", "short"), ("twice", "twice"))
            ),
            len(owners.get("two_owners", [])), len(owners.get("stale_owners", [])),
            error[:160] + ("..." if len(error) > 160 else ""),
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def ratios(rows: list[dict], baseline: str) -> list[str]:
    """Each scenario's median restore time over ``baseline``'s (same file, same load).

    >>> ratios([{"scenario": "a", "restored": [1.0, 3.0]},
    ...         {"scenario": "b", "restored": [0.5]}], "b")
    ['a: 2.00 s = 4.0 x b (0.50 s)', 'b: 0.50 s = 1.0 x b (0.50 s)']
    """
    base = next((r["restored"] for r in rows if r["scenario"] == baseline), None)
    if not base:
        return [f"no restore time for the baseline {baseline}"]
    ref = statistics.median(base)
    return [
        f"{r['scenario']}: {statistics.median(r['restored']):.2f} s = "
        f"{statistics.median(r['restored']) / ref:.1f} x {baseline} ({ref:.2f} s)"
        for r in rows
        if r["restored"]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path, nargs="+", help="chaos_<commit>.jsonl files")
    parser.add_argument("--baseline", help="a scenario to compare restore times against")
    parser.add_argument("--per-run", action="store_true", help="a line per run too")
    args = parser.parse_args(argv)
    records = [json.loads(line) for p in args.raw for line in p.read_text().splitlines() if line]
    rows = scenario_rows(records)
    print(markdown(rows))
    if args.per_run:
        print("\n" + per_run(records))
    if args.baseline:
        print("\n" + "\n".join(ratios(rows, args.baseline)))
    for r in records:
        if not r["ok"]:
            print(f"\n{r['scenario']} run {r['run']}: {r['error'] or 'checks failed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
