"""The flights job on the single-machine cluster: ZooKeeper + Nimbus + 2 supervisors.

Talks to: the real ZooKeeper server, Nimbus and supervisor daemons that
``elastorm cluster up`` starts (separate JVMs on loopback), via ``sparse submit``.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from shared_cluster import cluster_up

from drivers.flights_elastic import ElasticFlightsDriver
from drivers.smoke import SmokeDriver
from elastorm.errors import UserError
from elastorm.runtime import cli, nimbus
from elastorm.runtime.cluster import down, status
from elastorm.runtime.config import env_nimbus
from elastorm.runtime.run import run_topology
from elastorm.runtime.storm_home import ensure_storm_home
from elastorm.runtime.topology_jar import build_topology_jar

pytestmark = pytest.mark.integration


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
    cfg, _ = cluster
    # The first 200,000 of the 336,776 rows: the script's eight migrations come at the
    # same shares of the input, in 40% less time (CI's 40 minutes).
    driver = ElasticFlightsDriver(limit=200_000)
    outcome = run_topology(cfg, "cluster", driver, timeout=400)
    assert outcome.ok, outcome.summary
    used = {m["used"] for m in outcome.facts["migrations"]}
    assert {"direct", "cpa", "cpal"} <= used


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
