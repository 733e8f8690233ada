"""``elastorm options``: every topology option (or, with ``--project``, every key of
config.json's ``elastorm`` section), its allowed values, default and meaning."""

from __future__ import annotations

import argparse

from elastorm.config import ProjectConfig, Section, TopologyConfig, options_table


def register(subparsers) -> None:
    """Add the ``options`` subcommand."""
    parser = subparsers.add_parser(
        "options",
        help="list the elastorm.* topology options (markdown table)",
        description="Print every elastorm.* option a topology conf may set (in its "
        "`config`, or with `sparse submit -o key=value`), with what is allowed, the "
        "default and what it means. With --examples, the example jobs' options too; "
        "with --project, the keys of config.json's `elastorm` section instead.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--examples", action="store_true", help="also list the example jobs' options"
    )
    which.add_argument(
        "--project",
        action="store_true",
        help="list the keys of config.json's `elastorm` section instead",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    sections: list[type[Section]] = [TopologyConfig]
    if args.project:
        sections = [ProjectConfig]
    elif args.examples:
        from elastorm.examples.options import EXAMPLE_SECTIONS

        sections.extend(EXAMPLE_SECTIONS)
    print(options_table(*sections), end="")
    return 0
