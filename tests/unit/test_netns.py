"""A supervisor in a network namespace (``runtime/netns.py``, ``runtime/cluster.py``):
its names and addresses, the ``ip`` commands, and the daemons' configuration with and
without it. No namespace is created: the commands are checked as data."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path

import pytest

from elastorm.errors import UserError
from elastorm.runtime import netns
from elastorm.runtime.cluster import (
    Addresses,
    addresses,
    nimbus_daemon,
    supervisor_daemon,
    up,
)
from elastorm.runtime.config import load_config
from elastorm.runtime.services import LOOPBACK, daemon_command, zookeeper_daemon

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg(tmp_path: Path):
    return dataclasses.replace(load_config(PROJECT), home=tmp_path / "home")


@pytest.mark.parametrize("port", [1, 2181, 12181, 24181, 16383, 16384, 65535])
def test_plan_is_a_slash_30_inside_the_subnets_with_short_interface_names(port: int) -> None:
    plan = netns.netns_plan(port)
    net = ipaddress.ip_network(f"{plan.host_address}/30", strict=False)
    assert net.subnet_of(netns.SUBNETS)
    hosts = [str(h) for h in net.hosts()]
    assert hosts == [plan.host_address, plan.ns_address]
    assert max(len(plan.host_veth), len(plan.ns_veth)) <= 15
    assert str(port) in plan.namespace and plan.host_veth != plan.ns_veth


def test_plans_of_different_ports_never_share_a_subnet_below_16384_apart() -> None:
    subnets = {netns.netns_plan(p).host_address for p in range(10_000, 10_000 + 16_384)}
    assert len(subnets) == 16_384
    assert netns.netns_plan(1000).host_address == netns.netns_plan(1000 + 16_384).host_address


def test_plan_rejects_a_port_out_of_range() -> None:
    with pytest.raises(ValueError, match="zookeeper_port"):
        netns.netns_plan(0)
    with pytest.raises(ValueError, match="interface name"):
        dataclasses.replace(netns.netns_plan(1), host_veth="x" * 16)


def test_setup_joins_the_namespace_to_the_host_and_teardown_deletes_it() -> None:
    plan = netns.netns_plan(24181)
    cmds = netns.setup_commands(plan)
    assert cmds[0] == ["ip", "netns", "add", "elastorm-24181"]
    assert ["ip", "link", "set", "est24181n", "netns", "elastorm-24181"] in cmds
    assert ["ip", "addr", "add", "10.231.121.213/30", "dev", "est24181h"] in cmds
    inside = ["ip", "netns", "exec", "elastorm-24181", "ip"]
    assert [*inside, "addr", "add", "10.231.121.214/30", "dev", "est24181n"] in cmds
    assert cmds[-1] == [*inside, "link", "set", "lo", "up"]  # workers dial their supervisor
    assert netns.teardown_command(plan) == ["ip", "netns", "delete", "elastorm-24181"]
    assert netns.link_command(plan, up=False) == [*inside, "link", "set", "est24181n", "down"]
    assert netns.link_command(plan, up=True)[-1] == "up"


def test_without_a_namespace_every_daemon_stays_on_loopback(cfg) -> None:
    assert addresses(cfg) == Addresses()
    for index in range(3):
        daemon = supervisor_daemon(cfg, index, 16727)
        assert daemon.enter == ()
        assert daemon.storm_conf["storm.local.hostname"] == LOOPBACK
        assert daemon_command(cfg, daemon)[0] == "java"
    text = Path(zookeeper_daemon(cfg).args[0]).read_text()
    assert f"clientPortAddress={LOOPBACK}" in text.splitlines()


def _namespaced(cfg, monkeypatch, index: int) -> netns.NetnsPlan:
    """Pretend the cluster's namespace exists with supervisor ``index`` inside."""
    plan = netns.netns_plan(cfg.zookeeper_port)
    monkeypatch.setattr(netns, "exists", lambda p: p == plan)
    cfg.run.mkdir(parents=True, exist_ok=True)
    (cfg.run / netns.STATE_FILE).write_text(json.dumps({"supervisor": index}))
    return plan


def test_with_a_namespace_every_address_is_reachable_from_both_sides(cfg, monkeypatch) -> None:
    plan = _namespaced(cfg, monkeypatch, 2)
    net = addresses(cfg)
    assert (net.host, net.namespaced, net.inside) == (plan.host_address, 2, plan.ns_address)
    nimbus = nimbus_daemon(cfg, 16727).storm_conf
    assert nimbus["storm.local.hostname"] == plan.host_address  # the leader it publishes
    for index in range(3):
        daemon = supervisor_daemon(cfg, index, 16727)
        conf = daemon.storm_conf
        assert conf["nimbus.seeds"] == [plan.host_address]
        assert conf["storm.zookeeper.servers"] == [plan.host_address]
        cmd = daemon_command(cfg, daemon)
        if index == 2:
            assert conf["storm.local.hostname"] == plan.ns_address
            assert daemon.enter == tuple(netns.exec_prefix(plan.namespace))
            assert cmd[:5] == ["ip", "netns", "exec", plan.namespace, "java"]
            assert f"-Ddaemon.name={daemon.name}" in cmd  # the pid-file check still finds it
        else:
            assert conf["storm.local.hostname"] == plan.host_address
            assert cmd[0] == "java"
    # ZooKeeper binds one address: every interface, so the host's 127.0.0.1 and the
    # namespace's host_address both reach it; a private test server stays on loopback.
    lines = Path(zookeeper_daemon(cfg).args[0]).read_text().splitlines()
    assert f"clientPortAddress={netns.ANY}" in lines
    private = zookeeper_daemon(cfg, name="zk-test", port=1, data_dir=cfg.home / "zk-test")
    assert f"clientPortAddress={LOOPBACK}" in Path(private.args[0]).read_text().splitlines()


def test_a_state_file_without_its_namespace_means_no_namespace(cfg) -> None:
    # A port no cluster uses (the lowest config.json allows): a netcut cluster running
    # on this machine has its namespace.
    cfg = dataclasses.replace(cfg, zookeeper_port=1024)
    cfg.run.mkdir(parents=True, exist_ok=True)
    (cfg.run / netns.STATE_FILE).write_text(json.dumps({"supervisor": 1}))
    assert netns.namespaced_supervisor(cfg) is None  # e.g. after a reboot
    assert netns.destroy(cfg) is False and not (cfg.run / netns.STATE_FILE).exists()


def test_up_asks_for_root_and_an_index_among_the_supervisors(cfg, monkeypatch) -> None:
    with pytest.raises(UserError, match=r"0\.\.3"):
        up(cfg, supervisors=4, netns_supervisor=4)
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="needs root"):
        up(cfg, supervisors=4, netns_supervisor=3)
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="`ip`"):
        up(cfg, supervisors=4, netns_supervisor=3)


def test_a_failed_setup_deletes_what_it_made(cfg, monkeypatch) -> None:
    ran: list[list[str]] = []
    made = {"ns": False}

    def fake_ip(cmd: list[str]) -> None:
        ran.append(cmd)
        if cmd[:3] == ["ip", "netns", "add"]:
            made["ns"] = True
        elif cmd[:3] == ["ip", "netns", "delete"]:
            made["ns"] = False
        elif cmd[:3] == ["ip", "link", "add"]:
            raise UserError("`ip link add` failed (2): RTNETLINK answers: File exists")

    monkeypatch.setattr(netns, "check_can_create", lambda: None)
    monkeypatch.setattr(netns, "exists", lambda plan: made["ns"])
    monkeypatch.setattr(netns, "run_ip", fake_ip)
    with pytest.raises(UserError, match="File exists"):
        netns.create(cfg, 3)
    assert ran[-1][:3] == ["ip", "netns", "delete"] and not made["ns"]
    assert netns.namespaced_supervisor(cfg) is None
