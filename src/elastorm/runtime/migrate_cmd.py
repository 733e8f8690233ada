"""``elastorm migrate``: move a key group of a running elastic topology."""

from __future__ import annotations

import argparse
import json

from elastorm.core.messages import Protocol
from elastorm.core.protocol_choice import MOVES
from elastorm.runtime.config import load_config
from elastorm.runtime.migrate import (
    add_secret_option,
    add_zookeeper_option,
    connected,
    keyed_operator,
    request_migration,
    wait_for_controller,
    wait_for_status,
)

STATUS_WAIT = 10.0  # s for the controller's status when --timeout is not given
MIGRATION_WAIT = 60.0  # s for a migration to end when --timeout is not given


def register(subparsers) -> None:
    """Add the ``migrate`` subcommand."""
    parser = subparsers.add_parser(
        "migrate",
        help="migrate a key group of a running topology (direct, CPA or CPAL)",
        description="Ask the topology's controller, through ZooKeeper, to move a key group "
        "and wait until both ends report done. CPA and CPAL need the target to hold the "
        "group's newest checkpoint (use --to holder): the controller waits up to "
        "elastorm.controller.defer_secs (10 s by default) for it (a holder just placed gets "
        "its first checkpoint), then falls back to direct and says so.",
    )
    parser.add_argument("--topology", required=True, help="topology name as submitted")
    parser.add_argument(
        "--operator",
        default=None,
        help="keyed component (default: the topology's keyed operator, if it has only one)",
    )
    parser.add_argument("--group", type=int, help="key group to move")
    parser.add_argument("--to", default="holder", help="target task id, or 'holder' (default)")
    parser.add_argument(
        "--protocol",
        choices=[p.value for p in MOVES],
        default="cpal",
        help="migration protocol (default: cpal)",
    )
    add_zookeeper_option(parser)
    add_secret_option(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds to wait: for the controller's status (default {STATUS_WAIT:.0f}; "
        f"more while the topology starts) and for the migration (default {MIGRATION_WAIT:.0f})",
    )
    parser.add_argument(
        "--status",
        action="store_true",
        help="only print the controller's routing table, holders, epoch and the "
        "migrations in flight (with what each waits for, and whether it is stuck)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    with connected(
        args.zookeeper or load_config().zookeeper, secret_file=args.secret_file
    ) as client:
        wait = STATUS_WAIT if args.timeout is None else args.timeout
        operator = args.operator or keyed_operator(client, args.topology, timeout=wait)
        status = wait_for_status(client, args.topology, operator, timeout=wait)
        if args.status or args.group is None:
            print(json.dumps(status, indent=2))
            return 0
        target = args.to if args.to == "holder" else int(args.to)
        wait_for_controller(client, args.topology, wait)
        result = request_migration(
            client,
            args.topology,
            operator,
            args.group,
            target,
            Protocol(args.protocol),
            MIGRATION_WAIT if args.timeout is None else args.timeout,
            until_stuck=True,
        )
    times = result.times
    took = times.get("done", 0) - times.get("started", 0) if "done" in times else None
    used = result.protocol_used.value if result.protocol_used else "-"
    print(
        f"key group {args.group}: {result.state.value}; protocol {used}"
        f"{' (asked ' + args.protocol + ')' if used != args.protocol else ''}; "
        f"task {result.source} -> {result.target}; epoch {result.epoch}"
        + (f"; completed in {took * 1000:.0f} ms" if took is not None else "")
        + (f"; {result.detail}" if result.detail else "")
    )
    return 0 if result.state.value == "done" else 1
