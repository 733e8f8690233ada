"""What the daemons are told to bind and advertise: loopback wherever Storm and
ZooKeeper have a setting for it (no server is started)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from elastorm.runtime.cluster import base_conf, nimbus_daemon, supervisor_daemon
from elastorm.runtime.config import load_config
from elastorm.runtime.local import local_runner_daemon
from elastorm.runtime.services import LOOPBACK, daemon_command, zookeeper_daemon

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg(tmp_path: Path):
    """The shipped config, with its home (pid files, per-daemon storm.yaml) in tmp."""
    return dataclasses.replace(load_config(PROJECT), home=tmp_path / "home")


def _advertises_loopback(conf: dict) -> None:
    assert conf["storm.local.hostname"] == LOOPBACK
    assert conf["nimbus.seeds"] == [LOOPBACK]
    assert conf["storm.zookeeper.servers"] == [LOOPBACK]


def test_cluster_daemons_advertise_only_loopback(cfg) -> None:
    _advertises_loopback(base_conf(cfg, 16727))
    _advertises_loopback(nimbus_daemon(cfg, 16727).storm_conf)
    for index in range(cfg.cluster_supervisors):
        _advertises_loopback(supervisor_daemon(cfg, index, 16727).storm_conf)


def test_zookeeper_listens_on_loopback_only(cfg) -> None:
    daemon = zookeeper_daemon(cfg)
    zoo_cfg = Path(daemon.args[0]).read_text().splitlines()
    assert f"clientPortAddress={LOOPBACK}" in zoo_cfg
    assert f"clientPort={cfg.zookeeper_port}" in zoo_cfg
    assert "admin.enableServer=false" in zoo_cfg  # no Jetty admin server on 8080


def test_local_cluster_advertises_loopback(cfg) -> None:
    daemon = local_runner_daemon(cfg, 16627, "/storm-local/test")
    assert daemon.storm_conf == {"storm.local.hostname": LOOPBACK}
    assert daemon.args[:3] == ("16627", LOOPBACK, str(cfg.zookeeper_port))
    cmd = daemon_command(cfg, daemon)
    conf_file = cfg.run / "local-cluster" / "storm.yaml"
    assert f"-Dstorm.conf.file={conf_file}" in cmd
    assert conf_file.read_text() == f'storm.local.hostname: "{LOOPBACK}"\n'


def test_nimbus_runs_the_elastic_scheduler_and_each_supervisor_names_its_node(cfg) -> None:
    from elastorm.runtime.cluster import node_of_port
    from elastorm.runtime.plugins import ELASTIC_SCHEDULER, NODE_META

    assert nimbus_daemon(cfg, 16727).storm_conf["storm.scheduler"] == ELASTIC_SCHEDULER
    for index in range(3):
        conf = supervisor_daemon(cfg, index, 16727).storm_conf
        assert conf["supervisor.scheduler.meta"] == {NODE_META: f"supervisor-{index}"}
        for port in conf["supervisor.slots.ports"]:
            assert node_of_port(cfg, port) == f"supervisor-{index}"
