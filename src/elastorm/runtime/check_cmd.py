"""``elastorm check``: validate the configuration and reach the servers, one line per finding."""

from __future__ import annotations

import argparse
import shutil

from elastorm.config import TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.config import check_storm_versions, env_nimbus, load_config
from elastorm.runtime.services import port_open, zookeeper_ok
from elastorm.storm.wire import EncodingUnavailable, require_encoding


def register(subparsers) -> None:
    """Add the ``check`` subcommand."""
    parser = subparsers.add_parser(
        "check",
        help="validate config.json and check that ZooKeeper and Nimbus answer",
        description="Validate config.json (every key of every env, every elastorm key), "
        "check that config.json, project.clj and jvm/pom.xml pin the same Storm version, "
        "that java and mvn exist, that this Python has the default multilang encoding's "
        "package (msgpack), "
        "and, with --env, that ZooKeeper and that env's Nimbus answer. Exit 2 on the first "
        "problem, with a one-line reason.",
    )
    parser.add_argument(
        "-e", "--env", default=None, help="also check this config.json env's servers (e.g. cluster)"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    cfg = load_config()
    version = check_storm_versions(cfg.project)
    print(f"config.json ok; Storm {version} pinned in config.json, project.clj, jvm/pom.xml")
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} is not on PATH")
    print("java and mvn found")
    # Local workers run the components on this interpreter (services.java_env).
    default = TopologyConfig().multilang_encoding
    try:
        require_encoding(default)
    except EncodingUnavailable as exc:
        raise UserError(f"{exc} (it is the default)") from None
    print(f"the components' Python can use the default multilang encoding, {default}")
    if args.env:
        host, port = env_nimbus(cfg.project, args.env)
        if args.env != "prod" and not zookeeper_ok(cfg.zookeeper_port):
            raise UserError(
                f"ZooKeeper on {cfg.zookeeper} is down (start it with `elastorm cluster up`)"
            )
        if not port_open(port, host, timeout=3):
            raise UserError(f"Nimbus of env {args.env} at {host}:{port} is unreachable")
        print(f"ZooKeeper and Nimbus ({host}:{port}) answer")
    return 0
