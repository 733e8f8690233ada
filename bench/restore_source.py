"""A key group restored from its memory holder against from the durable store (issue 29).

Usage::

    .venv/bin/python bench/restore_source.py [--keys 1000 10000 100000] [--repeats 5]

Starts the project's HDFS (``elastorm hdfs up``) unless ``--uri`` names a store, and
measures, for one key group of ``--keys`` keys (each ``{"count": n, "sum": x}``, the
flights job's op2 record), in one run, arms alternating:

- ``memory``: what a restore on the group's checkpoint holder does: the held copy
  (``CheckpointHolder.take``) promoted to live state (``checkpoint_to_state``);
- ``hdfs`` (and ``file``, a local directory, the embedded default): what a DURABLE
  restore's target does: the group's newest set read back from the store
  (``durable.restore.load_latest``: list the group's directory, read its manifest,
  read and checksum the base and its deltas, decode, rebuild) and promoted.

The set in the store is a base plus ``--deltas`` incremental checkpoints, each
updating 10% of the keys, as the durable writer leaves it between compactions. The
times are the restore step alone, not the failure detection and planning around it
(the chaos table's "restored after" has those: ``docs/benchmarks.md``). Raw records go
to ``docs/raw/restore_source_<commit>.jsonl`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ROOT, commit  # noqa: E402

from elastorm.core.checkpoint import CheckpointHolder, checkpoint_to_state  # noqa: E402
from elastorm.core.messages import CheckpointDelta  # noqa: E402
from elastorm.durable.format import Policy  # noqa: E402
from elastorm.durable.restore import load_latest  # noqa: E402
from elastorm.durable.store import DurableStore, open_store  # noqa: E402
from elastorm.durable.writer import write_checkpoint  # noqa: E402

OPERATOR = "sum_delays"
GROUP = 3


def chain(keys: int, deltas: int, seed: int = 13) -> list[CheckpointDelta]:
    """A full checkpoint of ``keys`` keys, then ``deltas`` deltas of 10% of them each."""
    rng = random.Random(seed)
    entries = {
        f"N{k:06d}": {"count": rng.randrange(1, 500), "sum": rng.random()} for k in range(keys)
    }
    marks = {"flights_spout:1": keys}
    out = [CheckpointDelta(key_group=GROUP, checkpoint=(1, 1), base=None, entries=entries,
                           watermarks=marks, out_seq={})]  # fmt: skip
    for n in range(2, deltas + 2):
        touched = {k: {"count": rng.randrange(1, 500), "sum": rng.random()}
                   for k in rng.sample(sorted(entries), max(1, keys // 10))}  # fmt: skip
        marks = {"flights_spout:1": keys + n * 100}
        out.append(CheckpointDelta(key_group=GROUP, checkpoint=(1, n), base=(1, n - 1),
                                   entries=touched, watermarks=marks, out_seq={}))  # fmt: skip
    return out


def memory_restore(deltas: list[CheckpointDelta]) -> float:
    """Seconds to take the held copy and promote it (the holder's deltas applied before)."""
    holder = CheckpointHolder()
    for d in deltas:
        holder.apply(d)
    began = time.perf_counter()
    state = checkpoint_to_state(holder.take(GROUP), epoch=2)
    took = time.perf_counter() - began
    assert state.key_group == GROUP
    return took


def write_set(store: DurableStore, deltas: list[CheckpointDelta]) -> None:
    """The group's durable set: the base, then each delta (the writer's path)."""
    current = None
    for d in deltas:
        current = write_checkpoint(store, Policy(), OPERATOR, current, d)


def durable_restore(store: DurableStore, keys: int) -> float:
    """Seconds to read the newest set back and promote it."""
    began = time.perf_counter()
    loaded = load_latest(store, OPERATOR, GROUP)
    assert loaded is not None
    state = checkpoint_to_state(loaded.copy, epoch=2)
    took = time.perf_counter() - began
    assert len(state.items()) == keys, len(state.items())
    return took


def measure(args: argparse.Namespace, stores: dict[str, DurableStore]) -> int:
    out = args.out or ROOT / "docs" / "raw" / f"restore_source_{commit()}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with out.open("a") as raw:
        raw.write(json.dumps({"commit": commit(), **{k: str(v) for k, v in vars(args).items()},
                              "stores": {n: s.uri for n, s in stores.items()}}) + "\n")  # fmt: skip
        for keys in args.keys:
            deltas = chain(keys, args.deltas)
            for store in stores.values():
                write_set(store, deltas)
            arms = ["memory", *stores]
            times: dict[str, list[float]] = {a: [] for a in arms}
            for repeat in range(args.repeats):
                for arm in arms if repeat % 2 == 0 else arms[::-1]:
                    took = (
                        memory_restore(deltas)
                        if arm == "memory"
                        else durable_restore(stores[arm], keys)
                    )
                    times[arm].append(took)
                    raw.write(json.dumps({"keys": keys, "arm": arm, "repeat": repeat,
                                          "secs": took}) + "\n")  # fmt: skip
            for arm in arms:
                med = statistics.median(times[arm])
                rows.append((keys, arm, med, max(times[arm])))
    print("| keys | arm | restore median | max | vs memory |")
    print("|---:|---|---:|---:|---:|")
    base = {k: m for k, a, m, _ in rows if a == "memory"}
    for keys, arm, med, top in rows:
        ratio = med / base[keys] if base[keys] else float("inf")
        print(f"| {keys:,} | {arm} | {med * 1000:.3f} ms | {top * 1000:.3f} ms | {ratio:,.0f}x |")
    print(f"raw: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="One key group restored from its memory holder against from the "
        "durable store (the project's HDFS and a local directory), arms in one run.",
    )
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--deltas", type=int, default=5, help="deltas after the base")
    parser.add_argument("--repeats", type=int, default=5, help="restores per arm and size")
    parser.add_argument("--uri", default=None, help="a store instead of the project's HDFS")
    parser.add_argument("--out", type=Path, default=None, help="raw JSONL file")
    args = parser.parse_args(argv)
    local = open_store(f"file://{tempfile.mkdtemp(prefix='elastorm-restore-')}")
    if args.uri is not None:
        return measure(args, {"store": open_store(args.uri), "file": local})
    from elastorm.runtime import hdfs
    from elastorm.runtime.config import load_config

    cfg = load_config()
    info = hdfs.up(cfg)
    print(f"hdfs up (pid {info['pid']}), {len(info['datanodes'])} DataNodes, store {info['uri']}")
    try:
        return measure(args, {"hdfs": open_store(f"{info['uri']}/restore-bench"), "file": local})
    finally:  # the HDFS this run started is not left running
        hdfs.down(cfg, wipe=True)
        print("hdfs down")


if __name__ == "__main__":
    sys.exit(main())
