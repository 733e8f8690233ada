"""Run integration tests again and again with CPU-heavy processes beside them.

Issue 12's cluster tests failed on a fresh 2-core machine whose load average was
near 50; this tells a stall from slowness by running them on purpose under load:

    .venv/bin/python bench/tests_under_load.py --runs 10 --hogs 2 \\
        -k "elastic_flights_with_migrations or (killed_mid_migration and source) \\
            or killed_controller" \\
        tests/integration/test_storm_cluster.py tests/integration/test_storm_crash.py

Each run is one pytest session over all the given tests (they share one cluster).
``--hogs N`` starts N processes that spin on the CPU for the whole time. Prints
one line per run, a summary, and writes every run's outcome and pytest's output
tail to ``--out`` (JSON lines), so the figures in docs/benchmarks.md have their
raw records beside them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _spin() -> None:
    """Burn one CPU until killed."""
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def _loadavg() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="pytest node ids or files")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    parser.add_argument("--runs", type=int, default=10, help="pytest sessions (default 10)")
    parser.add_argument("--hogs", type=int, default=2, help="CPU-spinning processes (default 2)")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "raw" / "tests_under_load.jsonl",
        help="JSON-lines record of every run",
    )
    parser.add_argument("--stop-on-failure", action="store_true")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.hogs < 0:
        parser.error("--runs must be >= 1 and --hogs >= 0")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    results = []
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "-q",
                    *(["-k", args.keyword] if args.keyword else []),
                    *args.tests,
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            seconds = time.monotonic() - started
            tail = (proc.stdout + proc.stderr)[-6000:]
            passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", tail)) else 0
            failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", tail)) else 0
            record = {
                "run": run,
                "hogs": args.hogs,
                "tests": args.tests,
                "keyword": args.keyword,
                "exit": proc.returncode,
                "passed": passed,
                "failed": failed,
                "seconds": round(seconds, 1),
                "loadavg_end": round(_loadavg(), 1),
                "failures": re.findall(r"^FAILED (.*)$", tail, flags=re.M),
                "tail": tail,
            }
            results.append(record)
            with args.out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
            print(
                f"run {run}/{args.runs}: exit {proc.returncode}, {passed} passed, {failed} failed, "
                f"{seconds:.0f} s, load average {record['loadavg_end']}"
                + (f"; failed: {record['failures']}" if record["failures"] else ""),
                flush=True,
            )
            if proc.returncode != 0 and args.stop_on_failure:
                break
    finally:
        for h in hogs:
            h.terminate()
    good = sum(1 for r in results if r["exit"] == 0)
    print(f"{good} of {len(results)} runs passed every test, with {args.hogs} CPU hogs beside them")
    return 0 if good == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
