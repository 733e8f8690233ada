"""``elastorm correlate``: run the offline correlation job (``elastorm.jobs.correlation``)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``correlate`` subcommand to the ``elastorm`` CLI."""
    parser = subparsers.add_parser(
        "correlate",
        help="compute key-group load correlations from stream history (PySpark)",
        description=(
            "Count each key group's load per time window on Spark (crc32 of the UTF-8 key"
            " mod the operator's key-group count, like the topology) and write the Pearson"
            " correlation of all key groups as an artifact for the controller."
            " See docs/correlation.md."
        ),
        epilog=(
            "example: elastorm correlate"
            " -i name=op1,path=flights.csv,groups=48,key=tailnum,ts=time_hour"
            " -i name=op4,path=logs/op4,groups=48,format=tuplelog --window 3600 -o corr.npz"
        ),
    )
    # Imported here so ``elastorm --help`` stays fast; pyspark loads only on run.
    from elastorm.jobs.correlation import add_arguments

    add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from elastorm.jobs.correlation import run

    return run(args)
