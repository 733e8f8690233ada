"""The ``elastorm`` command line: one subcommand per module, each with ``--help``.

A subcommand module exposes ``register(subparsers)``, which adds its parser and
sets ``func`` (called with the parsed args, returns an exit code). Errors that a
user can fix are raised as ``UserError`` and printed as one line, no traceback.

Exit codes: 0 done; 1 a run finished but its check failed (``local``, ``run``); 2 an
error (bad usage or configuration, a server that does not answer, anything
unexpected), always with one line on stderr; 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback

from elastorm.errors import UserError

#: Modules that contribute subcommands, in the order ``--help`` lists them.
SUBCOMMAND_MODULES = (
    "elastorm.runtime.setup_cmd",
    "elastorm.runtime.plugins_cmd",
    "elastorm.runtime.local_cmd",
    "elastorm.runtime.cluster_cmd",
    "elastorm.runtime.hosts_cmd",
    "elastorm.runtime.hdfs_cmd",
    "elastorm.runtime.check_cmd",
    "elastorm.runtime.options_cmd",
    "elastorm.runtime.status_cmd",
    "elastorm.runtime.migrate_cmd",
    "elastorm.runtime.state_cmd",
    "elastorm.runtime.scale_cmd",
    "elastorm.runtime.forget_cmd",
    "elastorm.runtime.savepoint_cmd",
    "elastorm.runtime.postgres_cmd",
    "elastorm.dashboard.cli",
    "elastorm.jobs.correlation_cmd",
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
        print(f"elastorm {args.command}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"elastorm {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or an unforeseen failure: still one line
        if args.verbose:
            traceback.print_exc()
        hint = "" if args.verbose else " (run `elastorm -v ...` for the traceback)"
        detail = _one_line(f"{type(exc).__name__}: {exc}")
        print(f"elastorm {args.command}: error: {detail}{hint}", file=sys.stderr)
        return 2


def _one_line(text: str) -> str:
    """``text`` with its lines joined by `` | `` (error messages stay on one line)."""
    return " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
