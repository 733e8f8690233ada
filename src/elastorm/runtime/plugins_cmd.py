"""``elastorm storm-plugins --storm-home PATH``: add elastorm to an existing Storm."""

from __future__ import annotations

import argparse
from pathlib import Path

from elastorm.runtime.config import check_storm_versions, load_config
from elastorm.runtime.plugins import install_plugins, storm_yaml_lines
from elastorm.runtime.storm_home import ensure_storm_home


def register(subparsers) -> None:
    """Add the ``storm-plugins`` subcommand."""
    parser = subparsers.add_parser(
        "storm-plugins",
        help="install elastorm's scheduler into an existing Storm home; print storm.yaml lines",
        description="Build elastorm's JVM plugins if needed (as `elastorm setup` does), copy "
        "its daemon jar (the elastic scheduler) into STORM_HOME/extlib-daemon/ of an "
        "existing Storm of the version elastorm pins, and print the lines to add to "
        "storm.yaml on Nimbus and on every supervisor. Workers need nothing: the topology "
        "jar `sparse submit` builds carries elastorm's serializer and relay. Do it on "
        "every Nimbus host, then restart Nimbus.",
    )
    parser.add_argument(
        "--storm-home", required=True, type=Path, help="the Storm home (where lib/ is)"
    )
    parser.add_argument(
        "--print-only",
        action="store_true",
        help="only print the storm.yaml lines; install nothing",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    cfg = load_config()
    if not args.print_only:
        ensure_storm_home(cfg)  # builds the plugin jar if needed
        jar = install_plugins(
            args.storm_home.resolve(), cfg.jvm_build, check_storm_versions(cfg.project)
        )
        print(f"installed {jar}")
        print("add to storm.yaml, then restart Nimbus:\n")
    print(storm_yaml_lines(), end="")
    return 0
