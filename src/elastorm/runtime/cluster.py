"""The single-machine Storm cluster: ZooKeeper, Nimbus and N supervisors (N nodes).

Each supervisor is one elastorm *node*: its own slot ports, its own local dir and
supervisor id, its own process group (killing it with its workers is a node
failure). Every daemon advertises and dials 127.0.0.1 (``storm.local.hostname``,
``nimbus.seeds``, ``storm.zookeeper.servers``) and ZooKeeper binds 127.0.0.1; Nimbus's
and the supervisors' Thrift servers and the workers' Netty servers bind every interface,
since Storm 2.8 has no setting for their address (``docs/runtime.md``, "What listens
where"). With ``up(..., netns_supervisor=i)`` supervisor ``i`` runs in a network
namespace of its own (``runtime/netns.py``) and the addresses change to ones both sides
reach (:class:`Addresses`), so the chaos harness can cut that node off the network.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass

from thriftpy2.transport import TTransportException

from elastorm.errors import UserError
from elastorm.runtime import netns
from elastorm.runtime.config import ElastormConfig, env_nimbus
from elastorm.runtime.plugins import EVERY_NODE, NIMBUS, supervisor_settings
from elastorm.runtime.services import (
    LOOPBACK,
    Daemon,
    ensure_zookeeper,
    port_open,
    running_pid,
    start,
    stop,
    wait_until,
    zookeeper_ok,
)
from elastorm.runtime.storm_home import ensure_storm_home

log = logging.getLogger(__name__)

CLUSTER_ENV = "cluster"


@dataclass(frozen=True, kw_only=True, slots=True)
class Addresses:
    """What the cluster's daemons advertise and dial: ``host`` for ZooKeeper, Nimbus and
    every supervisor on the host; ``inside`` for supervisor ``namespaced`` (None: no
    namespace, loopback everywhere)."""

    host: str = LOOPBACK
    namespaced: int | None = None
    inside: str = LOOPBACK
    namespace: str | None = None


def addresses(cfg: ElastormConfig) -> Addresses:
    """The cluster's addresses now: loopback, unless its namespace exists."""
    index = netns.namespaced_supervisor(cfg)
    if index is None:
        return Addresses()
    plan = netns.netns_plan(cfg.zookeeper_port)
    return Addresses(
        host=plan.host_address, namespaced=index, inside=plan.ns_address, namespace=plan.namespace
    )


def base_conf(cfg: ElastormConfig, nimbus_port: int, host: str = LOOPBACK) -> dict:
    """Storm settings every daemon of the cluster shares; ``host`` is where ZooKeeper
    and Nimbus are dialled and what the daemon advertises (a supervisor in the
    namespace overrides the latter)."""
    return {
        "storm.zookeeper.servers": [host],
        "storm.zookeeper.port": cfg.zookeeper_port,
        "storm.zookeeper.root": "/storm",
        "nimbus.seeds": [host],
        "nimbus.thrift.port": nimbus_port,
        "storm.local.hostname": host,
        "storm.log.dir": str(cfg.logs),
        "worker.heap.memory.mb": cfg.worker_heap_mb,
        "topology.worker.max.heap.size.mb": float(cfg.worker_heap_mb),
        "worker.childopts": (
            f"-Xmx{cfg.worker_heap_mb}m -Djava.net.preferIPv4Stack=true {cfg.worker_jvm_opts}"
        ).strip(),
        "supervisor.worker.start.timeout.secs": 120,
        # Storm's own liveness timeouts, raised from 30/120/30 s: on this 2-core machine
        # under load a starting worker took over 120 s and a busy one's heartbeat lagged
        # 80 s, and Storm then reassigned or restarted healthy workers, packing
        # executors two to a worker and dropping tuples in transit. elastorm detects a
        # lost task itself, from its ZooKeeper session and liveness connection, in about
        # a second (docs/failures.md); a dead worker's process exit is still seen at once.
        "nimbus.task.timeout.secs": 90,
        "nimbus.task.launch.secs": 300,
        "supervisor.worker.timeout.secs": 90,
        "nimbus.monitor.freq.secs": 5,
        "nimbus.supervisor.timeout.secs": 30,
        # What an operator's existing Storm gets too (`elastorm storm-plugins`): ride
        # out a ZooKeeper outage, never blacklist a node (runtime/plugins.py).
        **EVERY_NODE,
    }


def nimbus_daemon(cfg: ElastormConfig, nimbus_port: int, net: Addresses | None = None) -> Daemon:
    """Nimbus with its own local dir (``net``: the cluster's :func:`addresses`)."""
    net = net or addresses(cfg)
    conf = base_conf(cfg, nimbus_port, net.host) | {
        "storm.local.dir": str(cfg.run / "nimbus" / "data"),
        **NIMBUS,  # the elastic scheduler
    }
    return storm_daemon("nimbus", "nimbus", conf, port=nimbus_port)


def supervisor_daemon(
    cfg: ElastormConfig,
    index: int,
    nimbus_port: int,
    slots: int | None = None,
    net: Addresses | None = None,
) -> Daemon:
    """Supervisor ``index`` = node ``index``: own slot ports, thrift port and local dir;
    in the namespace if ``net`` (the cluster's :func:`addresses`) puts it there."""
    net = net or addresses(cfg)
    inside = index == net.namespaced
    slots = slots or cfg.cluster_slots_per_supervisor
    if not 1 <= slots <= 8:
        raise ValueError(f"slots per supervisor must be in 1..8, got {slots}")
    first = cfg.cluster_first_slot_port + index * 10
    name = node_name(index)
    conf = base_conf(cfg, nimbus_port, net.host) | {
        "storm.local.hostname": net.inside if inside else net.host,
        "storm.local.dir": str(cfg.run / name / "data"),
        "logviewer.port": first + 9,
        **supervisor_conf(cfg, name, list(range(first, first + slots)), first + 8),
    }
    # It halts itself when its ZooKeeper session expires (a ZooKeeper outage with Nimbus
    # away: chaos join/zk-stop, session 31): supervised. Killing its process group, as a
    # lost node is simulated, kills the supervising loop too.
    enter = tuple(netns.exec_prefix(net.namespace)) if inside and net.namespace else ()
    return storm_daemon("supervisor", name, conf, enter=enter)


#: Storm's daemons: main class and heap (MB).
STORM_DAEMONS = {
    "nimbus": ("org.apache.storm.daemon.nimbus.Nimbus", 512),
    "supervisor": ("org.apache.storm.daemon.supervisor.Supervisor", 256),
}


def storm_daemon(kind: str, name: str, conf: dict, **where) -> Daemon:
    """Storm's ``kind`` daemon (a key of :data:`STORM_DAEMONS`) as ``name`` with ``conf``,
    supervised: Storm's daemons halt themselves on a ZooKeeper outage of a few seconds,
    by design, and expect to be started again. ``where``: ``port``, ``enter``,
    ``address``."""
    main, heap = STORM_DAEMONS[kind]
    return Daemon(name=name, main=main, storm_conf=conf, heap_mb=heap, supervised=True, **where)


def supervisor_conf(cfg: ElastormConfig, name: str, slots: list[int], thrift: int) -> dict:
    """What supervisor ``name`` offers: its slot ports, their memory and CPU, its Thrift
    port, and its node name for the elastic scheduler."""
    return {
        "supervisor.slots.ports": slots,
        "supervisor.thrift.port": thrift,
        "supervisor.memory.capacity.mb": float(cfg.worker_heap_mb * len(slots) * 2),
        "supervisor.cpu.capacity": 100.0 * len(slots),
        **supervisor_settings(name),
    }


def node_name(index: int) -> str:
    """Supervisor ``index``'s node name (its daemon name and scheduler meta)."""
    return f"supervisor-{index}"


def node_of_port(cfg: ElastormConfig, port: int) -> str:
    """The node whose slot ``port`` is (supervisor ``i`` owns ports ``first + 10 i ..``)."""
    index, offset = divmod(port - cfg.cluster_first_slot_port, 10)
    if index < 0 or offset >= 8:
        raise UserError(f"port {port} is no slot port of this cluster")
    return node_name(index)


def up(
    cfg: ElastormConfig,
    supervisors: int | None = None,
    slots: int | None = None,
    netns_supervisor: int | None = None,
) -> dict:
    """Bring the cluster up (idempotent) and wait until Nimbus sees every supervisor.

    ``netns_supervisor``: run that supervisor in a network namespace of its own
    (``runtime/netns.py``; root only). The namespace is deleted again if the start
    fails, and by :func:`down`.
    """
    count = cfg.cluster_supervisors if supervisors is None else supervisors
    if count < 1:
        raise UserError(f"--supervisors must be at least 1, got {count}")
    if slots is not None and slots < 1:
        raise UserError(f"slots per supervisor must be at least 1, got {slots}")
    created = _namespace(cfg, count, netns_supervisor)
    try:
        return _up(cfg, count, slots)
    except BaseException:
        if created:  # nothing may stay inside a namespace about to go
            stop(cfg, node_name(netns_supervisor))
            netns.destroy(cfg)
        raise


def _namespace(cfg: ElastormConfig, count: int, index: int | None) -> bool:
    """Create the namespace for supervisor ``index`` unless it is there already; True
    if this call created it. Refused while daemons run: they were started with
    loopback addresses, which the namespace cannot reach."""
    if index is None or netns.namespaced_supervisor(cfg) == index:
        return False
    if not 0 <= index < count:
        raise UserError(f"--netns-supervisor must be in 0..{count - 1}, got {index}")
    netns.check_can_create()
    names = sorted(p.stem for p in cfg.run.glob("*.pid")) if cfg.run.exists() else []
    if running := [n for n in names if running_pid(cfg, n)]:
        raise UserError(
            f"{', '.join(running)} already run with other addresses: `elastorm cluster down` "
            "first, then up with --netns-supervisor"
        )
    netns.create(cfg, index)
    return True


def _up(cfg: ElastormConfig, count: int, slots: int | None) -> dict:
    from elastorm.runtime.nimbus import cluster_summary

    if zookeeper_ok(cfg.zookeeper_port) and running_pid(cfg, "zookeeper") is None:
        raise UserError(
            f"a ZooKeeper this project did not start answers on {LOOPBACK}:{cfg.zookeeper_port} "
            f"(no pid file in {cfg.run}): the cluster would share its state and `cluster down "
            "--wipe` could not clear it; stop that ZooKeeper or set elastorm.zookeeper_port"
        )
    ensure_storm_home(cfg)
    host, port = env_nimbus(cfg.project, CLUSTER_ENV)
    ensure_zookeeper(cfg)
    net = addresses(cfg)
    if net.namespaced is not None and not port_open(cfg.zookeeper_port, net.host):
        raise UserError(
            f"ZooKeeper does not answer on {net.host}:{cfg.zookeeper_port}, where supervisor-"
            f"{net.namespaced} dials it from its namespace; `elastorm cluster down` first"
        )
    nimbus = nimbus_daemon(cfg, port, net)
    pid = start(cfg, nimbus)
    wait_until(lambda: port_open(port, host), "Nimbus", 90, pid, cfg.logs / "nimbus.log")
    for index in range(count):
        start(cfg, supervisor_daemon(cfg, index, port, slots, net))

    def registered() -> bool:
        # Nimbus may still be opening its Thrift server, or drop a first connection.
        try:
            return len(cluster_summary(host, port)["supervisors"]) >= count
        except (UserError, OSError, TTransportException):
            return False

    wait_until(registered, f"{count} supervisors registered with Nimbus", 90)
    summary = cluster_summary(host, port)
    log.info("cluster up: Nimbus %s:%d, %d supervisors", host, port, len(summary["supervisors"]))
    return summary


def down(cfg: ElastormConfig, *, wipe: bool = False) -> list[str]:
    """Stop every daemon of the cluster (supervisors first); return what was stopped.

    ``wipe`` also deletes ZooKeeper's data and the daemons' local dirs, so the next
    ``up`` starts with no topologies (otherwise Nimbus resumes what was running). The
    namespace of a namespaced supervisor, if any, is deleted with its veth pair.
    """
    stopped = []
    names = sorted(p.stem for p in cfg.run.glob("supervisor-*.pid")) if cfg.run.exists() else []
    for name in [*names, "nimbus", "zookeeper"]:
        if stop(cfg, name):
            stopped.append(name)
    if netns.destroy(cfg):
        stopped.append("network namespace")
    if wipe:
        for path in [cfg.home / "zookeeper", *cfg.run.glob("*/data")]:
            shutil.rmtree(path, ignore_errors=True)
        log.info("wiped ZooKeeper data and the daemons' local dirs")
    return stopped


def status(cfg: ElastormConfig) -> dict:
    """What runs: daemons with pids, and what Nimbus reports if it answers."""
    from elastorm.runtime.nimbus import cluster_summary

    host, port = env_nimbus(cfg.project, CLUSTER_ENV)
    names = sorted(p.stem for p in cfg.run.glob("*.pid")) if cfg.run.exists() else []
    daemons = {name: running_pid(cfg, name) for name in names}
    result: dict = {"daemons": daemons, "zookeeper_ok": zookeeper_ok(cfg.zookeeper_port)}
    try:
        result["nimbus"] = cluster_summary(host, port)
    except UserError as exc:
        result["nimbus"] = {"error": str(exc)}
    return result
