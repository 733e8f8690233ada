"""Seed 001 section 7.2 on real Storm: checkpoint allocation vs checkpoint-assisted migrations.

Usage::

    .venv/bin/python bench/shift_bench.py [--strategies none,baseline,even,correlated]
                                          [--repeats R] [--duration S] [--json PATH]

Each run is ``topologies/shift.py`` on a fresh LocalCluster (``runtime.shift_driver``):
a spout whose load moves from op1 to op2 over ``--ramp`` seconds (correlation -1),
op1's 10 key groups on node1, op2's on node2, node0 and node2 under a 70%
external CPU load (emulated by throttling their tasks). After the warm-up the
controller allocates checkpoints with the strategy; when node2 overloads, its
adaptation moves op2's key groups away. Printed per strategy: migrations, the
share that was checkpoint-assisted (CPA/CPAL), the share of usable checkpoints
while a node was overloaded (seed 001 Fig. 8's measure), and whether every count
is exact; then ratios against even allocation measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from runtime.config import load_config  # noqa: E402
from runtime.errors import UserError  # noqa: E402
from runtime.run import run_topology  # noqa: E402
from runtime.shift_driver import STRATEGIES, ShiftDriver  # noqa: E402


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated")
    p.add_argument("--repeats", type=int, default=1, help="runs per strategy (default 1)")
    p.add_argument("--duration", type=float, default=110.0, help="spout seconds (default 110)")
    p.add_argument("--ramp", type=float, default=100.0, help="ramp seconds (default 100)")
    p.add_argument("--rate", type=float, default=800.0, help="tuples/s (default 800)")
    p.add_argument("--json", default=None, help="write every run's facts here")
    args = p.parse_args(argv)
    args.strategies = [s for s in args.strategies.split(",") if s]
    bad = set(args.strategies) - set(STRATEGIES)
    if bad:
        p.error(f"unknown strategies {sorted(bad)} (have {', '.join(STRATEGIES)})")
    return args


def mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.fmean(got) if got else None


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load_config()
    runs: list[dict] = []
    for r in range(args.repeats):
        for strategy in args.strategies:
            driver = ShiftDriver(
                strategy,
                duration=args.duration,
                ramp=args.ramp,
                rate=args.rate,
                # even allocation is random: a new draw per repeat
                extra={"elastorm.controller.seed": r},
            )
            try:
                out = run_topology(cfg, "local", driver, timeout=args.duration + 300)
            except UserError as exc:
                print(f"run {r} {strategy}: FAILED: {exc}")
                runs.append({"strategy": strategy, "repeat": r, "error": str(exc)})
                continue
            print(f"run {r}: {out.summary}")
            runs.append({"repeat": r, **out.facts})
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1, default=str))
    print()
    print(
        "| strategy | runs | migrations | checkpoint-assisted | usable while overloaded | counts |"
    )
    print("|---|---|---|---|---|---|")
    summary = {}
    for s in args.strategies:
        ok = [x for x in runs if x.get("strategy") == s and "error" not in x]
        assisted = mean([x["assisted_share"] for x in ok])
        usable = mean([x["usable_share_mean"] for x in ok])
        summary[s] = (assisted, usable)
        exact = sum(bool(x["exact"]) for x in ok)
        migrations = "/".join(str(x["migrations"]) for x in ok) or "-"
        print(
            f"| {s} | {len(ok)} | {migrations} | {fmt(assisted)} | {fmt(usable)} "
            f"| {exact}/{len(ok)} exact |"
        )
    if "even" in summary and "correlated" in summary:
        (ca, cu), (ea, eu) = summary["correlated"], summary["even"]
        for name, c, e in (("assisted", ca, ea), ("usable", cu, eu)):
            ratio = "-" if not c or not e else f"{c / e:.2f}x"
            print(f"correlated / even, {name}: {ratio}")
    failed = [x for x in runs if "error" in x or not x.get("exact")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
