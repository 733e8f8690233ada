"""Failure detection in milliseconds: every keyed task holds a TCP connection to its
controller, and the kernel closes it the instant the process dies (kill -9, a crashed
worker, a killed supervisor), so the controller hears of the death at once instead of
one ZooKeeper session timeout later.

A host that dies or a network cut closes nothing on the other side: those are still
found by the session timeout (``elastorm.zk.watcher``). A connection lost while the
task lives on is a blip if the task is back before the controller's next look (it
reconnects at once); if the controller declared it lost meanwhile, the reconnecting
task is told ``fenced`` and stops, as it would on finding its fence in ZooKeeper.

Wire: the task sends one line, ``<task id> <incarnation>\\n`` (its znode's creation
zxid); the controller answers only ``fenced\\n`` (then closes) or nothing.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

FENCED = b"fenced\n"
RETRY_SECS = 0.2  # between a task's attempts to (re)connect
RECHECK_SECS = 1.0  # how often a connected task checks that its incarnation still holds


def parse_hello(line: bytes) -> tuple[int, int]:
    """``(task, incarnation)`` from a task's first line; ``ValueError`` if malformed.

    >>> parse_hello(b"11 4294967301\\n")
    (11, 4294967301)
    """
    task, incarnation = line.split()
    return int(task), int(incarnation)


class LivenessServer:
    """The controller's end: accepts one connection per task incarnation and calls
    ``on_drop(task, incarnation)`` when one closes. ``fenced(task, incarnation)`` says
    whether that incarnation was declared lost (it is then told so and turned away).
    One thread per connection (a topology has tens of keyed tasks, not thousands)."""

    def __init__(
        self,
        host: str,
        *,
        on_drop: Callable[[int, int], None],
        fenced: Callable[[int, int], bool],
    ) -> None:
        self._sock = socket.create_server((host, 0))
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._on_drop = on_drop
        self._fenced = fenced
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}  # task -> incarnation of its open connection
        self.malformed = 0

    def start(self) -> LivenessServer:
        threading.Thread(target=self._accept, name="elastorm-liveness", daemon=True).start()
        return self

    def connected(self, task: int, incarnation: int) -> bool:
        """Whether ``task``'s ``incarnation`` holds an open connection now."""
        with self._lock:
            return self._open.get(task) == incarnation

    def close(self) -> None:
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                task, incarnation = parse_hello(conn.makefile("rb").readline(64))
            except (OSError, ValueError):
                self.malformed += 1
                return
            if self._fenced(task, incarnation):
                log.warning(
                    "liveness: task %s (zxid %s) was declared lost: fenced", task, incarnation
                )
                _send(conn, FENCED)
                return
            with self._lock:
                self._open[task] = incarnation
            try:
                while conn.recv(64):
                    pass  # a task sends nothing after its hello
            except OSError:
                pass
            with self._lock:
                if self._open.get(task) == incarnation:
                    del self._open[task]
        log.warning("liveness: task %s (zxid %s) closed its connection", task, incarnation)
        self._on_drop(task, incarnation)


def _send(conn: socket.socket, data: bytes) -> None:
    try:
        conn.sendall(data)
    except OSError:
        pass


class LivenessClient:
    """A keyed task's end: keeps a connection to the controller's address (read anew
    before every attempt: a restarted controller listens elsewhere) under its current
    ``incarnation`` (``None`` until its znode exists), and calls ``on_fenced`` if the
    controller says it was declared lost."""

    def __init__(
        self,
        task: int,
        *,
        address: Callable[[], str | None],
        incarnation: Callable[[], int | None],
        on_fenced: Callable[[], None],
    ) -> None:
        self.task = task
        self._address = address
        self._incarnation = incarnation
        self._on_fenced = on_fenced

    def start(self) -> LivenessClient:
        name = f"elastorm-liveness-{self.task}"
        threading.Thread(target=self._run, name=name, daemon=True).start()
        return self

    def _run(self) -> None:
        while True:
            try:
                if self._session():
                    return
            except Exception:  # never let detection kill the task; try again
                log.exception("liveness: task %s", self.task)
            time.sleep(RETRY_SECS)

    def _session(self) -> bool:
        """One connection, until it closes; True if the controller fenced us."""
        incarnation = self._incarnation()
        address = self._address()
        if incarnation is None or not address:
            return False
        host, port = address.rsplit(":", 1)
        try:
            conn = socket.create_connection((host, int(port)), timeout=2.0)
        except OSError:
            return False
        with conn:
            conn.settimeout(RECHECK_SECS)
            conn.sendall(f"{self.task} {incarnation}\n".encode())
            reply = b""
            while self._incarnation() == incarnation:  # re-registered: say so anew
                try:
                    chunk = conn.recv(64)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                reply += chunk
        if reply.startswith(FENCED):
            self._on_fenced()
            return True
        return False
