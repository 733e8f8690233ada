"""elastorm's own HDFS for the durable store: one NameNode and N DataNodes on loopback.

Hadoop's ``MiniDFSCluster`` (the real NameNode and DataNode code, in one JVM) from
Maven Central's ``hadoop-client-minicluster``, started by ``elastorm.jvm.HdfsCluster``
(``src/elastorm/jvm/hdfs``) like the Storm daemons: its own process group, a pid file
``<home>/run/hdfs.pid``, a log ``<home>/logs/hdfs.log``, data under ``<home>/hdfs``
(kept across ``down``/``up``; ``down --wipe`` deletes it). WebHDFS serves on the
NameNode's HTTP port: the durable store's ``hdfs://127.0.0.1:<hdfs_http_port>/...``.

The launcher's control endpoint (loopback, ``hdfs_control_port``) stops and starts the
NameNode and kills and starts one DataNode, for the fault tests; its ``/status`` says
whether the NameNode serves (out of safe mode, DataNodes registered). ``up`` returns
once a probe file went through the ``hdfs://`` durable store (``elastorm.durable.webhdfs``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import urllib.error
import urllib.request

from fsspec.implementations.webhdfs import WebHDFS

from elastorm.durable.store import StoreError
from elastorm.durable.webhdfs import WebHdfsStore
from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig
from elastorm.runtime.services import (
    LOOPBACK,
    Daemon,
    port_open,
    running_pid,
    start,
    stop,
    wait_until,
)
from elastorm.runtime.storm_home import ensure_storm_home

log = logging.getLogger(__name__)

NAME = "hdfs"
MAIN = "elastorm.jvm.HdfsCluster"
HEAP_MB = 768
#: Seconds ``up`` waits for WebHDFS: a cold start took 106 s on this 2-core machine
#: under load (Jetty unpacking the NameNode's web apps from a 56 MB jar), ~25 s quiet.
UP_TIMEOUT = 300.0
PROBE_DIR = "/elastorm-probe"  # where `up` checks that the durable store can write


def hdfs_daemon(cfg: ElastormConfig) -> Daemon:
    """The launcher JVM, its ports and data directory from config.json."""
    if cfg.hdfs_replication > cfg.hdfs_datanodes:
        raise UserError(
            f"config.json: elastorm.hdfs_replication ({cfg.hdfs_replication}) is more than "
            f"elastorm.hdfs_datanodes ({cfg.hdfs_datanodes}): every block would stay "
            "under-replicated"
        )
    args = {
        "base": cfg.home / NAME,
        "nn": cfg.hdfs_namenode_port,
        "http": cfg.hdfs_http_port,
        "datanodes": cfg.hdfs_datanodes,
        "dn": cfg.hdfs_first_datanode_port,
        "replication": cfg.hdfs_replication,
        "control": cfg.hdfs_control_port,
    }
    return Daemon(
        name=NAME,
        main=MAIN,
        args=tuple(f"{key}={value}" for key, value in args.items()),
        heap_mb=HEAP_MB,
        port=cfg.hdfs_http_port,
        lib="lib-hdfs",
    )


def store_uri(cfg: ElastormConfig, root: str = "/elastorm") -> str:
    """The durable store URI of this HDFS (``elastorm.durable.uri``)."""
    return f"hdfs://{LOOPBACK}:{cfg.hdfs_http_port}{root}"


def _ports(cfg: ElastormConfig) -> list[int]:
    data = [cfg.hdfs_first_datanode_port + i for i in range(3 * cfg.hdfs_datanodes)]
    return [cfg.hdfs_namenode_port, cfg.hdfs_http_port, cfg.hdfs_control_port, *data]


def control(cfg: ElastormConfig, path: str, *, post: bool = False, timeout: float = 180.0) -> dict:
    """Ask the launcher's control endpoint (``/status``, ``/namenode/stop``, ...); its JSON.

    ``UserError`` if the launcher does not answer or refuses the request.
    """
    url = f"http://{LOOPBACK}:{cfg.hdfs_control_port}{path}"
    request = urllib.request.Request(url, method="POST" if post else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        detail = json.loads(exc.read() or b"{}").get("error", exc.reason)
        raise UserError(f"HDFS control {path}: {detail}") from None
    except OSError as exc:
        raise UserError(f"HDFS control endpoint {url} does not answer ({exc})") from None


def webhdfs_ok(cfg: ElastormConfig) -> bool:
    """True if WebHDFS answers a GETFILESTATUS of ``/`` (fsspec's client)."""
    try:
        WebHDFS(LOOPBACK, port=cfg.hdfs_http_port, skip_instance_cache=True).info("/")
    except Exception:  # refused, reset, a NameNode error page: not serving
        return False
    return True


def serving(cfg: ElastormConfig) -> bool:
    """True if the NameNode serves, every DataNode runs and WebHDFS answers."""
    try:
        state = control(cfg, "/status", timeout=5.0)
    except UserError:
        return False
    up = state["namenode"] == "serving" and all(d == "up" for d in state["datanodes"])
    return up and webhdfs_ok(cfg)


def check_store(cfg: ElastormConfig, retry_secs: float = 60.0) -> float:
    """Put, read back and delete a probe file through the ``hdfs://`` durable store;
    the seconds it took. ``UserError`` if the store cannot do it within ``retry_secs``."""
    store = WebHdfsStore(LOOPBACK, cfg.hdfs_http_port, PROBE_DIR, retry_secs=retry_secs)
    began = time.monotonic()
    probe = f"probe-{os.getpid()}"
    try:
        store.put(probe, b"elastorm")
        same = store.get(probe) == b"elastorm"
        store.delete(probe)
    except StoreError as exc:
        raise UserError(f"HDFS serves but the durable store fails: {exc}") from None
    if not same:
        raise UserError(f"HDFS: {store.uri}/{probe} read back differs from what was written")
    return time.monotonic() - began


def up(cfg: ElastormConfig, timeout: float = UP_TIMEOUT) -> dict:
    """Start the HDFS (idempotent: in a running one, start a stopped NameNode or killed
    DataNodes), wait until it serves and the durable store can write to it; return
    :func:`status`."""
    daemon = hdfs_daemon(cfg)
    if running_pid(cfg, NAME) is None:
        taken = [p for p in _ports(cfg) if port_open(p)]
        if taken:
            raise UserError(
                f"HDFS ports {taken} are taken by another process; stop it or change the "
                "elastorm.hdfs_* ports in config.json"
            )
    else:
        _restart_stopped(cfg)
    ensure_storm_home(cfg)
    pid = start(cfg, daemon)
    wait_until(lambda: serving(cfg), "HDFS", timeout, pid, cfg.logs / f"{NAME}.log")
    took = check_store(cfg)
    log.info(
        "HDFS serves; WebHDFS on %s:%d; a durable store round trip took %.2f s",
        LOOPBACK, cfg.hdfs_http_port, took,
    )  # fmt: skip
    return status(cfg)


def _restart_stopped(cfg: ElastormConfig) -> None:
    """Start what a fault test left stopped in a running HDFS (the NameNode, DataNodes)."""
    try:
        state = control(cfg, "/status", timeout=5.0)
    except UserError:
        return  # still starting: up waits for it
    if state["namenode"] == "stopped":
        namenode(cfg, "start")
    for index, dn in enumerate(state["datanodes"]):
        if dn == "killed":
            datanode(cfg, "start", index)


def down(cfg: ElastormConfig, *, wipe: bool = False) -> bool:
    """Stop the HDFS; ``wipe`` also deletes its data. True if it was running."""
    was = stop(cfg, NAME)
    if wipe:
        shutil.rmtree(cfg.home / NAME, ignore_errors=True)
        log.info("wiped HDFS data in %s", cfg.home / NAME)
    return was


def status(cfg: ElastormConfig) -> dict:
    """The launcher's pid, the NameNode's and DataNodes' states, and the store URI."""
    pid = running_pid(cfg, NAME)
    info: dict = {"pid": pid, "webhdfs": f"http://{LOOPBACK}:{cfg.hdfs_http_port}/webhdfs/v1"}
    info["uri"] = store_uri(cfg)
    if pid is None:
        return info | {"namenode": "not running", "datanodes": []}
    try:
        info |= control(cfg, "/status", timeout=5.0)
    except UserError as exc:
        return info | {"namenode": "no answer", "datanodes": [], "error": str(exc)}
    info["webhdfs_answers"] = webhdfs_ok(cfg)
    return info


def namenode(cfg: ElastormConfig, action: str) -> dict:
    """``stop`` or ``start`` the NameNode (the DataNodes keep running); the new status."""
    if action not in ("stop", "start"):
        raise UserError(f"NameNode action must be stop or start, got {action!r}")
    return control(cfg, f"/namenode/{action}", post=True)


def datanode(cfg: ElastormConfig, action: str, index: int) -> dict:
    """``kill`` or ``start`` DataNode ``index``; the new status."""
    if action not in ("kill", "start"):
        raise UserError(f"DataNode action must be kill or start, got {action!r}")
    return control(cfg, f"/datanode/{index}/{action}", post=True)
