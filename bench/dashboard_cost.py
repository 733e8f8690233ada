"""What the dashboard costs: CPU and memory of the ``elastorm dashboard`` process, the
ZooKeeper requests it adds, and how long the page takes to draw, with 1,000 key
groups.

    PYTHONPATH=src .venv/bin/python bench/dashboard_cost.py --tasks 20 --nodes 20
    PYTHONPATH=src .venv/bin/python bench/dashboard_cost.py --tasks 50 --nodes 50

A private ZooKeeper server (its own port and data dir) holds a fake topology
``bench``: ``--tasks`` real ``HeartbeatPublisher``s (one heartbeat a second each, as a
keyed task publishes), spread over ``--nodes`` nodes, and a fake controller that
publishes ``status/op`` for ``--groups`` key groups (the controller bolt's shape) and
completes one migration request every 5 s, changing the group's owner. Three phases
of ``--secs`` seconds each:

A. no dashboard: the ZooKeeper server's received-request count (``srvr``) = baseline;
B. ``elastorm dashboard`` running, no page open;
C. the page open in headless Chromium (server-sent events).

Per phase: the server's requests/s, the dashboard process's CPU (utime+stime over
wall time, in cores) and resident memory, its own ZooKeeper read count, and in C the
page's draws per second, draw time and frame time (the page records them on
``<body>``: the synchronous drawing, ECharts' painting included, and the time until
the next frame was shown). The dashboard also reads a controller metrics file with a
``--heatmap``-group correlation matrix (100 = the most the controller writes), so the
heatmap is drawn too.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's drivers/

from drivers.synthetic import private_zookeeper
from elastorm.controller.model import Heartbeat  # noqa: E402
from elastorm.controller.requests import MigrationRequest, RequestEvent, encode_request
from elastorm.core.messages import Protocol
from elastorm.core.routing import RoutingTable
from elastorm.runtime.config import load_config
from elastorm.runtime.services import port_open
from elastorm.zk.client import make_client, write_znode
from elastorm.zk.codec import encode_routing
from elastorm.zk.heartbeat import HeartbeatPublisher, default_identity
from elastorm.zk.layout import ZkSettings, ZnodeLayout
from elastorm.zk.requests import submit_request

TOPOLOGY = "bench"
LAYOUT = ZnodeLayout(TOPOLOGY)
OP = "op"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def zk_received(port: int) -> int:
    """Requests the ZooKeeper server received so far (four-letter word ``srvr``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"srvr")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    for line in data.decode().splitlines():
        if line.startswith("Received:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Received in srvr reply: {data!r}")


def proc_cpu_rss(pid: int) -> tuple[float, int]:
    """(user+system CPU seconds, resident bytes) of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def dashboard_reads(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("elastorm_dashboard_zookeeper_reads_total{"):
                return float(line.rsplit(" ", 1)[1])
    return float("nan")


class FakeCluster:
    """Heartbeat publishers and a fake controller for topology ``bench``."""

    def __init__(self, hosts: str, groups: int, tasks: int, nodes: int) -> None:
        self.settings = ZkSettings(hosts=hosts)
        self.layout = ZnodeLayout(TOPOLOGY)
        self.groups, self.tasks = groups, list(range(100, 100 + tasks))
        self.owners = [self.tasks[g % tasks] for g in range(groups)]
        self.holders = [self.tasks[(g + 1) % tasks] for g in range(groups)]
        self.publishers = [
            HeartbeatPublisher(
                layout=self.layout,
                settings=self.settings,
                identity=default_identity(task_id=t, operator=OP, node_id=f"node{i % nodes}"),
                heartbeat=lambda t=t: self.heartbeat(t),
            )
            for i, t in enumerate(self.tasks)
        ]
        self.client = make_client(self.settings)
        self.moves = 0

    def heartbeat(self, task: int) -> Heartbeat:
        owned = tuple(g for g, o in enumerate(self.owners) if o == task)
        held = tuple(g for g, h in enumerate(self.holders) if h == task)
        return Heartbeat(
            key_groups=owned,
            checkpoints=held,
            input_rates=tuple((g, 10.0 + (g * 37 % 90) + 5 * (time.time() % 3)) for g in owned),
            queue_length=float(len(owned)),
            node_cpu=0.3 + 0.01 * (task % 50),
            memory=50e6,
            latency=0.02 + 0.002 * (task % 10),
            service_time=0.0004,
            state_sizes=tuple((g, 1000.0) for g in owned),
        )

    def start(self) -> None:
        self.client.start(timeout=10)
        for p in self.publishers:
            p.start()
        self.client.create(LAYOUT.leader, b"", ephemeral=True, makepath=True)
        self.publish()

    def publish(self) -> None:
        table = RoutingTable(epoch=self.moves, owners=tuple(self.owners))
        self._put(LAYOUT.routing(OP), encode_routing(OP, table, controller="bench"))
        data = {
            "lost": [],
            "holders": self.holders,
            "assisted": [True] * self.groups,
            "tasks": self.tasks,
            "emitters": [],
            "moving": [],
            "migrations": [],
        }
        self._put(LAYOUT.status(OP), json.dumps(data).encode())

    def _put(self, path: str, data: bytes) -> None:
        if self.client.exists(path):
            self.client.set(path, data)
        else:
            self.client.create(path, data, makepath=True)

    def migrate(self) -> None:
        """One migration request, answered at once (what the controller bolt writes)."""
        g = (self.moves * 37) % self.groups
        req = MigrationRequest(operator=OP, key_group=g, target="holder", protocol=Protocol.CPAL)
        name = submit_request(self.client, LAYOUT, req)
        now = time.time()
        source, target = self.owners[g], self.holders[g]
        req = req.advance(
            RequestEvent.START, now, source=source, protocol_used=Protocol.CPAL, epoch=1
        )
        req = req.advance(RequestEvent.FINISH, now + 0.02)
        self.client.set(LAYOUT.request(name), encode_request(req))
        self.owners[g], self.holders[g] = target, source
        self.moves += 1
        self.publish()

    def stop(self) -> None:
        for p in self.publishers:
            p.stop()
        self.client.stop()
        self.client.close()


def controller_metrics(groups: int) -> dict:
    """Controller figures whose allocation summary has a ``groups`` x ``groups``
    correlation matrix (blocks of ten correlated groups, anti-correlated across)."""
    matrix = [
        [1.0 if i == j else round(0.8 if i // 10 == j // 10 else -0.3, 3) for j in range(groups)]
        for i in range(groups)
    ]
    summary = {"theta": 0.1, "allocation_score": 1.2, "reference_score": 1.15, "score_drift": 0.05}
    summary["correlation"] = {"key_groups": [f"{OP}/{g}" for g in range(groups)], "matrix": matrix}
    return {"strategy": "correlated", "allocation": summary}


def phase(name, secs, zk_port, fake, pid=None, url=None, page=None) -> dict:
    """Run ``secs`` seconds, one migration every 5 s; measure what the docstring says."""
    r0, t0 = zk_received(zk_port), time.monotonic()
    c0 = proc_cpu_rss(pid)[0] if pid else None
    d0 = dashboard_reads(url) if url else None
    n0 = int(page.evaluate("document.body.dataset.draws || 0")) if page else None
    draw_ms, frame_ms, rss = [], [], []
    next_move = time.monotonic() + 2.5
    while (now := time.monotonic()) - t0 < secs:
        if now >= next_move:
            fake.migrate()
            next_move += 5
        if pid:
            rss.append(proc_cpu_rss(pid)[1])
        if page:
            draw_ms.append(float(page.evaluate("document.body.dataset.drawMs || 'nan'")))
            frame_ms.append(float(page.evaluate("document.body.dataset.frameMs || 'nan'")))
        time.sleep(0.5)
    wall = time.monotonic() - t0
    out = {"phase": name, "seconds": round(wall, 1), "load_avg_1m": os.getloadavg()[0]}
    # Our own srvr calls count too (1 each end): negligible against thousands.
    out["zk_requests_per_s"] = round((zk_received(zk_port) - r0) / wall, 1)
    if pid:
        out["dashboard_cpu_cores"] = round((proc_cpu_rss(pid)[0] - c0) / wall, 4)
        out["dashboard_rss_mb_max"] = round(max(rss) / 2**20, 1)
    if url:
        out["dashboard_zk_reads_per_s"] = round((dashboard_reads(url) - d0) / wall, 1)
    if page:
        draws = int(page.evaluate("document.body.dataset.draws || 0")) - n0
        out["page_draws_per_s"] = round(draws / wall, 2)
        for what, values in (("draw", draw_ms), ("frame", frame_ms)):
            ms = sorted(x for x in values if x == x)
            out[f"page_{what}_ms_median"] = ms[len(ms) // 2] if ms else None
            out[f"page_{what}_ms_max"] = ms[-1] if ms else None
        out["page_events_listed"] = page.evaluate("document.querySelectorAll('#events li').length")
        out["page_node_rows"] = page.evaluate("document.querySelectorAll('#nodes tbody tr').length")
    print(json.dumps(out), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--secs", type=float, default=30)
    ap.add_argument("--heatmap", type=int, default=100, help="key groups in the heatmap")
    ap.add_argument("--port", type=int, default=28081)
    ap.add_argument("--out", default=None, help="append the result (JSON line) to this file")
    args = ap.parse_args()
    if port_open(args.port):
        raise SystemExit(f"port {args.port} is taken")
    with private_zookeeper(load_config(), name="zookeeper-dashboard-bench") as cfg:
        zk_port = cfg.zookeeper_port
        fake = FakeCluster(f"127.0.0.1:{zk_port}", args.groups, args.tasks, args.nodes)
        fake.start()
        time.sleep(3)
        result = {"groups": args.groups, "tasks": args.tasks, "nodes": args.nodes, "phases": []}
        result["heatmap"] = args.heatmap
        # The controller's figures, where a leading controller publishes them.
        figures = json.dumps(controller_metrics(args.heatmap)).encode()
        write_znode(fake.client, LAYOUT.figures, figures)
        result["phases"].append(phase("A: no dashboard", args.secs, zk_port, fake))
        cmd = [
            sys.executable, "-m", "elastorm.runtime.cli", "dashboard", "--topology", TOPOLOGY,
            "--zookeeper", f"127.0.0.1:{zk_port}", "--port", str(args.port), "-e", "none",
        ]  # fmt: skip
        dash = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{args.port}"
        try:
            while not port_open(args.port):
                time.sleep(0.1)
            time.sleep(3)
            result["phases"].append(
                phase("B: dashboard, page closed", args.secs, zk_port, fake, dash.pid, url)
            )
            from playwright.sync_api import Error as PlaywrightError
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
                )
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(url)
                page.wait_for_selector(f'.op[data-operator="{OP}"]', timeout=180_000)
                time.sleep(2)
                result["phases"].append(
                    phase("C: dashboard, page open", args.secs, zk_port, fake, dash.pid, url, page)
                )
                if os.environ.get("ELASTORM_BENCH_SCREENSHOT"):
                    try:
                        page.screenshot(
                            path=os.environ["ELASTORM_BENCH_SCREENSHOT"], full_page=True
                        )
                    except PlaywrightError as exc:  # a loaded machine: the figures still count
                        print(f"no screenshot: {exc}", file=sys.stderr)
                browser.close()
        finally:
            dash.terminate()
            dash.wait(10)
            fake.stop()
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
