"""Fixtures shared by the integration tests.

``storm_cluster``: one single-machine cluster (real ZooKeeper, Nimbus and two
supervisors, each with six worker slots so a test can run one worker per executor)
for every test module that needs it, started once per session: starting and wiping
a cluster costs tens of seconds on two cores. ``hdfs_cluster``: the project's HDFS
(``elastorm hdfs up``), likewise once per session, wiped before and after.
"""

from __future__ import annotations

import pytest
from shared_cluster import cluster_up

from elastorm.errors import UserError
from elastorm.runtime.cluster import down
from elastorm.runtime.config import load_config
from elastorm.runtime.portlock import hold_ports


@pytest.fixture(scope="session", autouse=True)
def sole_user_of_the_ports():
    """Hold the machine-wide lock of this configuration's fixed ports for the session
    (``elastorm.runtime.portlock``): a second suite on the same ports stops at once
    (session 31: a second CI's ``sparse submit -f`` killed the first's same-named
    topology 0.4 s after it was activated; both runs' failures were that)."""
    cfg = load_config()
    try:
        with hold_ports(cfg, "a test session"):
            yield
    except UserError as exc:
        pytest.exit(str(exc), returncode=3)


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
