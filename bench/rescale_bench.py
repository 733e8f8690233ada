"""Going from 2 to 3 nodes on the single-machine cluster: elastorm's live rescale vs
Storm's ``rebalance``.

Usage::

    .venv/bin/python bench/rescale_bench.py [--rebalance-wait 30] [--out docs/raw] [--plot PATH]

The synthetic job (``topologies/synthetic.py``: a rate-limited spout, a pass-through
emitter, a counter with 20 key groups on 4 tasks = at most 4 nodes, 100,000 keys
preloaded into the hot group) on ``elastorm cluster up`` with 2 supervisors, twice:

* **elastorm**: the job starts on nodes 0 and 1 under the elastic scheduler; after a
  steady window, ``scale --nodes 3`` (``elastorm.runtime.scale``): a third supervisor
  starts, the scheduler binds it, the controller moves key groups onto it by CPAL;
* **rebalance**: the same job under Storm's default scheduler
  (``elastorm.elastic_scheduling: false``); after a steady window a third supervisor
  starts and Nimbus is asked to ``rebalance`` onto 3 workers (``--rebalance-wait``
  seconds deactivated: Storm's default is the message timeout, 30 s).

Measured at the sink (``outputs-*.jsonl`` of the counter tasks, merged): the longest
gap in any key group's output and in the job's output, p50/p99 end-to-end latency
(spout stamp to the counter's output) during the change against the steady window
before it, and the time until the new node carries its share (elastorm: until the
controller reports the node filled and nothing left to move; rebalance: until the
tasks Nimbus placed on the new node emit at least half of an even share in a
second). Exactly-once totals are checked for both. Stop-and-resubmit from
checkpoints (the Flink way) is not measured: elastorm's checkpoints live in the
tasks' memory, with no durable tier to resubmit from (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import bench_common

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from elastorm.runtime import nimbus  # noqa: E402
from elastorm.runtime.cluster import CLUSTER_ENV, down, node_of_port, up  # noqa: E402
from elastorm.runtime.config import env_nimbus, load_config  # noqa: E402
from elastorm.runtime.provision import LocalSupervisors  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402
from elastorm.runtime.synthetic_driver import (  # noqa: E402
    Settings,
    Step,
    SyntheticDriver,
    latency_percentiles,
    output_gaps,
    read_jsonl,
)

log = logging.getLogger("rescale_bench")
STEADY_SECS = 20.0
AFTER_SECS = 20.0


def settings(elastic: bool) -> Settings:
    extra: dict[str, Any] = {"elastorm.initial_nodes": {"counter": [0, 1]}}
    if elastic:
        extra["elastorm.controller.join_settle_secs"] = 8.0
    else:
        extra["elastorm.elastic_scheduling"] = False
    return Settings(rate=800.0, keys=100_000, preload_rate=20_000.0, hot_share=0.3, extra=extra)


def new_node_share_at(
    output_dir: str, assignment: dict, node: str, start: float, after: float
) -> float | None:
    """Seconds from ``start`` to the first second, from ``after`` on (the end of the
    rebalance's deactivation: before it, the tasks that will move still run where they
    were), in which the counter tasks Nimbus placed on ``node`` emitted at least half of
    an even share (1 / nodes) of all outputs; None if that never happened."""
    tasks_on = {n: set(ts) for n, ts in assignment["counter"].items()}
    nodes = len(tasks_on)
    per_sec: dict[int, dict[bool, int]] = {}
    for path in Path(output_dir).glob("outputs-*.jsonl"):
        task = int(path.stem.split("-")[1])
        mine = task in tasks_on.get(node, set())
        for row in read_jsonl(str(path)):
            for sec, _, n in row["lat"]:
                if sec >= after:
                    per_sec.setdefault(sec, {True: 0, False: 0})[mine] += n
    for sec in sorted(per_sec):
        got = per_sec[sec]
        total = got[True] + got[False]
        if total and got[True] >= 0.5 * total / nodes:
            return sec - start
    return None


def measure(outcome, kind: str) -> dict[str, Any]:
    records = outcome.facts["records"]
    steady = next(r for r in records if r["kind"] == "idle")
    change = next(r for r in records if r["kind"] == kind)
    out_dir = outcome.facts["output_dir"]
    rows = read_jsonl(os.path.join(out_dir, "outputs-*.jsonl"))
    if kind == "scale":
        start, end = change["started"], change["done"]
        share_secs = end - start
    else:
        start = change["started"]
        end = start + change["wait"] + 60.0
        new = change["started_nodes"][0]
        share_secs = new_node_share_at(
            out_dir, change["assignment_after"], new, start, start + change["wait"]
        )
    final = outcome.facts["final"]
    return {
        "kind": kind,
        "window_s": [round(start, 3), round(end, 3)],
        "steady": {
            **output_gaps(rows, steady["started"], steady["done"]),
            **latency_percentiles(rows, int(steady["started"]) + 1, int(steady["done"])),
        },
        "during": {
            **output_gaps(rows, start, end),
            **latency_percentiles(rows, int(start), int(end) + 1),
        },
        "new_node_share_secs": None if share_secs is None else round(share_secs, 1),
        "exact": bool(final) and final.get("emitted") == final.get("state_total"),
        "load_avg_1min": [r["load"] for r in records if "load" in r],
        "emitted": final.get("emitted") if final else None,
        "state_total": final.get("state_total") if final else None,
        "assignment_after": change["assignment_after"],
        "owned": change.get("owned"),
        "summary": outcome.summary,
        "output_dir": out_dir,
    }


def run_one(cfg, elastic: bool, wait: int) -> dict[str, Any]:
    down(cfg, wipe=True)
    up(cfg, supervisors=2, slots=2)
    host, port = env_nimbus(cfg.project, CLUSTER_ENV)
    if elastic:
        plan = [
            Step(kind="idle", seconds=STEADY_SECS, tag="steady"),
            Step(kind="scale", nodes=3, tag="elastorm 2->3"),
            Step(kind="idle", seconds=AFTER_SECS, tag="after"),
        ]
    else:
        plan = [
            Step(kind="idle", seconds=STEADY_SECS, tag="steady"),
            Step(kind="rebalance", nodes=3, wait=wait, seconds=wait + 60.0, tag="rebalance"),
        ]
    driver = SyntheticDriver(plan, settings(elastic))
    provisioner = LocalSupervisors(cfg, slots=2)
    driver.provisioner = provisioner
    driver.assignments = lambda: nimbus.executor_nodes(
        host, port, driver.topology, lambda _, p: node_of_port(cfg, p)
    )
    driver.rebalancer = lambda w, n: nimbus.rebalance(host, port, driver.topology, w, n)
    os.environ["ELASTORM_KEYED_TASKS"] = "4"
    try:
        outcome = run_topology(cfg, CLUSTER_ENV, driver, timeout=900)
    finally:
        down(cfg, wipe=True)
    return measure(outcome, "scale" if elastic else "rebalance")


def timeline(output_dir: str) -> tuple[list[int], list[int], list[float]]:
    """Per second of output time: outputs of the whole job and their highest latency (ms)."""
    count: dict[int, int] = {}
    top: dict[int, int] = {}
    for row in read_jsonl(os.path.join(output_dir, "outputs-*.jsonl")):
        for sec, ms, n in row["lat"]:
            count[sec] = count.get(sec, 0) + n
            top[sec] = max(top.get(sec, 0), ms)
    secs = sorted(count)
    return secs, [count[t] for t in secs], [float(top[t]) for t in secs]


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 + len(results), figsize=(5 * (2 + len(results)), 3.6))
    names = [r["kind"].replace("scale", "elastorm live rescale") for r in results]
    gaps = [r["during"]["max_group_gap_ms"] / 1000 for r in results]
    steady_gaps = [r["steady"]["max_group_gap_ms"] / 1000 for r in results]
    x = range(len(results))
    axes[0].bar([i - 0.2 for i in x], steady_gaps, 0.4, label="steady")
    axes[0].bar([i + 0.2 for i in x], gaps, 0.4, label="during 2->3")
    axes[0].set_xticks(list(x), names)
    axes[0].set_ylabel("longest gap in a key group's output (s)")
    axes[0].set_yscale("log")
    axes[0].legend()
    for j, (q, style) in enumerate((("p50_ms", "o"), ("p99_ms", "s"))):
        axes[1].plot(
            [i - 0.1 for i in x], [r["steady"][q] for r in results], style, label=f"{q} steady"
        )
        axes[1].plot(
            [i + 0.1 for i in x],
            [r["during"][q] for r in results],
            style,
            label=f"{q} during",
            fillstyle="none",
        )
        del j
    axes[1].set_xticks(list(x), names)
    axes[1].set_ylabel("end-to-end latency (ms)")
    axes[1].set_yscale("log")
    axes[1].legend(fontsize=7)
    for ax, r, name in zip(axes[2:], results, names, strict=True):
        secs, outputs, top = timeline(r["output_dir"])
        start, end = r["window_s"]
        t0 = start - 40
        keep = [i for i, t in enumerate(secs) if t0 <= t <= end + 30]
        ax.plot([secs[i] - start for i in keep], [outputs[i] for i in keep], label="outputs/s")
        ax.set_xlabel(f"s from the {name} request")
        ax.set_ylabel("outputs per second")
        ax.axvspan(0, end - start, color="orange", alpha=0.2, label="change window")
        twin = ax.twinx()
        twin.plot([secs[i] - start for i in keep], [top[i] for i in keep], "r.", ms=3)
        twin.set_ylabel("highest latency in the second (ms)", color="r")
        twin.set_yscale("log")
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebalance-wait", type=int, default=30, help="rebalance wait_secs")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "raw")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "rescale_bench.png")
    parser.add_argument(
        "--only", choices=["elastorm", "rebalance"], default=None, help="run one of the two"
    )
    parser.add_argument(
        "--replot", type=Path, default=None, help="only redraw the plot from a raw results file"
    )
    args = parser.parse_args()
    if args.replot:
        plot(json.loads(args.replot.read_text())["results"], args.plot)
        print(f"plot: {args.plot}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = load_config()
    commit = bench_common.commit()
    results = []
    for elastic in (True, False):
        if args.only and args.only != ("elastorm" if elastic else "rebalance"):
            continue
        began = time.time()
        results.append(run_one(cfg, elastic, args.rebalance_wait))
        results[-1]["run_secs"] = round(time.time() - began)
        print(json.dumps({k: v for k, v in results[-1].items() if k != "summary"}, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / f"rescale_bench_{commit}.json"
    raw.write_text(json.dumps({"commit": commit, "results": results}, indent=1))
    print(f"raw results: {raw}")
    if results:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    for r in results:
        s, d = r["steady"], r["during"]
        print(
            f"{r['kind']:>9}: longest key-group gap {d['max_group_gap_ms']} ms (steady "
            f"{s['max_group_gap_ms']}), job gap {d['job_gap_ms']} ms, p50 {d['p50_ms']} / p99 "
            f"{d['p99_ms']} ms (steady {s['p50_ms']} / {s['p99_ms']}), new node's share after "
            f"{r['new_node_share_secs']} s, exact totals {r['exact']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
