"""``elastorm scale --nodes N`` and ``elastorm drain NODE``: scale a running elastic
topology out and in (docs/scaling.md)."""

from __future__ import annotations

import argparse
import time

from elastorm.runtime.config import load_config
from elastorm.runtime.migrate import connect
from elastorm.runtime.provision import provisioner
from elastorm.runtime.scale import (
    Progress,
    apply_scale,
    plan_scale,
    request_drain,
    wait_settled,
)
from elastorm.zk.layout import ZnodeLayout


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", required=True, help="topology name as submitted")
    parser.add_argument(
        "--provisioner",
        default="local",
        help="who starts and stops nodes: 'local' (supervisors of this machine's "
        "cluster, default) or 'command:<script>' (see docs/scaling.md)",
    )
    parser.add_argument(
        "--zookeeper",
        default=None,
        help="ZooKeeper host:port (default: this project's, 127.0.0.1:<zookeeper_port>)",
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait (default 300)")
    parser.add_argument("--no-wait", action="store_true", help="return once the request is written")


def register(subparsers) -> None:
    """Add the ``scale`` and ``drain`` subcommands."""
    scale = subparsers.add_parser(
        "scale",
        help="scale a running elastic topology to N nodes (live, key groups move by CPAL)",
        description="Start or drain nodes until N nodes run the topology's keyed "
        "operators: new nodes are started by the provisioner, bound by the elastic "
        "scheduler and given key groups by the controller; surplus nodes are emptied by "
        "the controller, then stopped. N is at most the keyed operators' task count.",
    )
    scale.add_argument("--nodes", type=int, required=True, help="number of nodes wanted")
    _common(scale)
    scale.set_defaults(func=_scale)
    drain = subparsers.add_parser(
        "drain",
        help="move every key group and checkpoint off NODE, then release and stop it",
        description="Mark NODE draining: the scheduler gives it no new work, the controller "
        "moves its key groups (CPAL) and checkpoints elsewhere and releases it; then the "
        "provisioner stops it (unless --keep).",
    )
    drain.add_argument("node", metavar="NODE", help="node name, e.g. supervisor-2")
    drain.add_argument("--keep", action="store_true", help="do not stop the node afterwards")
    _common(drain)
    drain.set_defaults(func=_drain)


def _show(p: Progress, took: float) -> None:
    for name, ops in sorted(p.owned.items()):
        groups = ", ".join(f"{op} {n}" for op, n in sorted(ops.items()))
        print(f"  {name:<16} key groups: {groups}")
    print(f"settled in {took:.1f} s")


def _scale(args: argparse.Namespace) -> int:
    cfg = load_config()
    client = connect(args.zookeeper or f"127.0.0.1:{cfg.zookeeper_port}")
    layout = ZnodeLayout(args.topology)
    nodes = provisioner(args.provisioner, cfg)
    try:
        began = time.monotonic()
        change = plan_scale(client, layout, args.nodes, nodes)
        print(
            f"scale {args.topology} to {args.nodes} nodes: start {list(change.start)}, "
            f"drain {list(change.drain)}"
        )
        apply_scale(client, layout, change, nodes, args.timeout)
        if args.no_wait:
            return 0
        active = set(change.nodes.wanted or ()) - set(change.nodes.draining)
        p = wait_settled(client, layout, active, args.timeout)
        for name in change.drain:
            nodes.stop(name)
            print(f"stopped {name}")
        _show(p, time.monotonic() - began)
    finally:
        client.stop()
        client.close()
    return 0


def _drain(args: argparse.Namespace) -> int:
    cfg = load_config()
    client = connect(args.zookeeper or f"127.0.0.1:{cfg.zookeeper_port}")
    layout = ZnodeLayout(args.topology)
    nodes = provisioner(args.provisioner, cfg)
    try:
        began = time.monotonic()
        after = request_drain(client, layout, args.node)
        print(f"{args.node} draining; node set now wanted {list(after.wanted or ())}")
        if args.no_wait:
            return 0
        active = set(after.wanted or ()) - set(after.draining)
        p = wait_settled(client, layout, active, args.timeout)
        if not args.keep:
            nodes.stop(args.node)
            print(f"stopped {args.node}")
        _show(p, time.monotonic() - began)
    finally:
        client.stop()
        client.close()
    return 0
