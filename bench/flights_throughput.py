"""End-to-end throughput of the flights job on Storm (tuples/s), against an in-process baseline.

Usage::

    .venv/bin/python bench/flights_throughput.py [--limit N] [--repeats R] [--env local]

For each repeat: the flights job on a fresh LocalCluster (or a running ``--env``),
all rows by default, checked against pandas (a run that fails the check is not
counted). Throughput = spout rows / (time from the first poll that saw the spout
reading to the poll that saw every tuple at the sink; polls every 1 s). In the
same run it measures the same components wired in one Python process with no
Storm (direct method calls, ``bolts.pipeline``), and prints Storm's rate as a
ratio of that baseline. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from jobs.flights_reference import default_flights_path  # noqa: E402
from runtime.config import load_config  # noqa: E402
from runtime.drivers import FlightsDriver  # noqa: E402
from runtime.run import run_topology  # noqa: E402


def in_process_rate(limit: int | None) -> tuple[float, int]:
    """Rows/s of spout -> op1 -> op2/op3/op4 -> sink by direct calls in this process."""
    from bolts.pipeline import run_pipeline

    started = time.perf_counter()
    rows = run_pipeline(default_flights_path(), limit)
    return rows / (time.perf_counter() - started), rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="rows (default: all 336,776)")
    parser.add_argument("--repeats", type=int, default=2, help="Storm runs (default 2)")
    parser.add_argument("--env", default="local", help="config.json env (default: local)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()

    cfg = load_config()
    base_rate, base_rows = in_process_rate(args.limit)
    print(f"baseline in-process pipeline: {base_rows} rows, {base_rate:,.0f} rows/s")
    rates = []
    for i in range(args.repeats):
        driver = FlightsDriver(args.limit)
        outcome = run_topology(cfg, args.env, driver, timeout=1800)
        if not outcome.ok:
            print(f"run {i + 1}: check against pandas FAILED, not counted\n{outcome.summary}")
            continue
        seconds = outcome.facts["processing_seconds"]
        rate = outcome.facts["rows"] / seconds
        rates.append(rate)
        print(
            f"run {i + 1} on {args.env}: {outcome.facts['rows']} rows in {seconds:.1f} s "
            f"= {rate:,.0f} rows/s (ratio to in-process: {rate / base_rate:.3f}); "
            f"whole run incl. start-up {outcome.facts['seconds']} s"
        )
    if not rates:
        return 1
    median = statistics.median(rates)
    print(
        f"median Storm {args.env}: {median:,.0f} rows/s over {len(rates)} runs; "
        f"ratio to in-process baseline {median / base_rate:.3f}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "env": args.env,
                    "limit": args.limit,
                    "storm_rows_per_s": rates,
                    "storm_median_rows_per_s": median,
                    "in_process_rows_per_s": base_rate,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
