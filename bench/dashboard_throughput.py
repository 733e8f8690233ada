"""Does the dashboard slow the job down? The elastic flights job's throughput with the
dashboard open and closed, in the same run.

    .venv/bin/python bench/dashboard_throughput.py [--window 15] [--windows 6]

On the single-machine cluster (brought up if needed, with this checkout's
config.json ports), the elastic flights job runs at full speed (no rate limit, no
migrations). After a 10 s warm-up, ``--windows`` windows of ``--window`` seconds
alternate: closed (no dashboard process) and open (``elastorm dashboard`` running
and its page open in headless Chromium on this same machine, so the browser's CPU
counts against the job too). Throughput of a window = rows the spout read in it /
its length (the spout's counts file, written every second). Results: one JSON line
per run, appended to ``--out``; docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from elastorm.runtime.cluster import up  # noqa: E402
from elastorm.runtime.config import load_config  # noqa: E402
from elastorm.runtime.drivers import ElasticFlightsDriver  # noqa: E402
from elastorm.runtime.flights_results import read_results  # noqa: E402
from elastorm.runtime.outcome import Outcome  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402
from elastorm.runtime.services import port_open  # noqa: E402

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


class OpenClosed(ElasticFlightsDriver):
    def __init__(self, window: float, windows: int, port: int) -> None:
        super().__init__(None, script=(), max_rate=0.0)
        self.window, self.windows, self.port = window, windows, port
        self.rows: list[dict] = []

    def _rows(self, output_dir: str) -> int:
        return read_results(output_dir).spout_total("rows_read")

    def wait(self, output_dir: str, timeout: float, progress) -> None:
        from playwright.sync_api import sync_playwright

        deadline = time.monotonic() + timeout
        while self._rows(output_dir) == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("the spout never read a row")
            time.sleep(0.5)
        time.sleep(10)
        with sync_playwright() as pw:
            for i in range(self.windows):
                state = "open" if i % 2 else "closed"
                dash = browser = None
                if state == "open":
                    cmd = [
                        sys.executable, "-m", "elastorm.runtime.cli", "dashboard",
                        "--topology", self.topology, "--zookeeper", self.zk_hosts,
                        "--port", str(self.port), "-e", "cluster",
                    ]  # fmt: skip
                    dash = subprocess.Popen(
                        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
                    )
                    while not port_open(self.port):
                        time.sleep(0.1)
                    browser = pw.chromium.launch(
                        executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
                    )
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.goto(f"http://127.0.0.1:{self.port}")
                    page.wait_for_selector(".op", timeout=30_000)
                r0, t0 = self._rows(output_dir), time.monotonic()
                time.sleep(self.window)
                r1, t1 = self._rows(output_dir), time.monotonic()
                if browser is not None:
                    browser.close()
                if dash is not None:
                    dash.terminate()
                    dash.wait(10)
                exhausted = read_results(output_dir).exhausted
                row = {"window": i, "state": state, "rows_per_s": round((r1 - r0) / (t1 - t0), 1)}
                row["exhausted"] = exhausted
                row["load_avg_1m"] = os.getloadavg()[0]
                print(json.dumps(row), flush=True)
                if exhausted:
                    break
                self.rows.append(row)

    def outcome(self, output_dir: str) -> Outcome:
        return Outcome(summary="", ok=True, facts={"windows": self.rows})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=15.0)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--port", type=int, default=28082)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cfg = load_config()
    up(cfg)
    driver = OpenClosed(args.window, args.windows, args.port)
    outcome = run_topology(cfg, "cluster", driver, timeout=900)
    windows = outcome.facts["windows"]
    by = {s: [w["rows_per_s"] for w in windows if w["state"] == s] for s in ("closed", "open")}
    result = {
        "windows": windows,
        "median_closed": statistics.median(by["closed"]) if by["closed"] else None,
        "median_open": statistics.median(by["open"]) if by["open"] else None,
    }
    print(json.dumps(result))
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
