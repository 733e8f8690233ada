"""``elastorm options``: every topology option (with ``--jobs``, the project's jobs' too;
with ``--project``, every key of config.json's ``elastorm`` section instead), its
allowed values, default and meaning."""

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
        "default and what it means. With --jobs, the options of the project's own jobs "
        "too (the sections its drivers, drivers/NAME.py, declare); with --project, the "
        "keys of config.json's `elastorm` section instead.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--jobs",
        "--examples",
        dest="jobs",
        action="store_true",
        help="also list the options the project's drivers declare (--examples: the same)",
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
    elif args.jobs:
        from elastorm.runtime.config import load_config
        from elastorm.runtime.drivers import project_sections

        sections.extend(project_sections(load_config().project))
    print(options_table(*sections), end="")
    return 0
