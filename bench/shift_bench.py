"""Checkpoint allocation vs checkpoint-assisted migrations on real Storm.

Madsen & Zhou 2015, sections 7.2 (the experiment in which load shifts between nodes:
checkpoint allocation and load balancing) and 7.3 (the flights load: checkpoint-assisted
migrations and usable checkpoints).

Usage::

    .venv/bin/python bench/shift_bench.py [--job shift|flights_load]
                                          [--strategies none,baseline,even,correlated]
                                          [--key-groups 16,32,48] [--repeats R] [--json PATH]

``--job flights_load`` runs ``topologies/flights_load.py`` instead (the flights load of
Madsen & Zhou 2015, section 7.3: the flights rows at a ramping rate through op2, op3 and
op4, each with ``--key-groups`` key groups, on four nodes; see ``drivers.shift``),
with its own defaults for duration, ramp and rate.

Each run is ``topologies/shift.py`` on a fresh LocalCluster (``drivers.shift``):
a spout whose load moves from op1 to op2 over ``--ramp`` seconds (correlation -1),
op1's 10 key groups on node1, op2's on node2, node0 and node2 under a 70%
external CPU load (emulated by throttling their tasks). After the warm-up the
controller allocates checkpoints with the strategy; when node2 overloads, its
adaptation moves op2's key groups away. Printed per strategy: migrations, the
share that was checkpoint-assisted (CPA/CPAL), the share of usable checkpoints
while a node was overloaded (Madsen & Zhou 2015, Fig. 8's measure), and whether every count
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
sys.path.insert(0, str(ROOT))  # the project's drivers/

from drivers.flights_load import FlightsLoadDriver  # noqa: E402
from drivers.shift import ShiftDriver  # noqa: E402
from elastorm.config import STRATEGIES  # noqa: E402
from elastorm.errors import UserError  # noqa: E402
from elastorm.runtime.config import load_config  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job", choices=("shift", "flights_load"), default="shift")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated")
    p.add_argument("--key-groups", default="16,32,48", help="flights_load: key groups per operator")
    p.add_argument("--repeats", type=int, default=1, help="runs per strategy (default 1)")
    p.add_argument("--duration", type=float, default=None, help="spout seconds")
    p.add_argument("--ramp", type=float, default=None, help="ramp seconds")
    p.add_argument("--rate", type=float, default=None, help="tuples/s (shift), final rows/s")
    p.add_argument("--env", default="local", help="config.json env (default: local)")
    p.add_argument("--json", default=None, help="write every run's facts here")
    args = p.parse_args(argv)
    args.strategies = [s for s in args.strategies.split(",") if s]
    args.key_groups = (
        [int(k) for k in args.key_groups.split(",") if k] if args.job == "flights_load" else [10]
    )
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
    knobs = {
        k: v
        for k, v in (("duration", args.duration), ("ramp", args.ramp), ("rate", args.rate))
        if v
    }
    for r in range(args.repeats):
        for groups in args.key_groups:
            for strategy in args.strategies:
                # even allocation is random: a new draw per repeat
                extra = {"elastorm.controller.seed": r}
                if args.job == "shift":
                    driver = ShiftDriver(strategy, extra=extra, **knobs)
                else:
                    driver = FlightsLoadDriver(strategy, key_groups=groups, extra=extra, **knobs)
                try:
                    out = run_topology(cfg, args.env, driver, timeout=driver.duration + 300)
                except UserError as exc:
                    print(f"run {r} {strategy}: FAILED: {exc}")
                    runs.append(
                        {"strategy": strategy, "key_groups": groups, "repeat": r, "error": str(exc)}
                    )
                    continue
                print(f"run {r}: {out.summary}")
                runs.append({"repeat": r, "key_groups": groups, **out.facts})
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1, default=str))
    print()
    print(
        "| key groups | strategy | runs | migrations | checkpoint-assisted "
        "| usable while overloaded | counts |"
    )
    print("|---|---|---|---|---|---|---|")
    for groups in args.key_groups:
        summary = {}
        for s in args.strategies:
            ok = [
                x
                for x in runs
                if x.get("strategy") == s and x.get("key_groups") == groups and "error" not in x
            ]
            assisted = mean([x["assisted_share"] for x in ok])
            usable = mean([x["usable_share_mean"] for x in ok])
            summary[s] = (assisted, usable)
            exact = sum(bool(x["exact"]) for x in ok)
            migrations = "/".join(str(x["migrations"]) for x in ok) or "-"
            print(
                f"| {groups} | {s} | {len(ok)} | {migrations} | {fmt(assisted)} | {fmt(usable)} "
                f"| {exact}/{len(ok)} exact |"
            )
        if "even" in summary and "correlated" in summary:
            (ca, cu), (ea, eu) = summary["correlated"], summary["even"]
            for name, c, e in (("assisted", ca, ea), ("usable", cu, eu)):
                ratio = "-" if not c or not e else f"{c / e:.2f}x"
                print(f"{groups} key groups, correlated / even, {name}: {ratio}")
    failed = [x for x in runs if "error" in x or not x.get("exact")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
