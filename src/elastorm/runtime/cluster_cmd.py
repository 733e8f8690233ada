"""``elastorm cluster up|down|status``: the single-machine Storm cluster."""

from __future__ import annotations

import argparse
import json

from elastorm.controller.problems import problems
from elastorm.errors import UserError
from elastorm.runtime.cluster import CLUSTER_ENV, down, node_of_port, status, up
from elastorm.runtime.config import env_nimbus, load_config
from elastorm.runtime.nimbus import executor_nodes
from elastorm.runtime.status import gather


def register(subparsers) -> None:
    """Add the ``cluster`` subcommand."""
    parser = subparsers.add_parser(
        "cluster",
        help="run a Storm cluster on this machine (ZooKeeper, Nimbus, N supervisors)",
        description="Start, stop or inspect ZooKeeper + Nimbus + N supervisors on loopback. "
        "Submit to it with `sparse submit -e cluster -j <jar>` (see `elastorm jar`).",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p_up = sub.add_parser(
        "up",
        help="start the cluster (idempotent)",
        description="Start ZooKeeper, Nimbus and the supervisors; wait "
        "until Nimbus lists every supervisor.",
    )
    p_up.add_argument(
        "--supervisors",
        type=int,
        default=None,
        help="number of supervisors (nodes); default: config.json elastorm.cluster_supervisors",
    )
    p_up.add_argument(
        "--netns-supervisor",
        type=int,
        default=None,
        metavar="I",
        help="run supervisor I in a network namespace of its own, joined to the host by a "
        "veth pair, so it can be cut off the network (root only; the chaos harness's "
        "netcut scenarios); `down` deletes the namespace",
    )
    p_up.set_defaults(func=_up)
    p_down = sub.add_parser(
        "down",
        help="stop every daemon and its workers",
        description="Stop the supervisors (and their workers), Nimbus and ZooKeeper.",
    )
    p_down.add_argument(
        "--wipe",
        action="store_true",
        help="also delete ZooKeeper data and local dirs (next `up` starts with no topologies)",
    )
    p_down.set_defaults(func=_down)
    p_status = sub.add_parser(
        "status",
        help="daemons, supervisors and topologies",
        description="Show daemon pids and what Nimbus reports, with the node each "
        "component's tasks run on (the elastic scheduler keeps one task of every keyed "
        "operator per node).",
    )
    p_status.add_argument("--json", action="store_true", help="print JSON")
    p_status.set_defaults(func=_status)


def _up(args: argparse.Namespace) -> int:
    summary = up(load_config(), args.supervisors, netns_supervisor=args.netns_supervisor)
    print(
        f"cluster up: {len(summary['supervisors'])} supervisors, "
        f"{len(summary['topologies'])} topologies"
    )
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = down(load_config(), wipe=args.wipe)
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _status(args: argparse.Namespace) -> int:
    """Print what runs; exit 2 (via ``UserError``, one line) when Nimbus does not answer."""
    info = status(load_config())
    nimbus = info["nimbus"]
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for name, pid in info["daemons"].items():
            print(f"{name:<16} {'pid ' + str(pid) if pid else 'not running'}")
        print(f"{'zookeeper srvr':<16} {'serving' if info['zookeeper_ok'] else 'no answer'}")
    if "error" in nimbus:
        raise UserError(nimbus["error"])
    if args.json:
        return 0
    for sup in nimbus["supervisors"]:
        print(f"supervisor {sup['id'][:8]}  {sup['host']}  slots {sup['used']}/{sup['slots']}")
    cfg = load_config()
    host, port = env_nimbus(cfg.project, CLUSTER_ENV)
    for topo in nimbus["topologies"]:
        print(
            f"topology {topo['name']}  {topo['status']}  workers {topo['workers']}  "
            f"executors {topo['executors']}  up {topo['uptime_secs']} s"
        )
        placed = executor_nodes(host, port, topo["name"], lambda _, p: node_of_port(cfg, p))
        for component, by_node in placed.items():
            where = "  ".join(f"{node} {tasks}" for node, tasks in by_node.items())
            print(f"  {component:<16} {where}")
        try:
            found = problems(gather(topo["name"], cfg.zookeeper, (host, port)).facts)
        except UserError as exc:  # ZooKeeper not answering: Nimbus's part is above
            print(f"  problems not read: {exc}")
            continue
        for p in found:
            print(f"  {'problem' if p.current else 'earlier'}: {p.line}")
    return 0
