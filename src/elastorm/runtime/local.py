"""elastorm's embedded local mode: Storm's ``LocalCluster`` in one JVM, fed through Thrift.

``sparse run`` cannot run locally on Storm 2.x (Flux ignores ``--local``;
streamparse issues #464, #479), and Flux declares a ShellBolt's streams non-direct,
which elastorm's routing needs. So local mode starts ``elastorm.jvm.LocalRunner``:
a ``LocalCluster`` with a Nimbus Thrift server on ``envs.local.nimbus``, using the
project's real ZooKeeper server. Topologies reach it through ``sparse submit -e
local``, the very path production uses. The topology jar goes first on the
classpath: local mode extracts ``resources/`` from the first jar that has one.

A keyed task whose Python process dies (``kill -9``) stays dead instead of taking
the LocalCluster with it (``LocalRunner.KeyedTaskDeath``): the controller declares
it lost and restores its key groups on their checkpoint holders, as it would a
lost node. Storm restarts nothing here; any other executor's death ends the run.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig, env_nimbus
from elastorm.runtime.services import (
    LOOPBACK,
    Daemon,
    daemon_command,
    ensure_zookeeper,
    java_env,
    port_open,
    stop,
)

log = logging.getLogger(__name__)

LOCAL_ENV = "local"


def local_runner_daemon(cfg: ElastormConfig, port: int, zk_root: str) -> Daemon:
    """The LocalRunner JVM: Nimbus Thrift on ``port``, the project's ZooKeeper under ``zk_root``.

    Its ``storm.yaml`` (read by ``LocalCluster`` through ``-Dstorm.conf.file``) sets
    ``storm.local.hostname`` to loopback, so the hostname Nimbus and the supervisors
    publish in ZooKeeper is 127.0.0.1, not the machine's name. Storm has no option
    for the address Nimbus's Thrift server binds: it listens on every interface
    (``docs/runtime.md``, "What listens where").
    """
    return Daemon(
        name="local-cluster",
        main="elastorm.jvm.LocalRunner",
        args=(str(port), LOOPBACK, str(cfg.zookeeper_port), str(cfg.local_supervisors), zk_root),
        storm_conf={"storm.local.hostname": LOOPBACK},
        heap_mb=max(1024, cfg.worker_heap_mb * 2),
    )


@contextmanager
def local_cluster(cfg: ElastormConfig, topology_jar: Path, timeout: float = 120.0):
    """Run a LocalCluster for the duration of the ``with`` block; yield Nimbus (host, port).

    The JVM exits when its stdin closes, so it never outlives this process. A
    ZooKeeper started here is stopped at the end; one already running (``elastorm
    cluster up``'s) is left alone.
    """
    host, port = env_nimbus(cfg.project, LOCAL_ENV)
    if port_open(port, host):
        raise UserError(f"port {port} (envs.local.nimbus) is taken: is another local run active?")
    own_zookeeper = ensure_zookeeper(cfg)
    try:
        with _local_runner(cfg, topology_jar, host, port, timeout) as nimbus:
            yield nimbus
    finally:
        if own_zookeeper and stop(cfg, "zookeeper"):
            log.info("stopped the ZooKeeper this run started")


@contextmanager
def _local_runner(cfg: ElastormConfig, topology_jar: Path, host: str, port: int, timeout: float):
    """The LocalRunner JVM for the ``with`` block; yields Nimbus (host, port)."""
    daemon = local_runner_daemon(cfg, port, f"/storm-local/{os.getpid()}-{int(time.time())}")
    cmd = daemon_command(cfg, daemon, first=(topology_jar,))
    cmd.insert(1, f"-Dstorm.jar={topology_jar}")
    # LocalRunner installs a SecurityManager that keeps a keyed task's death from
    # exiting the JVM (every worker is this JVM); Java 18+ needs this to allow one.
    cmd.insert(1, "-Djava.security.manager=allow")
    cfg.logs.mkdir(parents=True, exist_ok=True)
    out_path = cfg.logs / "local-cluster.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=java_env(cfg),
            cwd=cfg.home,
        )
    log.info(
        "starting Storm LocalCluster (pid %d), log %s", proc.pid, cfg.logs / "local-cluster.log"
    )
    try:
        deadline = time.monotonic() + timeout
        while b"ELASTORM-LOCAL-READY" not in out_path.read_bytes():
            if proc.poll() is not None:
                raise UserError(f"Storm LocalCluster exited during start-up; see {out_path}")
            if time.monotonic() > deadline:
                raise UserError(
                    f"Storm LocalCluster not ready after {timeout:.0f} s; see {out_path}"
                )
            time.sleep(0.3)
        log.info("LocalCluster ready: Nimbus on %s:%d", host, port)
        yield host, port
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log.warning("LocalCluster did not stop in 60 s; killing it")
            proc.kill()
            proc.wait()
        log.info("LocalCluster stopped")
