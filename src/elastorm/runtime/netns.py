"""One supervisor of the single-machine cluster in a network namespace of its own, so
the chaos harness can cut it off the network for real (``ip link set <veth> down``).

Inside a namespace, 127.0.0.1 is the namespace's own loopback: a supervisor there can
reach nothing the host binds to loopback. So the namespace is joined to the host by a
veth pair on a /30 of its own (host end ``host_address``, namespace end
``ns_address``), and while it exists every address a Storm daemon advertises or dials
is one both sides reach: the host daemons advertise ``host_address`` (a local address
of the host, reachable from the host itself whatever the link's state), the namespaced
supervisor advertises ``ns_address``, and ZooKeeper binds every interface (it binds one
address, and the host's tools dial 127.0.0.1 while the namespace dials
``host_address``). Without a namespace nothing changes: loopback everywhere.

The names and the subnet derive from the cluster's ZooKeeper port, which no two
checkouts on one machine share, so their namespaces never collide. Which supervisor
is namespaced is kept in ``<home>/run/netns.json`` while the namespace exists, so a
supervisor started again later (``LocalSupervisors``, after a kill) goes back into it.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig

log = logging.getLogger(__name__)

#: The /16 the namespaces' /30 subnets are cut from (private, rarely used).
SUBNETS = ipaddress.IPv4Network("10.231.0.0/16")
#: Every interface: where ZooKeeper listens while a namespace exists.
ANY = "0.0.0.0"
#: Where named namespaces live (``ip netns add`` creates the file).
NETNS_DIR = Path("/run/netns")
STATE_FILE = "netns.json"


@dataclass(frozen=True, kw_only=True, slots=True)
class NetnsPlan:
    """A namespace joined to the host by a veth pair: ``host_veth`` (host side,
    ``host_address``) and ``ns_veth`` (inside, ``ns_address``), both on one /30."""

    namespace: str
    host_veth: str
    ns_veth: str
    host_address: str
    ns_address: str
    prefix: int = 30

    def __post_init__(self) -> None:
        for name in (self.host_veth, self.ns_veth):
            if not 1 <= len(name) <= 15:  # IFNAMSIZ - 1
                raise ValueError(f"interface name {name!r} must have 1-15 characters")


def netns_plan(zookeeper_port: int) -> NetnsPlan:
    """The namespace, veth names and addresses of the cluster whose ZooKeeper listens on
    ``zookeeper_port`` (1 <= port <= 65535): subnet ``port mod 16384`` of the 16,384
    /30s in 10.231.0.0/16, so ports that differ by less than 16,384 never share one.

    >>> p = netns_plan(24181)
    >>> (p.namespace, p.host_veth, p.ns_veth, p.host_address, p.ns_address)
    ('elastorm-24181', 'est24181h', 'est24181n', '10.231.121.213', '10.231.121.214')
    """
    if not 1 <= zookeeper_port <= 65535:
        raise ValueError(f"zookeeper_port must be in 1..65535, got {zookeeper_port}")
    count = SUBNETS.num_addresses // 4  # the /30s in the /16: 16,384
    base = SUBNETS.network_address + 4 * (zookeeper_port % count)
    return NetnsPlan(
        namespace=f"elastorm-{zookeeper_port}",
        host_veth=f"est{zookeeper_port}h",
        ns_veth=f"est{zookeeper_port}n",
        host_address=str(base + 1),
        ns_address=str(base + 2),
    )


def setup_commands(plan: NetnsPlan) -> list[list[str]]:
    """The ``ip`` commands that create the namespace and join it to the host, in order
    (the namespace's loopback up too: Storm's workers talk to their supervisor there)."""
    inside = [*exec_prefix(plan.namespace), "ip"]
    cidr = f"/{plan.prefix}"
    return [
        ["ip", "netns", "add", plan.namespace],
        ["ip", "link", "add", plan.host_veth, "type", "veth", "peer", "name", plan.ns_veth],
        ["ip", "link", "set", plan.ns_veth, "netns", plan.namespace],
        ["ip", "addr", "add", plan.host_address + cidr, "dev", plan.host_veth],
        ["ip", "link", "set", plan.host_veth, "up"],
        [*inside, "addr", "add", plan.ns_address + cidr, "dev", plan.ns_veth],
        [*inside, "link", "set", plan.ns_veth, "up"],
        [*inside, "link", "set", "lo", "up"],
    ]


def teardown_command(plan: NetnsPlan) -> list[str]:
    """Deleting the namespace deletes the veth pair with it (its end is inside)."""
    return ["ip", "netns", "delete", plan.namespace]


def link_command(plan: NetnsPlan, *, up: bool) -> list[str]:
    """Cut (``up=False``) or restore the namespace's only link at its inner end. The
    host then sees what a partition looks like from the rest of a cluster: silence
    (its packets go into a link without carrier; connects time out, nothing is reset).
    Inside, the route is gone, so sends fail at once ("Network is unreachable"). Cut
    at the host's end it would be the other way round (seen here with both)."""
    state = "up" if up else "down"
    return [*exec_prefix(plan.namespace), "ip", "link", "set", plan.ns_veth, state]


def exec_prefix(namespace: str) -> list[str]:
    """What runs a command inside ``namespace`` (``ip netns exec`` execs it: same pid,
    so pid files and process groups work as for any daemon)."""
    return ["ip", "netns", "exec", namespace]


def run_ip(cmd: list[str]) -> None:
    """Run one ``ip`` command; ``UserError`` with its stderr if it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise UserError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")


def check_can_create() -> None:
    """``UserError`` unless this process may create namespaces: root, ``ip`` on PATH."""
    if os.geteuid() != 0:
        raise UserError("a supervisor in a network namespace needs root (ip netns add)")
    if shutil.which("ip") is None:
        raise UserError("a supervisor in a network namespace needs iproute2's `ip` on PATH")


def exists(plan: NetnsPlan) -> bool:
    """True if the namespace is there (``ip netns add`` made its file)."""
    return (NETNS_DIR / plan.namespace).exists()


def create(cfg: ElastormConfig, supervisor: int) -> NetnsPlan:
    """Create the cluster's namespace for supervisor ``supervisor`` (a leftover one is
    deleted first); on any failure delete what was made and raise ``UserError``."""
    check_can_create()
    plan = netns_plan(cfg.zookeeper_port)
    destroy(cfg)
    try:
        for cmd in setup_commands(plan):
            run_ip(cmd)
    except (UserError, OSError, subprocess.TimeoutExpired):
        destroy(cfg)
        raise
    cfg.run.mkdir(parents=True, exist_ok=True)
    (cfg.run / STATE_FILE).write_text(json.dumps({"supervisor": supervisor}) + "\n")
    log.info(
        "namespace %s: supervisor-%d at %s, host at %s (%s)",
        plan.namespace, supervisor, plan.ns_address, plan.host_address, plan.host_veth,
    )  # fmt: skip
    return plan


def destroy(cfg: ElastormConfig) -> bool:
    """Delete the cluster's namespace (and veth pair) if it exists; True if it did."""
    plan = netns_plan(cfg.zookeeper_port)
    (cfg.run / STATE_FILE).unlink(missing_ok=True)
    if not exists(plan):
        return False
    run_ip(teardown_command(plan))
    log.info("deleted namespace %s and its veth pair", plan.namespace)
    return True


def set_link(cfg: ElastormConfig, *, up: bool) -> NetnsPlan:
    """Cut or restore the namespaced supervisor's link (the chaos harness's network cut)."""
    plan = netns_plan(cfg.zookeeper_port)
    if namespaced_supervisor(cfg) is None:
        raise UserError("no namespaced supervisor: `cluster up --netns-supervisor I` first")
    run_ip(link_command(plan, up=up))
    return plan


def namespaced_supervisor(cfg: ElastormConfig) -> int | None:
    """The index of the supervisor inside the cluster's namespace, None if there is none."""
    path = cfg.run / STATE_FILE
    if not path.exists() or not exists(netns_plan(cfg.zookeeper_port)):
        return None
    return int(json.loads(path.read_text())["supervisor"])
