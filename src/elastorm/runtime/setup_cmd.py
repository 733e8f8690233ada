"""``elastorm setup``: assemble the Storm home from Maven Central (idempotent)."""

from __future__ import annotations

import argparse

from elastorm.runtime.config import load_config
from elastorm.runtime.storm_home import ensure_storm_home


def register(subparsers) -> None:
    """Add the ``setup`` subcommand."""
    parser = subparsers.add_parser(
        "setup",
        help="download Storm from Maven Central and lay out a Storm home",
        description="Resolve Storm's jars with Maven (cached in ~/.m2) and link them into "
        "<home>/storm-<version>/{lib,lib-worker}; write log4j2 configs. Idempotent.",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    home = ensure_storm_home(load_config())
    print(f"Storm home: {home}")
    return 0
