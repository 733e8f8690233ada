"""Peace (Kwon et al. 2008) against uncoordinated writes: many tasks checkpoint at once.

Usage::

    PYTHONPATH=src .venv/bin/python bench/peace.py [--writers 12] [--mb 16] [--rounds 3]

Starts the project's HDFS (``elastorm hdfs up``: a NameNode and DataNodes on loopback,
replication from config.json) unless ``--uri`` names another store, then runs both
arms in one run, alternating ``--repeats`` times:

- ``none``: every writer writes as soon as it has its checkpoint (today's default);
- ``peace``: ``elastorm.durable.schedule = peace``: each writer starts writes only in
  its window of the cycle (``--capacity`` writers per slot), as the runtime does.

Each writer is a process of its own (a keyed task is one), holding the runtime's
``DurableWriter`` made by ``start_writer`` (the same code path as a keyed task, no
Storm). Each round every writer offers a full checkpoint of ``--mb`` MB of one key
group at the same instant (the start of a cycle), then runs a processing loop (a
fixed unit of CPU work, about 1 ms, repeated) until the round ends, timing each unit:
the processing-latency proxy (what a task's tuples see while its writer thread
encodes and sends, and the other writers contend). Reported per arm: each writer's
completion (offer to durable) p50 and p99, all writes' completion (the round's last
writer) mean, and the processing unit's p50/p99.

The cycle (``--cycle-secs``; in the runtime the durable period
``elastorm.checkpoint_interval_secs`` x ``every``): by default 1.25 x the time
``--capacity`` concurrent writes of one checkpoint take, measured first, per slot
(Kwon et al.'s time step is about the time to write one chunk); the slots are
fixed, not ended by completions as in the paper (no coordinator here), so a slot
too long shows as waiting in the ``peace`` arm's completions.

Raw records (one JSON line per writer and round, then one summary line per arm) go to
``docs/raw/peace_<commit>.jsonl`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ROOT, commit  # noqa: E402

from elastorm.config import DurableConfig  # noqa: E402
from elastorm.core.messages import CheckpointDelta  # noqa: E402
from elastorm.durable.format import encode_checkpoint, group_dir  # noqa: E402
from elastorm.durable.store import Within, open_store, resolve_uri  # noqa: E402
from elastorm.durable.submissions import SubmissionView  # noqa: E402
from elastorm.durable.writer import start_writer  # noqa: E402

OPERATOR = "op"
ARMS = ("none", "peace")
UNIT_ITERATIONS = 20_000  # the processing proxy's unit of work (about 1 ms of CPU)


SUBMISSION = "bench"
"""The submission directory (a storm id, in a topology) the writers write into."""


def checkpoint_of(group: int, number: int, mb: float) -> CheckpointDelta:
    """A full checkpoint of ``group`` holding about ``mb`` MB of values (1 KB each)."""
    value = "x" * 1000
    entries = {f"k{i:08d}": value for i in range(max(1, int(mb * 1000)))}
    return CheckpointDelta(
        key_group=group,
        checkpoint=(1, number),
        base=None,
        entries=entries,
        watermarks={"src": number},
        out_seq={},
    )


def unit_of_work() -> None:
    """A fixed piece of CPU work, standing in for processing one tuple."""
    total = 0
    for i in range(UNIT_ITERATIONS):
        total += i * i
    if total < 0:
        raise AssertionError


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def writer_process(rank: int, plan: dict, results) -> None:
    """One writer (a keyed task): per round, offer a checkpoint at the round's start,
    process until its end, and report the write's completion and the units' times."""
    config = DurableConfig(
        uri=plan["uri"],
        schedule=plan["arm"],
        concurrent_writes=plan["capacity"],
    )  # every other option at its default, as a keyed task has it
    root = resolve_uri(plan["uri"], home=plan["home"], topology=plan["topology"])
    assert root is not None
    writer = start_writer(
        config,
        SubmissionView(open_store(root), SUBMISSION),
        task=rank,
        tasks=list(range(plan["writers"])),
        period_secs=plan["cycle"],
    )
    assert writer is not None
    for number, start in enumerate(plan["starts"], start=1):
        delta = checkpoint_of(rank, number, plan["mb"])
        time.sleep(max(0.0, start - time.time()))
        offered = time.time()
        writer.offer(OPERATOR, delta)
        done = None
        units: list[float] = []
        while time.time() < start + plan["round_secs"] or done is None:
            began = time.perf_counter()
            unit_of_work()
            units.append(time.perf_counter() - began)
            if done is None and writer.health().get("writes", 0) >= number:
                done = time.time()
        results.put(
            {
                "arm": plan["arm"],
                "repeat": plan["repeat"],
                "round": number,
                "writer": rank,
                "completion_secs": done - offered,
                "overran_round": done > start + plan["round_secs"],
                "unit_ms_p50": 1000 * percentile(units, 0.5),
                "unit_ms_p99": 1000 * percentile(units, 0.99),
                "units": len(units),
            }
        )
    writer.close()


def run_arm(arm: str, repeat: int, args, uri: str, cycle: float, home: str) -> list[dict]:
    """Start ``--writers`` writer processes under ``arm``; their per-round records."""
    round_secs = max(cycle, args.min_round_secs)
    period = math.ceil(round_secs / cycle) * cycle  # rounds begin on cycle starts
    first = (math.floor(time.time() / cycle) + 1) * cycle + period  # time to spawn
    plan = {
        "arm": arm,
        "repeat": repeat,
        "uri": uri,
        "capacity": args.capacity,
        "writers": args.writers,
        "mb": args.mb,
        "cycle": cycle,
        "round_secs": round_secs,
        "topology": f"bench-peace-{arm}-{repeat}-{int(time.time())}",
        "home": home,
        "starts": [first + r * period for r in range(args.rounds)],
    }
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=writer_process, args=(r, plan, results)) for r in range(args.writers)
    ]
    for p in procs:
        p.start()
    deadline = plan["starts"][-1] + period + 600  # a writer stuck this long: fail loudly
    rows = [
        results.get(timeout=max(1.0, deadline - time.time()))
        for _ in range(args.writers * args.rounds)
    ]
    for p in procs:
        p.join()
    clean(uri, plan["topology"], home, args.writers)
    return sorted(rows, key=lambda r: (r["round"], r["writer"]))


def clean(uri: str, topology: str, home: str, writers: int) -> None:
    """Delete the files an arm wrote (each key group's directory)."""
    root = resolve_uri(uri, home=home, topology=topology)
    assert root is not None
    store = Within(open_store(root), SUBMISSION)
    for group in range(writers):
        directory = group_dir(OPERATOR, group)
        for name in store.list(directory):
            store.delete(f"{directory}/{name}")


def calibrate(uri: str, args, home: str) -> float:
    """Seconds ``--capacity`` concurrent writes of one checkpoint take (the slot's base)."""
    root = resolve_uri(uri, home=home, topology=f"bench-peace-calibrate-{int(time.time())}")
    assert root is not None
    store = open_store(root)
    data = encode_checkpoint(checkpoint_of(0, 1, args.mb))
    paths = [f"calibrate/w{i}" for i in range(args.capacity)]
    threads = [threading.Thread(target=store.put, args=(p, data)) for p in paths]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - began
    for p in paths:
        store.delete(p)
    return took


def summary(arm: str, rows: list[dict]) -> dict:
    """One arm's numbers over every repeat and round."""
    completions = [r["completion_secs"] for r in rows]
    by_round: dict[tuple[int, int], float] = {}
    for r in rows:
        key = (r["repeat"], r["round"])
        by_round[key] = max(by_round.get(key, 0.0), r["completion_secs"])
    return {
        "arm": arm,
        "summary": True,
        "writes": len(rows),
        "writer_completion_p50_secs": percentile(completions, 0.5),
        "writer_completion_p99_secs": percentile(completions, 0.99),
        "all_writes_completion_mean_secs": statistics.fmean(by_round.values()),
        "unit_ms_p50": statistics.median(r["unit_ms_p50"] for r in rows),
        "unit_ms_p99": percentile([r["unit_ms_p99"] for r in rows], 0.99),
        "overran_rounds": sum(r["overran_round"] for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Peace (Kwon et al. 2008) against uncoordinated durable checkpoint "
        "writes, both arms in one run, on the project's HDFS.",
    )
    parser.add_argument("--writers", type=int, default=12, help="concurrent writers (tasks)")
    parser.add_argument("--mb", type=float, default=16.0, help="MB per checkpoint")
    parser.add_argument("--rounds", type=int, default=3, help="checkpoints per writer per arm")
    parser.add_argument("--repeats", type=int, default=2, help="arm pairs, order alternating")
    parser.add_argument(
        "--capacity", type=int, default=4, help="writers per slot (concurrent_writes)"
    )
    parser.add_argument(
        "--cycle-secs", type=float, default=0.0,
        help="the schedule's cycle; 0: 1.25 x a measured --capacity-write time per slot",
    )  # fmt: skip
    parser.add_argument(
        "--min-round-secs", type=float, default=5.0,
        help="a round lasts at least this (and at least a cycle): the processing window",
    )  # fmt: skip
    parser.add_argument(
        "--uri", default=None,
        help="durable store URI (default: start the project's HDFS and use it)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="raw JSONL file")
    args = parser.parse_args(argv)

    home = tempfile.mkdtemp(prefix="elastorm-peace-")
    if args.uri is not None:
        return measure(args, args.uri, home)
    from elastorm.runtime import hdfs
    from elastorm.runtime.config import load_config

    cfg = load_config()
    info = hdfs.up(cfg)
    print(f"hdfs up (pid {info['pid']}), {len(info['datanodes'])} DataNodes, store {info['uri']}")
    try:
        return measure(args, info["uri"], home)
    finally:  # the HDFS this run started is not left running
        hdfs.down(cfg, wipe=True)
        print("hdfs down")


def measure(args: argparse.Namespace, uri: str, home: str) -> int:
    """Both arms on the store ``uri``, ``args.repeats`` times; the table and the raw file."""
    slots = math.ceil(args.writers / args.capacity)
    cycle = args.cycle_secs
    if cycle <= 0:
        took = calibrate(uri, args, home)
        cycle = 1.25 * took * slots
        print(f"{args.capacity} concurrent {args.mb} MB writes: {took:.2f} s; cycle {cycle:.2f} s")
    out = args.out or ROOT / "docs" / "raw" / f"peace_{commit()}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with out.open("a") as raw:
        head = {"commit": commit(), "uri": uri, "cycle_secs": cycle, "slots": slots, **vars(args)}
        raw.write(json.dumps({**head, "out": str(out)}) + "\n")
        for repeat in range(args.repeats):
            for arm in ARMS if repeat % 2 == 0 else ARMS[::-1]:
                print(f"repeat {repeat}: {arm} ...", flush=True)
                got = run_arm(arm, repeat, args, uri, cycle, home)
                for row in got:
                    raw.write(json.dumps(row) + "\n")
                rows.extend(got)
        sums = [summary(arm, [r for r in rows if r["arm"] == arm]) for arm in ARMS]
        for s in sums:
            raw.write(json.dumps(s) + "\n")
    print(
        f"{'arm':6} {'writes':>6} {'writer p50 s':>12} {'writer p99 s':>12} "
        f"{'all writes s':>12} {'unit p50 ms':>11} {'unit p99 ms':>11} {'overran':>7}"
    )
    for s in sums:
        print(
            f"{s['arm']:6} {s['writes']:6d} {s['writer_completion_p50_secs']:12.2f} "
            f"{s['writer_completion_p99_secs']:12.2f} "
            f"{s['all_writes_completion_mean_secs']:12.2f} {s['unit_ms_p50']:11.2f} "
            f"{s['unit_ms_p99']:11.2f} {s['overran_rounds']:7d}"
        )
    print(f"raw: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
