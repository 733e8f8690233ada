"""Start, watch and stop the real servers: ZooKeeper, Nimbus, supervisors.

Each daemon is a JVM in its own session (so stopping it also stops what it
launched, e.g. a supervisor's workers), with a pid file under ``<home>/run`` and a
log under ``<home>/logs``. ZooKeeper listens on loopback only; every daemon is told
to reach the others on loopback, but Storm's Thrift and Netty servers listen on all
interfaces (Storm 2.8 has no bind-address option; ``docs/runtime.md``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime import netns
from elastorm.runtime.config import ElastormConfig
from elastorm.runtime.storm_home import classpath

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class Daemon:
    """One JVM daemon: its name (pid/log file stem), main class and Storm config."""

    name: str
    main: str
    args: tuple[str, ...] = ()
    storm_conf: dict | None = None
    heap_mb: int = 512
    port: int | None = None  # the port that says it is up
    lib: str = "lib"  # which jar folder of the Storm home makes its classpath
    # What runs it inside its host: ``ip netns exec`` for the chaos harness's namespaced
    # supervisor (``runtime/netns.py``), ``nsenter`` into a host of ``runtime/hosts.py``.
    enter: tuple[str, ...] = ()
    address: str = LOOPBACK  # where ``port`` is checked
    # Started again when it exits after its first start-up (``supervised``); Storm's
    # daemons are fail-fast and expect a supervisor process to do this.
    supervised: bool = False


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def zookeeper_ok(port: int, timeout: float = 2.0, host: str = LOOPBACK) -> bool:
    """True if a ZooKeeper server on ``host`` is serving (its ``srvr`` reply names a mode).

    ``ruok`` is not enough: a server whose start-up failed still answers ``imok``.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
    except OSError:
        return False
    return b"Mode:" in reply


def _yaml(conf: dict) -> str:
    # JSON is valid YAML 1.2 and Storm's SnakeYAML reads it.
    return "\n".join(f"{k}: {json.dumps(v)}" for k, v in conf.items()) + "\n"


def _pidfile(cfg: ElastormConfig, name: str) -> Path:
    return cfg.run / f"{name}.pid"


def running_pid(cfg: ElastormConfig, name: str) -> int | None:
    """The pid of daemon ``name`` if its pid file names a live process that is that daemon.

    The process's command line must carry ``-Ddaemon.name=<name>``: after pids wrap, a
    stale pid file can name some other process, which must be neither trusted as the
    daemon nor killed in its place.
    """
    path = _pidfile(cfg, name)
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    if _zombie(pid):  # exited, not yet reaped by the process that started it
        return None
    return pid if _is_daemon(pid, name) else None


def _zombie(pid: int) -> bool:
    """True if ``pid`` has exited and waits to be reaped (``Z`` in ``/proc/<pid>/stat``):
    its pid still answers ``kill(pid, 0)``, and its command line is empty. Seen: a
    Nimbus that halted under a chaos harness that had started it counted as running,
    so bringing the cluster up again started no new one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def _is_daemon(pid: int, name: str) -> bool:
    """True if process ``pid`` was started by ``daemon_command`` for daemon ``name``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no procfs here: trust the pid file, as before
        return True
    # Empty while the process is between fork and exec: not known yet, trust the file.
    return not cmdline or f"-Ddaemon.name={name}".encode() in cmdline.split(b"\0")


def java_env(cfg: ElastormConfig) -> dict[str, str]:
    """Environment for JVMs: JAVA_HOME set, the project's Python tools first on PATH.

    Workers run the Python components through ``streamparse_run``; it must be on the
    supervisor's PATH (``use_virtualenv: false``), so the interpreter's ``bin/`` leads.
    """
    env = dict(os.environ)
    java = shutil.which("java")
    if "JAVA_HOME" not in env and java:
        env["JAVA_HOME"] = str(Path(java).resolve().parents[1])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["ELASTORM_PROJECT"] = str(cfg.project)
    return env


def daemon_log_dir(cfg: ElastormConfig, daemon: Daemon) -> Path:
    """Where ``daemon`` logs, and a supervisor's workers under ``workers-artifacts``: its
    Storm conf's ``storm.log.dir`` (one per host), else the project's logs."""
    return Path((daemon.storm_conf or {}).get("storm.log.dir", cfg.logs))


def daemon_command(cfg: ElastormConfig, daemon: Daemon, first: tuple[Path, ...] = ()) -> list[str]:
    """The java command line for ``daemon``."""
    home = cfg.storm_home
    cmd = [
        "java",
        "-server",
        f"-Xmx{daemon.heap_mb}m",
        f"-Dstorm.home={home}",
        # Storm's daemons take the log dir from this property before their conf's.
        f"-Dstorm.log.dir={daemon_log_dir(cfg, daemon)}",
        f"-Dlogfile.name={daemon.name}.log",
        f"-Ddaemon.name={daemon.name}",
        f"-Dlog4j.configurationFile={home / 'log4j2' / 'cluster.xml'}",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.4lw.commands.whitelist=ruok,srvr,stat",
        "-Djava.net.preferIPv4Stack=true",
    ]
    if daemon.storm_conf is not None:
        conf_dir = cfg.run / daemon.name
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "storm.yaml").write_text(_yaml(daemon.storm_conf))
        cmd.append(f"-Dstorm.conf.file={conf_dir / 'storm.yaml'}")
    cp = classpath(home, *first, lib=daemon.lib)
    return [*daemon.enter, *cmd, "-cp", cp, daemon.main, *daemon.args]


# Runs "$@" again whenever it exits, unless its first run ended within ``grace`` s (a
# daemon that cannot start fails at once, as unsupervised): $1 grace, $2 pause, $3 name.
# A SIGTERM (``stop``) is passed on and waited out, so the loop lives exactly as long as
# the daemon's own shutdown: ``stop`` waits on the loop's pid before it sends SIGKILL,
# and a Nimbus killed mid-shutdown keeps its leader lock for a ZooKeeper session
# (its successor refused submissions as "not a leader" for 16 s, session 31).
SUPERVISE_SH = """grace=$1 pause=$2 name=$3; shift 3; first=1; child=
trap 'if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi; exit 143' TERM
while :; do
  began=$(date +%s); "$@" & child=$!; wait "$child"; code=$?; child=
  if [ $first = 1 ] && [ $(( $(date +%s) - began )) -lt "$grace" ]; then exit $code; fi
  first=0
  echo "elastorm: $name exited with status $code; starting it again in $pause s" >&2
  sleep "$pause"
done"""


def supervised(cmd: list[str], name: str, grace: int = 20, pause: float = 2.0) -> list[str]:
    """``cmd`` under a shell loop that starts it again ``pause`` s after it exits, as
    Storm asks of its daemons ("run under supervision": Nimbus halts itself when
    ZooKeeper is gone a while, by design). A first run shorter than ``grace`` s is a
    failed start-up: the loop exits with its status instead. The loop shares the
    daemon's session, so stopping the daemon stops both."""
    return ["/bin/sh", "-c", SUPERVISE_SH, "elastorm-supervise", str(grace), str(pause), name,
            *cmd]  # fmt: skip


def start(cfg: ElastormConfig, daemon: Daemon, first: tuple[Path, ...] = ()) -> int:
    """Start ``daemon`` in the background unless it already runs; return its pid."""
    pid = running_pid(cfg, daemon.name)
    if pid:
        log.info("%s already running (pid %d)", daemon.name, pid)
        return pid
    if daemon.port is not None and port_open(daemon.port, daemon.address):
        raise UserError(
            f"port {daemon.address}:{daemon.port} for {daemon.name} is taken by another process; "
            "stop it or change the port in config.json"
        )
    cfg.logs.mkdir(parents=True, exist_ok=True)
    cfg.run.mkdir(parents=True, exist_ok=True)
    out = open(cfg.logs / f"{daemon.name}.out", "ab")
    cmd = daemon_command(cfg, daemon, first)
    proc = subprocess.Popen(
        supervised(cmd, daemon.name) if daemon.supervised else cmd,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=java_env(cfg),
        cwd=cfg.home,
        start_new_session=True,
    )
    _pidfile(cfg, daemon.name).write_text(f"{proc.pid}\n")
    log.info(
        "started %s (pid %d), log %s",
        daemon.name,
        proc.pid,
        daemon_log_dir(cfg, daemon) / f"{daemon.name}.log",
    )
    return proc.pid


def wait_until(
    check, what: str, timeout: float, pid: int | None = None, logfile: Path | None = None
):
    """Poll ``check()`` until true; fail with ``UserError`` on timeout or if ``pid`` dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if pid is not None and not _alive(pid):
            hint = f"; see {logfile}" if logfile else ""
            raise UserError(f"{what}: the process exited during start-up{hint}")
        time.sleep(0.3)
    hint = f"; see {logfile}" if logfile else ""
    raise UserError(f"{what}: not ready after {timeout:.0f} s{hint}")


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(cfg: ElastormConfig, name: str, grace: float = 15.0) -> bool:
    """Stop daemon ``name`` and everything it launched; True if it was running."""
    pid = running_pid(cfg, name)
    _pidfile(cfg, name).unlink(missing_ok=True)
    if not pid:
        return False
    _kill_group(pid, grace)
    log.info("stopped %s (pid %d)", name, pid)
    return True


def _kill_group(pid: int, grace: float) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def zoo_cfg_text(
    data: Path, port: int, bind: str, *, fsync: bool, ensemble: tuple[str, ...] = ()
) -> str:
    """A ZooKeeper server's ``zoo.cfg``: standalone, or one of ``ensemble`` (the servers'
    addresses; server ``i + 1`` at ``ensemble[i]``, quorum ports 2888 and 3888, each
    server's ``myid`` in its ``data``)."""
    servers = "".join(f"server.{i + 1}={a}:2888:3888\n" for i, a in enumerate(ensemble))
    return (
        # tickTime 500 ms lets elastorm's clients ask for 1-2 s sessions (failure
        # detection); the explicit maximum keeps Storm's own 20 s sessions.
        f"tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=40000\n"
        f"dataDir={data}\nclientPort={port}\n"
        f"forceSync={'yes' if fsync else 'no'}\n"
        f"clientPortAddress={bind}\nmaxClientCnxns=200\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat\nautopurge.snapRetainCount=3\n"
        "autopurge.purgeInterval=1\n"
        + (f"initLimit=20\nsyncLimit=10\n{servers}" if ensemble else "")
    )


def zookeeper_daemon(
    cfg: ElastormConfig,
    *,
    name: str = "zookeeper",
    port: int | None = None,
    data_dir: Path | None = None,
) -> Daemon:
    """A real ZooKeeper server (the Maven artifact Storm depends on), standalone, loopback.

    By default the project's server; tests that stop a server on purpose ask for a
    private one with its own ``name``, ``port`` and ``data_dir``. The project's server
    binds every interface while one supervisor runs in a network namespace (it must be
    reachable from there and from the host's loopback: ``runtime/netns.py``).
    """
    port = cfg.zookeeper_port if port is None else port
    data = data_dir or cfg.home / name
    data.mkdir(parents=True, exist_ok=True)
    cfg.run.mkdir(parents=True, exist_ok=True)
    zoo_cfg = cfg.run / f"{name}.cfg"
    namespaced = name == "zookeeper" and netns.namespaced_supervisor(cfg) is not None
    bind = netns.ANY if namespaced else LOOPBACK
    zoo_cfg.write_text(zoo_cfg_text(data, port, bind, fsync=cfg.zookeeper_fsync))
    return zookeeper_server(name, zoo_cfg, port)


def zookeeper_server(name: str, zoo_cfg: Path, port: int, **where) -> Daemon:
    """A ZooKeeper server as ``name`` run from its ``zoo_cfg`` (``zoo_cfg_text``);
    ``where``: ``enter``, ``address``, ``supervised``."""
    return Daemon(
        name=name,
        main="org.apache.zookeeper.server.quorum.QuorumPeerMain",
        args=(str(zoo_cfg),),
        heap_mb=256,
        port=port,
        lib="lib-zookeeper",
        **where,
    )


def ensure_zookeeper(cfg: ElastormConfig, timeout: float = 30.0) -> bool:
    """Start ZooKeeper unless one already answers on the configured port; True if this
    call started it (so the caller stops it when done: ``stop(cfg, "zookeeper")``)."""
    if zookeeper_ok(cfg.zookeeper_port):
        return False
    daemon = zookeeper_daemon(cfg)
    pid = start(cfg, daemon)
    wait_until(
        lambda: zookeeper_ok(cfg.zookeeper_port),
        "ZooKeeper",
        timeout,
        pid,
        cfg.logs / "zookeeper.log",
    )
    log.info("ZooKeeper answers on %s:%d", LOOPBACK, cfg.zookeeper_port)
    return True
