"""With the topology's secret, elastorm's znodes carry ZooKeeper ACLs and its commands
and migration requests are signed (``docs/security.md``).

Talks to: a private ZooKeeper server that this module starts and stops with
``elastorm.runtime.services`` (its own daemon name, port 22181 and a data dir under
/tmp), so it touches neither the project's server nor the ports a cluster uses; and
it holds no port lock (``sole_user_of_the_ports`` is overridden below).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError

from elastorm.controller.requests import MigrationRequest, RequestState, decode_record
from elastorm.controller.scaling import NodeSet, decode_node_set
from elastorm.core.auth import Keyring, seal
from elastorm.core.messages import PeerDown, Protocol
from elastorm.runtime import services
from elastorm.runtime.config import load_config
from elastorm.zk.acls import secure_tree
from elastorm.zk.client import make_client, write_znode
from elastorm.zk.commands import CommandInbox, CommandOutbox, encode_command
from elastorm.zk.layout import ZkSettings, ZnodeLayout
from elastorm.zk.requests import RequestBoard, submit_request
from elastorm.zk.submission import claim_submission

pytestmark = pytest.mark.integration

NAME = "zookeeper-zktest-acls"
PORT = 22181
HOSTS = f"{services.LOOPBACK}:{PORT}"
RING = Keyring(current=b"the topology's secret")
LAYOUT = ZnodeLayout("acls")


@pytest.fixture(scope="session", autouse=True)
def sole_user_of_the_ports():
    """Not needed here: this module uses only its own ZooKeeper's port (22181)."""
    yield


@pytest.fixture(scope="module")
def zookeeper():
    cfg = load_config()
    assert not services.zookeeper_ok(PORT, timeout=0.5), f"port {PORT} is taken"
    data = Path(tempfile.mkdtemp(prefix="elastorm-zk-acls-"))
    daemon = services.zookeeper_daemon(cfg, name=NAME, port=PORT, data_dir=data)
    pid = services.start(cfg, daemon)
    try:
        services.wait_until(
            lambda: services.zookeeper_ok(PORT), NAME, 30, pid, cfg.logs / f"{NAME}.log"
        )
        yield
    finally:
        services.stop(cfg, NAME)
        shutil.rmtree(data, ignore_errors=True)


def client(keyring: Keyring | None = None):
    """A started client of the private server, with or without a secret."""
    c = make_client(ZkSettings(hosts=HOSTS, keyring=keyring))
    c.start(timeout=15)
    return c


@pytest.fixture
def clients(zookeeper):
    made = []

    def make(keyring: Keyring | None = None):
        made.append(client(keyring))
        return made[-1]

    yield make
    for c in made:
        c.stop()
        c.close()


def test_an_unauthenticated_client_reads_but_cannot_change_elastorm_znodes(clients) -> None:
    secured, stranger = clients(RING), clients()
    routing = LAYOUT.routing("op")
    write_znode(secured, routing, b'{"epoch": 1}')
    outbox = CommandOutbox(secured, LAYOUT, task=0)
    outbox.start()
    outbox.post(7, PeerDown(key_group=0, task=4))
    deadline = time.monotonic() + 10
    while outbox.written < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    outbox.stop()

    assert stranger.get(routing)[0] == b'{"epoch": 1}'  # anyone reads
    assert stranger.get_children(LAYOUT.command_dir(7))  # ... the mailboxes too
    with pytest.raises(NoAuthError):
        stranger.set(routing, b'{"epoch": 99}')
    with pytest.raises(NoAuthError):
        stranger.delete(routing)
    with pytest.raises(NoAuthError):
        stranger.create(f"{LAYOUT.command_dir(7)}/c-", b"forged", sequence=True)
    with pytest.raises(NoAuthError):
        stranger.create(f"{LAYOUT.base}/requests", b"")
    with pytest.raises(NoAuthError):
        stranger.delete(LAYOUT.base, recursive=True)
    assert secured.get(routing)[0] == b'{"epoch": 1}'

    secured.set(routing, b'{"epoch": 2}')  # the secret's holder writes and deletes
    secured.delete(routing)
    assert stranger.exists(routing) is None
    # The shared root stays open, so another topology (its own secret) makes its subtree.
    other = clients(Keyring(current=b"another topology's secret"))
    write_znode(other, ZnodeLayout("other").routing("op"), b"{}")
    with pytest.raises(NoAuthError):
        other.create(f"{LAYOUT.base}/intruder", b"")


def test_znodes_created_in_a_transaction_get_the_acl_too(clients) -> None:
    """The controller's store and the submission claim create through transactions."""
    layout = ZnodeLayout("claimed")
    secured, stranger = clients(RING), clients()
    claim_submission(secured, layout, "claimed-1-1700000000")
    with pytest.raises(NoAuthError):
        stranger.set(layout.submission, b"forged")
    secured.ensure_path(layout.controller)
    tx = secured.transaction()
    tx.create(layout.routing_dir, b"")
    tx.create(layout.routing("op"), b'{"epoch": 1}')
    assert not [r for r in tx.commit() if isinstance(r, Exception)]
    with pytest.raises(NoAuthError):
        stranger.set(layout.routing("op"), b"forged")
    secured.set(layout.routing("op"), b'{"epoch": 2}')


def test_rotation_keeps_znodes_written_under_the_previous_secret_writable(clients) -> None:
    old, new = Keyring(current=b"old secret"), Keyring(current=b"new secret")
    path = ZnodeLayout("rotated").routing("op")
    write_znode(clients(old), path, b"1")
    with pytest.raises(NoAuthError):
        clients(new).set(path, b"2")  # the new secret alone is another identity
    rotating = clients(Keyring(current=b"new secret", previous=b"old secret"))
    rotating.set(path, b"3")
    assert clients().get(path)[0] == b"3"


def test_a_command_without_the_secret_is_refused(clients) -> None:
    """The MAC holds even where the ACLs do not (a mailbox made before the secret was
    turned on is open): unsigned and wrongly signed commands are refused and deleted,
    the controller's signed one is taken."""
    layout = ZnodeLayout("commands")
    stranger = clients()
    mailbox = layout.command_dir(5)
    stranger.ensure_path(mailbox)  # open, as before the secret
    message = PeerDown(key_group=0, task=9)
    stranger.create(f"{mailbox}/c-", encode_command("x", 1, message), sequence=True)
    forged = seal(Keyring(current=b"guess"), "command", encode_command("x", 2, message),
                  now=time.time(), nonce="aa")  # fmt: skip
    stranger.create(f"{mailbox}/c-", forged, sequence=True)
    inbox = CommandInbox(layout=layout, task=5, client=clients(RING))
    inbox.start()
    try:
        deadline = time.monotonic() + 10
        while inbox.refused < 2:
            assert time.monotonic() < deadline, "the forged commands were not refused"
            time.sleep(0.05)
        assert inbox.take() == []
        outbox = CommandOutbox(clients(RING), layout, task=0)
        outbox.start()
        outbox.post(5, message)
        while not inbox:
            assert time.monotonic() < deadline + 10, "the signed command was not taken"
            time.sleep(0.05)
        outbox.stop()
        assert inbox.take() == [message]
        assert stranger.get_children(mailbox) == [] or inbox.refused == 2
    finally:
        inbox.stop()


def test_a_migration_request_without_the_secret_is_refused(clients) -> None:
    layout = ZnodeLayout("requests")
    stranger, controller = clients(), clients(RING)
    stranger.ensure_path(layout.requests)  # open, as before the secret
    request = MigrationRequest(operator="op", key_group=3, target=2, protocol=Protocol.CPA)
    forged = submit_request(stranger, layout, request)
    board = RequestBoard(controller, layout, "op")
    assert board.pending() == []
    refused = decode_record(stranger.get(layout.request(forged))[0])
    assert refused.state is RequestState.REFUSED and "not signed" in refused.detail
    signed = submit_request(clients(RING), layout, request)
    assert board.pending() == [(signed, request)]


def test_the_controller_secures_znodes_made_before_the_secret_and_the_schedulers(clients):
    """Znodes made open (before the secret, or by the Java scheduler in Nimbus, which holds
    no secret) get their ACL as the controller starts; the scheduler still publishes."""
    layout = ZnodeLayout("adopted")
    stranger = clients()
    write_znode(stranger, layout.routing("op"), b"open")
    write_znode(stranger, layout.scheduler_placement, b"{}")  # as ElasticScheduler does
    rotating = clients(Keyring(current=b"new secret", previous=RING.current))
    write_znode(clients(RING), layout.checkpoints, b"under the previous secret")

    assert secure_tree(rotating, layout, rotating.keyring) >= 5
    assert secure_tree(rotating, layout, rotating.keyring) == 0  # nothing left to change
    with pytest.raises(NoAuthError):
        stranger.set(layout.routing("op"), b"forged")
    with pytest.raises(NoAuthError):
        stranger.set(layout.scheduler_nodes, b'{"wanted": [], "draining": []}')
    with pytest.raises(NoAuthError):
        clients(RING).set(layout.checkpoints, b"the old secret alone no longer writes")
    stranger.set(layout.scheduler_placement, b'{"binding": {}}')  # the scheduler goes on
    rotating.delete(layout.scheduler_placement)
    write_znode(stranger, layout.scheduler_placement, b"{}")  # ... and makes it anew
    assert decode_node_set(stranger.get(layout.scheduler_nodes)[0]) == NodeSet()


def test_the_dashboard_migrates_with_the_secret_and_says_why_not_without(clients) -> None:
    from starlette.testclient import TestClient

    from elastorm.dashboard.app import create_app
    from elastorm.dashboard.source import DashboardSource

    layout = ZnodeLayout("dashboard")
    controller = clients(RING)
    controller.create(layout.leader, b"controller-0", ephemeral=True, makepath=True)
    controller.ensure_path(layout.requests)  # the board, made secured
    body = {"operator": "op", "group": 3, "target": 2, "protocol": "cpa"}
    auth = {"Authorization": "Bearer t"}
    answers = {}
    for name, keyring in (("without", None), ("with", RING)):
        source = DashboardSource(hosts=HOSTS, topology="dashboard", keyring=keyring)
        source.client.start(timeout=15)
        try:
            app = TestClient(create_app(source, token="t"))
            answers[name] = app.post("/api/migrate", json=body, headers=auth)
        finally:
            source.client.stop()
            source.client.close()
    assert answers["without"].status_code == 403
    assert "--secret-file" in answers["without"].json()["error"]
    assert answers["with"].status_code == 202, answers["with"].text
    request = MigrationRequest(operator="op", key_group=3, target=2, protocol=Protocol.CPA)
    board = RequestBoard(controller, layout, "op")
    assert board.pending() == [(answers["with"].json()["request"], request)]
