"""End-to-end throughput of the flights job on Storm (tuples/s): plain vs elastic.

Usage::

    .venv/bin/python bench/flights_throughput.py [--limit N] [--repeats R] [--env local]
        [--topologies flights,flights_elastic]

For each repeat and topology: the job on a fresh LocalCluster (or a running
``--env``), all rows by default, checked against pandas (a run that fails the
check is not counted). Throughput = spout rows / (time from the first poll that
saw the spout reading to the poll that saw every tuple at the sink; polls every
1 s). ``flights_elastic`` runs op2 on 20 key groups with the same 2 tasks as the
plain job, checkpoints every 5 s and no migrations. Repeats alternate the
topologies so machine noise hits both alike. In the same run it measures the
components wired in one Python process with no Storm (``bolts.pipeline``), and
prints every rate as a ratio of that baseline and elastic/plain. It also adds up
the CPU time of each run's processes (``CpuMeter``: the topology's worker JVMs and
their Python children), which the other jobs on shared cores disturb much less
than wall-clock rates. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's drivers/

from demos.flights_schema import default_flights_path  # noqa: E402
from drivers.flights import FlightsDriver  # noqa: E402
from drivers.flights_elastic import ElasticFlightsDriver  # noqa: E402
from elastorm.runtime.config import load_config  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402


def in_process_rate(limit: int | None) -> tuple[float, int]:
    """Rows/s of spout -> op1 -> op2/op3/op4 -> sink by direct calls in this process."""
    from bolts.pipeline import run_pipeline

    started = time.perf_counter()
    rows = run_pipeline(default_flights_path(), limit)
    return rows / (time.perf_counter() - started), rows


class CpuMeter:
    """CPU seconds used by one topology's processes (workers and their Python children).

    Polls ``/proc`` every ``interval`` s on a thread: worker JVMs of this project
    whose ``-Dstorm.id=`` starts with ``<topology>-`` and all their descendants; keeps each
    process's latest ``utime + stime``. On a shared machine wall-clock rates swing
    with the other jobs' load, CPU time per row much less (Linux only).
    """

    def __init__(self, topology: str, interval: float = 0.5) -> None:
        self.marker = f"-Dstorm.id={topology}-".encode()
        self.project = str(Path(__file__).resolve().parents[1]).encode()
        self.interval = interval
        self.cpu: dict[int, tuple[str, float]] = {}  # pid -> (what it runs, seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> CpuMeter:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)

    def poll(self) -> None:
        procs = read_procs(self._tick)
        # The project's own workers only: other checkouts on this machine run topologies
        # of the same names (a chaos run's flights_elastic), and counting their JVMs
        # gave more CPU seconds than two cores have (docs/benchmarks.md, 2026-11-24 23:44).
        workers = {
            pid for pid, (_, _, cmd) in procs.items() if self.marker in cmd and self.project in cmd
        }
        if not workers:  # local mode: the LocalRunner JVM of this project runs the executors
            workers = {
                pid
                for pid, (_, _, cmd) in procs.items()
                if b"LocalRunner" in cmd and self.project in cmd
            }
        mine = with_descendants(procs, workers)
        for pid in mine:
            _, seconds, cmd = procs[pid]
            self.cpu[pid] = (_process_kind(cmd), seconds)

    def seconds(self) -> tuple[float, float]:
        """``(all processes, Python processes only)`` CPU seconds."""
        total = sum(s for _, s in self.cpu.values())
        return total, sum(s for kind, s in self.cpu.values() if kind != "jvm")

    def by_kind(self) -> dict[str, float]:
        """CPU seconds per component class (``jvm`` for the worker JVMs), summed over tasks."""
        out: dict[str, float] = {}
        for kind, s in self.cpu.values():
            out[kind] = out.get(kind, 0.0) + s
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def read_procs(tick: int) -> dict[int, tuple[int, float, bytes]]:
    """Every process: pid -> (parent pid, CPU seconds (user + system), command line)."""
    procs: dict[int, tuple[int, float, bytes]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        # after "(comm)": state ppid ... utime(12th) stime(13th)
        seconds = (int(fields[11]) + int(fields[12])) / tick
        procs[int(entry)] = (int(fields[1]), seconds, cmd)
    return procs


def with_descendants(procs: dict[int, tuple[int, float, bytes]], roots: set[int]) -> set[int]:
    """``roots`` and every process below them in ``procs``."""
    mine = set(roots)
    grew = True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in mine} - mine
        mine |= more
        grew = bool(more)
    return mine


def _process_kind(cmdline: bytes) -> str:
    """``jvm``, or the component class a ``streamparse_run`` process runs (its last arg)."""
    args = cmdline.rstrip(b"\0").split(b"\0")
    if b"python" not in args[0]:
        return "jvm"
    return args[-1].decode(errors="replace").rsplit(".", 1)[-1]


def _storm_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` from the command line; VALUE parsed as JSON when it is JSON."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--storm-option wants KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def make_driver(topology: str, limit: int | None) -> FlightsDriver:
    if topology == "flights":
        return FlightsDriver(limit)
    # Same parallelism as the plain job, no migrations, full speed, checkpoints every 5 s.
    os.environ["ELASTORM_KEYED_TASKS"] = "2"
    return ElasticFlightsDriver(limit, script=(), max_rate=0.0, checkpoint_interval=5.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="rows (default: all 336,776)")
    parser.add_argument("--repeats", type=int, default=2, help="Storm runs per topology (2)")
    parser.add_argument("--env", default="local", help="config.json env (default: local)")
    parser.add_argument(
        "--topologies",
        default="flights,flights_elastic",
        help="comma-separated (default: flights,flights_elastic)",
    )
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument(
        "--storm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topology config for both jobs (repeatable; VALUE as JSON, else a string), "
        "e.g. topology.disable.loadaware.messaging=true",
    )
    args = parser.parse_args()
    extra = dict(_storm_option(o) for o in args.storm_option)

    cfg = load_config()
    topologies = args.topologies.split(",")
    base_rate, base_rows = in_process_rate(args.limit)
    print(f"baseline in-process pipeline: {base_rows} rows, {base_rate:,.0f} rows/s")
    rates: dict[str, list[float]] = {t: [] for t in topologies}
    cpu: dict[str, list[dict[str, float]]] = {t: [] for t in topologies}
    per_component: dict[str, list[dict[str, float]]] = {t: [] for t in topologies}
    for i in range(args.repeats):
        for topology in topologies:
            load = os.getloadavg()[0]
            with CpuMeter(topology) as meter:
                outcome = run_topology(
                    cfg,
                    args.env,
                    make_driver(topology, args.limit),
                    timeout=1800,
                    extra_options=extra,
                )
            if not outcome.ok:
                print(f"{topology} run {i + 1}: check against pandas FAILED, not counted")
                print(outcome.summary)
                continue
            seconds = outcome.facts["processing_seconds"]
            rows = outcome.facts["rows"]
            rate = rows / seconds
            rates[topology].append(rate)
            total, python = meter.seconds()
            cpu[topology].append(
                {"all_ms_per_krow": 1e6 * total / rows, "python_ms_per_krow": 1e6 * python / rows}
            )
            by_kind = {k: round(1e6 * s / rows, 1) for k, s in meter.by_kind().items()}
            per_component[topology].append(by_kind)
            print(
                f"{topology} run {i + 1} on {args.env}: {rows} rows in "
                f"{seconds:.1f} s = {rate:,.0f} rows/s (ratio to in-process: "
                f"{rate / base_rate:.3f}); whole run incl. start-up {outcome.facts['seconds']} s; "
                f"CPU {total:.1f} s ({python:.1f} s Python) = "
                f"{1e6 * total / rows:.0f} ms per 1k rows; load {load:.1f}"
            )
            print(
                "  CPU ms per 1k rows by process: "
                + ", ".join(f"{k} {v}" for k, v in by_kind.items())
            )
    medians = {t: statistics.median(r) for t, r in rates.items() if r}
    cpu_medians = {
        t: {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        for t, runs in cpu.items()
        if runs
    }
    for topology, median in medians.items():
        c = cpu_medians[topology]
        print(
            f"median {topology} on {args.env}: {median:,.0f} rows/s over "
            f"{len(rates[topology])} runs; ratio to in-process {median / base_rate:.3f}; "
            f"CPU per 1k rows {c['all_ms_per_krow']:.0f} ms ({c['python_ms_per_krow']:.0f} Python)"
        )
    if {"flights", "flights_elastic"} <= set(medians):
        ratio = medians["flights_elastic"] / medians["flights"]
        print(f"elastic / plain: {ratio:.3f} (overhead {100 * (1 - ratio):.1f}%)")
        for kind in ("all", "python"):
            e = cpu_medians["flights_elastic"][f"{kind}_ms_per_krow"]
            p = cpu_medians["flights"][f"{kind}_ms_per_krow"]
            print(f"CPU per row ({kind} processes), elastic / plain: {e / p:.3f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "env": args.env,
                    "storm_options": extra,
                    "limit": args.limit,
                    "rows_per_s": rates,
                    "median_rows_per_s": medians,
                    "cpu_per_run": cpu,
                    "median_cpu": cpu_medians,
                    "cpu_by_component_per_run": per_component,
                    "in_process_rows_per_s": base_rate,
                },
                indent=2,
            )
        )
    return 0 if medians else 1


if __name__ == "__main__":
    sys.exit(main())
