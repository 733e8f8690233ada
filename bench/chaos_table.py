"""The chaos harness's table, recounted from its raw JSON lines (``bench/chaos.py``
writes one record per run), for docs/benchmarks.md.

    .venv/bin/python bench/chaos_table.py docs/raw/chaos_<commit>.jsonl

One row per scenario, in the order the file first names them: runs, runs whose checks
all passed, tuples checked (op2's flights per plane-year plus op3's, against pandas),
lost, counted twice, key groups ever seen with two owners at one routing epoch, old
owners still claiming a group 5 s after its handover, the heartbeat samples those
checks read, the medians over the runs' kills of the time from the kill until
another controller led (the ``*-ctl`` scenarios) and until every lost group was
restored and, for network cuts, the updates the sink received from the cut-off
node's tasks after that restore (and how many key totals they replaced). With
``--baseline SCENARIO``, each scenario's median restore time relative to that
scenario's in the same file(s). Then every run that failed, with its error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROLES = ("op2", "op3")


def scenario_rows(records: list[dict]) -> list[dict]:
    """Per scenario: the sums over its runs (a run that never finished checks nothing)."""
    rows: dict[str, dict] = {}
    for r in records:
        row = rows.setdefault(
            r["scenario"],
            {"scenario": r["scenario"], "runs": 0, "ok": 0, "checked": 0, "lost": 0,
             "twice": 0, "two_owners": 0, "stale": 0, "samples": 0, "restored": [],
             "leading": [], "late": None},
        )  # fmt: skip
        row["runs"] += 1
        row["ok"] += bool(r["ok"])
        for role in ROLES:
            for field in ("checked", "lost", "twice"):
                row[field] += r.get(role, {}).get(field, 0)
        owners = r.get("owners") or {}
        row["two_owners"] += len(owners.get("two_owners", []))
        row["stale"] += len(owners.get("stale_owners", []))
        row["samples"] += owners.get("samples", 0)
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
        "| scenario | runs | passed | tuples checked | lost | counted twice | two owners "
        "| stale owners | owner samples | new controller after (median s) "
        "| restored after (median s) "
        "| cut-off owner's updates after the restore (totals replaced) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        restored, leading = (
            f"{statistics.median(row[k]):.2f}" if row[k] else "-" for k in ("restored", "leading")
        )
        late = f"{row['late'][0]} ({row['late'][1]})" if row["late"] else "-"
        lines.append(
            f"| {row['scenario']} | {row['runs']} | {row['ok']} | {row['checked']:,} "
            f"| {row['lost']} | {row['twice']} | {row['two_owners']} | {row['stale']} "
            f"| {row['samples']:,} "
            f"| {leading} | {restored} | {late} |"
        )
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
    args = parser.parse_args(argv)
    records = [json.loads(line) for p in args.raw for line in p.read_text().splitlines() if line]
    rows = scenario_rows(records)
    print(markdown(rows))
    if args.baseline:
        print("\n" + "\n".join(ratios(rows, args.baseline)))
    for r in records:
        if not r["ok"]:
            print(f"\n{r['scenario']} run {r['run']}: {r['error'] or 'checks failed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
