"""The flights job on the single-machine cluster: ZooKeeper + Nimbus + 2 supervisors.

Its elastic run has scripted direct, CPA and CPAL migrations while it runs, and one more
CPA whose target does not answer: its Python process is stopped (SIGSTOP) while the
migration runs. The controller must report it ``stuck`` within
``elastorm.migration_timeout_secs``, naming the task it waits for, and once the process
runs again (SIGCONT) the migration completes and every total is still exact.

Talks to: the real ZooKeeper server, Nimbus and supervisor daemons that
``elastorm cluster up`` starts (separate JVMs on loopback), via ``sparse submit``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from typing import Any

import pytest
from shared_cluster import cluster_up

from drivers.flights_elastic import ElasticFlightsDriver
from drivers.smoke import SmokeDriver
from elastorm.controller.requests import RequestState
from elastorm.core.messages import Protocol
from elastorm.errors import UserError
from elastorm.runtime import cli, nimbus
from elastorm.runtime.cluster import down, status
from elastorm.runtime.config import env_nimbus
from elastorm.runtime.migrate import connect, request_migration, wait_until_movable
from elastorm.runtime.run import run_topology
from elastorm.runtime.storm_home import ensure_storm_home
from elastorm.runtime.topology_jar import build_topology_jar
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import read_request, read_status

pytestmark = pytest.mark.integration

STUCK_AFTER = 3.0  # elastorm.migration_timeout_secs in this run
STOPPED_FOR = 10.0  # s the target stays stopped (Storm's subprocess timeout is 30 s)


class StalledTargetDriver(ElasticFlightsDriver):
    """The scripted migrations, plus a CPA (step ``stall``) whose target is stopped."""

    SCRIPT = (*ElasticFlightsDriver.DEFAULT_SCRIPT, (0.9, "stall"))

    def __init__(self) -> None:
        super().__init__(limit=None, script=self.SCRIPT)
        self.stall: dict[str, Any] = {}

    def options(self, output_dir: str) -> dict[str, object]:
        self.output_dir = output_dir
        # Stopped for STOPPED_FOR s, the target is slow, not lost: its ZooKeeper session
        # outlives the stop (a shorter one would rightly declare it lost and fence it,
        # docs/failures.md).
        return super().options(output_dir) | {
            "elastorm.migration_timeout_secs": STUCK_AFTER,
            "elastorm.zookeeper.session_secs": 3 * STOPPED_FOR,
        }

    def _migrate(self, index: int, protocol: str) -> dict[str, Any]:
        if protocol != "stall":
            return super()._migrate(index, protocol)
        if self._client is None:
            self._client = connect(self.zk_hosts)
        group = (index * 7 + 3) % self.key_groups
        status = wait_until_movable(
            self._client, self.topology, "sum_delays", group, assisted=True, timeout=120
        )
        target = status["holders"][group]
        counts = os.path.join(self.output_dir, "counts", f"sum_delays-{target}.json")
        with open(counts, encoding="utf-8") as fh:
            pid = int(json.load(fh)["pid"])
        os.kill(pid, signal.SIGSTOP)
        try:
            asked = time.monotonic()
            stuck = request_migration(
                self._client,
                self.topology,
                "sum_delays",
                group,
                "holder",
                Protocol.CPA,
                timeout=60,
                until_stuck=True,
            )
            self.stall["answered_after"] = time.monotonic() - asked
            self.stall["request"] = stuck
            # The controller marks the request stuck, then publishes its status at the
            # end of the same tick: wait for that (bounded) rather than race it.
            layout = ZnodeLayout(self.topology)
            until = time.monotonic() + 10
            while True:
                status = read_status(self._client, layout, "sum_delays")
                stuck_now = [m for m in (status or {}).get("migrations", ()) if m["stuck"]]
                if stuck_now or time.monotonic() > until:
                    break
                time.sleep(0.1)
            self.stall["status"] = status
        finally:
            time.sleep(max(0.0, STOPPED_FOR - (time.monotonic() - asked)))
            os.kill(pid, signal.SIGCONT)
        name = max(self._client.get_children(ZnodeLayout(self.topology).requests))
        deadline = time.monotonic() + 120
        while (done := read_request(self._client, ZnodeLayout(self.topology), name)).state is (
            RequestState.STUCK
        ):
            assert time.monotonic() < deadline, "the stalled migration never completed"
            time.sleep(0.1)
        self.stall["target"] = target
        return {
            "group": group,
            "asked": "cpa",
            "used": done.protocol_used.value if done.protocol_used else None,
            "state": done.state.value,
            "source": done.source,
            "target": done.target,
            "ms": None,
            "detail": done.detail,
        }


@pytest.fixture
def cluster(storm_cluster):
    return storm_cluster


def test_cluster_runs_two_supervisors_as_two_nodes(cluster) -> None:
    cfg, summary = cluster
    assert len(summary["supervisors"]) == 2
    assert len({s["id"] for s in summary["supervisors"]}) == 2
    daemons = status(cfg)["daemons"]
    assert daemons["supervisor-0"] and daemons["supervisor-1"] and daemons["nimbus"]


def _wait_topology_gone(host: str, port: int, name: str, timeout: float = 60) -> None:
    """Block until Nimbus no longer lists topology ``name``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = {t["name"] for t in nimbus.cluster_summary(host, port)["topologies"]}
        if name not in names:
            return
        time.sleep(1)
    raise UserError(f"topology {name} still listed by Nimbus after {timeout:.0f} s")


def test_nimbus_lists_a_submitted_topology_until_killed(cluster, tmp_path) -> None:
    cfg, _ = cluster
    ensure_storm_home(cfg)
    jar = build_topology_jar(cfg, tmp_path / "topology.jar")
    host, port = env_nimbus(cfg.project, "cluster")
    driver = SmokeDriver(500)
    nimbus.submit(
        cfg.project, "cluster", "smoke", "smoke-listed", jar, driver.options(str(tmp_path))
    )
    try:
        names = {t["name"]: t for t in nimbus.cluster_summary(host, port)["topologies"]}
        assert names["smoke-listed"]["status"] == "ACTIVE"
        driver.wait(str(tmp_path), 180, lambda _: None)
        assert driver.outcome(str(tmp_path)).ok
    finally:
        nimbus.kill(cfg.project, "cluster", "smoke-listed")
    _wait_topology_gone(host, port, "smoke-listed", timeout=60)


def test_elastic_flights_with_migrations_on_cluster_matches_pandas(cluster) -> None:
    """Every protocol's scripted migrations, and a stalled one reported ``stuck`` in
    bounded time, then done, every plane-year exact."""
    cfg, _ = cluster
    driver = StalledTargetDriver()
    outcome = run_topology(cfg, "cluster", driver, timeout=500)
    assert outcome.ok, outcome.summary
    used = [m["used"] for m in outcome.facts["migrations"]]
    assert {"direct", "cpa", "cpal"} <= set(used), used
    assert all(m["state"] == "done" for m in outcome.facts["migrations"])
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
    # The stalled one: reported stuck in bounded time, naming the silent target.
    stall = driver.stall
    request, target = stall["request"], stall["target"]
    assert request.state is RequestState.STUCK, request
    assert stall["answered_after"] < STUCK_AFTER + 10, stall
    assert f"the target (task {target})" in request.detail, request.detail
    (flight,) = [m for m in stall["status"]["migrations"] if m["stuck"]]
    assert flight["waiting_for"].get("target") == target, flight


def _broken_project(cfg, tmp_path, monkeypatch, change) -> None:
    """Point the CLI at a copy of the project whose config.json ``change`` edits."""
    for name in ("project.clj", "config.json"):
        shutil.copy(cfg.project / name, tmp_path / name)
    raw = json.loads((tmp_path / "config.json").read_text())
    change(raw)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    monkeypatch.setenv("ELASTORM_PROJECT", str(tmp_path))


def test_unreachable_nimbus_is_one_line(cluster, tmp_path, monkeypatch, capsys) -> None:
    cfg, _ = cluster
    # Nothing listens on port 1.
    _broken_project(
        cfg, tmp_path, monkeypatch, lambda raw: raw["envs"]["cluster"].update(nimbus="127.0.0.1:1")
    )
    assert cli.main(["check", "-e", "cluster"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "elastorm check: error: Nimbus of env cluster at 127.0.0.1:1 is unreachable"


def test_zookeeper_down_is_one_line(cluster, tmp_path, monkeypatch, capsys) -> None:
    cfg, _ = cluster
    # No ZooKeeper listens on 12999.
    _broken_project(
        cfg, tmp_path, monkeypatch, lambda raw: raw["elastorm"].update(zookeeper_port=12999)
    )
    assert cli.main(["check", "-e", "cluster"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("elastorm check: error: ZooKeeper on 127.0.0.1:12999 is down")


def test_run_against_a_stopped_cluster_fails_cleanly(cluster) -> None:
    cfg, _ = cluster
    down(cfg)
    try:
        with pytest.raises(UserError, match="unreachable"):
            run_topology(cfg, "cluster", SmokeDriver(10), timeout=30)
    finally:
        cluster_up(cfg)
        time.sleep(1)
