"""``elastorm forget --topology NAME``: delete the ZooKeeper state elastorm keeps for a
topology name (docs/runtime.md, "Resubmitting a name, and forgetting one")."""

from __future__ import annotations

import argparse
import sys

from elastorm.config import DurableConfig
from elastorm.durable.store import resolve_uri
from elastorm.errors import UserError
from elastorm.runtime.config import load_config
from elastorm.runtime.forget import forget, inventory, refusal, running_entry
from elastorm.runtime.migrate import add_secret_option, add_zookeeper_option, connected
from elastorm.zk.layout import ZnodeLayout, ZnodeLayoutError


def register(subparsers) -> None:
    """Add the ``forget`` subcommand."""
    parser = subparsers.add_parser(
        "forget",
        help="delete the ZooKeeper state elastorm keeps for a topology name",
        description="List, then delete, every znode elastorm keeps for a topology name "
        "under /elastorm/NAME: the last submission's routing tables, checkpoint "
        "allocation, incarnations, restart points, requests and node set, and the "
        "earlier submissions set aside under archive/ when the name was resubmitted. "
        "Refused while Nimbus runs the topology or its tasks' sessions are open (unless "
        "--force). Durable checkpoint files are not touched. Without --yes it asks, or "
        "only lists when not on a terminal.",
    )
    parser.add_argument("--topology", required=True, help="topology name as submitted")
    add_zookeeper_option(parser)
    add_secret_option(parser)
    parser.add_argument(
        "--nimbus",
        default=None,
        metavar="HOST:PORT",
        help="Nimbus to ask whether the topology runs (default: config.json's cluster env)",
    )
    parser.add_argument("--yes", action="store_true", help="delete without asking")
    parser.add_argument(
        "--force",
        action="store_true",
        help="delete even if the topology runs or Nimbus cannot be asked (its tasks then "
        "lose their state: a restart of one starts empty)",
    )
    parser.set_defaults(func=_run)


def _nimbus(args: argparse.Namespace) -> tuple[str, int]:
    if args.nimbus:
        host, _, port = args.nimbus.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--nimbus must be HOST:PORT, got {args.nimbus!r}")
        return host, int(port)
    from elastorm.runtime.cluster import CLUSTER_ENV
    from elastorm.runtime.config import env_nimbus

    return env_nimbus(load_config().project, CLUSTER_ENV)


def _running(args: argparse.Namespace):
    """Nimbus's entry for the topology (None: not running); ``UserError`` if Nimbus
    cannot be asked."""
    from elastorm.runtime import nimbus

    host, port = _nimbus(args)
    try:
        summary = nimbus.cluster_summary(host, port)
    except UserError as exc:
        raise UserError(
            f"cannot tell whether {args.topology} runs ({exc}); pass --nimbus HOST:PORT, "
            "or --force to delete anyway"
        ) from None
    return running_entry(args.topology, summary)


def _run(args: argparse.Namespace) -> int:
    try:
        layout = ZnodeLayout(args.topology)
    except ZnodeLayoutError as exc:
        raise UserError(str(exc)) from None
    with connected(
        args.zookeeper or load_config().zookeeper, secret_file=args.secret_file
    ) as client:
        inv = inventory(client, layout)
        if inv is None:
            print(f"nothing to forget: no znodes under {layout.base}")
            return 0
        sub = inv.submission
        print(f"{inv.base}: {inv.znodes} znodes")
        print(f"  submission: {sub.storm_id if sub else 'none recorded'}")
        for part, count in inv.parts.items():
            print(f"  {part + '/':<16} {count:>6} znodes")
        for name in inv.archived:
            print(f"  set aside: {name} ({inv.base}/archive/{name})")
        if not args.force:
            why = refusal(args.topology, inv, _running(args))
            if why:
                raise UserError(f"not forgetting {args.topology}: {why}; or pass --force")
        if not args.yes:
            if not sys.stdin.isatty():
                print("nothing deleted: pass --yes to delete")
                return 0
            answer = input(f"delete these {inv.znodes} znodes? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                print("nothing deleted")
                return 0
        forget(client, layout)
    home = str(load_config().home.resolve())
    default = resolve_uri("file://", home=home, topology=args.topology)
    print(
        f"deleted {inv.znodes} znodes under {inv.base}; a new submission of "
        f"{args.topology} starts clean. Durable checkpoint files were not touched: they "
        f"are under <{DurableConfig.key('uri')}>/{args.topology}/ (by default {default}/), "
        "one directory per storm id, with savepoints/ beside them; delete that directory "
        "to drop them too"
    )
    return 0
