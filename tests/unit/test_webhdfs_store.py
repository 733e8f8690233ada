"""The ``hdfs://`` backend's decisions without an HDFS: which failures are retried, the
backoff, URI parsing, and how WebHDFS error replies become exceptions. The backend on
a real HDFS: ``tests/integration/test_hdfs_store.py``."""

from __future__ import annotations

import json
from itertools import islice

import pytest
import requests

from elastorm.durable import webhdfs
from elastorm.durable.store import DurableStore, StoreError, open_store
from elastorm.durable.webhdfs import RemoteError, WebHdfsStore, delays, retriable


def reply(status: int, body: object) -> requests.Response:
    """A requests Response with ``status`` and a JSON (or raw text) body."""
    response = requests.Response()
    response.status_code = status
    response._content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    response.headers["Content-Type"] = "application/json"
    return response


def remote(exception: str, message: str = "m") -> dict:
    return {"RemoteException": {"exception": exception, "message": message, "javaClassName": "x"}}


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (requests.ConnectionError("refused"), True),
        (requests.ConnectTimeout("slow"), True),
        (requests.ReadTimeout("slow"), True),
        (RemoteError("SafeModeException", "Name node is in safe mode", 403), True),
        (RemoteError("RetriableException", "Namenode is in startup mode", 403), True),
        (RemoteError("StandbyException", "Operation category WRITE", 403), True),
        (RemoteError("IOException", "Failed to find datanode", 403), True),
        (RemoteError("NullPointerException", "", 500), True),
        (RemoteError("AccessControlException", "Permission denied", 403), False),
        (RemoteError("FileAlreadyExistsException", "exists", 403), False),
        (RemoteError("IllegalArgumentException", "bad", 400), False),
        (RemoteError("ParentNotDirectoryException", "not a dir", 403), False),
        (requests.HTTPError(response=reply(503, "busy")), True),
        (requests.HTTPError(response=reply(404, "no")), False),
        (FileNotFoundError("gone"), False),
        (ValueError("bug"), False),
    ],
)
def test_retriable_says_which_failures_pass(exc: BaseException, expected: bool) -> None:
    assert retriable(exc) is expected


def test_delays_double_up_to_the_cap() -> None:
    assert list(islice(delays(0.25, 4.0), 8)) == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]


def test_an_error_reply_becomes_its_java_exception() -> None:
    with pytest.raises(RemoteError) as caught:
        webhdfs._raise_remote(reply(403, remote("SafeModeException", "in safe mode\nmore")))
    assert caught.value.exception == "SafeModeException" and caught.value.status == 403
    assert "in safe mode (HTTP 403)" in str(caught.value) and "more" not in str(caught.value)
    with pytest.raises(FileNotFoundError, match="File does not exist: /a"):
        webhdfs._raise_remote(
            reply(404, remote("FileNotFoundException", "File does not exist: /a"))
        )


def test_other_replies_are_left_to_fsspec() -> None:
    webhdfs._raise_remote(reply(200, {"boolean": True}))
    webhdfs._raise_remote(reply(307, ""))
    webhdfs._raise_remote(reply(500, "<html>a proxy's error page</html>"))
    webhdfs._raise_remote(reply(500, {"error": "not a RemoteException"}))


@pytest.mark.parametrize(
    ("uri", "host", "port", "root", "user"),
    [
        ("hdfs://127.0.0.1:18070/elastorm/t", "127.0.0.1", 18070, "/elastorm/t", None),
        ("webhdfs://nn.example:9871/a/b/", "nn.example", 9871, "/a/b", None),
        ("hdfs://nn/x", "nn", 9870, "/x", None),
        ("hdfs://storm@nn:9870/x", "nn", 9870, "/x", "storm"),
    ],
)
def test_open_store_reads_the_uri(uri, host, port, root, user, monkeypatch) -> None:
    monkeypatch.setenv("HADOOP_USER_NAME", "hadoop-env-user")
    store = open_store(uri)
    assert isinstance(store, WebHdfsStore) and isinstance(store, DurableStore)
    assert (store.host, store.port, store.root) == (host, port, root)
    assert store.user == (user or "hadoop-env-user")
    assert store.uri == f"hdfs://{host}:{port}{root}"
    assert store._path("op/g00001/base-1") == f"{root}/op/g00001/base-1"


@pytest.mark.parametrize("uri", ["hdfs:///no-host", "hdfs://nn", "http://nn:9870/x"])
def test_open_store_refuses_what_is_not_an_hdfs_uri(uri) -> None:
    with pytest.raises(ValueError, match="expected hdfs://"):
        webhdfs.open_store(uri)


def test_store_paths_are_checked_before_any_request() -> None:
    store = WebHdfsStore("127.0.0.1", 1, "/r", retry_secs=0)
    for bad in ("", "/abs", "a/../b", "a//b"):
        with pytest.raises(ValueError, match="bad store path"):
            store.get(bad)


def test_an_unreachable_store_fails_with_a_store_error_after_its_bound() -> None:
    # Port 1 on loopback refuses at once: every try is a retriable ConnectionError.
    store = WebHdfsStore("127.0.0.1", 1, "/r", retry_secs=0.3)
    with pytest.raises(StoreError, match=r"put a/b: ConnectionError: cannot reach 127\.0\.0\.1:1"):
        store.put("a/b", b"x")
    with pytest.raises(StoreError, match="still failing after [0-9]+ tries in 0.3 s"):
        store.list("a")


def test_a_refusal_is_not_retried(monkeypatch) -> None:
    store = WebHdfsStore("127.0.0.1", 1, "/r", retry_secs=60)
    calls = []

    def refuse(path):
        calls.append(path)
        raise RemoteError("AccessControlException", "Permission denied: user=dr.who", 403)

    monkeypatch.setattr(store.fs, "cat_file", refuse)
    with pytest.raises(StoreError, match="get a: RemoteError: AccessControlException: Perm"):
        store.get("a")
    assert calls == ["/r/a"]


def test_passing_failures_are_retried_until_one_attempt_succeeds(monkeypatch) -> None:
    store = WebHdfsStore("127.0.0.1", 1, "/r", retry_secs=60)
    slept: list[float] = []
    monkeypatch.setattr(webhdfs.time, "sleep", slept.append)
    failures = [
        requests.ConnectionError("NameNode down"),
        RemoteError("SafeModeException", "Name node is in safe mode", 403),
    ]

    def flaky(path):
        if failures:
            raise failures.pop(0)
        return b"data"

    monkeypatch.setattr(store.fs, "cat_file", flaky)
    assert store.get("a") == b"data"
    assert slept == [0.25, 0.5]
    monkeypatch.setattr(store.fs, "cat_file", lambda path: (_ for _ in ()).throw(FileNotFoundError))
    with pytest.raises(FileNotFoundError):
        store.get("a")
    assert slept == [0.25, 0.5]  # a missing file is an answer, not a failure
