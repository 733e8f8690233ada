"""Fixtures shared by the integration tests.

``storm_cluster``: one single-machine cluster (real ZooKeeper, Nimbus and two
supervisors, each with six worker slots so a test can run one worker per executor)
for every test module that needs it, started once per session: starting and wiping
a cluster costs tens of seconds on two cores. ``hdfs_cluster``: the project's HDFS
(``elastorm hdfs up``), likewise once per session, wiped before and after.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from shared_cluster import cluster_up

from elastorm.runtime.cluster import down
from elastorm.runtime.config import load_config


@pytest.fixture(scope="session", autouse=True)
def sole_user_of_the_ports():
    """Hold a machine-wide lock on this configuration's fixed ports for the whole session.

    Two checkouts' suites on one machine share ZooKeeper's and Nimbus's ports: one
    attaches to the other's cluster, and same-second topology names collide (session
    31: a second CI's ``sparse submit -f`` killed the first's topology 0.4 s after it
    was activated; both runs' failures were that). The second suite stops at once."""
    cfg = load_config()
    lock = Path(f"/tmp/elastorm-ports-{cfg.zookeeper_port}.lock")
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pytest.exit(
                f"another test session holds ZooKeeper port {cfg.zookeeper_port} ({lock}: "
                f"{handle.read().strip() or 'unknown'}); wait for it or give this checkout "
                "other ports in config.json",
                returncode=3,
            )
        handle.truncate(0)
        handle.write(f"pid {os.getpid()}, home {cfg.home}\n")
        handle.flush()
        yield


@pytest.fixture(scope="session")
def storm_cluster():
    """(config, the summary ``elastorm cluster up`` returned)."""
    cfg = load_config()
    down(cfg, wipe=True)  # nothing left over from an earlier, interrupted run
    summary = cluster_up(cfg)
    yield cfg, summary
    down(cfg, wipe=True)


@pytest.fixture(scope="session")
def postgres_server():
    """The project's private PostgreSQL server (``elastorm postgres up``: Debian's
    package, data under ``<home>/postgres``, port ``elastorm.postgres_port``); stopped
    at the end unless it was running before."""
    from elastorm.runtime import postgres

    cfg = load_config()
    was_running = postgres.running(postgres.server(cfg))
    server = postgres.up(cfg)
    yield server
    if not was_running:
        postgres.down(cfg)


@pytest.fixture(scope="session")
def hdfs_cluster():
    """The project's HDFS (one NameNode, three DataNodes, replication 3, WebHDFS),
    started from nothing; stopped and wiped afterwards, also when ``up`` fails."""
    from elastorm.runtime import hdfs

    cfg = load_config()
    hdfs.down(cfg, wipe=True)
    try:
        hdfs.up(cfg)
        yield cfg
    finally:
        hdfs.down(cfg, wipe=True)
