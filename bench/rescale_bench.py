"""Going from 2 to 3 nodes on the single-machine cluster: elastorm's live rescale vs
Storm's ``rebalance`` vs stopping the job and resubmitting it from a savepoint.

Usage::

    .venv/bin/python bench/rescale_bench.py [--rebalance-wait 30] [--session-secs 4]
        [--only elastorm|rebalance|resubmit ...] [--out docs/raw] [--plot PATH]
    .venv/bin/python bench/rescale_bench.py --remeasure docs/raw/rescale_bench_<commit>.json

The synthetic job (``topologies/synthetic.py``: a rate-limited spout, a pass-through
emitter, a counter with 20 key groups on 4 tasks = at most 4 nodes, 100,000 keys
preloaded into the hot group) on ``elastorm cluster up`` with 2 supervisors, three
times:

* **elastorm**: the job starts on nodes 0 and 1 under the elastic scheduler; after a
  steady window, ``scale --nodes 3`` (``elastorm.runtime.scale``): a third supervisor
  starts, the scheduler binds it, the controller moves key groups onto it by CPAL;
* **rebalance**: the same job under Storm's default scheduler
  (``elastorm.elastic_scheduling: false``); after a steady window a third supervisor
  starts and Nimbus is asked to ``rebalance`` onto 3 workers (``--rebalance-wait``
  seconds deactivated: Storm's default is the message timeout, 30 s);
* **resubmit** (Flink's stop-with-savepoint and restart): the job starts as for
  elastorm; after the steady window a third supervisor starts, then the spout stops
  sending, the job drains, every counter task writes its key groups to a savepoint
  (``elastorm savepoint``, once every group's durable copy caught up), the topology is
  killed and submitted again, same name, on 3 nodes
  with ``elastorm.restore_from``; the input that fell due meanwhile is sent first,
  stamped when it fell due (a topic nobody read), so the downtime is in the latencies.

Measured at the sink (``outputs-*.jsonl`` of the counter tasks, merged): the longest
gap in any key group's output and in the job's output, p50/p99 end-to-end latency
(spout stamp to the counter's output) during the change against the steady window
before it, and the time until the new node carries its share (elastorm: until the
controller reports the node filled and nothing left to move; rebalance: until the
tasks Nimbus placed on the new node emit at least half of an even share in a
second, counted from the end of the deactivation or the resubmit; this is also given
for elastorm as ``share_by_outputs_secs``). Beside the gaps, ``output_gaps`` gives the
group's *stall* (how long its output stopped while it had input waiting) and its
input's own gap. Every run first waits 30 s (the preload's backlog drains), then
takes its 20 s steady window; ``settled`` is a window after the change (elastorm's
20 s "after" step; from 30 s after the resubmitted job's first output to its end).
Exactly-once totals are checked for all three.
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
sys.path.insert(0, str(ROOT))  # the project's drivers/

from drivers.synthetic import (  # noqa: E402
    Settings,
    Step,
    SyntheticDriver,
    latency_percentiles,
    output_gaps,
    read_jsonl,
)
from elastorm.config import DurableConfig  # noqa: E402
from elastorm.runtime import nimbus  # noqa: E402
from elastorm.runtime.cluster import CLUSTER_ENV, down, node_of_port, up  # noqa: E402
from elastorm.runtime.config import env_nimbus, load_config  # noqa: E402
from elastorm.runtime.outcome import Outcome  # noqa: E402
from elastorm.runtime.provision import LocalSupervisors  # noqa: E402
from elastorm.runtime.restore import restore_options, store_of, take_savepoint  # noqa: E402
from elastorm.runtime.run import checked_options, durable_home, run_topology  # noqa: E402

log = logging.getLogger("rescale_bench")
SETTLE_SECS = 30.0
STEADY_SECS = 20.0
AFTER_SECS = 20.0


WAYS = ("elastorm", "rebalance", "resubmit")
KIND = {"elastorm": "scale", "rebalance": "rebalance", "resubmit": "resubmit"}


def settings(way: str, session_secs: float) -> Settings:
    extra: dict[str, Any] = {
        "elastorm.zookeeper.session_secs": session_secs,
        "elastorm.initial_nodes": {"counter": [0, 1]},
        "elastorm.synthetic.hot_on_request": False,  # every group on the 5 s interval
    }
    if way == "elastorm":
        extra["elastorm.controller.join_settle_secs"] = 8.0
    elif way == "rebalance":
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


def moves(output_dir: str, start: float, end: float) -> list[dict[str, Any]]:
    """The migrations the emitter saw in ``[start, end]``: key group, protocol, seconds
    from ``start`` to its ``Migrate`` and to its ``ProcessedAllReplay`` (CPAL's target
    caught up), from the emitter's ``events-*.jsonl``."""
    by_epoch: dict[int, dict[str, Any]] = {}
    for e in read_jsonl(os.path.join(output_dir, "events-*.jsonl")):
        if "key_group" not in e or not start <= e["at"] <= end:
            continue
        m = by_epoch.setdefault(e["epoch"], {"key_group": e["key_group"], "epoch": e["epoch"]})
        if e["type"] == "Migrate":
            m |= {"protocol": e["protocol"], "migrate_s": round(e["at"] - start, 2)}
            m["buffered"] = e["buffered"]
        elif e["type"] == "ProcessedAllReplay":
            m["caught_up_s"] = round(e["at"] - start, 2)
    return sorted(by_epoch.values(), key=lambda m: m.get("migrate_s", 0.0))


def move_stall(rows: list[dict[str, Any]], key_group: int, at: float) -> int:
    """The longest stall of ``key_group``'s output from 1 s before to 3 s after its
    ``Migrate`` reached the emitter at ``at``: the move's own pause, told apart from
    stalls elsewhere in the window."""
    mine = [{"out": [o for o in row["out"] if o[0] == key_group], "in": []} for row in rows]
    return output_gaps(mine, at - 1.0, at + 3.0)["max_group_stall_ms"]


def measure(outcome, kind: str) -> dict[str, Any]:
    records = outcome.facts["records"]
    steady = next(r for r in records if r["kind"] == "idle" and r["tag"] == "steady")
    change = next(r for r in records if r["kind"] == kind)
    out_dir = outcome.facts["output_dir"]
    rows = read_jsonl(os.path.join(out_dir, "outputs-*.jsonl"))
    start, new = change["started"], change["started_nodes"][0]
    if kind == "scale":
        end = change["done"]
        share_secs = end - start
        by_outputs = new_node_share_at(out_dir, change["assignment_after"], new, start, start)
    elif kind == "resubmit":
        end = change["done"]
        after = change["resubmitted"]
        share_secs = by_outputs = new_node_share_at(
            out_dir, change["assignment_after"], new, start, after
        )
    else:
        end = start + change["wait"] + 60.0
        share_secs = by_outputs = new_node_share_at(
            out_dir, change["assignment_after"], new, start, start + change["wait"]
        )
    final = outcome.facts["final"]
    secs, outputs, top = timeline(out_dir)
    # After the change, once settled: elastorm's "after" window; 30 s after the
    # resubmitted job's first output to the end of its watch. None for rebalance.
    after_idle = [r for r in records if r["kind"] == "idle" and r["tag"] == "after"]
    settled = None
    if after_idle:
        settled = (after_idle[0]["started"], after_idle[0]["done"])
    elif kind == "resubmit":
        # From the outputs (the driver's "first_output" of run ffade17 was the stopped
        # job's last flush): the first second with output after the resubmit.
        first = min(sec for row in rows for sec, _, _ in row["lat"] if sec >= change["resubmitted"])
        change = change | {"first_output": float(first)}
        settled = (first + 30.0, change["done"])
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
        "settled": None
        if settled is None
        else {
            "window_s": [round(settled[0], 3), round(settled[1], 3)],
            **output_gaps(rows, *settled),
            **latency_percentiles(rows, int(settled[0]) + 1, int(settled[1])),
        },
        "new_node_share_secs": None if share_secs is None else round(share_secs, 1),
        "share_by_outputs_secs": None if by_outputs is None else round(by_outputs, 1),
        "phases": {
            k: round(change[k] - start, 2)
            for k in ("saved", "killed", "resubmitted", "first_output")
            if k in change
        },
        "exact": bool(final) and final.get("emitted") == final.get("state_total"),
        "load_avg_1min": [r["load"] for r in records if "load" in r],
        "emitted": final.get("emitted") if final else None,
        "state_total": final.get("state_total") if final else None,
        "moves": [
            m | {"stall_ms": move_stall(rows, m["key_group"], start + m["migrate_s"])}
            for m in moves(out_dir, start, end)
            if "migrate_s" in m
        ],
        "timeline": [  # s from the request, outputs, highest latency (ms)
            [t - int(start), n, ms]
            for t, n, ms in zip(secs, outputs, top, strict=True)
            if start - 60 <= t <= end + 30
        ],
        "assignment_after": change["assignment_after"],
        "owned": change.get("owned"),
        "summary": outcome.summary,
        "output_dir": out_dir,
    }


def run_one(cfg, way: str, wait: int, session_secs: float) -> dict[str, Any]:
    down(cfg, wipe=True)
    up(cfg, supervisors=2, slots=2)
    host, port = env_nimbus(cfg.project, CLUSTER_ENV)
    # The 100,000 keys' preload leaves a backlog of seconds on a crowded machine: let it
    # drain before the steady window.
    settle = Step(kind="idle", seconds=SETTLE_SECS, tag="settle")
    steady = Step(kind="idle", seconds=STEADY_SECS, tag="steady")
    if way == "elastorm":
        plan = [
            settle,
            steady,
            Step(kind="scale", nodes=3, tag="elastorm 2->3"),
            Step(kind="idle", seconds=AFTER_SECS, tag="after"),
        ]
    elif way == "rebalance":
        plan = [
            settle,
            steady,
            Step(kind="rebalance", nodes=3, wait=wait, seconds=wait + 60.0, tag="rebalance"),
        ]
    else:
        plan = [settle, steady, Step(kind="resubmit", nodes=3, seconds=60.0, tag="resubmit")]
    driver = SyntheticDriver(plan, settings(way, session_secs))
    provisioner = LocalSupervisors(cfg, slots=2)
    driver.provisioner = provisioner
    driver.assignments = lambda: nimbus.executor_nodes(
        host, port, driver.topology, lambda _, p: node_of_port(cfg, p)
    )
    driver.rebalancer = lambda w, n: nimbus.rebalance(host, port, driver.topology, w, n)
    driver.killer = lambda name: nimbus.kill(cfg.project, CLUSTER_ENV, name)
    jar = cfg.home / "jars" / "topology.jar"  # built by run_topology
    home = str(cfg.home.resolve())

    def resubmit(name: str, options: dict[str, object]) -> None:
        options = restore_options(options, topology=name, zookeeper=cfg.zookeeper, home=home)
        nimbus.submit(cfg.project, CLUSTER_ENV, driver.name, name, jar, checked_options(options))

    def savepoint(topology: str, name: str) -> None:
        store = store_of(
            str(durable_home(cfg)[DurableConfig.key("uri")]), home=home, topology=topology
        )
        take_savepoint(store, cfg.zookeeper, topology, name)

    driver.resubmitter = resubmit
    driver.savepointer = savepoint
    os.environ["ELASTORM_KEYED_TASKS"] = "4"
    try:
        outcome = run_topology(cfg, CLUSTER_ENV, driver, timeout=900)
    finally:
        down(cfg, wipe=True)
    return measure(outcome, KIND[way])


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
    label = {"scale": "elastorm live", "rebalance": "Storm rebalance", "resubmit": "resubmit"}
    names = [label.get(r["kind"], r["kind"]) for r in results]
    x = range(len(results))
    bars = (
        ("steady", "max_group_stall_ms", "stall, steady"),
        ("during", "max_group_stall_ms", "stall, during 2->3"),
        ("during", "max_group_gap_ms", "gap, during 2->3"),
    )
    for j, (window, measure, text) in enumerate(bars):
        values = [(r[window].get(measure) or 0) / 1000 for r in results]
        axes[0].bar([i + (j - 1) * 0.27 for i in x], values, 0.27, label=text)
    axes[0].axhline(0.145, color="k", ls="--", lw=0.8, label="145 ms target")
    axes[0].set_xticks(list(x), names)
    axes[0].set_ylabel("longest stop of a key group's output (s)")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
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


def remeasure(raw: Path) -> int:
    """:func:`measure` again on the run directories a raw results file names."""
    old = json.loads(raw.read_text())
    results = []
    for r in old["results"]:
        facts = json.loads((Path(r["output_dir"]) / "records.json").read_text())
        facts["output_dir"] = r["output_dir"]
        outcome = Outcome(summary=r.get("summary", ""), ok=r["exact"], facts=facts)
        again = measure(outcome, r["kind"])
        results.append(again | {"run_secs": r.get("run_secs")})
    out = raw.with_name(raw.stem + "-remeasured.json")
    out.write_text(json.dumps({"commit": old["commit"], "results": results}, indent=1))
    print(f"remeasured: {out}")
    return 0


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebalance-wait", type=int, default=30, help="rebalance wait_secs")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "raw")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "rescale_bench.png")
    parser.add_argument(
        "--session-secs", type=float, default=4.0, help="elastorm.zookeeper.session_secs"
    )
    parser.add_argument("--only", choices=WAYS, action="append", help="run only these ways")
    parser.add_argument(
        "--replot", type=Path, default=None, help="only redraw the plot from a raw results file"
    )
    parser.add_argument(
        "--remeasure",
        type=Path,
        default=None,
        help="measure a raw results file's runs again from their run directories "
        "(records.json, outputs); writes <raw>-remeasured.json",
    )
    args = parser.parse_args()
    if args.remeasure:
        return remeasure(args.remeasure)
    if args.replot:
        plot(json.loads(args.replot.read_text())["results"], args.plot)
        print(f"plot: {args.plot}")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = load_config()
    commit = bench_common.commit()
    results = []
    for way in args.only or WAYS:
        began = time.time()
        results.append(run_one(cfg, way, args.rebalance_wait, args.session_secs))
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
            f"{s['max_group_gap_ms']}; input's own {d['max_input_gap_ms']} / "
            f"{s['max_input_gap_ms']}), stall {d['max_group_stall_ms']} ms (steady "
            f"{s['max_group_stall_ms']}), job gap {d['job_gap_ms']} ms, stall "
            f"{d['job_stall_ms']} ms, p50 {d['p50_ms']} / p99 {d['p99_ms']} ms (steady "
            f"{s['p50_ms']} / {s['p99_ms']}: p99 x{ratio(d['p99_ms'], s['p99_ms'])}), new "
            f"node's share after {r['new_node_share_secs']} s (by outputs "
            f"{r['share_by_outputs_secs']} s), exact totals {r['exact']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
