"""Where an elastic tuple's time goes in Python: the op1 -> op2 path without Storm.

Usage::

    .venv/bin/python bench/keyed_path_profile.py [--rows N]

Runs the flights rows' (tailnum, [id, year, arr_delay]) through what the Storm
adapters do per tuple — ``Emitter.emit`` (routing, numbering, buffering), the wire
encoding (``to_wire``/``from_wire``), ``TaskCoordinator.receive`` (dedup, fold,
fragments) — with checkpoints every 5,000 tuples, and compares it in the same run
with the plain op2 fold (``SumDelays``' dict update). Prints tuples/s of each, the
cost per stage (emit, to_wire, from_wire, receive), the same stages with data runs
(issue 34: ``RunBuilder``, ``encode_runs``/``decode_runs``, ``receive_run``) for each
``--runs`` flush size, and a cProfile summary of the elastic path. Times are CPU
time of this process (``time.process_time``), best of ``--repeats``, so other jobs on
the shared cores disturb them less.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path

from elastorm.core.state import fold

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bolts.flights_elastic import add_delay  # noqa: E402
from demos.flights_schema import (  # noqa: E402
    column_index,
    default_flights_path,
    open_rows,
    parse_row,
)
from elastorm.core.actions import Send  # noqa: E402
from elastorm.core.messages import decode_runs, encode_runs  # noqa: E402
from elastorm.core.migration.coordinator import TaskCoordinator  # noqa: E402
from elastorm.core.migration.emitter import Emitter  # noqa: E402
from elastorm.core.migration.runs import RunBuilder  # noqa: E402
from elastorm.core.routing import RoutingTable  # noqa: E402
from elastorm.storm.elastic import from_wire, to_wire  # noqa: E402


def load(n: int) -> list[tuple[str, list]]:
    rows = open_rows(default_flights_path())
    header = next(rows)
    index, width = column_index(header), len(header)
    out = []
    for row_no, row in enumerate(rows):
        reason, parsed = parse_row(row, index, width)
        if reason is None and parsed[2] is not None:
            tailnum, year, arr_delay, _, ts = parsed
            out.append((tailnum, [row_no, year, arr_delay], ts))
        if len(out) >= n:
            break
    return out


clock = time.process_time


def plain(rows) -> float:
    totals: dict = {}
    start = clock()
    for key, (_, year, delay), _ts in rows:
        t = totals.get((key, year))
        if t is None:
            t = totals[(key, year)] = [0, 0]
        t[0] += delay
        t[1] += 1
    return len(rows) / (clock() - start)


def elastic(rows) -> float:
    tasks = [10, 11]
    routing = RoutingTable.round_robin(20, tasks)
    emitter = Emitter(task=4, routing=routing, source="extract_delays:4")
    coords = {
        t: TaskCoordinator(
            task=t,
            num_key_groups=20,
            upstreams=[4],
            step=fold(add_delay),
            owned=routing.key_groups_of(t),
            holders={g: tasks[1 - tasks.index(t)] for g in routing.key_groups_of(t)},
        )
        for t in tasks
    }
    start = clock()
    for i, (key, value, ts) in enumerate(rows):
        for send in emitter.emit(key, value, ts):
            message = from_wire(to_wire(send.message))
            for action in coords[send.to_task].receive(4, message):
                if isinstance(action, Send):  # a checkpoint delta to the holder
                    holder = coords[action.to_task]
                    for ack in holder.receive(send.to_task, from_wire(to_wire(action.message))):
                        if isinstance(ack, Send):
                            coords[ack.to_task].receive(action.to_task, ack.message)
        if i % 5000 == 4999:
            for t, c in coords.items():
                for g in c.owned():
                    for action in c.checkpoint(g):
                        if isinstance(action, Send):
                            coords[action.to_task].receive(t, from_wire(to_wire(action.message)))
    return len(rows) / (clock() - start)


def stages(rows, flush: int = 1) -> dict[str, float]:
    """Microseconds per tuple of each stage alone (no checkpoints), one stage at a time:
    one data message per tuple (``flush`` 1) or, as ``elastorm.data.batch_size`` =
    ``flush`` sends them, data runs of up to ``flush`` tuples per Storm tuple.

    Each stage's outputs are kept for the next one, so the cyclic GC is paused here
    (it would otherwise scan the growing lists, a cost the streaming path does not have).
    """
    gc.collect()
    gc.disable()
    try:
        return _stages(rows) if flush == 1 else _run_stages(rows, flush)
    finally:
        gc.enable()


def _path() -> tuple[Emitter, dict[int, TaskCoordinator]]:
    """The emitter and op2's two tasks of the staged runs (no holders: no checkpoints)."""
    tasks = [10, 11]
    routing = RoutingTable.round_robin(20, tasks)
    emitter = Emitter(task=4, routing=routing, source="extract_delays:4")
    coords = {
        t: TaskCoordinator(
            task=t, num_key_groups=20, upstreams=[4], step=fold(add_delay),
            owned=routing.key_groups_of(t),
        )
        for t in tasks
    }  # fmt: skip
    return emitter, coords


def _run_stages(rows, flush: int) -> dict[str, float]:
    """The data-runs path (issue 34): sends into a ``RunBuilder`` taken every ``flush``
    tuples and encoded per task (``to_runs``), decoded (``from_runs``), admitted run by
    run (``receive_run``); ``storm_tuples`` is Storm tuples per 1,000 data tuples."""
    emitter, coords = _path()
    t0 = clock()
    sends = [send for key, value, ts in rows for send in emitter.emit(key, value, ts)]
    t1 = clock()
    builder, fields = RunBuilder(), []
    for send in sends:
        message = send.message
        if builder.add(send.to_task, message.key_group, message.item) >= flush:
            fields += [(t, encode_runs(runs)) for t, runs in builder.take().items()]
    fields += [(t, encode_runs(runs)) for t, runs in builder.take().items()]
    t2 = clock()
    decoded = [(t, decode_runs(field)) for t, field in fields]
    t3 = clock()
    for task, runs in decoded:
        receive_run = coords[task].receive_run
        for run in runs:
            receive_run(4, run)
    t4 = clock()
    n = len(rows) / 1e6
    return {
        "emit": (t1 - t0) / n,
        "to_runs": (t2 - t1) / n,
        "from_runs": (t3 - t2) / n,
        "receive_run": (t4 - t3) / n,
        "storm_tuples": len(fields) / len(rows) * 1000,
    }


def _stages(rows) -> dict[str, float]:
    emitter, coords = _path()
    t0 = clock()
    sends = [send for key, value, ts in rows for send in emitter.emit(key, value, ts)]
    t1 = clock()
    texts = [to_wire(send.message) for send in sends]
    t2 = clock()
    messages = [from_wire(text) for text in texts]
    t3 = clock()
    for send, message in zip(sends, messages, strict=True):
        coords[send.to_task].receive(4, message)
    t4 = clock()
    n = len(rows) / 1e6
    return {
        "emit": (t1 - t0) / n,
        "to_wire": (t2 - t1) / n,
        "from_wire": (t3 - t2) / n,
        "receive": (t4 - t3) / n,
    }


def _flush_label(flush: int) -> str:
    return "one data message per tuple" if flush == 1 else f"data runs, flush every {flush}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="best of (3)")
    parser.add_argument(
        "--runs",
        type=lambda text: [int(f) for f in text.split(",") if f],
        default=[20, 100],
        help="data runs stages: tuples per flush, comma separated (20,100; empty: none)",
    )
    args = parser.parse_args()
    rows = load(args.rows)
    base = max(plain(rows) for _ in range(args.repeats))
    rate = max(elastic(rows) for _ in range(args.repeats))
    print(
        f"plain op2 fold: {base:,.0f} tuples/s; elastic op1->op2 path: {rate:,.0f} tuples/s "
        f"({1e6 / rate:.1f} us per tuple; {rate / base:.3f} of plain)"
    )
    for flush in (1, *args.runs):
        runs = [stages(rows, flush) for _ in range(args.repeats)]
        best = {stage: min(run[stage] for run in runs) for stage in runs[0]}
        per_k = best.pop("storm_tuples", 1000.0)
        print(
            f"per stage, us per tuple (no checkpoints), {_flush_label(flush)}: "
            + ", ".join(f"{stage} {us:.2f}" for stage, us in best.items())
            + f"; sum {sum(best.values()):.2f}; Storm tuples per 1k: {per_k:,.0f}"
        )
    profile = cProfile.Profile()
    profile.runcall(elastic, rows)
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
