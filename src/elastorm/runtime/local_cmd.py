"""``elastorm local`` (embedded LocalCluster), ``elastorm run`` (any env), ``elastorm jar``."""

from __future__ import annotations

import argparse

from elastorm.config import STRATEGIES
from elastorm.runtime.config import load_config
from elastorm.runtime.drivers import DriverArgs, load_driver
from elastorm.runtime.local import LOCAL_ENV
from elastorm.runtime.run import run_topology
from elastorm.runtime.topology_jar import build_topology_jar


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "topology",
        help="topology NAME: topologies/NAME.py, run and checked by drivers/NAME.py's "
        "make_driver() if the project has one",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="correlated",
        help="for the driver: the controller's checkpoint allocation (default correlated)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="for the driver: how much input to stream (e.g. flights: the first N rows; "
        "smoke: numbers to send)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900,
        help="give up if the run is not complete after this many seconds; a topology "
        "without a driver runs this long (default 900)",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where components write results (default: <home>/runs/<name>)",
    )


def register(subparsers) -> None:
    """Add the ``local``, ``run`` and ``jar`` subcommands."""
    local = subparsers.add_parser(
        "local",
        help="run a topology on an embedded Storm LocalCluster and check its results",
        description="Start Storm's LocalCluster (one JVM, real ZooKeeper), submit the topology "
        "with `sparse submit -e local`, wait until every tuple is processed, kill it, print "
        "per-operator counts and the check against pandas.",
    )
    _common(local)
    local.set_defaults(func=_local)
    run = subparsers.add_parser(
        "run",
        help="run a topology on a running cluster (e.g. `elastorm cluster up`) and check it",
        description="Like `local`, but submits to the Nimbus of a config.json env that is "
        "already up.",
    )
    _common(run)
    run.add_argument("-e", "--env", default="cluster", help="config.json env (default: cluster)")
    run.set_defaults(func=_run)
    jar = subparsers.add_parser(
        "jar",
        help="build the topology jar for `sparse submit -j`",
        description="Pack src/ under resources/ (plus the multilang serializer) into one jar.",
    )
    jar.add_argument("--out", default=None, help="jar path (default: <home>/jars/topology.jar)")
    jar.set_defaults(func=_jar)


def _execute(args: argparse.Namespace, env: str) -> int:
    from pathlib import Path

    cfg = load_config()
    driver_args = DriverArgs(limit=args.limit, strategy=args.strategy)
    outcome = run_topology(
        cfg,
        env,
        load_driver(cfg.project, args.topology, driver_args),
        args.timeout,
        Path(args.output_dir).resolve() if args.output_dir else None,
    )
    print(outcome.summary)
    print(f"run took {outcome.facts['seconds']} s; output in {outcome.facts['output_dir']}")
    return 0 if outcome.ok else 1


def _local(args: argparse.Namespace) -> int:
    return _execute(args, LOCAL_ENV)


def _run(args: argparse.Namespace) -> int:
    return _execute(args, args.env)


def _jar(args: argparse.Namespace) -> int:
    from pathlib import Path

    cfg = load_config()
    from elastorm.runtime.storm_home import ensure_storm_home

    ensure_storm_home(cfg)
    out = Path(args.out).resolve() if args.out else cfg.home / "jars" / "topology.jar"
    print(build_topology_jar(cfg, out))
    return 0
