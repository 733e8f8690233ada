"""The hosts' plan (pure): names, addresses, the ip commands, sshd's config."""

from __future__ import annotations

import doctest
import ipaddress
from pathlib import Path

import pytest

from elastorm.runtime import hosts
from elastorm.runtime.hosts import HOST_DIR, hosts_plan, link_command, setup_commands, sshd_config
from elastorm.runtime.netns import netns_plan


def test_the_doctests() -> None:
    assert doctest.testmod(hosts).failed == 0 and doctest.testmod(hosts).attempted >= 1


def test_every_host_has_its_own_address_on_one_24_apart_from_the_supervisors_namespace() -> None:
    plan = hosts_plan(12181, 20)
    net = ipaddress.ip_network(f"{plan.gateway}/{plan.prefix}", strict=False)
    addresses = [h.address for h in plan.hosts]
    assert len(set(addresses)) == 20 and plan.gateway not in addresses
    assert all(ipaddress.ip_address(a) in net for a in addresses)
    assert ipaddress.ip_address(netns_plan(12181).ns_address) not in net
    # Interface names fit IFNAMSIZ; another checkout's port gets other names and a /24.
    assert all(len(n) <= 15 for h in plan.hosts for n in (h.outer, h.inner))
    other = hosts_plan(22181, 1)
    assert other.bridge != plan.bridge and other.gateway != plan.gateway


@pytest.mark.parametrize(("port", "count"), [(0, 1), (12181, 0), (12181, 21)])
def test_out_of_range_is_refused(port, count) -> None:
    with pytest.raises(ValueError):
        hosts_plan(port, count)


def test_each_host_is_joined_to_the_bridge_and_routes_through_the_machine() -> None:
    plan = hosts_plan(12181, 2)
    cmds = [" ".join(c) for c in setup_commands(plan)]
    assert cmds[0] == f"ip link add {plan.bridge} type bridge"
    for h in plan.hosts:
        assert f"ip link set {h.outer} master {plan.bridge}" in cmds
        assert f"ip netns exec {h.namespace} ip route add default via {plan.gateway}" in cmds
    inner = plan.hosts[1].inner
    assert link_command(plan.hosts[1], up=False)[-4:] == ["link", "set", inner, "down"]
    assert link_command(plan.hosts[1], up=True)[-1] == "up"


def test_sshd_listens_on_its_host_only_and_takes_keys_only() -> None:
    h = hosts_plan(12181, 1).hosts[0]
    text = sshd_config(h, Path("/x/host0"), Path("/x"))
    lines = set(text.splitlines())
    assert f"ListenAddress {h.address}" in lines
    assert {
        "PasswordAuthentication no",
        "UsePAM no",
        "AuthorizedKeysFile /x/authorized_keys",
    } <= lines
    assert str(HOST_DIR) == "/var/lib/elastorm-host"


def test_storm_across_hosts_is_laid_out_as_an_operator_lays_it_out(tmp_path) -> None:
    import dataclasses

    from elastorm.errors import UserError
    from elastorm.runtime import multihost
    from elastorm.runtime.config import load_config
    from elastorm.runtime.hosts import Hosts

    assert doctest.testmod(multihost).failed == 0
    cfg = dataclasses.replace(load_config(), home=tmp_path / "home")
    plan = hosts_plan(cfg.zookeeper_port, 5)
    r = multihost.roles(plan)
    hosts = Hosts(cfg)
    for h in plan.hosts:  # what `up` leaves: each host's sshd pid, for nsenter
        (hosts.folder / h.name).mkdir(parents=True)
        (hosts.folder / h.name / "sshd.pid").write_text("4242\n")
    zk = multihost.host_daemon(cfg, hosts, r, plan.hosts[1], "zookeeper")
    text = Path(zk.args[0]).read_text().splitlines()
    assert [f"server.{i + 1}={h.address}:2888:3888" for i, h in enumerate(plan.hosts[:3])] == [
        line for line in text if line.startswith("server.")
    ]
    assert (hosts.folder / "host1" / "root" / "zookeeper" / "myid").read_text() == "2\n"
    assert zk.enter == ("nsenter", "--target=4242", "--net", "--mount", "--")
    assert zk.address == plan.hosts[1].address
    sup = multihost.host_daemon(cfg, hosts, r, plan.hosts[4], "supervisor").storm_conf
    assert sup["storm.zookeeper.servers"] == [h.address for h in plan.hosts[:3]]
    assert sup["nimbus.seeds"] == [h.address for h in plan.hosts[:2]]
    assert sup["storm.local.hostname"] == plan.hosts[4].address
    assert sup["storm.local.dir"] == str(HOST_DIR / "storm")
    assert sup["supervisor.scheduler.meta"] == {"elastorm.node": "host4"}
    nimbus = multihost.host_daemon(cfg, hosts, r, plan.hosts[0], "nimbus").storm_conf
    assert nimbus["storm.scheduler"] == "elastorm.jvm.ElasticScheduler"
    with pytest.raises(UserError, match="at least 4 hosts"):
        multihost.roles(hosts_plan(cfg.zookeeper_port, 3))


def test_the_hosts_streamparse_env_is_config_jsons_and_says_what_to_set_when_not(
    tmp_path,
) -> None:
    import dataclasses
    import json

    from elastorm.errors import UserError
    from elastorm.runtime import hosts_deploy
    from elastorm.runtime.config import load_config
    from elastorm.runtime.hosts import STATE_FILE, Hosts, pip_conf

    assert doctest.testmod(hosts_deploy).failed == 0
    project = load_config()
    cfg = dataclasses.replace(project, home=tmp_path / "home")
    hosts = Hosts(cfg)
    hosts.folder.mkdir(parents=True)
    (hosts.folder / STATE_FILE).write_text(json.dumps({"count": 4}))  # as `up` leaves it
    env = hosts_deploy.hosts_env(hosts, {"options": {"topology.workers": 2}})
    plan = hosts_plan(cfg.zookeeper_port, 4)
    assert env["workers"] == [plan.hosts[2].address, plan.hosts[3].address]
    assert env["nimbus"] == f"{plan.hosts[0].address}:6627"
    assert env["use_virtualenv"] and env["virtualenv_root"].startswith(str(HOST_DIR))
    # The committed config.json names the project's own hosts (the default port) ...
    hosts_deploy.check_hosts_env(cfg, hosts)
    # ... and for other hosts it says what to set.
    other = Hosts(dataclasses.replace(cfg, zookeeper_port=22181))
    other.folder.mkdir(parents=True, exist_ok=True)
    with pytest.raises(UserError, match="set it to"):
        hosts_deploy.check_hosts_env(dataclasses.replace(cfg, zookeeper_port=22181), other)
    assert "no-index = true" in pip_conf(tmp_path).splitlines()
