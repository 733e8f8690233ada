"""``elastorm options``: every topology option, its allowed values, default and meaning."""

from __future__ import annotations

import argparse

from elastorm.config import TopologyConfig, options_table


def register(subparsers) -> None:
    """Add the ``options`` subcommand."""
    parser = subparsers.add_parser(
        "options",
        help="list the elastorm.* topology options (markdown table)",
        description="Print every elastorm.* option a topology conf may set (in its "
        "`config`, or with `sparse submit -o key=value`), with what is allowed, the "
        "default and what it means. With --project, the options of the project's own "
        "jobs too: the sections its drivers (drivers/NAME.py) declare.",
    )
    parser.add_argument(
        "--project",
        "--examples",
        dest="project",
        action="store_true",
        help="also list the options the project's drivers declare (--examples: the same)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    sections = [TopologyConfig]
    if args.project:
        from elastorm.runtime.config import load_config
        from elastorm.runtime.drivers import project_sections

        sections.extend(project_sections(load_config().project))
    print(options_table(*sections), end="")
    return 0
