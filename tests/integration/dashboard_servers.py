"""Start ``elastorm dashboard`` and a real Prometheus (the Debian package's binary) for
a test, each on its own port and directory, and stop exactly those processes after.

Ports: ``ELASTORM_DASHBOARD_PORT`` (default 28080) and ``ELASTORM_PROMETHEUS_PORT``
(default 29090), so that several checkouts on one machine do not collide.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from elastorm.runtime.services import port_open

DASHBOARD_PORT = int(os.environ.get("ELASTORM_DASHBOARD_PORT", "28080"))
CHROMIUM = "/usr/bin/chromium"  # the system package's; no browser is downloaded
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
PROMETHEUS_PORT = int(os.environ.get("ELASTORM_PROMETHEUS_PORT", "29090"))


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not listening on {port} after {timeout:.0f} s")
        time.sleep(0.1)


@contextmanager
def dashboard_process(
    topology: str,
    zk_hosts: str,
    workdir: Path,
    port: int = DASHBOARD_PORT,
    token: str | None = None,
    env: str = "cluster",
    project: Path | None = None,
):
    """``elastorm dashboard`` for ``topology`` (with actions behind ``token`` if given),
    its Nimbus the streamparse env ``env``'s of ``project`` (default: this checkout);
    yields its base URL and the process."""
    if port_open(port):
        raise RuntimeError(f"port {port} is taken (set ELASTORM_DASHBOARD_PORT)")
    log = workdir / "dashboard.log"
    cmd = [
        sys.executable, "-m", "elastorm.runtime.cli", "dashboard", "--topology", topology,
        "--zookeeper", zk_hosts, "--port", str(port), "-e", env,
    ]  # fmt: skip
    environ = dict(os.environ)
    if project is not None:
        environ["ELASTORM_PROJECT"] = str(project)
    if token is not None:
        cmd.append("--enable-actions")
        environ["ELASTORM_DASHBOARD_TOKEN"] = token
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=environ)
    try:
        _wait_port(port, proc, log, "elastorm dashboard", 30)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        _stop(proc)


@contextmanager
def prometheus_server(target_port: int, workdir: Path, port: int = PROMETHEUS_PORT):
    """A Prometheus scraping ``127.0.0.1:target_port/metrics`` every second; yields its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed (bin/setup installs it)")
    if port_open(port):
        raise RuntimeError(f"port {port} is taken (set ELASTORM_PROMETHEUS_PORT)")
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: elastorm-dashboard\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
    )
    log = workdir / "prometheus.log"
    cmd = [
        binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, log, "prometheus", 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


def promql(base: str, query: str) -> list[dict]:
    """The result vector of an instant PromQL query (Prometheus' HTTP API)."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]
