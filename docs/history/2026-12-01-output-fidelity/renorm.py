# ruff: noqa: E501  (table-printing lines of a one-off analysis)
"""Re-normalise bench/replication_join.py's completeness (f611a08) by each arm's own
post-recovery rate instead of the 10 s before the kill.  Pure Python, instant."""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = [
    json.loads(line) for line in open(HERE.parents[1] / "raw" / "replication_join_f611a08.jsonl")
]
for r in ROWS:
    c = [x or 0.0 for x in r["completeness"]]
    base = r["baseline_rate"]
    steady = sum(c[10:40]) / 30 * base  # flights/s after recovery (input-bound)
    flights = [x * base for x in c]
    n = [f / steady for f in flights]
    cum = [
        sum(n[: k + 1]) - (k + 1) for k in range(len(n))
    ]  # cumulative surplus, in seconds of input
    print(
        f"{r['arm']:8} pred {r['predicted_of']:.3f} base(10 s before) {base:6.1f}/s  steady(10-40 s) {steady:6.1f}/s"
        f"  base/steady {base / steady:.2f}"
    )
    print(
        f"   paper-style 5-s mean as published {sum(c[:5]) / 5:.3f}; re-normalised {sum(n[:5]) / 5:.3f};"
        f" first 10 s {sum(n[:10]) / 10:.3f}; min bin 0-4 {min(n[:5]):.2f}"
    )
    print("   bins 0-9 / steady:", [round(x, 2) for x in n[:10]])
    print("   cumulative surplus (s of steady input):", [round(x, 2) for x in cum[:10]])
