"""``elastorm hdfs``'s launcher command and checks, without starting an HDFS (that is
``tests/integration/test_hdfs_store.py``)."""

from __future__ import annotations

import dataclasses
import socket

import pytest

from elastorm.errors import UserError
from elastorm.runtime import hdfs
from elastorm.runtime.config import load_config


def test_the_launcher_gets_the_configured_ports_and_data_dir() -> None:
    cfg = load_config()
    daemon = hdfs.hdfs_daemon(cfg)
    args = dict(arg.split("=", 1) for arg in daemon.args)
    assert daemon.main == "elastorm.jvm.HdfsCluster" and daemon.lib == "lib-hdfs"
    assert args == {
        "base": str(cfg.home / "hdfs"),
        "nn": str(cfg.hdfs_namenode_port),
        "http": str(cfg.hdfs_http_port),
        "datanodes": str(cfg.hdfs_datanodes),
        "dn": str(cfg.hdfs_first_datanode_port),
        "replication": str(cfg.hdfs_replication),
        "control": str(cfg.hdfs_control_port),
    }
    assert hdfs.store_uri(cfg) == f"hdfs://127.0.0.1:{cfg.hdfs_http_port}/elastorm"


def test_more_replicas_than_datanodes_is_refused() -> None:
    cfg = dataclasses.replace(load_config(), hdfs_datanodes=2, hdfs_replication=3)
    with pytest.raises(
        UserError, match=r"hdfs_replication \(3\) is more than .*hdfs_datanodes \(2\)"
    ):
        hdfs.hdfs_daemon(cfg)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_launcher_that_does_not_answer_is_one_clear_error() -> None:
    port = free_port()
    cfg = dataclasses.replace(load_config(), hdfs_control_port=port)
    with pytest.raises(UserError, match=rf"HDFS control endpoint http://127.0.0.1:{port}/status"):
        hdfs.control(cfg, "/status", timeout=1.0)
    assert not hdfs.serving(cfg)


@pytest.mark.parametrize(
    ("call", "bad"), [(hdfs.namenode, ("kill",)), (hdfs.datanode, ("stop", 0))]
)
def test_fault_actions_are_checked(call, bad) -> None:
    with pytest.raises(UserError, match="action must be"):
        call(load_config(), *bad)
