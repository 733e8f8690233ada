"""CPU a worker's Python process spends importing its component's module, before it
handles a tuple.

Usage::

    .venv/bin/python bench/worker_imports.py [--repeats 5] [--out docs/raw/x.json]

Storm starts one Python process per executor (streamparse's multilang), and a job
restarting or rescaling starts many at once on the same cores: on the 2-core test
machine the join job's sink took 20-90 s from Storm's prepare to its first log line at
load 50-130, and one never started within its run (chaos ``join/lose-1``, session 28).
For each module a topology's workers import, this runs ``python -c "import m"`` in a
fresh interpreter ``--repeats`` times and reports the median CPU (user + system, of
the child), beside ``import streamparse`` (what any streamparse worker pays) and an
empty interpreter, measured in the same run. CPU, not wall time, so a loaded machine
disturbs it less. Also lists the heavy third-party packages each module pulls in.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ("", "streamparse")
#: The component modules of the repository's topologies and the tutorial's project.
MODULES = (
    "spouts.flights",
    "bolts.flights",
    "bolts.flights_elastic",
    "bolts.flights_join",
    "elastorm.storm.keyed_bolt",
    "elastorm.storm.controller_bolt",
)
HEAVY = ("pandas", "numpy", "pyarrow", "networkx", "pyspark", "scipy")


def cpu_of(module: str) -> float:
    """CPU seconds of a fresh interpreter that imports ``module`` ('' for none)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = f"import {module}" if module else "pass"
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def heavy_of(module: str) -> list[str]:
    """Which of :data:`HEAVY` importing ``module`` loads."""
    code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters per module")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    rows = {}
    for module in (*BASELINES, *MODULES):
        runs = []
        for _ in range(args.repeats):
            runs.append(cpu_of(module))
        rows[module or "(empty interpreter)"] = {
            "cpu_median_s": round(statistics.median(runs), 3),
            "cpu_runs_s": [round(r, 3) for r in runs],
            "heavy": heavy_of(module) if module else [],
        }
    floor = rows["streamparse"]["cpu_median_s"]
    print(f"{'module':34} {'CPU s (median)':>15} {'x streamparse':>14}  heavy packages")
    for name, row in rows.items():
        ratio = row["cpu_median_s"] / floor if floor else float("nan")
        print(f"{name:34} {row['cpu_median_s']:15.3f} {ratio:14.2f}  {' '.join(row['heavy'])}")
    load = os.getloadavg()[0]
    print(f"(median of {args.repeats} fresh interpreters each; 1-minute load {load:.1f})")
    if args.out:
        args.out.write_text(json.dumps({"repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
