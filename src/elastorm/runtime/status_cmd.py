"""``elastorm status --topology T``: does the topology run, and if not, why (one line each)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from elastorm.controller.problems import RECENT_SECS, problems, why_no_status
from elastorm.errors import UserError
from elastorm.runtime.cluster import CLUSTER_ENV
from elastorm.runtime.config import env_nimbus, load_config
from elastorm.runtime.migrate import add_zookeeper_option
from elastorm.runtime.status import Gathered, busiest_task, gather


def register(subparsers) -> None:
    """Add the ``status`` subcommand."""
    parser = subparsers.add_parser(
        "status",
        help="a topology's state on Storm and in elastorm, and why it cannot run (if so)",
        description="Print what Nimbus and the topology's ZooKeeper say of it: its Storm "
        "status, its keyed tasks, and one line per problem (placement refused by the "
        "elastic scheduler, a controller that refuses the topology, tasks that failed to "
        "start, errors Storm recorded, with the newest reason; `earlier:` once not seen for "
        f"{RECENT_SECS:.0f} s). Exit 1 if a problem is current.",
    )
    parser.add_argument("--topology", required=True, help="topology name as submitted (-N)")
    add_zookeeper_option(parser)
    parser.add_argument(
        "-e",
        "--environment",
        default=CLUSTER_ENV,
        help=f"config.json env whose Nimbus to ask (default: {CLUSTER_ENV}; 'none': do not ask)",
    )
    parser.add_argument(
        "--pid",
        metavar="OPERATOR",
        default=None,
        help="print only the process id of OPERATOR's task that owns the most key groups "
        "(to kill it: kill -9 $(elastorm status --topology T --pid OPERATOR))",
    )
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    cfg = load_config()
    nimbus = None if args.environment == "none" else env_nimbus(cfg.project, args.environment)
    got = gather(args.topology, args.zookeeper or cfg.zookeeper, nimbus)
    if args.pid is not None:
        task = busiest_task(got.tasks, args.pid)
        if task is None:
            raise UserError(
                f"{args.topology} has no live task of {args.pid}: {why_no_status(got.facts)}"
            )
        print(task.identity.pid)
        return 0
    found = problems(got.facts)
    if args.json:
        print(json.dumps(asdict(got.facts) | {"problems": [asdict(p) for p in found]}, indent=2))
        return 1 if any(p.current for p in found) else 0
    for line in lines(got):
        print(line)
    return 1 if any(p.current for p in found) else 0


def lines(got: Gathered) -> list[str]:
    """What ``elastorm status`` prints: the topology, its keyed tasks, its problems."""
    facts = got.facts
    if facts.on_storm:
        storm = f"{facts.storm_status} on Storm, up {facts.uptime_secs} s"
    elif facts.on_storm is False:
        storm = "not on Storm"
    else:
        storm = f"Storm not asked ({got.nimbus_note})"
    controller = "a controller leads" if facts.controller_alive else "no controller leads"
    out = [f"{facts.topology}: {storm}; {controller}"]
    for task, record in got.tasks.items():
        who, beat = record.identity, record.heartbeat
        out.append(
            f"  {who.operator} task {task}: pid {who.pid} on {who.node_id}, "
            f"{len(beat.key_groups)} key groups, {len(beat.checkpoints)} checkpoints held"
        )
    if facts.statuses:
        out.append(f"controller status of: {', '.join(facts.statuses)}")
    else:
        out.append(f"no controller status: {why_no_status(facts)}")
    out += [f"{'problem' if p.current else 'earlier'}: {p.line}" for p in problems(facts)]
    return out
