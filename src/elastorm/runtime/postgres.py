"""A private PostgreSQL server for the sinks: Debian's ``postgresql`` package, our data dir.

``bin/setup`` installs the package if missing; :func:`up` creates a cluster with
``initdb`` under ``<home>/postgres/data`` (once), starts it with ``pg_ctl`` on
loopback at ``elastorm.postgres_port`` (config.json; 15432 by default, not the
system server's 5432), TCP only (no Unix socket), trusting loopback connections
(a test and development server, like the project's ZooKeeper), and creates the
database ``elastorm``. :func:`down` stops it (``pg_ctl stop -m fast``). PostgreSQL
refuses to run as root: as root, the server runs as the package's ``postgres`` user,
which then owns ``<home>/postgres``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig
from elastorm.runtime.services import LOOPBACK, port_open

DATABASE = "elastorm"
SUPERUSER = "postgres"
SERVER_USER = "postgres"  # the OS user Debian's package creates, for when we are root


@dataclass(frozen=True, kw_only=True)
class Postgres:
    """Where the private server lives and how to reach it."""

    bin: Path  # the directory of initdb, pg_ctl, createdb
    root: Path  # <home>/postgres
    port: int

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    @property
    def dsn(self) -> str:
        """The libpq connection string of the ``elastorm`` database
        (``elastorm.sinks.postgres_dsn``)."""
        return f"host={LOOPBACK} port={self.port} dbname={DATABASE} user={SUPERUSER}"


def find_bin() -> Path:
    """The directory of PostgreSQL's server programs: Debian keeps them in
    ``/usr/lib/postgresql/<major>/bin`` (the newest is taken), off the PATH; else
    wherever ``pg_ctl`` is on the PATH. ``UserError`` if neither."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    raise UserError("PostgreSQL is not installed (bin/setup installs Debian's postgresql)")


def server(cfg: ElastormConfig) -> Postgres:
    """The private server of this project."""
    return Postgres(bin=find_bin(), root=cfg.home / "postgres", port=cfg.postgres_port)


def _as_server_user() -> dict:
    """``subprocess`` arguments that run a program as the server's OS user when we
    are root (PostgreSQL refuses root), else nothing."""
    if os.geteuid() != 0:
        return {}
    return {"user": SERVER_USER, "group": pwd.getpwnam(SERVER_USER).pw_gid}


def _run(pg: Postgres, program: str, *args: str, check: bool = True) -> int:
    """Run one of PostgreSQL's programs (output to the server's log)."""
    with open(pg.log, "a") as log:
        done = subprocess.run(
            [str(pg.bin / program), *args],
            cwd=pg.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            **_as_server_user(),
        )
    if check and done.returncode != 0:
        raise UserError(f"PostgreSQL's {program} failed (exit {done.returncode}); see {pg.log}")
    return done.returncode


def running(pg: Postgres) -> bool:
    """Whether our server runs (``pg_ctl status`` on our data dir)."""
    return pg.data.is_dir() and _run(pg, "pg_ctl", "-D", str(pg.data), "status", check=False) == 0


def up(cfg: ElastormConfig) -> Postgres:
    """Start the private server (initdb first if there is no data dir); idempotent.
    ``UserError`` if the port is taken by something else."""
    pg = server(cfg)
    pg.root.mkdir(parents=True, exist_ok=True)
    pg.log.touch()
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SERVER_USER)
        for path in (pg.root, pg.log):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    if pg.data.is_dir() and running(pg):
        return pg
    if port_open(pg.port):
        raise UserError(
            f"port {pg.port} is taken by another server; set elastorm.postgres_port in config.json"
        )
    if not (pg.data / "PG_VERSION").is_file():
        _run(pg, "initdb", "-D", str(pg.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8")
    options = f"-p {pg.port} -c listen_addresses={LOOPBACK} -c unix_socket_directories=''"
    _run(pg, "pg_ctl", "-D", str(pg.data), "-l", str(pg.log), "-o", options, "-w", "start")
    _run(pg, "createdb", "-h", LOOPBACK, "-p", str(pg.port), "-U", SUPERUSER, DATABASE, check=False)
    return pg


def down(cfg: ElastormConfig) -> bool:
    """Stop the private server; False if it was not running."""
    pg = server(cfg)
    if not running(pg):
        return False
    _run(pg, "pg_ctl", "-D", str(pg.data), "-m", "fast", "-w", "stop")
    return True
