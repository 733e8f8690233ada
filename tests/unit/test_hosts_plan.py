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
