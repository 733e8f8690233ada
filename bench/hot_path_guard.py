"""The hot path's regression guard (issue 34): the keyed count at this commit, recorded.

Usage::

    .venv/bin/python bench/hot_path_guard.py [--record] [--table]

Runs ``bench/throughput.py``'s ``elastorm_plain`` and ``elastic`` variants one after the
other (shorter windows, a two-step search for the sustained rate), and compares the
elastic keyed count with elastorm's own wire measured in the same run: the ratio of their
sustained rates and of their CPU per tuple (machine noise hits both alike, so ratios
compare across commits where absolute figures do not). ``--record`` appends the line to
``docs/raw/hot_path_guard.jsonl`` (commit, time, load, both variants' figures).
From issue 34's stage 1 on, ``elastic`` sends data as runs (``elastorm.data.batch_size``
= 100): a line recorded before that measured one Storm tuple per data tuple, what
``elastic_itemwise`` measures now, so expect a step there, not a regression.

Exits 1 when the elastic ratio of rate fell, or that of CPU per tuple rose, by more than
``--tolerance`` (25%) against the last recorded line of another commit: a change that
costs a quarter is seen when it lands. ``--table`` prints the recorded history as the
results page's table (``docs/benchmarks.md``) and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from throughput import CpuSnapshot, argument_parser, run_variant

from elastorm.runtime.config import load_config

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "docs" / "raw" / "hot_path_guard.jsonl"
VARIANTS = ("elastorm_plain", "elastic")


def figures(result: dict) -> dict:
    """One variant's recorded figures: burst and sustained rate, CPU per 1k tuples, p99 at 50%."""
    return {
        "burst": round(result["saturation"]["rate"]),
        "sustained": result.get("sustained_rate") and round(result["sustained_rate"]),
        "cpu_ms_per_ktuple": result["saturation"]["cpu_ms_per_ktuple_all"],
        "p99_at_50_ms": result["at_50"]["p99_ms"],
    }


def ratios(line: dict) -> tuple[float | None, float]:
    """Elastic against the wire in one line: (sustained rate ratio, CPU per tuple ratio).

    >>> ratios({"elastic": {"sustained": 40, "cpu_ms_per_ktuple": 50.0},
    ...         "elastorm_plain": {"sustained": 160, "cpu_ms_per_ktuple": 10.0}})
    (0.25, 5.0)
    """
    e, w = line["elastic"], line["elastorm_plain"]
    rate = e["sustained"] / w["sustained"] if e["sustained"] and w["sustained"] else None
    return rate, e["cpu_ms_per_ktuple"] / w["cpu_ms_per_ktuple"]


def regressions(previous: dict, now: dict, tolerance: float) -> list[str]:
    """What got worse by more than ``tolerance`` from ``previous`` to ``now``.

    >>> before = {"commit": "a", "elastic": {"sustained": 40, "cpu_ms_per_ktuple": 50.0},
    ...           "elastorm_plain": {"sustained": 160, "cpu_ms_per_ktuple": 10.0}}
    >>> after = {"commit": "b", "elastic": {"sustained": 28, "cpu_ms_per_ktuple": 50.0},
    ...          "elastorm_plain": {"sustained": 160, "cpu_ms_per_ktuple": 10.0}}
    >>> regressions(before, after, 0.25)
    ['sustained rate against the wire 0.17x, was 0.25x at a (-30%)']
    >>> regressions(before, before, 0.25)
    []
    """
    (rate0, cpu0), (rate1, cpu1) = ratios(previous), ratios(now)
    found = []
    if rate0 and rate1 and rate1 < (1 - tolerance) * rate0:
        found.append(
            f"sustained rate against the wire {rate1:.2f}x, was {rate0:.2f}x at "
            f"{previous['commit']} ({100 * (rate1 / rate0 - 1):+.0f}%)"
        )
    if cpu1 > (1 + tolerance) * cpu0:
        found.append(
            f"CPU per tuple against the wire {cpu1:.2f}x, was {cpu0:.2f}x at "
            f"{previous['commit']} ({100 * (cpu1 / cpu0 - 1):+.0f}%)"
        )
    return found


def table(lines: list[dict]) -> str:
    """The recorded history, newest last, as a markdown table."""
    out = [
        "| commit | when (UTC) | load | wire sustained/s | elastic burst/s | elastic "
        "sustained/s | elastic CPU ms/1k | rate x wire | CPU x wire | p99 at 50% |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for line in lines:
        rate, cpu = ratios(line)
        e, w = line["elastic"], line["elastorm_plain"]
        out.append(
            f"| {line['commit']} | {line['at']} | {line['load']:.1f} | {w['sustained'] or '-'} "
            f"| {e['burst']} | {e['sustained'] or '-'} | {e['cpu_ms_per_ktuple']} "
            f"| {f'{rate:.2f}' if rate else '-'} | {cpu:.2f} | {e['p99_at_50_ms']} ms |"
        )
    return "\n".join(out)


def read_history() -> list[dict]:
    if not HISTORY.exists():
        return []
    return [json.loads(x) for x in HISTORY.read_text().splitlines() if x.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help=f"append the line to {HISTORY}")
    parser.add_argument("--table", action="store_true", help="print the history; run nothing")
    parser.add_argument(
        "--tolerance", type=float, default=0.25, help="worse than this share fails (0.25)"
    )
    args = parser.parse_args()
    history = read_history()
    if args.table:
        print(table(history))
        return 0
    bench = argument_parser().parse_args(
        ["--warmup", "8", "--window", "10", "--settle", "5", "--search", "2"]
    )
    cfg = load_config()
    cpu = CpuSnapshot(str(cfg.project))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    line: dict = {
        "commit": commit,
        "at": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load": os.getloadavg()[0],
    }
    for v in VARIANTS:
        print(f"{v} ...", flush=True)
        line[v] = figures(run_variant(v, bench, cfg, cpu, {}))
        print(f"{v}: {line[v]}", flush=True)
    rate, cpu_ratio = ratios(line)
    print(f"elastic against the wire: rate {rate and round(rate, 2)}x, CPU {cpu_ratio:.2f}x")
    previous = next((x for x in reversed(history) if x["commit"] != commit), None)
    worse = regressions(previous, line, args.tolerance) if previous else []
    if args.record:
        with HISTORY.open("a") as f:
            f.write(json.dumps(line) + "\n")
    for text in worse:
        print(f"REGRESSION: {text}", file=sys.stderr)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
