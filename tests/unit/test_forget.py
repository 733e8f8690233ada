"""``elastorm forget --topology NAME`` (issue 32): lists the name's znodes (archived
submissions too), refuses while the topology runs, deletes on --yes. ZooKeeper is the
in-memory one of ``tests/memory_zk.py``; Nimbus is faked at its adapter
(``elastorm.runtime.nimbus.cluster_summary``)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from memory_zk import MemoryZk

import elastorm.runtime.forget_cmd as forget_cmd
import elastorm.runtime.nimbus as nimbus
from elastorm.core.routing import RoutingTable
from elastorm.errors import UserError
from elastorm.runtime.cli import main
from elastorm.zk.codec import encode_routing
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.submission import claim_submission

LAYOUT = ZnodeLayout("wc")
ARGS = ["forget", "--topology", "wc", "--zookeeper", "zk:1", "--nimbus", "nimbus:6627"]


def resubmitted() -> MemoryZk:
    """``wc`` submitted twice: the first submission's state set aside, the second's
    routing table in place; ``other`` beside it."""
    zk = MemoryZk()
    table = encode_routing("count", RoutingTable(epoch=3, owners=(1, 2)), controller="c")
    claim_submission(zk, LAYOUT, "wc-1-100")
    zk.create(LAYOUT.routing("count"), table, makepath=True)
    claim_submission(zk, LAYOUT, "wc-2-200")
    zk.create(LAYOUT.routing("count"), table, makepath=True)
    other = ZnodeLayout("other")
    claim_submission(zk, other, "other-1-1")
    zk.create(other.routing("count"), table, makepath=True)
    return zk


@pytest.fixture
def cluster(monkeypatch):
    """The in-memory ZooKeeper behind the command, and what Nimbus reports."""
    zk = resubmitted()
    running: list[dict] = []

    @contextmanager
    def connected(hosts: str, secret_file: str | None = None):
        assert hosts == "zk:1"
        yield zk

    def cluster_summary(host: str, port: int) -> dict:
        assert (host, port) == ("nimbus", 6627)
        return {"supervisors": [], "topologies": running}

    monkeypatch.setattr(forget_cmd, "connected", connected)
    monkeypatch.setattr(nimbus, "cluster_summary", cluster_summary)
    return zk, running


def test_without_yes_it_lists_the_znodes_and_the_archived_submissions_and_deletes_nothing(
    cluster, capsys
) -> None:
    zk, _ = cluster
    before = dict(zk.nodes)
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert "/elastorm/wc: 9 znodes" in out
    assert "submission: wc-2-200" in out
    # archive, archive/wc-1-100 and its controller/routing/count; the live routing
    # table with its two parents; the submission
    assert "archive/              5 znodes" in out and "controller/           3 znodes" in out
    assert "set aside: wc-1-100 (/elastorm/wc/archive/wc-1-100)" in out
    assert "nothing deleted: pass --yes to delete" in out
    assert zk.nodes == before


def test_yes_deletes_the_name_and_its_archives_and_nothing_else(cluster, capsys) -> None:
    zk, _ = cluster
    assert main([*ARGS, "--yes"]) == 0
    assert "deleted 9 znodes under /elastorm/wc" in capsys.readouterr().out
    assert not [p for p in zk.nodes if p.startswith("/elastorm/wc")]
    assert zk.exists(ZnodeLayout("other").routing("count"))  # another name: untouched
    # A new submission of the name is then a first one: nothing to set aside.
    assert claim_submission(zk, LAYOUT, "wc-3-300").set_aside is None
    assert main([*ARGS, "--topology", "nothing-here", "--yes"]) == 0
    assert "nothing to forget: no znodes under /elastorm/nothing-here" in capsys.readouterr().out


def test_it_refuses_while_nimbus_runs_the_topology_unless_forced(cluster, capsys) -> None:
    zk, running = cluster
    running.append({"name": "wc", "id": "wc-2-200", "status": "ACTIVE"})
    before = dict(zk.nodes)
    assert main([*ARGS, "--yes"]) == 2
    err = capsys.readouterr().err
    assert "not forgetting wc: Nimbus runs wc (storm id wc-2-200, status ACTIVE)" in err
    assert "--force" in err and zk.nodes == before
    assert main([*ARGS, "--yes", "--force"]) == 0
    assert not zk.exists(LAYOUT.base)


def test_it_refuses_while_tasks_sessions_are_open(cluster, capsys) -> None:
    zk, _ = cluster
    zk.create(LAYOUT.task(5), b"live", ephemeral=True, makepath=True)
    assert main([*ARGS, "--yes"]) == 2
    assert "1 znodes of wc belong to open ZooKeeper sessions (tasks/5)" in capsys.readouterr().err
    assert zk.exists(LAYOUT.task(5))


def test_it_refuses_when_nimbus_cannot_be_asked(cluster, capsys, monkeypatch) -> None:
    zk, _ = cluster

    def unreachable(host: str, port: int) -> dict:
        raise UserError(f"Nimbus at {host}:{port} is unreachable (is the cluster up?)")

    monkeypatch.setattr(nimbus, "cluster_summary", unreachable)
    assert main([*ARGS, "--yes"]) == 2
    err = capsys.readouterr().err
    assert "cannot tell whether wc runs (Nimbus at nimbus:6627 is unreachable" in err
    assert zk.exists(LAYOUT.base)
