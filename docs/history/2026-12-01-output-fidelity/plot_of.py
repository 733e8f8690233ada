# ruff: noqa: E501  (one-off analysis plot)
"""Predicted Output Fidelity against what bench/replication_join.py measured (f611a08):
left, the 5-s means as published and re-normalised; right, the per-second bins.
    .venv/bin/python docs/history/2026-12-01-output-fidelity/plot_of.py"""

import json

import matplotlib

matplotlib.use("Agg")
from pathlib import Path

import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent

rows = [
    json.loads(line) for line in open(HERE.parents[1] / "raw" / "replication_join_f611a08.jsonl")
]
aligned = {"none": 0.351, "planned": 0.693, "all": 1.0}  # of_join.py, rows 0-36000
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
for r in rows:
    c = [x or 0.0 for x in r["completeness"]]
    steady = sum(c[10:40]) / 30
    pub = sum(c[:5]) / 5
    ren = pub / steady
    for x, m, _lab in (
        (r["predicted_of"], "o", "controller graph"),
        (aligned[r["arm"]], "s", "aligned graph"),
    ):
        a.scatter([x], [pub], marker=m, facecolors="none", edgecolors="C0")
        a.scatter([x], [ren], marker=m, color="C1")
        a.annotate(r["arm"], (x, ren), textcoords="offset points", xytext=(4, 4), fontsize=8)
    b.plot(
        range(15),
        [v / steady for v in c[:15]],
        marker=".",
        label=f"{r['arm']} (ctl {r['predicted_of']}, aligned {aligned[r['arm']]})",
    )
a.plot([0, 1], [0, 1], "k:", lw=1)
a.set_xlabel("predicted OF (o: controller's full graph, s: aligned graph)")
a.set_ylabel("first 5 s: hollow = as published, filled = / own steady rate")
a.set_xlim(0, 1.05)
a.set_ylim(0, 1.4)
a.set_title("f611a08: predicted OF vs 5-s completeness")
b.axhline(1, color="k", lw=0.5)
b.set_xlabel("seconds after the kill (1-s bins; bin 0 includes pre-kill time)")
b.set_ylabel("flights/s at the sink / post-recovery rate")
b.set_title("no plateau at OF: the outage is shorter than a bin")
b.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "of_vs_measured_f611a08.png", dpi=110)
print("wrote", HERE / "of_vs_measured_f611a08.png")
