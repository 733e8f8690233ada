"""Does the dashboard slow the job down? A job's throughput with the dashboard open and
closed, in the same run, interleaved.

    .venv/bin/python bench/dashboard_throughput.py [--job flights|counter] [--runs 2]
        [--window 6] [--settle 3]

On the single-machine cluster (brought up if needed, with this checkout's
config.json ports), ``--runs`` times, one of two jobs (no migrations):

* ``flights`` (default): the elastic flights job at full speed or capped at
  ``--max-rate`` rows/s; each run reads the 336,776 rows once (about a minute at full
  speed), throughput = rows the spout read;
* ``counter``: the keyed-count job of bench/throughput.py
  (``topologies/throughput_elastic.py``: one keyed counter task on 20 key groups, its
  checkpoints on a second task, the router, relay and controller), its spout at full
  speed for as long as the windows last; throughput = tuples the counter applied
  (its ``throughput-<task>.json`` files, timed by the time each was written).

Once the job runs, ``elastorm dashboard`` and a headless Chromium are
started on this same machine; after 5 s, windows of ``--window`` seconds follow in
blocks of four, ABBA: closed (the dashboard process stopped with SIGSTOP, so it uses
no CPU and reads nothing, and the browser on a blank page), open (the dashboard
resumed and its page open in the browser, whose CPU counts against the job too),
open, closed; so a steady drift of the job's speed weighs on both states alike. Each
state change is followed by ``--settle`` seconds outside any window. Throughput of a
window = what the job's counts file (written every second) counted in it / its
length. Per block: open mean / closed mean. Results: every window as a JSON
line, and one JSON line per invocation appended to ``--out``; docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's drivers/

from throughput import ThroughputDriver  # noqa: E402

from demos.flights_results import read_results  # noqa: E402
from drivers.flights_elastic import ElasticFlightsDriver  # noqa: E402
from elastorm.runtime.cluster import up  # noqa: E402
from elastorm.runtime.config import load_config  # noqa: E402
from elastorm.runtime.outcome import Outcome  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402
from elastorm.runtime.services import port_open  # noqa: E402

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


ABBA = ("closed", "open", "open", "closed")


class Windows:
    """The ABBA windows of one run over a job's cumulative count (``count(output_dir)``:
    the count and the wall-clock time it was counted at; ``finished(output_dir)`` when
    its input ran out)."""

    def __init__(self, run: int, args: argparse.Namespace, count, finished) -> None:
        self.run, self.args = run, args
        self.count, self.finished = count, finished
        self.rows: list[dict] = []

    def _start(self, pw, topology: str, zk_hosts: str):
        cmd = [
            sys.executable, "-m", "elastorm.runtime.cli", "dashboard",
            "--topology", topology, "--zookeeper", zk_hosts,
            "--port", str(self.args.port), "-e", "cluster",
        ]  # fmt: skip
        dash = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        while not port_open(self.args.port):
            time.sleep(0.1)
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        return dash, browser, page

    def _switch(self, state: str, dash, page) -> None:
        """open: the dashboard runs and its page is shown; closed: the dashboard process
        is stopped (SIGSTOP: no CPU, no ZooKeeper read) and the browser shows a blank
        page. Starting both anew for every window took longer than the job lasts."""
        if state == "open":
            dash.send_signal(signal.SIGCONT)
            page.goto(f"http://127.0.0.1:{self.args.port}")
            page.wait_for_selector(".op", timeout=120_000)
        else:
            page.goto("about:blank")
            dash.send_signal(signal.SIGSTOP)

    def measure(self, output_dir: str, timeout: float, topology: str, zk_hosts: str) -> None:
        """Wait until the job counts, then run the windows (kept in ``rows``)."""
        from playwright.sync_api import sync_playwright

        deadline = time.monotonic() + timeout
        while self.count(output_dir)[0] == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("the job never counted a tuple")
            time.sleep(0.5)
        with sync_playwright() as pw:
            dash, browser, page = self._start(pw, topology, zk_hosts)
            try:
                self._switch("closed", dash, page)
                time.sleep(5)
                current = "closed"
                for i in range(self.args.windows):
                    state = ABBA[i % 4]
                    if state != current:
                        self._switch(state, dash, page)
                        current = state
                        time.sleep(self.args.settle)
                    r0, t0 = self.count(output_dir)
                    time.sleep(self.args.window)
                    r1, t1 = self.count(output_dir)
                    exhausted = self.finished(output_dir)
                    row = {
                        "run": self.run,
                        "window": i,
                        "state": state,
                        "rows_per_s": round((r1 - r0) / (t1 - t0), 1),
                        "exhausted": exhausted,
                        "load_avg_1m": os.getloadavg()[0],
                    }
                    print(json.dumps(row), flush=True)
                    if exhausted:
                        break
                    self.rows.append(row)
            finally:
                dash.send_signal(signal.SIGCONT)
                browser.close()
                dash.terminate()
                dash.wait(10)


class OpenClosed(ElasticFlightsDriver):
    """The flights job: rows the spout read, until it has read them all."""

    def __init__(self, run: int, args: argparse.Namespace) -> None:
        super().__init__(None, script=(), max_rate=args.max_rate)
        self.windows = Windows(
            run,
            args,
            lambda d: (read_results(d).spout_total("rows_read"), time.time()),
            lambda d: read_results(d).exhausted,
        )

    def wait(self, output_dir: str, timeout: float, progress) -> None:
        self.windows.measure(output_dir, timeout, self.topology, self.zk_hosts)

    def outcome(self, output_dir: str) -> Outcome:
        return Outcome(summary="", ok=True, facts={"windows": self.windows.rows})


class OpenClosedCounter(ThroughputDriver):
    """The keyed-count job at full speed: tuples its counter applied; never runs out."""

    def __init__(self, run: int, args: argparse.Namespace) -> None:
        super().__init__("throughput_elastic", args, cpu=None)
        self.windows = Windows(run, args, self._tuples, lambda _d: False)

    def _tuples(self, output_dir: str) -> tuple[int, float]:
        """The counter's next files written from now on, and when they were written: at
        full speed a task's ticks queue behind data, so its files come irregularly, and
        a window is timed by the files' own clocks (as bench/throughput.py does)."""
        if self._read(output_dir) is None:
            return 0, time.time()
        got = self._fresh(output_dir, time.time(), timeout=60)
        return got["tuples"], got["at"]

    def wait(self, output_dir: str, timeout: float, progress) -> None:
        self.windows.measure(output_dir, timeout, self.topology, self.zk_hosts)

    def outcome(self, output_dir: str) -> Outcome:
        return Outcome(summary="", ok=True, facts={"windows": self.windows.rows})


def spread(values: list[float], digits: int = 1) -> dict:
    """n, median, mean, sample standard deviation, min and max of ``values``."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": round(statistics.median(values), digits),
        "mean": round(statistics.fmean(values), digits),
        "stdev": round(statistics.stdev(values), digits) if len(values) > 1 else None,
        "min": min(values),
        "max": max(values),
    }


def block_ratios(windows: list[dict]) -> list[float]:
    """Open mean / closed mean of every complete ABBA block of one run."""
    out = []
    by_run: dict[int, list[dict]] = {}
    for w in windows:
        by_run.setdefault(w["run"], []).append(w)
    for rows in by_run.values():
        for start in range(0, len(rows) - 3, 4):
            block = rows[start : start + 4]
            closed = [w["rows_per_s"] for w in block if w["state"] == "closed"]
            opened = [w["rows_per_s"] for w in block if w["state"] == "open"]
            if statistics.fmean(closed) > 0:
                out.append(round(statistics.fmean(opened) / statistics.fmean(closed), 3))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", choices=("flights", "counter"), default="flights")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument(
        "--max-rate",
        type=float,
        default=0.0,
        help="the spout's rows/s cap (elastorm.flights.max_rate; 0: full speed, and the "
        "job reads its 336,776 rows in about a minute)",
    )
    ap.add_argument("--window", type=float, default=6.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--windows", type=int, default=40, help="at most, per run")
    ap.add_argument("--batch", type=int, default=100, help="counter job: tuples per spout call")
    ap.add_argument("--port", type=int, default=28082)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cfg = load_config()
    up(cfg)
    windows: list[dict] = []
    for run in range(args.runs):
        driver = (OpenClosed if args.job == "flights" else OpenClosedCounter)(run, args)
        outcome = run_topology(cfg, "cluster", driver, timeout=1200)
        windows += outcome.facts["windows"]
    by = {s: [w["rows_per_s"] for w in windows if w["state"] == s] for s in ("closed", "open")}
    ratios = block_ratios(windows)
    result = {
        "args": vars(args),
        "windows": windows,
        "closed": spread(by["closed"]),
        "open": spread(by["open"]),
        "block_open_over_closed": ratios,
        "block_ratio": spread(ratios, 3),
    }
    print(json.dumps(result))
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
