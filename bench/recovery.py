"""Recovery of lost nodes: elastorm's way against Storm's, on the single-machine cluster.

Runs the elastic flights job with every executor in a worker of its own (a worker
stands for a node) and kills ``--lose`` op2 workers at once (kill -9 of the JVM and
its Python process), ``--rounds`` times per run. Per round, from the kill:
detection (the controller declares them lost), every lost key group restored, and
progress regained (every restored group applies new tuples again; see
``NodeLossDriver`` in ``tests/integration/crash_driver.py``). Two ways, in the same
invocation:

* ``elastorm``: restore from the checkpoint holders as soon as ZooKeeper says the
  task is gone (session ``--session`` s);
* ``storm``: ``elastorm.controller.recover_lost=false``: wait until Storm restarts
  the worker, then restore its groups from their checkpoints (Storm's own path).

    .venv/bin/python bench/recovery.py --lose 1 3 --rounds 5

Prints one line per round and a table (median, p90, max per way and loss size, and
the ratio of elastorm's median to Storm's); writes every round to ``--out``
(JSON lines, default ``docs/raw/recovery_<commit>.jsonl``). Every run must also
end with the flights totals equal to pandas'.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench_common import ROOT, commit, node_loss_cluster

sys.path.insert(0, str(ROOT / "tests" / "integration"))  # NodeLossDriver lives with the tests

WAYS = ("elastorm", "storm")
MEASURES = ("detected", "restored", "progress")


def _driver(way: str, lose: int, rounds: int, session: float, rate: float):
    from crash_driver import NodeLossDriver

    from elastorm.config import ControllerConfig, TopologyConfig

    extra = TopologyConfig.overrides(zookeeper_session_secs=session) | ControllerConfig.overrides(
        recover_lost=way == "elastorm"
    )

    class Driver(NodeLossDriver):
        def options(self, output_dir: str) -> dict[str, object]:
            return super().options(output_dir) | extra

    # Rounds spread over 30%..80% of the input, so each has time to come back.
    driver = Driver(None, lose=lose, rounds=rounds, every=0.5 / max(1, rounds - 1), max_rate=rate)
    driver.migration_timeout = 240.0
    return driver


def _stats(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return statistics.median(ordered), p90, ordered[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lose", type=int, nargs="+", default=[1, 3], help="tasks per kill")
    parser.add_argument("--rounds", type=int, default=5, help="kills per run (5)")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--session", type=float, default=4.0, help="ZooKeeper session (s)")
    parser.add_argument("--tasks", type=int, default=8, help="op2 tasks, one worker each (8)")
    parser.add_argument("--rate", type=float, default=1200.0, help="flights rows/s (1200)")
    parser.add_argument("--supervisors", type=int, default=3)
    parser.add_argument("--slots", type=int, default=6, help="worker slots per supervisor")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.rounds < 1 or any(n < 1 or n >= args.tasks for n in args.lose):
        parser.error("--rounds >= 1 and 1 <= --lose < --tasks")

    from elastorm.runtime.cluster import down
    from elastorm.runtime.run import run_topology

    cfg, out = node_loss_cluster(
        "recovery", args.out, tasks=args.tasks, supervisors=args.supervisors, slots=args.slots
    )
    rounds: list[dict] = []
    failed = False
    try:
        for lose in args.lose:
            for way in args.ways:
                driver = _driver(way, lose, args.rounds, args.session, args.rate)
                began = time.monotonic()
                outcome = run_topology(cfg, "cluster", driver, timeout=1800)
                print(
                    f"{way} lose {lose}: {'ok' if outcome.ok else 'FAILED'} "
                    f"({time.monotonic() - began:.0f} s)",
                    flush=True,
                )
                failed |= not outcome.ok
                for i, loss in enumerate(driver.losses):
                    record = {
                        "commit": commit(), "way": way, "lose": lose, "round": i,
                        "session_secs": args.session, "rate": args.rate, "ok": outcome.ok,
                        "loadavg_1m_at_end": round(os.getloadavg()[0], 1),
                        **loss,
                    }  # fmt: skip
                    rounds.append(record)
                    with out.open("a") as fh:
                        fh.write(json.dumps(record) + "\n")
                    timings = " ".join(f"{m} {loss.get(m)}" for m in MEASURES)
                    print(f"  round {i}: tasks {loss['tasks']} {timings}", flush=True)
    finally:
        down(cfg, wipe=True)

    print(f"\nseconds from the kill (median / p90 / max over rounds); raw: {out}")
    print(f"{'lose':>4} {'way':<9} {'n':>2} " + " ".join(f"{m:>20}" for m in MEASURES))
    medians: dict[tuple[int, str, str], float] = {}
    for lose in args.lose:
        for way in args.ways:
            rs = [r for r in rounds if r["lose"] == lose and r["way"] == way]
            cells = []
            for m in MEASURES:
                values = [r[m] for r in rs if m in r]
                if not values:
                    cells.append(f"{'-':>20}")
                    continue
                med, p90, top = _stats(values)
                medians[lose, way, m] = med
                cells.append(f"{med:6.2f} {p90:6.2f} {top:6.2f}")
            print(f"{lose:>4} {way:<9} {len(rs):>2} " + " ".join(cells))
    for lose in args.lose:
        for m in MEASURES:
            if (lose, "elastorm", m) in medians and medians.get((lose, "storm", m)):
                ratio = medians[lose, "elastorm", m] / medians[lose, "storm", m]
                print(f"lose {lose}: elastorm/storm median {m}: {ratio:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
