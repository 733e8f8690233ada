"""A Storm cluster across the hosts of ``runtime/hosts.py``, laid out as an operator
lays one out: a 3-server ZooKeeper ensemble, two Nimbus (Storm's leader election) and
supervisors on the other hosts, each daemon on Storm's default ports of its own host,
its data in the host's private folder, its log in ``<logs>/hosts/``.

Each daemon runs inside its host through ``nsenter`` into the host's sshd (its network
and mount namespaces), under the same start, supervision and pid files as the
single-machine cluster's (``runtime/services.py``). The Storm home is the project's, on
which ``elastorm setup`` installed elastorm's plugins as into any Storm
(``runtime/plugins.py``); the daemons get the settings ``elastorm storm-plugins``
prints.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from thriftpy2.transport import TTransportException

from elastorm.errors import UserError
from elastorm.runtime.cluster import base_conf, storm_daemon, supervisor_conf
from elastorm.runtime.config import ElastormConfig
from elastorm.runtime.hosts import HOST_DIR, HostPlan, Hosts, HostsPlan
from elastorm.runtime.plugins import NIMBUS
from elastorm.runtime.services import (
    Daemon,
    port_open,
    start,
    stop,
    wait_until,
    zoo_cfg_text,
    zookeeper_ok,
    zookeeper_server,
)
from elastorm.runtime.storm_home import ensure_storm_home

log = logging.getLogger(__name__)

ZOOKEEPER_PORT = 2181  # Storm's and ZooKeeper's defaults, each on its own host
NIMBUS_PORT = 6627
SUPERVISOR_PORT = 6628
FIRST_SLOT = 6700
SLOTS = 2
MIN_HOSTS = 4  # three ZooKeeper servers, two of them with a Nimbus, two supervisors


@dataclass(frozen=True, kw_only=True, slots=True)
class Roles:
    """Which hosts run what."""

    zookeepers: tuple[HostPlan, ...]
    nimbuses: tuple[HostPlan, ...]
    supervisors: tuple[HostPlan, ...]

    def daemons(self) -> list[tuple[HostPlan, str]]:
        """(host, daemon kind) for every daemon, in the order they start."""
        return [
            *((h, "zookeeper") for h in self.zookeepers),
            *((h, "nimbus") for h in self.nimbuses),
            *((h, "supervisor") for h in self.supervisors),
        ]


def roles(plan: HostsPlan) -> Roles:
    """ZooKeeper on the first three hosts, Nimbus on the first two, supervisors on every
    host from the third on (the third runs a ZooKeeper server and a supervisor).

    >>> from elastorm.runtime.hosts import hosts_plan
    >>> r = roles(hosts_plan(12181, 5))
    >>> [[h.name for h in hs] for hs in (r.zookeepers, r.nimbuses, r.supervisors)]
    [['host0', 'host1', 'host2'], ['host0', 'host1'], ['host2', 'host3', 'host4']]
    """
    if len(plan.hosts) < MIN_HOSTS:
        raise UserError(f"a cluster across hosts needs at least {MIN_HOSTS} hosts, got "
                        f"{len(plan.hosts)}: `elastorm hosts up --count {MIN_HOSTS}`")  # fmt: skip
    return Roles(zookeepers=plan.hosts[:3], nimbuses=plan.hosts[:2], supervisors=plan.hosts[2:])


def daemon_name(host: HostPlan, kind: str) -> str:
    """``<host>-<kind>``: its pid file and log stem."""
    return f"{host.name}-{kind}"


def storm_conf(cfg: ElastormConfig, r: Roles, host: HostPlan) -> dict:
    """What every Storm daemon on ``host`` shares: the ensemble, both Nimbus as seeds,
    the host's own address, its local dir in the host's private folder."""
    return base_conf(cfg, NIMBUS_PORT, host.address) | {
        "storm.zookeeper.servers": [z.address for z in r.zookeepers],
        "storm.zookeeper.port": ZOOKEEPER_PORT,
        "nimbus.seeds": [n.address for n in r.nimbuses],
        "storm.local.dir": str(HOST_DIR / "storm"),
        "storm.log.dir": str(cfg.logs / "hosts" / host.name),
        # Nimbus's metric store defaults to <storm.home>/storm_rocks: one folder for every
        # host here (they share the Storm home), and the second Nimbus failed to lock it.
        "storm.metricstore.rocksdb.location": str(HOST_DIR / "storm_rocks"),
    }


def host_daemon(cfg: ElastormConfig, hosts: Hosts, r: Roles, host: HostPlan, kind: str) -> Daemon:
    """The daemon ``kind`` (zookeeper, nimbus, supervisor) of ``host``, entered into it."""
    name = daemon_name(host, kind)
    where = {"enter": hosts.enter(host.name), "address": host.address}
    if kind == "zookeeper":
        me = r.zookeepers.index(host) + 1
        data = hosts.folder / host.name / "root" / "zookeeper"  # HOST_DIR/zookeeper inside
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{me}\n")
        zoo = cfg.run / f"{name}.cfg"
        cfg.run.mkdir(parents=True, exist_ok=True)
        ensemble = tuple(z.address for z in r.zookeepers)
        zoo.write_text(
            zoo_cfg_text(HOST_DIR / "zookeeper", ZOOKEEPER_PORT, host.address,
                         fsync=cfg.zookeeper_fsync, ensemble=ensemble)
        )  # fmt: skip
        return zookeeper_server(name, zoo, ZOOKEEPER_PORT, supervised=True, **where)
    conf = storm_conf(cfg, r, host)
    if kind == "nimbus":
        return storm_daemon("nimbus", name, conf | NIMBUS, port=NIMBUS_PORT, **where)
    slots = list(range(FIRST_SLOT, FIRST_SLOT + SLOTS))
    conf |= supervisor_conf(cfg, host.name, slots, SUPERVISOR_PORT)
    return storm_daemon("supervisor", name, conf, **where)


def up(cfg: ElastormConfig, hosts: Hosts, timeout: float = 180.0) -> dict:
    """Start the ensemble, both Nimbus and the supervisors on the hosts that are up; wait
    for a quorum, a leading Nimbus and every supervisor registered; Nimbus's summary."""
    plan = hosts.plan()
    if plan is None:
        raise UserError("no hosts are up: `elastorm hosts up` first")
    r = roles(plan)
    ensure_storm_home(cfg)
    (cfg.logs / "hosts").mkdir(parents=True, exist_ok=True)
    for h in r.zookeepers:
        start(cfg, host_daemon(cfg, hosts, r, h, "zookeeper"))
    for h in r.zookeepers:
        wait_until(lambda h=h: zookeeper_ok(ZOOKEEPER_PORT, host=h.address),
                   f"ZooKeeper on {h.name}", timeout)  # fmt: skip
    for h in r.nimbuses:
        start(cfg, host_daemon(cfg, hosts, r, h, "nimbus"))
    for h in r.supervisors:
        start(cfg, host_daemon(cfg, hosts, r, h, "supervisor"))

    def ready() -> bool:
        if not all(port_open(NIMBUS_PORT, n.address) for n in r.nimbuses):
            return False
        summary = leader_summary(r)
        return summary is not None and len(summary["supervisors"]) >= len(r.supervisors)

    wait_until(ready, f"both Nimbus, a leader and {len(r.supervisors)} supervisors", timeout)
    summary = leader_summary(r)
    assert summary is not None
    log.info("Storm across %d hosts: ZooKeeper on %s, Nimbus on %s, supervisors on %s",
             len(plan.hosts), *(", ".join(h.name for h in hs)
                                for hs in (r.zookeepers, r.nimbuses, r.supervisors)))  # fmt: skip
    return summary


def leader_summary(r: Roles) -> dict | None:
    """Nimbus's cluster summary as the leading Nimbus gives it (its ``nimbuses`` name
    the leader), or None while no Nimbus answers."""
    from elastorm.runtime.nimbus import cluster_summary

    for n in r.nimbuses:
        if not port_open(NIMBUS_PORT, n.address):
            continue
        try:
            return cluster_summary(n.address, NIMBUS_PORT)
        except (UserError, OSError, TTransportException):
            continue
    return None


def down(cfg: ElastormConfig, hosts: Hosts) -> list[str]:
    """Stop every daemon of the hosts' cluster (supervisors first); what was stopped."""
    plan = hosts.plan()
    if plan is None:
        return []
    r = roles(plan)
    return [
        daemon_name(h, kind) for h, kind in reversed(r.daemons()) if stop(cfg, daemon_name(h, kind))
    ]
