"""``elastorm postgres up|down|status``: the private PostgreSQL server of the sinks."""

from __future__ import annotations

import argparse

from elastorm.runtime import postgres
from elastorm.runtime.config import load_config


def register(subparsers) -> None:
    """Add the ``postgres`` subcommand."""
    parser = subparsers.add_parser(
        "postgres",
        help="run a private PostgreSQL server for the sinks (Debian's package)",
        description="Start, stop or inspect a PostgreSQL server of this project's own: "
        "data in <home>/postgres, loopback only, port elastorm.postgres_port of "
        "config.json. `up` and `status` print its connection string "
        "(elastorm.sinks.postgres_dsn).",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("up", help="initdb once, then start it (idempotent)").set_defaults(func=_up)
    sub.add_parser("down", help="stop it").set_defaults(func=_down)
    sub.add_parser("status", help="whether it runs, and its DSN").set_defaults(func=_status)


def _up(args: argparse.Namespace) -> int:
    print(postgres.up(load_config()).dsn)
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = postgres.down(load_config())
    print("stopped" if stopped else "not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    pg = postgres.server(load_config())
    if not postgres.running(pg):
        print("not running")
        return 2
    print(pg.dsn)
    return 0
