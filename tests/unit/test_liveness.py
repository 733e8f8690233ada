"""The liveness channel on real loopback sockets (no Storm): a task's connection
closing reaches the controller at once, a re-registered task connects anew under its
new incarnation, and a task declared lost is told ``fenced`` when it comes back."""

from __future__ import annotations

import threading
import time

import pytest

from elastorm.storm import liveness
from elastorm.storm.liveness import LivenessClient, LivenessServer, parse_hello


def wait(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def server():
    drops: list[tuple[int, int]] = []
    declared: set[tuple[int, int]] = set()
    srv = LivenessServer(
        "127.0.0.1",
        on_drop=lambda t, i: drops.append((t, i)),
        fenced=lambda t, i: (t, i) in declared,
    ).start()
    yield srv, drops, declared
    srv.close()


def test_a_closed_connection_is_reported_with_its_incarnation(server) -> None:
    import socket

    srv, drops, _ = server
    host, port = srv.address.rsplit(":", 1)
    conn = socket.create_connection((host, int(port)))
    conn.sendall(b"11 5\n")
    wait(lambda: srv.connected(11, 5))
    began = time.monotonic()
    conn.close()  # what the kernel does when the process dies
    wait(lambda: drops == [(11, 5)])
    assert time.monotonic() - began < 1.0
    assert not srv.connected(11, 5)


def test_a_client_follows_its_incarnation_and_stops_when_fenced(server, monkeypatch) -> None:
    monkeypatch.setattr(liveness, "RECHECK_SECS", 0.05)
    srv, drops, declared = server
    incarnation = [5]
    fenced = threading.Event()
    LivenessClient(
        11, address=lambda: srv.address, incarnation=lambda: incarnation[0], on_fenced=fenced.set
    ).start()
    wait(lambda: srv.connected(11, 5))
    incarnation[0] = 6  # its session expired and it registered again
    wait(lambda: srv.connected(11, 6))
    time.sleep(0.1)
    assert drops == []  # the old incarnation's connection, left with a bye: not a death
    declared.add((11, 6))  # the controller declared it lost meanwhile
    incarnation[0] = 7
    wait(lambda: srv.connected(11, 7))
    incarnation[0] = 6  # ... and a connection under the declared incarnation is fenced
    wait(fenced.is_set)


def test_a_client_waits_for_an_address_and_an_incarnation(server) -> None:
    srv, _, _ = server
    address: list[str | None] = [None]
    incarnation: list[int | None] = [None]
    LivenessClient(
        12, address=lambda: address[0], incarnation=lambda: incarnation[0], on_fenced=lambda: None
    ).start()
    time.sleep(0.3)
    address[0], incarnation[0] = srv.address, 4
    wait(lambda: srv.connected(12, 4))


def test_a_malformed_hello_is_counted_and_dropped(server) -> None:
    import socket

    srv, drops, _ = server
    host, port = srv.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(b"not a hello\n")
        wait(lambda: srv.malformed == 1)
    assert drops == []
    with pytest.raises(ValueError):
        parse_hello(b"11\n")


def test_a_connected_task_beats_so_the_controller_hears_it_alive(server, monkeypatch) -> None:
    """A beat every ``RECHECK_SECS``: the controller tells a task whose ZooKeeper session
    lapsed while it lives (still heard) from one that is frozen or cut off (silent)."""
    monkeypatch.setattr(liveness, "RECHECK_SECS", 0.05)
    srv, _, _ = server
    LivenessClient(
        13, address=lambda: srv.address, incarnation=lambda: 8, on_fenced=lambda: None
    ).start()
    wait(lambda: srv.connected(13, 8))
    first = srv.heard()[13]
    wait(lambda: srv.heard()[13][1] > first[1])
    assert srv.heard()[13][0] == 8


def test_a_client_moves_to_the_address_a_new_leader_publishes(server, monkeypatch) -> None:
    """After a takeover the new leader publishes its own address; a task connected to
    the old one (which may live on, deposed) moves to it within ``RECHECK_SECS``."""
    monkeypatch.setattr(liveness, "RECHECK_SECS", 0.05)
    old, old_drops, _ = server
    new = LivenessServer("127.0.0.1", on_drop=lambda t, i: None, fenced=lambda t, i: False)
    new.start()
    try:
        address = [old.address]
        LivenessClient(
            14, address=lambda: address[0], incarnation=lambda: 3, on_fenced=lambda: None
        ).start()
        wait(lambda: old.connected(14, 3))
        address[0] = None  # ZooKeeper does not answer: stay where it is
        time.sleep(0.2)
        assert old.connected(14, 3)
        address[0] = new.address
        wait(lambda: new.connected(14, 3))
        wait(lambda: not old.connected(14, 3))
        assert old_drops == []  # it said bye: the deposed leader declares no death
    finally:
        new.close()


def test_with_the_secret_a_forged_hello_is_refused_and_a_signed_one_taken() -> None:
    """A forger who connects as task 11 and closes at once would get it declared lost;
    with the secret its hello is refused, and only the real task's signed one counts."""
    import socket

    from elastorm.core.auth import Keyring

    ring = Keyring(current=b"topology-secret")
    drops: list[tuple[int, int]] = []
    srv = LivenessServer(
        "127.0.0.1", on_drop=lambda t, i: drops.append((t, i)), fenced=lambda t, i: False,
        keyring=ring,
    ).start()  # fmt: skip
    host, port = srv.address.rsplit(":", 1)
    try:
        forged = [
            b"11 5\n",  # unsigned, as before the secret
            liveness.hello_line(11, 5, Keyring(current=b"guess"), now=time.time()),
            liveness.hello_line(11, 5, ring, now=time.time() - 60),  # an old one, replayed
        ]
        for line in forged:
            with socket.create_connection((host, int(port))) as conn:
                conn.sendall(line)
        wait(lambda: srv.refused == len(forged))
        signed = liveness.hello_line(11, 5, ring, now=time.time())
        conn = socket.create_connection((host, int(port)))
        conn.sendall(signed)
        wait(lambda: srv.connected(11, 5))
        conn.close()
        wait(lambda: drops == [(11, 5)])
        with socket.create_connection((host, int(port))) as again:
            again.sendall(signed)  # the same hello twice: its nonce was seen
        wait(lambda: srv.refused == len(forged) + 1)
        assert drops == [(11, 5)]
    finally:
        srv.close()


def test_a_signed_client_connects_to_a_server_with_the_secret(monkeypatch) -> None:
    from elastorm.core.auth import Keyring

    ring = Keyring(current=b"new", previous=b"old")
    srv = LivenessServer(
        "127.0.0.1", on_drop=lambda t, i: None, fenced=lambda t, i: False, keyring=ring
    ).start()
    try:
        for task, secret in ((11, b"new"), (12, b"old")):  # both sides of a rotation
            LivenessClient(
                task, address=lambda: srv.address, incarnation=lambda: 5, on_fenced=lambda: None,
                keyring=Keyring(current=secret),
            ).start()  # fmt: skip
            wait(lambda task=task: srv.connected(task, 5))
        assert srv.refused == 0
    finally:
        srv.close()
