"""``elastorm dashboard``: the live page and ``/metrics`` of a running elastic topology."""

from __future__ import annotations

import argparse
import logging
import os
import secrets

from elastorm.dashboard.view import LagLimits
from elastorm.errors import UserError, as_user_error
from elastorm.files import SecretFileError, load_keyring
from elastorm.runtime.config import env_nimbus, load_config
from elastorm.runtime.migrate import add_secret_option, add_zookeeper_option
from elastorm.runtime.provision import provisioner

log = logging.getLogger(__name__)

DEFAULT_PORT = 8088
TOKEN_ENV = "ELASTORM_DASHBOARD_TOKEN"
LOOPBACKS = ("127.0.0.1", "localhost", "::1")


def register(subparsers) -> None:
    """Add the ``dashboard`` subcommand."""
    parser = subparsers.add_parser(
        "dashboard",
        help="serve the live dashboard and Prometheus /metrics of a running topology",
        description="One process that reads the topology's znodes in ZooKeeper (task "
        "heartbeats, the controllers' routing status, checkpoint allocation, migration "
        "requests) and Nimbus, and serves the live page (server-sent events) and /metrics. "
        "It never sits in the data path and is read-only unless --enable-actions is given; "
        f"actions then need the bearer token (from ${TOKEN_ENV}, or printed at start); "
        "with --tls-cert and --tls-key the page and its actions are served over HTTPS.",
    )
    parser.add_argument(
        "--topology", default=None, help="topology name as submitted (default: the newest)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 8088)")
    add_zookeeper_option(parser)
    add_secret_option(parser)
    parser.add_argument(
        "--tls-cert", default=None, help="PEM certificate: serve HTTPS (with --tls-key)"
    )
    parser.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    parser.add_argument(
        "-e",
        "--env",
        default="cluster",
        help="config.json env whose Nimbus to show (default cluster; 'none' to skip)",
    )
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between ZooKeeper reads (0.5)"
    )
    parser.add_argument(
        "--key-group-limit",
        type=int,
        default=64,
        help="export per-key-group metrics only for operators with at most this many groups",
    )
    lag = LagLimits()
    parser.add_argument(
        "--durable-lag-checkpoints",
        type=int,
        default=lag.checkpoints,
        help="highlight a key group whose durable copy trails the newest checkpoint by more "
        f"than this many checkpoints (default {lag.checkpoints}; with elastorm.durable.every "
        "= k use k + 1)",
    )
    parser.add_argument(
        "--durable-lag-seconds",
        type=float,
        default=lag.seconds,
        help="... or by more than this many seconds (default %(default)s: the durable "
        "writer's retry backoff ceiling)",
    )
    parser.add_argument(
        "--enable-actions",
        action="store_true",
        help="accept POST /api/migrate, /api/drain and /api/scale with the bearer token "
        f"(${TOKEN_ENV} or a random one)",
    )
    parser.add_argument(
        "--provisioner",
        default="local",
        help="who starts and stops nodes for the drain and scale actions: 'local' (this "
        "machine's cluster, default) or 'command:<script>' (as for elastorm scale)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import uvicorn

    from elastorm.dashboard.app import create_app
    from elastorm.dashboard.source import DashboardSource

    if args.interval <= 0 or args.interval > 1.0:
        raise UserError("--interval must be in (0, 1] (the page updates at least once a second)")
    scheme = tls_scheme(args.tls_cert, args.tls_key)
    with as_user_error(SecretFileError):
        keyring = load_keyring(args.secret_file)
    cfg = load_config()
    hosts = args.zookeeper or cfg.zookeeper
    nimbus = None if args.env == "none" else env_nimbus(cfg.project, args.env)
    token, nodes = None, None
    if args.enable_actions:
        nodes = provisioner(args.provisioner, cfg)
        token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
        if TOKEN_ENV not in os.environ:
            print(f"actions enabled; token: {token}", flush=True)
        if scheme == "http" and args.host not in LOOPBACKS:
            log.warning("actions over plain HTTP on %s: give --tls-cert and --tls-key", args.host)
    try:
        limits = LagLimits(
            checkpoints=args.durable_lag_checkpoints, seconds=args.durable_lag_seconds
        )
    except ValueError as exc:
        raise UserError(f"--durable-lag-checkpoints / --durable-lag-seconds: {exc}") from None
    source = DashboardSource(
        hosts=hosts,
        topology=args.topology,
        interval=args.interval,
        nimbus=nimbus,
        lag_limits=limits,
        keyring=keyring,
    )
    source.start()
    app = create_app(source, token=token, key_group_limit=args.key_group_limit, nodes=nodes)
    print(f"dashboard on {scheme}://{args.host}:{args.port}/ (ZooKeeper {hosts})", flush=True)
    try:
        # Open event streams never end by themselves: on Ctrl-C/SIGTERM give them 2 s.
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            timeout_graceful_shutdown=2,
            ssl_certfile=args.tls_cert,
            ssl_keyfile=args.tls_key,
        )
    finally:
        source.stop()
    return 0


def tls_scheme(cert: str | None, key: str | None) -> str:
    """``https`` with both a certificate and its key, ``http`` with neither; ``UserError``
    for one alone or a file that cannot be read."""
    if (cert is None) != (key is None):
        raise UserError("--tls-cert and --tls-key go together")
    if cert is None or key is None:
        return "http"
    for path in (cert, key):
        if not os.access(path, os.R_OK):
            raise UserError(f"{path} cannot be read")
    return "https"
