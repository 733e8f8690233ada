"""The autoscaler under a load ramp: node count against load, scaling decisions, latency.

Usage::

    .venv/bin/python bench/autoscale_ramp.py [--base 40] [--peak 450] [--work-us 2000]
        [--hold 15] [--cooldown 30] [--out docs/raw] [--plot docs/img/autoscale_ramp.png]

The synthetic job (``topologies/synthetic.py``, 20 key groups, the counter on 4 tasks =
at most 4 nodes, no hot keys) with a counter that spends ``--work-us`` of CPU on each
tuple (``elastorm.synthetic.work_us``), so its load follows its input rate. It starts on
one node of ``elastorm cluster up`` (1 supervisor) with the controller's adaptation
manager on (``elastorm.controller.adapt``); ``elastorm autoscale --min 1 --max 4`` runs
beside it as a user would run it (a subprocess; its output is kept). The input rate
then follows a ramp (``--base`` for 60 s, up to ``--peak`` over 150 s, 90 s there, down
to ``--base`` over 150 s, 150 s there), and every 2 s the driver records the rate, the
nodes bound and active, the controller's wish and whether a rescale is under way.

Reported: the node count over time against the rate, every decision of the autoscaler
(and how many times its direction changed: 1 = up, then down, no oscillation),
p50/p99 end-to-end latency per 10 s window, and the exactly-once totals.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import bench_common

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # the project's drivers/

from drivers import synthetic as sd  # noqa: E402
from elastorm.runtime.cluster import CLUSTER_ENV, down, up  # noqa: E402
from elastorm.runtime.config import load_config  # noqa: E402
from elastorm.runtime.outcome import Outcome  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402

log = logging.getLogger("autoscale_ramp")
WINDOW_SECS = 10
DECISION = re.compile(r"\[\s*(\d+) s\] scale to (\d+)")


def settings(args: argparse.Namespace) -> sd.Settings:
    c = "elastorm.controller."
    extra: dict[str, Any] = {
        "elastorm.initial_nodes": {"counter": [0]},
        "elastorm.synthetic.work_us": args.work_us,
        c + "adapt": True,
        c + "cpu_high": args.cpu_high,
        c + "cpu_low": args.cpu_low,
        c + "queue_high": args.queue_high,
        c + "queue_low": args.queue_low,
        c + "join_settle_secs": 8.0,
        # A busy task on a crowded 2-core machine misses a 4 s session (the default)
        # and is declared lost; this bench is about scaling, not failure detection.
        "elastorm.zookeeper.session_secs": args.session_secs,
    }
    return sd.Settings(rate=args.base, keys=0, hot_share=0.0, preload_rate=1000.0, extra=extra)


def plan(args: argparse.Namespace) -> list[sd.Step]:
    return [
        sd.Step(kind="ramp", rate=args.base, seconds=60.0, tag="base"),
        sd.Step(kind="ramp", rate=args.peak, seconds=150.0, tag="up"),
        sd.Step(kind="ramp", rate=args.peak, seconds=90.0, tag="peak"),
        sd.Step(kind="ramp", rate=args.base, seconds=150.0, tag="down"),
        sd.Step(kind="ramp", rate=args.base, seconds=150.0, tag="base again"),
    ]


def run_autoscaler(
    driver: sd.SyntheticDriver, args: argparse.Namespace, path: Path, procs: list
) -> None:
    """Once the driver's topology is submitted, run ``elastorm autoscale`` on it until
    the plan's time is up (its output to ``path``; the process in ``procs``)."""
    while not driver.topology:
        time.sleep(0.5)
    duration = sum(s.seconds for s in driver.plan) + 400  # workers start in minutes
    cmd = [sys.executable, "-m", "elastorm.runtime.cli", "autoscale"]
    cmd += ["--topology", driver.topology, "--min", "1", "--max", "4"]
    cmd += ["--hold", str(args.hold), "--cooldown", str(args.cooldown)]
    cmd += ["--duration", str(duration)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    with path.open("w", encoding="utf-8") as out:
        out.write(f"started at {time.time():.2f}: {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        proc.wait()


def decisions(path: Path) -> list[dict[str, Any]]:
    """The autoscaler's changes from its output: seconds since it started, node count."""
    text = path.read_text(encoding="utf-8")
    began = float(text.split(":", 1)[0].split()[-1])
    return [
        {"at": began + float(t), "nodes": int(n)}
        for t, n in DECISION.findall(text)  # "[  123 s] scale to 3: ..."
    ]


def direction_changes(counts: list[int]) -> int:
    """How often the sequence of node counts turned (up, then down: 1).

    >>> direction_changes([1, 2, 3, 2, 1]), direction_changes([1, 2, 1, 2, 1])
    (1, 3)
    """
    steps = [b - a for a, b in zip(counts, counts[1:], strict=False) if b != a]
    return sum(1 for a, b in zip(steps, steps[1:], strict=False) if (a > 0) != (b > 0))


def analyse(outcome, auto_log: Path) -> dict[str, Any]:
    records = [r for r in outcome.facts["records"] if r["kind"] == "ramp"]
    samples = [s for r in records for s in r["samples"]]
    t0 = records[0]["started"]
    rows = sd.read_jsonl(os.path.join(outcome.facts["output_dir"], "outputs-*.jsonl"))
    windows = []
    end = int(records[-1]["done"])
    for w in range(int(t0), end, WINDOW_SECS):
        got = sd.latency_percentiles(rows, w, w + WINDOW_SECS)
        windows.append({"t": w - t0, **got})
    made = decisions(auto_log)
    counts = [1, *[d["nodes"] for d in made]]
    final = outcome.facts["final"]
    phases = {}
    for r in records:
        p = sd.latency_percentiles(rows, int(r["started"]) + 1, int(r["done"]))
        active = [s[2] for s in r["samples"] if s[2] is not None]
        phases[r["tag"]] = {
            "from": r["from"],
            "to": r["to"],
            "secs": [round(r["started"] - t0), round(r["done"] - t0)],
            "nodes": [min(active), max(active)] if active else None,
            **p,
        }
    return {
        "t0": t0,
        "samples": [[round(s[0] - t0, 1), *s[1:]] for s in samples],
        "latency_windows": windows,
        "phases": phases,
        "decisions": [{"t": round(d["at"] - t0, 1), "nodes": d["nodes"]} for d in made],
        "direction_changes": direction_changes(counts),
        "exact": bool(final) and final.get("emitted") == final.get("state_total"),
        "emitted": final.get("emitted") if final else None,
        "state_total": final.get("state_total") if final else None,
        "load_avg_1min": [r["load"] for r in records],
        "output_dir": outcome.facts["output_dir"],
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    t = [s[0] for s in result["samples"]]
    top.plot(t, [s[1] for s in result["samples"]], color="tab:blue", label="input rate")
    top.set_ylabel("input (tuples/s)", color="tab:blue")
    nodes = top.twinx()
    known = [s for s in result["samples"] if s[2] is not None]  # ZooKeeper answered
    nodes.step([s[0] for s in known], [s[2] for s in known], where="post", color="tab:red")
    for d in result["decisions"]:
        nodes.axvline(d["t"], color="tab:red", ls=":", lw=0.8)
    nodes.set_ylabel("active nodes (red; dotted: decisions)", color="tab:red")
    nodes.set_ylim(0, 4.5)
    w = result["latency_windows"]
    wt = [x["t"] + WINDOW_SECS / 2 for x in w]
    bottom.plot(wt, [x["p50_ms"] for x in w], "o-", ms=3, label="p50")
    bottom.plot(wt, [x["p99_ms"] for x in w], "s-", ms=3, label="p99")
    bottom.set_yscale("log")
    bottom.set_ylabel(f"latency per {WINDOW_SECS} s (ms)")
    bottom.set_xlabel("s from the start of the ramp")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=float, default=40.0, help="tuples/s at the ends")
    parser.add_argument("--peak", type=float, default=450.0, help="tuples/s at the peak")
    parser.add_argument("--work-us", type=float, default=2000.0, help="CPU us per tuple")
    parser.add_argument("--cpu-high", type=float, default=0.5)
    parser.add_argument("--cpu-low", type=float, default=0.2)
    parser.add_argument("--queue-high", type=float, default=20.0)
    parser.add_argument("--queue-low", type=float, default=5.0)
    parser.add_argument("--session-secs", type=float, default=10.0)
    parser.add_argument("--hold", type=float, default=15.0, help="autoscale --hold")
    parser.add_argument("--cooldown", type=float, default=30.0, help="autoscale --cooldown")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "raw")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "autoscale_ramp.png")
    parser.add_argument("--replot", type=Path, default=None, help="redraw from a raw file")
    parser.add_argument(
        "--reanalyse",
        nargs=2,
        type=Path,
        metavar=("RUN_DIR", "AUTOSCALER_OUTPUT"),
        help="analyse a finished run again from its directory (records.json, outputs)",
    )
    args = parser.parse_args()
    if args.replot:
        plot(json.loads(args.replot.read_text())["result"], args.plot)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.reanalyse:
        run_dir, auto_log = args.reanalyse
        facts = json.loads((run_dir / "records.json").read_text()) | {"output_dir": str(run_dir)}
        commit = auto_log.stem.split("_")[2]  # autoscale_ramp_<commit>_autoscaler
        report(Outcome(summary="", ok=True, facts=facts), auto_log, commit, args)
        return 0
    cfg = load_config()
    commit = bench_common.commit()
    args.out.mkdir(parents=True, exist_ok=True)
    auto_log = args.out / f"autoscale_ramp_{commit}_autoscaler.txt"
    driver = sd.SyntheticDriver(plan(args), settings(args))
    os.environ["ELASTORM_KEYED_TASKS"] = "4"
    down(cfg, wipe=True)
    up(cfg, supervisors=1, slots=2)
    procs: list[subprocess.Popen] = []
    scaler = threading.Thread(
        target=run_autoscaler, args=(driver, args, auto_log, procs), daemon=True
    )
    scaler.start()
    try:
        outcome = run_topology(cfg, CLUSTER_ENV, driver, timeout=1800)
    finally:
        for proc in procs:  # the run is over, whatever its --duration says
            proc.terminate()
        down(cfg, wipe=True)
    scaler.join(timeout=5)
    report(outcome, auto_log, commit, args)
    return 0


def report(outcome: Outcome, auto_log: Path, commit: str, args: argparse.Namespace) -> None:
    """Analyse a run, write its raw results and plot, print the summary."""
    result = analyse(outcome, auto_log)
    raw = args.out / f"autoscale_ramp_{commit}.json"
    settings_used = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    record = {"commit": commit, "args": settings_used, "result": result}
    raw.write_text(json.dumps(record, indent=1, default=str))
    plot(result, args.plot)
    print(f"raw results: {raw}\nplot: {args.plot}\nautoscaler output: {auto_log}")
    for tag, p in result["phases"].items():
        print(
            f"{tag:>10}: {p['from']:.0f}->{p['to']:.0f} tuples/s, s {p['secs']}, active nodes "
            f"{p['nodes']}, p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms"
        )
    print(
        f"decisions: {[(d['t'], d['nodes']) for d in result['decisions']]}; direction "
        f"changes {result['direction_changes']}; exact totals {result['exact']} "
        f"({result['emitted']} emitted, {result['state_total']} in state)"
    )


if __name__ == "__main__":
    sys.exit(main())
