"""The durable checkpoint store interface (Kwon et al. 2008): a flat file system seen by path.

A backend is a thin adapter that stores whole files under relative, ``/``-separated
paths; it decides nothing. Every file the durable format writes has a unique name
and is never overwritten (the newest manifest is the one with the highest
checkpoint in its name), so a backend needs only two promises, both easy on a
local directory and on HDFS:

- ``put`` is all-or-nothing: a reader sees the whole file or no file at that path
  (write a temporary, then rename it to the final, fresh name);
- ``list`` shows a file only once its ``put`` has returned.

Backends: ``elastorm.durable.local`` (``file://``, the default) and
``elastorm.durable.webhdfs`` (``hdfs://`` / ``webhdfs://``), each exposing
``open_store(uri: str) -> DurableStore`` (``uri`` is the topology's root, as made by
:func:`resolve_uri`); :func:`open_store` picks one by scheme.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

#: Backend module (in this package) by URI scheme; each defines ``open_store(uri)``.
BACKENDS: dict[str, str] = {
    "file": "elastorm.durable.local",
    "hdfs": "elastorm.durable.webhdfs",
    "webhdfs": "elastorm.durable.webhdfs",
}


class StoreError(OSError):
    """The store failed to do an operation (unreachable, refused, I/O error): retry later."""


@runtime_checkable
class DurableStore(Protocol):
    """Whole files under relative paths (``operator/g00003/base-...``) below the URI's root.

    Paths are relative, ``/``-separated, with no empty, ``.`` or ``..`` segment;
    parent directories are created as needed. Names starting with ``.`` are reserved
    for a backend's temporaries and are never returned by :meth:`list`.
    Failures of the store itself raise :class:`StoreError`.
    """

    @property
    def uri(self) -> str:
        """Where the store lives (``file:///...``, ``hdfs://host:port/...``), for logs."""
        ...

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path``, all or nothing; replaces a file already there."""
        ...

    def get(self, path: str) -> bytes:
        """The whole file at ``path``; ``FileNotFoundError`` if there is none."""
        ...

    def list(self, directory: str) -> list[str]:
        """Sorted names of the files directly in ``directory`` (``[]`` if it does not exist)."""
        ...

    def delete(self, path: str) -> None:
        """Remove the file at ``path``; a missing file is not an error."""
        ...


def check_path(path: str) -> str:
    """Return ``path`` if it is a valid store path, else raise ``ValueError`` (for backends)."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"bad store path {path!r}: relative, '/'-separated, no empty/./.. parts")
    return path


class Within:
    """The part of ``store`` under ``prefix``, itself a :class:`DurableStore`: a
    submission's directory (``<topology root>/<storm id>``) seen as a store of its own."""

    def __init__(self, store: DurableStore, prefix: str) -> None:
        self.store, self.prefix = store, check_path(prefix)

    @property
    def uri(self) -> str:
        return f"{self.store.uri.rstrip('/')}/{self.prefix}"

    def put(self, path: str, data: bytes) -> None:
        self.store.put(f"{self.prefix}/{check_path(path)}", data)

    def get(self, path: str) -> bytes:
        return self.store.get(f"{self.prefix}/{check_path(path)}")

    def list(self, directory: str) -> list[str]:
        return self.store.list(f"{self.prefix}/{check_path(directory)}")

    def delete(self, path: str) -> None:
        self.store.delete(f"{self.prefix}/{check_path(path)}")


HOME_DIR = ".elastorm"
"""The elastorm home a process resolves a bare ``file://`` in, relative to its directory."""

DEFAULT_URI = "file://"
"""``elastorm.durable.uri``'s default: :func:`file_root` of the elastorm home."""


def file_root(home: str) -> str:
    """The store a bare ``file://`` means: ``<home>/durable`` (``home`` absolute).

    >>> file_root("/p/.elastorm/")
    'file:///p/.elastorm/durable'
    """
    return f"file://{home.rstrip('/')}/durable"


def resolve_uri(uri: str, *, home: str, topology: str) -> str | None:
    """The root of a topology's store (its own directory under ``uri``; each submission
    writes below it, in ``<storm id>/``: ``elastorm.durable.submissions``): ``None`` for
    ``none`` (no durable tier); a bare ``file://`` means ``file://<home>/durable``
    (``home`` absolute). ``resolve_uri("hdfs://nn:9870/elastorm", home=..., topology="t")``
    is ``hdfs://nn:9870/elastorm/t``."""
    if uri == "none":
        return None
    if uri == DEFAULT_URI:
        uri = file_root(home)
    return f"{uri.rstrip('/')}/{check_path(topology)}"


def topology_store(uri: str, *, home: str, topology: str) -> DurableStore | None:
    """The open store of ``topology`` for the option value ``uri`` (:func:`resolve_uri`);
    ``None`` when the durable tier is off."""
    root = resolve_uri(uri, home=home, topology=topology)
    return None if root is None else open_store(root)


def open_store(uri: str) -> DurableStore:
    """Open the backend for ``uri`` by its scheme (``file://``, ``hdfs://``, ``webhdfs://``)."""
    scheme = urlsplit(uri).scheme
    if scheme not in BACKENDS:
        raise ValueError(f"durable store {uri!r}: scheme must be one of {sorted(BACKENDS)}")
    backend = importlib.import_module(BACKENDS[scheme])
    return backend.open_store(uri)
