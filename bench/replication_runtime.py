"""Output completeness after a correlated failure: planned active replicas vs none vs all.

Partially active replication (Su & Zhou 2016) on the single-machine cluster. The
elastic flights job runs with every executor in a worker of its own (a worker stands
for a node) and ``--lose`` op2 workers are killed at once (kill -9 of the JVM and its
Python process) at 30% of the input, three times in the same invocation:

* ``none``: ``elastorm.controller.replication_budget=0``: every lost key group is
  restored from its checkpoint (the fault-tolerance manager);
* ``planned``: budget ``--budget`` op2 tasks, chosen by the configured planner from
  the running rates;
* ``all``: a budget covering every op2 task.

The victims are chosen alike in every arm: the ``--lose`` busiest op2 tasks (most
outputs so far) whose key groups all have their checkpoint holder (an active
replica is its group's holder) on a survivor, so no arm loses state. From the op2
tasks' counts files (``outputs``: applied tuples whose outputs were the task's to
send; a replica's are suppressed) the bench measures the output rate in 1-second
bins after the kill, as a share of the mean rate over the 10 s before it
(**completeness**), and prints it next to the **predicted Output Fidelity** of the
same failure: eq. 4 of the paper over the task graph (the spout's emitter feeding
each op2 task at its measured output rate), with the victims whose every group had
a started replica counted as surviving.

    .venv/bin/python bench/replication_runtime.py --lose 2 --budget 1

Writes one JSON line per arm to ``--out`` (default
``docs/raw/replication_runtime_<commit>.jsonl``); every run must also end with the
flights totals equal to pandas'.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench_common import (
    ROOT,
    commit,
    completeness_cells,
    node_loss_cluster,
    print_ratios_to_none,
)

sys.path.insert(0, str(ROOT / "tests" / "integration"))  # the drivers live with the tests
sys.path.insert(0, str(ROOT))  # the project\'s drivers/
from crash_driver import AFTER, BEFORE  # noqa: E402

ARMS = ("none", "planned", "all")


def _driver(arm: str, lose: int, budget: int, tasks: int, rate: float, limit: int):
    from crash_driver import CompletenessDriver

    budget = {"none": 0, "planned": budget, "all": tasks}[arm]
    driver = CompletenessDriver(limit, lose=lose, max_rate=rate, budget=budget)
    driver.migration_timeout = 240.0
    return driver


def predicted(owners: list[int], replicated: dict[int, int], victims: list[int], rates) -> float:
    """Eq. 4 over the op2 task graph: the emitter feeds each op2 task at its measured
    rate; victims whose every group had a replica survive on their replicas."""
    from elastorm.replication.model import Operator, Stream, TaskGraph, output_fidelity

    tasks = sorted(t for t, r in rates.items() if r > 0)
    graph = TaskGraph(
        operators=(
            Operator(name="extract_delays", tasks=("extract_delays",)),
            Operator(name="sum_delays", tasks=tuple(f"sum_delays:{t}" for t in tasks)),
        ),
        streams=tuple(
            Stream(source="extract_delays", target=f"sum_delays:{t}", rate=rates[t]) for t in tasks
        ),
    )
    saved = {t for t in victims if all(g in replicated for g, o in enumerate(owners) if o == t)}
    failed = {f"sum_delays:{t}" for t in victims if t not in saved and t in tasks}
    return output_fidelity(graph, failed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lose", type=int, default=2, help="op2 workers killed at once (2)")
    parser.add_argument("--budget", type=int, default=1, help="planned arm's budget (1)")
    parser.add_argument("--tasks", type=int, default=4, help="op2 tasks, one worker each (4)")
    parser.add_argument("--rate", type=float, default=1500.0, help="flights rows/s (1500)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--limit", type=int, default=150_000, help="flights rows (150000)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    if not 1 <= args.lose < args.tasks or args.budget < 0:
        parser.error("1 <= --lose < --tasks and --budget >= 0")

    from elastorm.runtime.cluster import down
    from elastorm.runtime.run import run_topology

    cfg, out = node_loss_cluster(
        "replication_runtime", args.out, tasks=args.tasks, supervisors=2, slots=6
    )
    failed = False
    rows = []
    try:
        for arm in args.arms:
            driver = _driver(arm, args.lose, args.budget, args.tasks, args.rate, args.limit)
            began = time.monotonic()
            outcome = run_topology(cfg, "cluster", driver, timeout=1800)
            failed |= not outcome.ok
            sampler, at = driver.sampler, driver.killed_at
            sampler.join(AFTER + 10)
            base_bins = sampler.rate_bins(at - BEFORE, at)
            base = sum(base_bins) / len(base_bins) if base_bins else 0.0
            after = [
                round(b / base, 3) if base else None for b in sampler.rate_bins(at, at + AFTER)
            ]
            [loss] = outcome.facts["losses"]
            # Measured rate per op2 task over the baseline window: the model's rates.
            rates = {}
            for task, series in sampler.samples.items():
                points = sorted((t, n) for t, n in series.items() if at - BEFORE <= t < at)
                rates[task] = (points[-1][1] - points[0][1]) if len(points) > 1 else 0
            row = {
                "commit": commit(),
                "arm": arm,
                "budget": {"none": 0, "planned": args.budget, "all": args.tasks}[arm],
                "lose": args.lose,
                "tasks": args.tasks,
                "rate": args.rate,
                "ok": outcome.ok,
                "victims": loss["tasks"],
                "groups": loss["groups"],
                "replicated_at_kill": driver.replicated_at_kill,
                "recoveries": outcome.facts.get("recoveries"),
                "predicted_of": round(
                    predicted(
                        driver.owners_at_kill, driver.replicated_at_kill, loss["tasks"], rates
                    ),
                    3,
                ),
                "baseline_rate": round(base, 1),
                "completeness": after,
                "restored_secs": loss.get("restored"),
                "progress_secs": loss.get("progress"),
                "seconds": round(time.monotonic() - began),
                "loadavg_1m_at_end": round(os.getloadavg()[0], 1),
            }
            rows.append(row)
            with out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(f"{arm}: {'ok' if outcome.ok else 'FAILED'} ({row['seconds']} s)", flush=True)
    finally:
        down(cfg, wipe=True)

    print(f"\ncompleteness after the kill (output rate / rate before it); raw: {out}")
    print(
        f"{'arm':<8} {'victims':<10} {'repl':>4} {'pred OF':>7}  first 10 s, then mean of 10-40 s"
    )
    for r in rows:
        first, late = completeness_cells(r)
        print(
            f"{r['arm']:<8} {str(r['victims']):<10} {len(r['replicated_at_kill']):>4} "
            f"{r['predicted_of']:>7.3f}  {first} | {late:4.2f}"
        )
    print_ratios_to_none(rows, 5)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
