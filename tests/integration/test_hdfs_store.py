"""The ``hdfs://`` durable store on a real HDFS: round trip, a DataNode killed, the
NameNode stopped.

Talks to: the project's own HDFS (``elastorm hdfs up``: Hadoop's MiniDFSCluster from
Maven Central's jars, one NameNode and three DataNodes, replication 3, WebHDFS on
``elastorm.hdfs_http_port``), started once per session (``conftest.hdfs_cluster``) and wiped
afterwards. No Storm. Replication is checked with a second, independent fsspec WebHDFS client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from fsspec.implementations.webhdfs import WebHDFS

from elastorm.durable.store import StoreError, open_store
from elastorm.durable.webhdfs import WebHdfsStore, retriable
from elastorm.runtime import hdfs
from elastorm.runtime.services import LOOPBACK

pytestmark = pytest.mark.integration

NAMENODE_OUTAGE = 10.0  # seconds the NameNode stays stopped


@pytest.fixture
def cluster(hdfs_cluster):
    """The session's HDFS (``conftest.hdfs_cluster``); each test writes a folder of its own."""
    return hdfs_cluster


def status_of(cfg, path: str) -> dict:
    """GETFILESTATUS of an absolute HDFS path, asked with a client of its own."""
    client = WebHDFS(LOOPBACK, port=cfg.hdfs_http_port, user="root", skip_instance_cache=True)
    return client.info(path)


def test_round_trip_with_replication_3(cluster) -> None:
    cfg = cluster
    store = open_store(hdfs.store_uri(cfg, "/elastorm/round-trip"))
    assert store.list("op") == []
    store.put("op/g00001/base-000001", b"first")
    store.put("op/g00001/delta-000002", bytes(range(256)) * 4096)  # 1 MiB
    store.put("op/g00001/empty", b"")
    assert store.get("op/g00001/base-000001") == b"first"
    assert store.get("op/g00001/delta-000002") == bytes(range(256)) * 4096
    assert store.get("op/g00001/empty") == b""
    store.put("op/g00001/base-000001", b"replaced")  # put replaces, atomically
    assert store.get("op/g00001/base-000001") == b"replaced"
    assert store.list("op/g00001") == ["base-000001", "delta-000002", "empty"]
    assert store.list("op") == []  # files only, not the directory g00001
    status = status_of(cfg, "/elastorm/round-trip/op/g00001/base-000001")
    assert status["replication"] == 3 and status["length"] == len(b"replaced")
    # Every put committed its temporary: nothing hidden is left beside the files.
    raw = status_of(cfg, "/elastorm/round-trip/op/g00001")
    assert raw["childrenNum"] == 3
    store.delete("op/g00001/empty")
    store.delete("op/g00001/empty")  # a missing file is not an error
    assert store.list("op/g00001") == ["base-000001", "delta-000002"]
    with pytest.raises(FileNotFoundError):
        store.get("op/g00001/empty")
    shown = subprocess.run(
        [sys.executable, "-m", "elastorm.runtime.cli", "hdfs", "status", "--json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    info = json.loads(shown.stdout)
    assert info["namenode"] == "serving" and info["datanodes"] == ["up", "up", "up"]


def test_a_killed_datanode_leaves_reads_and_writes_working(cluster) -> None:
    cfg = cluster
    store = WebHdfsStore(LOOPBACK, cfg.hdfs_http_port, "/elastorm/datanode", retry_secs=60)
    before = {f"before-{i}": f"written with 3 DataNodes {i}".encode() for i in range(4)}
    for name, data in before.items():
        store.put(name, data)
    assert hdfs.datanode(cfg, "kill", 1)["datanodes"] == ["up", "killed", "up"]
    try:
        for i in range(6):
            store.put(f"after-{i}", f"written with 2 DataNodes {i}".encode())
            assert store.get(f"before-{i % 4}") == before[f"before-{i % 4}"]
        for i in range(6):
            assert store.get(f"after-{i}") == f"written with 2 DataNodes {i}".encode()
    finally:
        hdfs.datanode(cfg, "start", 1)
    names = sorted([*before, *(f"after-{i}" for i in range(6))])
    assert WebHdfsStore(LOOPBACK, cfg.hdfs_http_port, "/elastorm").list("datanode") == names


def test_a_stopped_namenode_fails_writes_retriably_until_it_is_back(cluster) -> None:
    cfg = cluster
    store = WebHdfsStore(LOOPBACK, cfg.hdfs_http_port, "/elastorm/namenode", retry_secs=180)
    impatient = WebHdfsStore(LOOPBACK, cfg.hdfs_http_port, "/elastorm/namenode", retry_secs=1)
    store.put("before", b"written before the outage")
    assert hdfs.namenode(cfg, "stop")["namenode"] == "stopped"
    stopped = time.monotonic()
    restarted = threading.Event()

    def restart() -> None:
        time.sleep(max(0.0, NAMENODE_OUTAGE - (time.monotonic() - stopped)))
        hdfs.namenode(cfg, "start")
        restarted.set()

    try:
        with pytest.raises(StoreError, match="put during: ConnectionError") as failed:
            impatient.put("during", b"x")
        assert retriable(failed.value.__cause__)
        threading.Thread(target=restart, daemon=True).start()
        store.put("during", b"written across the outage")  # retried until the NameNode is back
        assert restarted.is_set()
        assert time.monotonic() - stopped >= NAMENODE_OUTAGE
    finally:
        if not restarted.wait(timeout=120):
            hdfs.namenode(cfg, "start")
    assert store.get("during") == b"written across the outage"
    assert store.get("before") == b"written before the outage"
    parent = WebHdfsStore(LOOPBACK, cfg.hdfs_http_port, "/elastorm")
    assert parent.list("namenode") == ["before", "during"]
