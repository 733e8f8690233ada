"""The ``hdfs://`` durable store: HDFS over WebHDFS, through fsspec's ``WebHDFS`` client.

``hdfs://[user@]host[:port]/root`` (``webhdfs://`` alike) names the NameNode's *HTTP*
port, where WebHDFS serves (Hadoop 3's default 9870; ``elastorm hdfs up`` uses
``elastorm.hdfs_http_port``), not its RPC port: this client speaks WebHDFS only, so
the workers need no Hadoop jars. The user is the URI's, else ``$HADOOP_USER_NAME``,
else the login name (HDFS's simple authentication, as the ``hdfs`` command does).

A thin adapter, like ``elastorm.durable.local``: ``put`` writes a hidden temporary
(``.<name>.tmp-<uuid>``) beside the file, then commits it with one WebHDFS RENAME with
``renameoptions=OVERWRITE`` (the NameNode's ``rename2``: atomic, replaces the file), so
a reader sees the whole file or none. Replication is the cluster's (``dfs.replication``).

Errors: a WebHDFS error reply names its Java exception (``RemoteException``); a
session hook turns it into :class:`RemoteError` (``FileNotFoundError`` for a missing
file) before fsspec folds it into a bare ``RuntimeError``. :func:`retriable` decides
which failures are passing (a refused or dropped connection, a NameNode in safe mode
or without DataNodes, a server error); each operation retries those with doubling
backoff for at most ``retry_secs``, then raises :class:`StoreError` naming the store,
the operation, the path and the last cause. Any other failure raises at once.
"""

from __future__ import annotations

import getpass
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import requests
from fsspec.implementations.webhdfs import WebHDFS
from requests.adapters import HTTPAdapter

from elastorm.durable.store import DurableStore, StoreError, check_path

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMES = ("hdfs", "webhdfs")
DEFAULT_PORT = 9870  # the NameNode's HTTP port in Hadoop 3 (dfs.namenode.http-address)
RETRY_SECS = 30.0  # how long one operation retries passing failures before StoreError
FIRST_DELAY = 0.25
MAX_DELAY = 4.0
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0

#: Java exceptions in a WebHDFS error reply that say "not now" rather than "never":
#: the NameNode starting (safe mode, no DataNode registered yet, so a plain
#: IOException "Failed to find datanode" or "could only be written to 0 ... nodes"),
#: a standby or retrying NameNode, a DataNode whose pipeline lost a peer.
RETRIABLE_EXCEPTIONS = frozenset(
    {
        "SafeModeException",
        "RetriableException",
        "StandbyException",
        "ObserverRetryOnActiveException",
        "IOException",
        "ConnectException",
        "SocketTimeoutException",
        "EOFException",
        "NotReplicatedYetException",
    }
)


class RemoteError(OSError):
    """A WebHDFS error reply: the Java exception's simple name, its message, the status."""

    def __init__(self, exception: str, message: str, status: int) -> None:
        super().__init__(f"{exception}: {message} (HTTP {status})")
        self.exception = exception
        self.status = status


def retriable(exc: BaseException) -> bool:
    """True if ``exc`` is a passing failure worth retrying (see the module doc).

    >>> retriable(RemoteError("SafeModeException", "Name node is in safe mode", 403))
    True
    >>> retriable(RemoteError("AccessControlException", "Permission denied", 403))
    False
    """
    if isinstance(exc, RemoteError):
        return exc.exception in RETRIABLE_EXCEPTIONS or exc.status >= 500
    if isinstance(exc, requests.HTTPError):  # an error reply that is not a RemoteException
        return exc.response is not None and exc.response.status_code >= 500
    return isinstance(exc, requests.ConnectionError | requests.Timeout)


def delays(first: float = FIRST_DELAY, cap: float = MAX_DELAY) -> Iterator[float]:
    """Seconds to wait before each retry: ``first``, doubling, at most ``cap``.

    >>> from itertools import islice
    >>> list(islice(delays(0.25, 1.0), 5))
    [0.25, 0.5, 1.0, 1.0, 1.0]
    """
    delay = first
    while True:
        yield delay
        delay = min(delay * 2, cap)


def _raise_remote(response: requests.Response, *args, **kwargs) -> None:
    """Session hook: raise a WebHDFS error reply (NameNode's or DataNode's) as its exception."""
    if response.status_code < 400:
        return
    try:
        remote = response.json()["RemoteException"]
        exception, message = remote["exception"], remote["message"]
    except (ValueError, KeyError, TypeError):
        return  # not a RemoteException: fsspec's raise_for_status reports it
    if exception == "FileNotFoundException":
        raise FileNotFoundError(message)
    raise RemoteError(exception, message.splitlines()[0], response.status_code)


class _Timeouts(HTTPAdapter):
    """Every request with connect and read timeouts (fsspec's client sets none): a hung
    NameNode or DataNode then fails the attempt instead of blocking it forever."""

    def send(self, request, **kwargs):
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = (CONNECT_TIMEOUT, READ_TIMEOUT)
        return super().send(request, **kwargs)


class WebHdfsStore:
    """A :class:`~elastorm.durable.store.DurableStore` under ``root`` on an HDFS."""

    def __init__(
        self,
        host: str,
        port: int = DEFAULT_PORT,
        root: str = "/",
        *,
        user: str | None = None,
        retry_secs: float = RETRY_SECS,
    ) -> None:
        if not root.startswith("/"):
            raise ValueError(f"HDFS root {root!r} must be an absolute path")
        self.host, self.port = host, port
        self.root = "/" + root.strip("/")
        self.user = user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        self.retry_secs = retry_secs
        self.fs = WebHDFS(host, port=port, user=self.user, skip_instance_cache=True)
        self.fs.session.mount("http://", _Timeouts())
        self.fs.session.hooks["response"].append(_raise_remote)

    @property
    def uri(self) -> str:
        return f"hdfs://{self.host}:{self.port}{self.root}"

    def _path(self, path: str) -> str:
        return f"{self.root.rstrip('/')}/{check_path(path)}"

    def put(self, path: str, data: bytes) -> None:
        target = self._path(path)
        parent, _, name = target.rpartition("/")

        def attempt() -> None:
            tmp = f"{parent}/.{name}.tmp-{uuid.uuid4().hex}"
            try:
                self.fs.pipe_file(tmp, data)
                self._replace(tmp, target)
            except BaseException:
                self._forget(tmp)
                raise

        self._retrying("put", path, attempt)

    def _replace(self, tmp: str, target: str) -> None:
        """Commit: rename ``tmp`` over ``target`` atomically (WebHDFS RENAME, OVERWRITE).

        fsspec's ``mv`` sends RENAME without options and drops the reply, whose
        ``{"boolean": false}`` is how plain RENAME says it did nothing; ``_call`` is
        fsspec's one generic WebHDFS request, with the option that makes it ``rename2``.
        """
        self.fs._call(
            "RENAME", method="put", path=tmp, destination=target, renameoptions="OVERWRITE"
        )

    def _forget(self, tmp: str) -> None:
        """Remove a failed put's temporary if the store lets us now (else it stays, hidden)."""
        try:
            self.fs.rm(tmp)
        except Exception as exc:  # the store is failing: the temporary is harmless
            log.debug("could not remove temporary %s: %s", tmp, exc)

    def get(self, path: str) -> bytes:
        target = self._path(path)
        return self._retrying("get", path, lambda: self.fs.cat_file(target))

    def list(self, directory: str) -> list[str]:
        target = self._path(directory)

        def attempt() -> list[str]:
            try:
                entries = self.fs.ls(target, detail=True)
            except FileNotFoundError:
                return []
            names = (e["pathSuffix"] for e in entries if e["type"] == "file")
            return sorted(n for n in names if not n.startswith("."))

        return self._retrying("list", directory, attempt)

    def delete(self, path: str) -> None:
        target = self._path(path)
        self._retrying("delete", path, lambda: self.fs.rm(target))

    def _retrying(self, op: str, path: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt``, retrying passing failures for ``retry_secs``; else StoreError.

        ``FileNotFoundError`` passes through (``get`` of a missing file).
        """
        deadline = time.monotonic() + self.retry_secs
        waits = delays()
        tries = 0
        while True:
            tries += 1
            try:
                return attempt()
            except FileNotFoundError:
                raise
            except OSError as exc:  # requests' errors and RemoteError are OSErrors
                left = deadline - time.monotonic()
                if not retriable(exc):
                    raise StoreError(f"{self.uri}: {op} {path}: {_cause(exc)}") from exc
                if left <= 0:
                    raise StoreError(
                        f"{self.uri}: {op} {path}: {_cause(exc)} "
                        f"(still failing after {tries} tries in {self.retry_secs:g} s)"
                    ) from exc
                log.warning("%s: %s %s failed, retrying: %s", self.uri, op, path, _cause(exc))
                time.sleep(min(next(waits), left))


def _cause(exc: BaseException) -> str:
    """One line naming what failed: the exception type and the first line of its text
    (for a connection that failed, the address and urllib3's last word on it)."""
    if isinstance(exc, requests.ConnectionError) and exc.request is not None:
        reason = str(getattr(exc.args[0], "reason", exc) if exc.args else exc)
        where = urlsplit(exc.request.url).netloc
        return f"{type(exc).__name__}: cannot reach {where} ({reason.rsplit(': ', 1)[-1]})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def open_store(uri: str) -> DurableStore:
    """A :class:`WebHdfsStore` for ``hdfs://[user@]host[:port]/root`` (``webhdfs://`` too)."""
    parts = urlsplit(uri)
    if parts.scheme not in SCHEMES or not parts.hostname or not parts.path.startswith("/"):
        raise ValueError(
            f"durable store {uri!r}: expected hdfs://[user@]host[:port]/directory, the port "
            f"being the NameNode's WebHDFS (HTTP) port, {DEFAULT_PORT} by default"
        )
    return WebHdfsStore(
        parts.hostname,
        parts.port or DEFAULT_PORT,
        unquote(parts.path),
        user=unquote(parts.username) if parts.username else None,
    )
