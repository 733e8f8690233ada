"""Output completeness after losing whole nodes: the join-and-window job with planned
active replicas vs none vs all, in one invocation.

Partially active replication (Su & Zhou 2016) on the single-machine cluster under the
elastic scheduler: ``--tasks`` supervisors (logical nodes), each running one task of
the join (``join_flights``, correlated input) and one of the tumbling window
(``daily_windows``, fed by the join); node0 runs the rest. At ``--kill-at`` of the
input the supervisors of nodes 1..``--lose`` are killed at once (kill -9 of the
daemon, its workers and their Python processes: ``JoinSupervisorLossDriver``), in
each arm alike:

* ``none``: replication budget 0: every lost group is restored from its checkpoint;
* ``planned``: budget ``--budget`` keyed tasks, chosen by the configured planner;
* ``all``: a budget covering every keyed task.

**Completeness** is measured at the sink: flights newly reflected in the windows'
totals per one-second bin after the kill, as a share of the mean over the 10 s
before it. **Predicted Output Fidelity**: eq. 4 over the task graph the controller
published just before the kill (its measured rates, the join as correlated input),
with the victim tasks whose every group had a started replica counted as surviving.
Every arm must end with every window equal to pandas'; the sink's count of
tentative updates and of rectified windows is recorded.

    .venv/bin/python bench/replication_join.py --lose 2 --budget 2

Writes one JSON line per arm to ``--out`` (default
``docs/raw/replication_join_<commit>.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import (
    ROOT,
    commit,
    completeness_cells,
    node_loss_cluster,
    print_ratios_to_none,
)

sys.path.insert(0, str(ROOT / "tests" / "integration"))  # the drivers live with the tests
sys.path.insert(0, str(ROOT))  # the project\'s drivers/

ARMS = ("none", "planned", "all")
BEFORE, AFTER = 10, 40  # seconds of baseline before the kill, one-second bins after it


def completeness(timeline: dict[str, int], killed_at: float) -> tuple[float, list[float | None]]:
    """The baseline rate (flights/s over the ``BEFORE`` s before the kill) and each
    one-second bin after it as a share of that."""
    at = int(killed_at)
    per = {int(k): v for k, v in timeline.items()}
    base = sum(per.get(s, 0) for s in range(at - BEFORE, at)) / BEFORE
    after = [round(per.get(s, 0) / base, 3) if base else None for s in range(at, at + AFTER)]
    return base, after


def predicted(replication: dict[str, Any] | None, loss: dict[str, Any]) -> float | None:
    """Eq. 4 over the published graph: the victims fail, except those whose every
    group had a started replica outside them."""
    from elastorm.controller.replication import predicted_fidelity, task_name
    from elastorm.replication.model import InputKind, Operator, Stream, TaskGraph

    if not replication or not replication.get("graph"):
        return None
    g = replication["graph"]
    graph = TaskGraph(
        operators=tuple(
            Operator(name=o["name"], tasks=tuple(o["tasks"]), kind=InputKind(o["kind"]))
            for o in g["operators"]
        ),
        streams=tuple(Stream(source=s, target=t, rate=r) for s, t, r in g["streams"]),
    )
    failed = set()
    for op, tasks in loss["victims"].items():
        replicas = loss["replicated_at_kill"][op]
        for t in tasks:
            saved = all(
                str(kg) in replicas and replicas[str(kg)] not in tasks
                for kg in loss["owned"][op][str(t)]
            )
            if not saved and task_name(op, t) in graph.tasks:
                failed.add(task_name(op, t))
    return round(predicted_fidelity(graph, failed, ()), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lose", type=int, default=2, help="nodes killed at once (2)")
    parser.add_argument("--budget", type=int, default=2, help="planned arm's budget (2)")
    parser.add_argument("--tasks", type=int, default=3, help="nodes = tasks per keyed bolt (3)")
    parser.add_argument("--rate", type=float, default=600.0, help="flights rows/s (600)")
    parser.add_argument("--limit", type=int, default=36_000, help="flights rows (36000)")
    parser.add_argument("--kill-at", type=float, default=0.3, help="share of the input (0.3)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not 1 <= args.lose < args.tasks:
        parser.error("1 <= --lose < --tasks")

    from crash_driver import JoinSupervisorLossDriver

    from elastorm.runtime.cluster import down
    from elastorm.runtime.provision import LocalSupervisors
    from elastorm.runtime.run import run_topology

    cfg, out = node_loss_cluster(
        "replication_join", args.out, tasks=args.tasks, supervisors=args.tasks, slots=6
    )
    budgets = {"none": 0, "planned": args.budget, "all": 2 * args.tasks}
    failed = False
    rows = []
    try:
        for arm in args.arms:
            driver = JoinSupervisorLossDriver(
                args.limit,
                lose=args.lose,
                budget=budgets[arm],
                kill_at=args.kill_at,
                max_rate=args.rate,
            )
            began = time.monotonic()
            try:
                outcome = run_topology(cfg, "cluster", driver, timeout=1200)
                ok, summary, facts = outcome.ok, outcome.summary, outcome.facts
            except Exception as exc:  # a failed arm is recorded, never hidden
                ok, summary, facts = False, f"{type(exc).__name__}: {exc}", {}
            finally:  # the killed supervisors back for the next arm
                supervisors = LocalSupervisors(cfg)
                for name in driver.killed:
                    supervisors.stop(name)
                if driver.killed:
                    supervisors.start(driver.killed, timeout=180)
            failed |= not ok
            loss = facts.get("loss") or driver.loss
            base, after = completeness(facts.get("timeline", {}), loss.get("killed_at", 0.0))
            row = {
                "commit": commit(),
                "arm": arm,
                "budget": budgets[arm],
                "lose": args.lose,
                "tasks": args.tasks,
                "rate": args.rate,
                "limit": args.limit,
                "ok": ok,
                "summary": summary,
                "victims": loss.get("victims"),
                "supervisors": loss.get("supervisors"),
                "owned": loss.get("owned"),
                "replicated_at_kill": loss.get("replicated_at_kill"),
                "plan_at_kill": (loss.get("replication_at_kill") or {}).get("plan"),
                "predicted_of": predicted(loss.get("replication_at_kill"), loss) if loss else None,
                "baseline_rate": round(base, 1),
                "completeness": after,
                "restored_secs": loss.get("restored_secs"),
                "tentative_updates": facts.get("tentative_updates"),
                "rectified": facts.get("rectified"),
                "check": facts.get("check"),
                "recoveries": facts.get("recoveries"),
                "seconds": round(time.monotonic() - began),
                "loadavg_1m_at_kill": loss.get("loadavg_1m"),
                "loadavg_1m_at_end": round(os.getloadavg()[0], 1),
            }
            rows.append(row)
            with out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(f"{arm}: {'ok' if ok else 'FAILED'} ({row['seconds']} s): {summary}", flush=True)
    finally:
        down(cfg, wipe=True)

    print(f"\ncompleteness after the kill (flights/s into the windows / rate before); raw: {out}")
    print(f"{'arm':<8} {'pred OF':>7}  first 10 s | mean 10-40 s | tentative, rectified")
    for r in rows:
        pred = r["predicted_of"] if r["predicted_of"] is not None else float("nan")
        first, late = completeness_cells(r)
        print(
            f"{r['arm']:<8} {pred:>7.3f}  {first} | {late:4.2f}"
            f" | {r['tentative_updates']}, {r['rectified']}"
        )
    print_ratios_to_none(rows, 10)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
