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
(JSON lines, default ``docs/raw/recovery_<commit>.jsonl``) and plots every round
(``docs/img/recovery_<commit>.png``). Every run must also end with the flights
totals equal to pandas'. A run that fails (a round that cannot find victims or does
not recover in time) is recorded as an ``error`` line and the bench goes on with
the next run; the exit status is then 1. ``--summary JSONL`` prints the table and
redraws the plot of an earlier run without starting a cluster.
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
sys.path.insert(0, str(ROOT))  # the project\'s drivers/

WAYS = ("elastorm", "storm")
MEASURES = ("detected", "restored", "progress")


def _driver(way: str, lose: int, rounds: int, session: float, rate: float, first: float):
    from crash_driver import NodeLossDriver

    from elastorm.config import ControllerConfig, TopologyConfig

    extra = TopologyConfig.overrides(zookeeper_session_secs=session) | ControllerConfig.overrides(
        recover_lost=way == "elastorm"
    )

    class Driver(NodeLossDriver):
        def options(self, output_dir: str) -> dict[str, object]:
            return super().options(output_dir) | extra

    # Rounds spread over first..85% of the input, so each has time to come back: Storm's
    # way needs Storm's restart (10-40 s) and a checkpoint on the re-placed holders
    # before the next victims qualify, and no round can show progress once the input
    # is read to the end.
    every = (0.85 - first) / max(1, rounds - 1)
    driver = Driver(None, lose=lose, rounds=rounds, every=every, first=first, max_rate=rate)
    driver.migration_timeout = 240.0
    return driver


def _stats(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return statistics.median(ordered), p90, ordered[-1]


def summarize(records: list[dict]) -> None:
    """Print the table (median / p90 / max per loss size, way and measure, every value)
    and the ratios of elastorm's medians to Storm's."""
    rounds = [r for r in records if "error" not in r]
    sizes = sorted({r["lose"] for r in records})
    ways = [w for w in WAYS if any(r["way"] == w for r in records)]
    print("\nseconds from the kill (median / p90 / max over rounds)")
    print(f"{'lose':>4} {'way':<9} {'n':>2} " + " ".join(f"{m:>20}" for m in MEASURES))
    medians: dict[tuple[int, str, str], float] = {}
    for lose in sizes:
        for way in ways:
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
            for m in MEASURES:
                print(f"{'':>17}{m}: {[r.get(m) for r in rs]}")
    for lose in sizes:
        for m in MEASURES:
            if (lose, "elastorm", m) in medians and medians.get((lose, "storm", m)):
                ratio = medians[lose, "elastorm", m] / medians[lose, "storm", m]
                print(f"lose {lose}: elastorm/storm median {m}: {ratio:.2f}")
    for r in records:
        if "error" in r:
            print(
                f"lose {r['lose']} {r['way']}: FAILED after {r['rounds_done']} rounds: {r['error']}"
            )


def plot(records: list[dict], path: Path) -> None:
    """Every round's seconds from the kill, one panel per loss size, a column of dots
    per (way, measure), the median marked, the targets drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r for r in records if "error" not in r]
    sizes = sorted({r["lose"] for r in rounds})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.2), squeeze=False)
    for ax, lose in zip(axes[0], sizes, strict=True):
        for i, m in enumerate(MEASURES):
            for j, (way, colour) in enumerate(zip(WAYS, ("tab:blue", "tab:red"), strict=True)):
                values = [r[m] for r in rounds if r["lose"] == lose and r["way"] == way and m in r]
                if not values:
                    continue
                x = i + (j - 0.5) * 0.35
                ax.scatter([x] * len(values), values, color=colour, s=18, alpha=0.7,
                           label=way if i == 0 else None)  # fmt: skip
                ax.hlines(statistics.median(values), x - 0.12, x + 0.12, color=colour)
        ax.axhline(1.0, color="grey", ls=":", lw=1)
        ax.axhline(2.0 if lose == 1 else 2.5, color="grey", ls="--", lw=1)
        ax.set_xticks(range(len(MEASURES)), MEASURES)
        ax.set_yscale("log")
        ax.set_ylabel("seconds from kill -9")
        ax.set_title(f"{lose} op2 worker(s) killed at once")
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(
        "kill -9 to detection, restore, progress: elastorm's way vs Storm's\n"
        "(dotted: 1 s detection target; dashed: progress target)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lose", type=int, nargs="+", default=[1, 3], help="tasks per kill")
    parser.add_argument("--rounds", type=int, default=5, help="kills per run (5)")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--session", type=float, default=4.0, help="ZooKeeper session (s)")
    parser.add_argument("--tasks", type=int, default=8, help="op2 tasks, one worker each (8)")
    parser.add_argument("--rate", type=float, default=600.0, help="flights rows/s (600)")
    parser.add_argument("--first", type=float, default=0.2, help="share read at the 1st kill")
    parser.add_argument("--supervisors", type=int, default=3)
    parser.add_argument("--slots", type=int, default=6, help="worker slots per supervisor")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summary", type=Path, nargs="+", help="only print and plot these")
    parser.add_argument("--plot", type=Path, help="the plot (docs/img/<raw file>.png)")
    args = parser.parse_args(argv)
    if args.summary:
        records = [json.loads(line) for p in args.summary for line in p.read_text().splitlines()]
        summarize(records)
        plot(records, args.plot or ROOT / "docs" / "img" / f"{args.summary[0].stem}.png")
        return 0
    if args.rounds < 1 or any(n < 1 or n >= args.tasks for n in args.lose):
        parser.error("--rounds >= 1 and 1 <= --lose < --tasks")

    from elastorm.runtime.cluster import down
    from elastorm.runtime.run import run_topology

    print(f"commit {commit()}, {vars(args)}; 1-min load average {os.getloadavg()[0]:.1f}")
    cfg, out = node_loss_cluster(
        "recovery", args.out, tasks=args.tasks, supervisors=args.supervisors, slots=args.slots
    )
    records: list[dict] = []
    failed = False
    try:
        for lose in args.lose:
            for way in args.ways:
                driver = _driver(way, lose, args.rounds, args.session, args.rate, args.first)
                began = time.monotonic()
                common = {
                    "commit": commit(), "way": way, "lose": lose, "tasks_total": args.tasks,
                    "session_secs": args.session, "rate": args.rate,
                }  # fmt: skip
                try:
                    outcome = run_topology(cfg, "cluster", driver, timeout=1800)
                    ok, error = outcome.ok, None
                except Exception as exc:  # one run's failure is a result, not the end
                    ok, error = False, f"{type(exc).__name__}: {exc}"
                verdict = "ok" if ok else f"FAILED {error or '(totals or migrations)'}"
                print(
                    f"{way} lose {lose}: {verdict} ({time.monotonic() - began:.0f} s)", flush=True
                )
                failed |= not ok
                load = round(os.getloadavg()[0], 1)
                lines = [
                    common | {"round": i, "ok": ok, "loadavg_1m_at_end": load, **loss}
                    for i, loss in enumerate(driver.losses)
                ]
                if error is not None:
                    lines.append(common | {"error": error, "rounds_done": len(driver.losses)})
                for record in lines:
                    records.append(record)
                    with out.open("a") as fh:
                        fh.write(json.dumps(record) + "\n")
                for i, loss in enumerate(driver.losses):
                    timings = " ".join(f"{m} {loss.get(m)}" for m in MEASURES)
                    print(
                        f"  round {i}: tasks {loss['tasks']} {timings} back {loss.get('back')} "
                        f"load {loss.get('loadavg_1m')}",
                        flush=True,
                    )
    finally:
        down(cfg, wipe=True)
    print(f"raw: {out}")
    summarize(records)
    if any("error" not in r for r in records):
        plot(records, args.plot or ROOT / "docs" / "img" / f"{out.stem}.png")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
