"""``elastorm scale --nodes N`` and ``elastorm drain NODE``: scale a running elastic
topology out and in (docs/scaling.md)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from elastorm.runtime.config import load_config
from elastorm.runtime.migrate import add_secret_option, add_zookeeper_option, connected
from elastorm.runtime.provision import NodeProvisioner, provisioner
from elastorm.runtime.scale import (
    Autoscaler,
    Progress,
    apply_scale,
    carry_out,
    finish_drain,
    plan_scale,
    progress,
    request_drain,
)
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import ZK_ERRORS


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", required=True, help="topology name as submitted")
    parser.add_argument(
        "--provisioner",
        default="local",
        help="who starts and stops nodes: 'local' (supervisors of this machine's "
        "cluster, default) or 'command:<script>' (see docs/scaling.md)",
    )
    add_zookeeper_option(parser)
    add_secret_option(parser)
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

    auto = subparsers.add_parser(
        "autoscale",
        help="scale a running elastic topology on its controller's thresholds",
        description="Follow the node count the controller's adaptation manager wants "
        "(elastorm.controller.adapt: a node overloaded with nowhere to shed load wants one "
        "more node; nodes its scale-in emptied want fewer), with hysteresis: a wish must "
        "hold --hold seconds and --cooldown seconds must pass between changes. Runs until "
        "interrupted or --duration.",
    )
    auto.add_argument("--min", type=int, default=1, help="fewest nodes (default 1)")
    auto.add_argument("--max", type=int, required=True, help="most nodes")
    auto.add_argument("--hold", type=float, default=30.0, help="seconds a wish must hold")
    auto.add_argument("--cooldown", type=float, default=60.0, help="seconds between changes")
    auto.add_argument("--duration", type=float, default=None, help="stop after this long")
    _common(auto)
    auto.set_defaults(func=_autoscale)


@contextmanager
def _session(
    args: argparse.Namespace,
) -> Iterator[tuple[KazooClient, ZnodeLayout, NodeProvisioner]]:
    """The ZooKeeper client, znode layout and node provisioner ``args`` name, for one
    command (the client closed at the end)."""
    cfg = load_config()
    with connected(args.zookeeper or cfg.zookeeper, secret_file=args.secret_file) as client:
        yield client, ZnodeLayout(args.topology), provisioner(args.provisioner, cfg)


def _autoscale(args: argparse.Namespace) -> int:
    scaler = Autoscaler(low=args.min, high=args.max, hold=args.hold, cooldown=args.cooldown)
    with _session(args) as (client, layout, nodes):
        began = time.monotonic()
        while args.duration is None or time.monotonic() - began < args.duration:
            try:
                if not client.connected:  # a call now would wait for the connection
                    raise ConnectionLoss()
                target = scaler.decide(progress(client, layout), time.monotonic())
                if target is not None:
                    change = plan_scale(client, layout, target, nodes)
                    print(
                        f"[{time.monotonic() - began:6.0f} s] scale to {target}: start "
                        f"{list(change.start)}, drain {list(change.drain)}",
                        flush=True,
                    )
                    carry_out(client, layout, change, nodes, args.timeout)
            except ZK_ERRORS as exc:  # the client reconnects by itself; so do we
                print(
                    f"[{time.monotonic() - began:6.0f} s] ZooKeeper unavailable "
                    f"({type(exc).__name__}); trying again",
                    flush=True,
                )
            time.sleep(1.0)
    return 0


def _show(p: Progress, took: float) -> None:
    for name, ops in sorted(p.owned.items()):
        groups = ", ".join(f"{op} {n}" for op, n in sorted(ops.items()))
        print(f"  {name:<16} key groups: {groups}")
    print(f"settled in {took:.1f} s")


def _scale(args: argparse.Namespace) -> int:
    with _session(args) as (client, layout, nodes):
        began = time.monotonic()
        change = plan_scale(client, layout, args.nodes, nodes)
        print(
            f"scale {args.topology} to {args.nodes} nodes: start {list(change.start)}, "
            f"drain {list(change.drain)}"
        )
        if args.no_wait:
            apply_scale(client, layout, change, nodes, args.timeout)
            return 0
        done = carry_out(client, layout, change, nodes, args.timeout)
        for name in change.drain:
            print(f"stopped {name}")
        _show(done.settled, time.monotonic() - began)
    return 0


def _drain(args: argparse.Namespace) -> int:
    with _session(args) as (client, layout, nodes):
        began = time.monotonic()
        after = request_drain(client, layout, args.node)
        print(f"{args.node} draining; node set now wanted {list(after.wanted or ())}")
        if args.no_wait:
            return 0
        p = finish_drain(client, layout, args.node, after, nodes, args.timeout, keep=args.keep)
        if not args.keep:
            print(f"stopped {args.node}")
        _show(p, time.monotonic() - began)
    return 0
