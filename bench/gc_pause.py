"""Pauses of Python's cyclic GC in a router holding its output buffer, by GC schedule.

Usage::

    PYTHONPATH=src .venv/bin/python bench/gc_pause.py [--rate 10000] [--seconds 60]

Feeds ``--rate`` x ``--seconds`` tuples through an :class:`Emitter` as the
``KeyRouter`` does (each buffered with its input's values list), trims every key
group every 5 s of simulated time up to one checkpoint interval back (what the
keyed task's checkpoints do), and times every collection with ``gc.callbacks``
in CPU time of this thread (``time.thread_time``: other jobs on the shared cores
disturb it less). With ``--paced`` the tuples are fed at ``--rate`` in real time
and each one's lag behind its due time is reported too (p50/p99/p99.9/max): what a
GC pause does to the tuples queued behind it, without Storm. Two schedules in
the same run, alternating ``--repeats`` times: ``python`` (Python's default
thresholds) and ``elastorm``
(``elastorm.storm.pygc``: full collections every ``elastorm.gc.full_every_secs``
of simulated time, from a tick every simulated second). Prints, per schedule,
collections and CPU per generation and the longest pause.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from elastorm.config import TopologyConfig  # noqa: E402
from elastorm.core.messages import Trim  # noqa: E402
from elastorm.core.migration.emitter import Emitter  # noqa: E402
from elastorm.core.routing import RoutingTable  # noqa: E402
from elastorm.storm.pygc import FullCollections  # noqa: E402

CHECKPOINT_SECS = 5.0
SOURCE = "router:4"


def run(schedule: str, rate: int, seconds: float, paced: bool = False) -> dict:
    """One simulated run; the collector's pauses by generation (ms of CPU). With
    ``paced``, tuple ``i`` is due at ``i / rate`` s of wall clock, and each tuple's
    lag (done minus due, ms) is kept: a GC pause delays every tuple behind it."""
    saved = gc.get_threshold()
    gc.collect()
    pauses: list[tuple[int, float]] = []
    began = [0.0]

    def timer(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.thread_time()
        else:
            pauses.append((info["generation"], 1e3 * (time.thread_time() - began[0])))

    every = TopologyConfig().gc_full_every_secs if schedule == "elastorm" else 0.0
    full = FullCollections(every, now=0.0)
    emitter = Emitter(task=4, routing=RoutingTable.round_robin(20, [10]), source=SOURCE)
    keys = [f"k{i}" for i in range(1000)]
    per_ckpt = int(rate * CHECKPOINT_SECS)
    lags: list[float] = []
    gc.callbacks.append(timer)
    start = time.perf_counter()
    try:
        for i in range(int(rate * seconds)):
            if paced:
                due = start + i / rate
                ahead = due - time.perf_counter()
                if ahead > 0.0005:
                    time.sleep(ahead)
            values = [keys[i % 1000], 1.0 + i]  # the input's values, kept in the buffer
            emitter.emit(values[0], values, 2.0)
            if paced:
                lags.append(1e3 * (time.perf_counter() - due))
            if i % rate == rate - 1:
                full.tick((i + 1) / rate)  # the component's tick, once a simulated second
            if i % per_ckpt == per_ckpt - 1 and i > per_ckpt:
                last = emitter.counters.snapshot()
                for g in range(20):
                    upto = max(0, last.get((SOURCE, g), 0) - per_ckpt // 20)
                    emitter.receive(10, Trim(key_group=g, watermarks={SOURCE: upto}))
    finally:
        gc.callbacks.remove(timer)
        gc.set_threshold(*saved)
    out: dict = {"schedule": schedule, "rate": rate, "seconds": seconds}
    for gen in (0, 1, 2):
        ms = [p for g, p in pauses if g == gen]
        out[f"gen{gen}"] = {
            "count": len(ms),
            "median_ms": round(statistics.median(ms), 2) if ms else None,
            "max_ms": round(max(ms), 2) if ms else None,
            "total_ms": round(sum(ms), 1),
        }
    out["buffered_at_end"] = len(emitter.buffer)
    if paced:
        lags.sort()
        out["lag_ms"] = {
            q: round(lags[min(len(lags) - 1, int(f * len(lags)))], 2)
            for q, f in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000, help="tuples per simulated second")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds (60)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--paced", action="store_true",
        help="feed the tuples at --rate in real time and report each one's lag (p50/p99/max)",
    )  # fmt: skip
    parser.add_argument("--json", default=None, help="append every result to this JSONL file")
    args = parser.parse_args()
    for i in range(args.repeats):
        base = None
        for schedule in ("python", "elastorm"):
            r = run(schedule, args.rate, args.seconds, args.paced) | {"repeat": i + 1}
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
            paused = sum(r[f"gen{g}"]["total_ms"] for g in (0, 1, 2))
            base = base or paused
            print(
                f"[{schedule} #{i + 1}] "
                + "; ".join(
                    f"gen{g} {r[f'gen{g}']['count']} x median {r[f'gen{g}']['median_ms']} "
                    f"max {r[f'gen{g}']['max_ms']} ms"
                    for g in (0, 1, 2)
                )
                + f"; GC CPU {paused:.0f} ms (x{paused / base:.2f} of python's)"
                + (f"; lag ms {r['lag_ms']}" if args.paced else ""),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
