"""``elastorm savepoint --topology T [--name NAME]``: take a savepoint of a topology's
durable checkpoints and source positions, without draining it (docs/runtime.md,
"Savepoints, restart and upgrade")."""

from __future__ import annotations

import argparse
import time

from elastorm.config import DurableConfig
from elastorm.durable.savepoint import SavepointError, check_name
from elastorm.durable.store import file_root
from elastorm.errors import UserError
from elastorm.runtime.config import load_config
from elastorm.runtime.migrate import add_zookeeper_option
from elastorm.runtime.restore import describe, restart_hint, store_of, take_savepoint


def register(subparsers) -> None:
    """Add the ``savepoint`` subcommand."""
    parser = subparsers.add_parser(
        "savepoint",
        help="record a topology's newest durable checkpoints and source positions",
        description="Take a savepoint of a (running or stopped) topology from its durable "
        "store: for every keyed operator and key group the newest complete durable set, "
        "and every emitter's restart point from ZooKeeper, written to "
        "savepoints/NAME.json in the store. The job is not drained: the sets are as old "
        "as each group's durable lag. Start a new submission from it with "
        "sparse submit ... -o elastorm.restore_from=NAME (exactly that; after a crash, "
        "this takes the newest durable sets: what =latest means). Retention never "
        "deletes a file a savepoint names.",
    )
    parser.add_argument("--topology", required=True, help="topology name as submitted")
    parser.add_argument("--name", default=None, help="savepoint name (default: sp-<date>-<time>)")
    parser.add_argument(
        "--uri",
        default=None,
        help=f"durable store ({DurableConfig.key('uri')}; default: <elastorm.home>/durable)",
    )
    add_zookeeper_option(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    cfg = load_config()
    name = args.name or f"sp-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        check_name(name)
    except SavepointError as exc:
        raise UserError(str(exc)) from None
    uri = args.uri or file_root(str(cfg.home.resolve()))
    store = store_of(uri, home=str(cfg.home.resolve()), topology=args.topology)
    sp, dropped = take_savepoint(
        store, args.zookeeper or cfg.zookeeper, args.topology, name, progress=print
    )
    if dropped:
        print(f"not covered by the sets, replaying from the source's start: {', '.join(dropped)}")
    print(describe(sp))
    print(f"written to {store.uri}/savepoints/{name}.json")
    print(restart_hint(sp))
    return 0
