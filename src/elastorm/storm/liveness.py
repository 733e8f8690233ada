"""Failure detection in milliseconds: every keyed task holds a TCP connection to its
controller, and the kernel closes it the instant the process dies (kill -9, a crashed
worker, a killed supervisor), so the controller hears of the death at once instead of
one ZooKeeper session timeout later.

A host that dies, a frozen process or a network cut closes nothing on the other side:
those are found by the session timeout (``elastorm.zk.watcher``), and declared only
once the connection also stops answering: the task sends a beat every
``RECHECK_SECS``, so a task whose session lapsed on a loaded machine while its beats
still arrive is alive (``elastorm.controller.failures``). A connection lost while the
task lives on is a blip if the task is back before the controller's next look (it
reconnects at once); if the controller declared it lost meanwhile, the reconnecting
task is told ``fenced`` and stops, as it would on finding its fence in ZooKeeper. A
task follows the published address: when another controller takes over, it leaves
the old one and connects to the new one within ``RECHECK_SECS``.

Wire: the task sends one line, ``<task id> <incarnation>\\n`` (its znode's creation
zxid), then ``BEAT`` every ``RECHECK_SECS``, and ``BYE`` before it closes a connection
it leaves alive (it re-registered, or follows a new leader); the controller answers
only ``fenced\\n`` (then closes) or nothing. A connection that closes without ``BYE``
is a death: a deposed leader took its tasks' leaving for deaths and declared them all
lost (chaos ``join/zk-stop``, session 31; its writes were refused, but its log said so).

With the topology's secret the first line ends with a tag, ``<task> <incarnation>
<tag>`` (``elastorm.core.auth``, purpose ``hello``): the controller turns away, and
logs, a hello that is unsigned, wrongly signed, older than 30 s or replayed, so a
forged hello cannot get a live task declared lost by closing.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

from elastorm.core.auth import AuthError, Keyring, ReplayGuard, sign, verify
from elastorm.zk.client import new_nonce

log = logging.getLogger(__name__)

FENCED = b"fenced\n"
BEAT = b".\n"
BYE = b"bye\n"
RETRY_SECS = 0.2  # between a task's attempts to (re)connect
RECHECK_SECS = 1.0  # how often a connected task checks that its incarnation still holds
HELLO_MAX = 256  # bytes of a first line read at most (a signed one is about 130)


def hello_line(task: int, incarnation: int, ring: Keyring | None, *, now: float) -> bytes:
    """A task's first line, signed with ``ring``'s secret if there is one.

    >>> hello_line(11, 4294967301, None, now=0.0)
    b'11 4294967301\\n'
    """
    body = f"{task} {incarnation}"
    if ring is None:
        return f"{body}\n".encode()
    tag = sign(ring, "hello", body.encode(), now=now, nonce=new_nonce())
    return f"{body} {tag}\n".encode()


def parse_hello(
    line: bytes, ring: Keyring | None = None, *, now: float = 0.0, guard: ReplayGuard | None = None
) -> tuple[int, int]:
    """``(task, incarnation)`` from a task's first line; ``ValueError`` if malformed,
    ``AuthError`` if ``ring`` is given and its tag fails (``guard``: nonces seen).

    >>> parse_hello(b"11 4294967301\\n")
    (11, 4294967301)
    """
    task, incarnation, *tag = line.split()
    if len(tag) > 1:
        raise ValueError("too many fields in a hello")
    if ring is not None:
        if not tag:
            raise AuthError("hello: not signed")
        body = task + b" " + incarnation
        verify(ring, "hello", body, tag[0].decode(), now=now, guard=guard or ReplayGuard())
    return int(task), int(incarnation)


class LivenessServer:
    """The controller's end: accepts one connection per task incarnation, notes when
    each was last heard (:meth:`heard`) and calls ``on_drop(task, incarnation)`` when
    one closes. ``fenced(task, incarnation)`` says whether that incarnation was declared
    lost (it is then told so and turned away). With ``keyring`` a hello must carry a
    valid tag, else it is refused (logged, counted, closed). One thread per connection
    (a topology has tens of keyed tasks, not thousands)."""

    def __init__(
        self,
        host: str,
        *,
        on_drop: Callable[[int, int], None],
        fenced: Callable[[int, int], bool],
        keyring: Keyring | None = None,
    ) -> None:
        self._sock = socket.create_server((host, 0))
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._on_drop = on_drop
        self._fenced = fenced
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}  # task -> incarnation of its open connection
        self._heard: dict[int, tuple[int, float]] = {}  # task -> (incarnation, last heard)
        self._keyring = keyring
        self._guard = ReplayGuard()
        self.malformed = 0
        self.refused = 0

    def start(self) -> LivenessServer:
        threading.Thread(target=self._accept, name="elastorm-liveness", daemon=True).start()
        return self

    def connected(self, task: int, incarnation: int) -> bool:
        """Whether ``task``'s ``incarnation`` holds an open connection now."""
        with self._lock:
            return self._open.get(task) == incarnation

    def heard(self) -> dict[int, tuple[int, float]]:
        """Task -> (incarnation, wall-clock time) of the last hello or beat heard."""
        with self._lock:
            return dict(self._heard)

    def close(self) -> None:
        self._sock.close()

    def _hear(self, task: int, incarnation: int) -> None:
        with self._lock:
            self._heard[task] = (incarnation, time.time())

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
                line = conn.makefile("rb").readline(HELLO_MAX)
                with self._lock:  # one guard for every connection's thread
                    task, incarnation = parse_hello(
                        line, self._keyring, now=time.time(), guard=self._guard
                    )
            except AuthError as exc:
                self.refused += 1
                log.warning("liveness: hello refused: %s", exc)
                return
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
            self._hear(task, incarnation)
            left = False
            seen = b""
            try:
                while chunk := conn.recv(64):
                    self._hear(task, incarnation)  # a beat
                    seen = seen[-len(BYE) :] + chunk
                    if BYE in seen:
                        left = True
                        break
            except OSError:
                pass
            with self._lock:
                if self._open.get(task) == incarnation:
                    del self._open[task]
        if left:
            log.info("liveness: task %s (zxid %s) left, alive", task, incarnation)
            return
        log.warning("liveness: task %s (zxid %s) closed its connection", task, incarnation)
        self._on_drop(task, incarnation)


def _send(conn: socket.socket, data: bytes) -> None:
    try:
        conn.sendall(data)
    except OSError:
        pass


class LivenessClient:
    """A keyed task's end: keeps a connection to the controller's address (looked at
    anew every ``RECHECK_SECS``: a restarted controller, or a standby that took over,
    listens elsewhere; ``address`` must not block, e.g. a watched znode's last value)
    under its current ``incarnation`` (``None`` until its znode exists), beats on it,
    and calls ``on_fenced`` if the controller says it was declared lost. With
    ``keyring`` its hello is signed."""

    def __init__(
        self,
        task: int,
        *,
        address: Callable[[], str | None],
        incarnation: Callable[[], int | None],
        on_fenced: Callable[[], None],
        keyring: Keyring | None = None,
    ) -> None:
        self.task = task
        self._keyring = keyring
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
                ended = self._session()
            except Exception:  # never let detection kill the task; try again
                log.exception("liveness: task %s", self.task)
                ended = "error"
            if ended == "fenced":
                return
            if ended != "moved":  # re-registered or a new controller: at once
                time.sleep(RETRY_SECS)

    def _session(self) -> str:
        """One connection, until it closes: ``fenced`` (the controller said so),
        ``moved`` (a new incarnation or a new controller address: connect anew at once)
        or ``closed``."""
        incarnation = self._incarnation()
        address = self._address()
        if incarnation is None or not address:
            return "closed"
        host, port = address.rsplit(":", 1)
        try:
            conn = socket.create_connection((host, int(port)), timeout=2.0)
        except OSError:
            return "closed"
        with conn:
            conn.settimeout(RECHECK_SECS)
            conn.sendall(hello_line(self.task, incarnation, self._keyring, now=time.time()))
            reply = b""
            while True:
                try:
                    chunk = conn.recv(64)
                except TimeoutError:
                    try:
                        conn.sendall(BEAT)  # first: nothing may delay a beat
                    except OSError:
                        break
                    if self._moved(incarnation, address):
                        _send(conn, BYE)  # alive: not a death to the one it leaves
                        return "moved"
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                reply += chunk
        if reply.startswith(FENCED):
            self._on_fenced()
            return "fenced"
        return "closed"

    def _moved(self, incarnation: int, address: str) -> bool:
        """Whether this task re-registered, or another controller publishes its address
        now (``None``: ZooKeeper does not answer, so stay)."""
        if self._incarnation() != incarnation:
            return True
        now = self._address()
        return now is not None and now != address
