"""The chaos harness's table, recounted from its raw JSON lines (``bench/chaos.py``
writes one record per run), for docs/benchmarks.md.

    .venv/bin/python bench/chaos_table.py docs/raw/chaos_<commit>.jsonl

One row per scenario, in the order the file first names them: runs, runs whose checks
all passed, tuples checked (op2's flights per plane-year plus op3's, against pandas),
lost, counted twice, key groups ever seen with two owners at one routing epoch, old
owners still claiming a group 5 s after its handover, the heartbeat samples those
checks read, and the medians over the runs' kills of the time from the kill until
another controller led (the ``*-ctl`` scenarios) and until every lost group was
restored. Then every run that failed, with its error.
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
             "leading": []},
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
    return list(rows.values())


def markdown(rows: list[dict]) -> str:
    """The table as docs/benchmarks.md shows it."""
    lines = [
        "| scenario | runs | passed | tuples checked | lost | counted twice | two owners "
        "| stale owners | owner samples | new controller after (median s) "
        "| restored after (median s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        restored, leading = (
            f"{statistics.median(row[k]):.2f}" if row[k] else "-" for k in ("restored", "leading")
        )
        lines.append(
            f"| {row['scenario']} | {row['runs']} | {row['ok']} | {row['checked']:,} "
            f"| {row['lost']} | {row['twice']} | {row['two_owners']} | {row['stale']} "
            f"| {row['samples']:,} "
            f"| {leading} | {restored} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path, nargs="+", help="chaos_<commit>.jsonl files")
    args = parser.parse_args(argv)
    records = [json.loads(line) for p in args.raw for line in p.read_text().splitlines() if line]
    print(markdown(scenario_rows(records)))
    for r in records:
        if not r["ok"]:
            print(f"\n{r['scenario']} run {r['run']}: {r['error'] or 'checks failed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
