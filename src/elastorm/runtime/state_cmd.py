"""``elastorm state``: read one key's current state from a running elastic topology."""

from __future__ import annotations

import argparse
import json

from elastorm.errors import UserError
from elastorm.runtime.migrate import add_secret_option, add_zookeeper_option
from elastorm.runtime.state import DEFAULT_TIMEOUT, query_state


def register(subparsers) -> None:
    """Add the ``state`` subcommand."""
    parser = subparsers.add_parser(
        "state",
        help="print one key's current state in a keyed operator of a running topology",
        description="Ask the task that owns the key's key group (from the operator's "
        "routing table in ZooKeeper) for the key's record, {state name: value}, and print "
        "it as JSON. During a migration or a restore the owner answers once the group is "
        "active again. Read-only: the state is never written.",
    )
    parser.add_argument("--topology", required=True, help="topology name as submitted (-N)")
    parser.add_argument("--operator", required=True, help="the keyed bolt's component name")
    key = parser.add_mutually_exclusive_group(required=True)
    key.add_argument("--key", help="the key, as the operator sees it")
    key.add_argument(
        "--key-values",
        metavar="JSON",
        help="for an operator keyed by a field list: the fields' values as a JSON array, "
        "e.g. '[\"AA\", 2013]' (made into the key as the router does)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for the owner's answer (default {DEFAULT_TIMEOUT:g})",
    )
    add_zookeeper_option(parser)
    add_secret_option(parser)
    parser.set_defaults(func=_run)


def _key(args: argparse.Namespace) -> str | list:
    """The key of ``--key``, or the field values of ``--key-values`` (a list, which
    ``query_state`` makes into the key as the router does)."""
    if args.key is not None:
        return args.key
    try:
        values = json.loads(args.key_values)
    except ValueError as exc:
        raise UserError(f"--key-values is not JSON: {exc}") from None
    if not isinstance(values, list) or not values:
        raise UserError(f"--key-values must be a non-empty JSON array, got {args.key_values}")
    return values


def _run(args: argparse.Namespace) -> int:
    result = query_state(
        args.topology,
        args.operator,
        _key(args),
        timeout=args.timeout,
        zookeeper=args.zookeeper,
        secret_file=args.secret_file,
    )
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0
