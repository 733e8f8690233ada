"""The kazoo side shared by the ZooKeeper adapters: client factory and the
background loop each adapter runs its ZooKeeper calls on.

Adapters never call ZooKeeper on their caller's thread (except the documented,
bounded ``ControllerStore.issue`` / ``load``): kazoo's listener callbacks only
set flags and wake the loop; the loop does the calls, with a timeout on each.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from elastorm.core.auth import Keyring
from elastorm.zk.acls import acl_for, digest_auth
from elastorm.zk.layout import ZkSettings, ZnodeLayout

log = logging.getLogger(__name__)

#: What a kazoo call raises when ZooKeeper refuses it or does not answer in time.
KAZOO_ERRORS = (KazooException, KazooTimeoutError)


def make_client(settings: ZkSettings) -> KazooClient:
    """A kazoo client with the session timeout of ``settings`` that reconnects for
    ever, at most ``reconnect_max_delay`` s apart (kazoo's default backoff grows to an
    hour, which would keep a task away long after ZooKeeper is back). With a keyring
    it authenticates and creates znodes with the ACLs of ``elastorm.zk.acls``."""
    retry = KazooRetry(
        max_tries=-1, delay=0.1, backoff=2, max_jitter=0.1, max_delay=settings.reconnect_max_delay
    )
    common = {
        "hosts": settings.hosts,
        "timeout": settings.session_timeout,
        "connection_retry": retry,
        "command_retry": KazooRetry(max_tries=0),
    }
    if settings.keyring is None:
        return KazooClient(**common)
    return SecuredClient(keyring=settings.keyring, **common)


def client_keyring(client: KazooClient) -> Keyring | None:
    """The secret ``client`` authenticates with (``None``: authentication off); what
    the adapters sign with and verify against."""
    return client.keyring if isinstance(client, SecuredClient) else None


def new_nonce() -> str:
    """A fresh nonce for a signed message (128 random bits, hex)."""
    return secrets.token_hex(16)


class SecuredClient(KazooClient):
    """A kazoo client that holds the topology's secret: it authenticates with it and
    creates every znode with its ACL (``elastorm.zk.acls.acl_for``: the root every
    topology shares stays open, so a topology's secret guards its own subtree, never
    another topology's right to make one). The adapters sign with its ``keyring``."""

    def __init__(self, *, keyring: Keyring, **kwargs: Any) -> None:
        super().__init__(auth_data=digest_auth(keyring), **kwargs)
        self.keyring = keyring

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, *args, **kwargs):
        """kazoo's ``create_async`` with :func:`~elastorm.zk.acls.acl_for` the znode's ACL."""
        return super().create_async(path, value, acl_for(path, self.keyring), *args, **kwargs)

    def transaction(self) -> TransactionRequest:
        """kazoo's transaction whose creates get their ACL too (the controller's store and
        the submission claim create through transactions)."""
        return SecuredTransaction(self)


class SecuredTransaction(TransactionRequest):
    """A transaction of a :class:`SecuredClient`: each create with its znode's ACL."""

    def create(self, path: str, value: bytes = b"", acl: Any = None, *args, **kwargs) -> None:
        return super().create(path, value, acl_for(path, self.client.keyring), *args, **kwargs)


def write_znode(client: KazooClient, path: str, data: bytes) -> None:
    """Set ``path`` to ``data``, creating it (and its parents) if absent: the one
    upsert of every adapter that publishes a value (created with its data, so never
    readable empty)."""
    try:
        client.set(path, data)
    except NoNodeError:
        client.create(path, data, makepath=True)


def session_id(client: KazooClient) -> int | None:
    """The client's current session id, ``None`` before the first connection."""
    cid = client.client_id
    return cid[0] if cid else None


class BackgroundLoop:
    """A daemon thread that runs ``_step()`` every ``interval`` s or when woken.

    kazoo connection-state changes wake it (``_on_state`` runs on kazoo's thread and
    only records the state). Exceptions in ``_step`` are logged and counted, never
    raised into anyone's processing path. Events go to a queue (``poll_events``) and
    to the optional ``on_event`` callback, which runs on this loop's thread.

    ``client`` may be shared (then the caller starts and closes it); without one the
    loop makes its own from ``settings`` and owns it. Every ZooKeeper call waits at
    most ``settings.request_timeout`` s (``_timeout``); ``clock`` stamps the events.
    """

    def __init__(
        self,
        client: KazooClient | None,
        *,
        layout: ZnodeLayout,
        settings: ZkSettings | None,
        name: str,
        interval: float,
        on_event: Callable[[Any], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = settings or ZkSettings()
        self._own_client = client is None
        self._client = make_client(settings) if client is None else client
        self._layout = layout
        self._timeout = settings.request_timeout
        self._clock = clock
        self._interval = interval
        self._on_event = on_event
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._events: collections.deque = collections.deque(maxlen=10_000)
        self._session_lost = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.step_errors = 0

    # -- lifecycle

    def start(self) -> None:
        """Start the loop (and the client's connection if this adapter owns it).
        Returns at once, connected or not."""
        self._client.add_listener(self._on_state)
        if self._own_client:
            self._client.start_async()
        self._thread.start()

    def _halt(self, timeout: float) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._client.remove_listener(self._on_state)

    def _close_client(self) -> None:
        if self._own_client:
            try:
                self._client.stop()
            finally:
                self._client.close()

    # -- events

    def poll_events(self) -> list:
        """Events since the last call, oldest first (thread-safe, never blocks)."""
        out = []
        while True:
            try:
                out.append(self._events.popleft())
            except IndexError:
                return out

    def _emit(self, event) -> None:
        self._events.append(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                log.exception("%s: on_event callback failed", self._thread.name)

    # -- loop

    def wake(self) -> None:
        """Run a step now instead of at the next interval (never blocks)."""
        self._wake.set()

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()  # a wake-up during the step below makes the wait return at once
            try:
                self._step()
            except Exception:
                self.step_errors += 1
                log.exception("%s: step failed", self._thread.name)
            self._wake.wait(self._interval)

    def _step(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _take_session_lost(self) -> bool:
        lost, self._session_lost = self._session_lost, False
        return lost


class DirectoryLoop(BackgroundLoop):
    """A background loop over one directory of znodes a task reads (its state
    queries, its commands): woken by a children watch, and every ``interval`` s
    anyway (kazoo drops watches when its connection does); stop closes its client
    if it owns one."""

    def __init__(self, client: KazooClient | None, *, directory: str, **loop: Any) -> None:
        super().__init__(client, **loop)  # BackgroundLoop's keywords
        self._dir = directory

    def stop(self, timeout: float = 2.0) -> None:
        self._halt(timeout)
        self._close_client()

    def _watch(self, _event) -> None:
        self.wake()  # kazoo's thread: only wake the loop

    def _children(self) -> list[str] | None:
        """The directory's children, watched (created if absent); ``None`` if
        ZooKeeper does not answer now."""
        if not self._client.connected:
            return None
        try:
            try:
                return self._client.get_children(self._dir, watch=self._watch)
            except NoNodeError:
                self._client.ensure_path(self._dir)
                return self._client.get_children(self._dir, watch=self._watch)
        except KAZOO_ERRORS as exc:
            log.debug("%s unreadable now (%r)", self._dir, exc)
            return None
