"""The ``elastorm`` command line: one subcommand per module, each with ``--help``.

A subcommand module exposes ``register(subparsers)``, which adds its parser and
sets ``func`` (called with the parsed args, returns an exit code). Errors that a
user can fix are raised as ``UserError`` and printed as one line, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from runtime.errors import UserError

#: Modules that contribute subcommands, in the order ``--help`` lists them.
SUBCOMMAND_MODULES = (
    "runtime.setup_cmd",
    "runtime.local_cmd",
    "runtime.cluster_cmd",
    "runtime.check_cmd",
    "runtime.migrate_cmd",
    "jobs.correlation_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="elastorm",
        description="Elastic, fault-tolerant stateful stream processing on Apache Storm.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # subcommand not built yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``elastorm`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"elastorm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"elastorm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
