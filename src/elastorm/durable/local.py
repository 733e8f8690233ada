"""The ``file://`` durable store: a directory (one machine, or a shared mount such as NFS).

A thin adapter: ``put`` writes a hidden temporary next to the file, fsyncs it and
renames it into place (``os.replace`` is atomic on POSIX), so a reader sees the whole
file or none; decisions live in ``elastorm.durable.format``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from elastorm.durable.store import DurableStore, StoreError, check_path


class LocalStore:
    """A :class:`~elastorm.durable.store.DurableStore` over the directory ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def uri(self) -> str:
        return self.root.resolve().as_uri()

    def _path(self, path: str) -> Path:
        return self.root / check_path(path)

    def put(self, path: str, data: bytes) -> None:
        target = self._path(path)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"{self.uri}: put {path}: {exc}") from exc

    def get(self, path: str) -> bytes:
        try:
            return self._path(path).read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StoreError(f"{self.uri}: get {path}: {exc}") from exc

    def list(self, directory: str) -> list[str]:
        try:
            entries = os.scandir(self._path(directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"{self.uri}: list {directory}: {exc}") from exc
        with entries:
            return sorted(e.name for e in entries if e.is_file() and not e.name.startswith("."))

    def delete(self, path: str) -> None:
        try:
            self._path(path).unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.uri}: delete {path}: {exc}") from exc


def open_store(uri: str) -> DurableStore:
    """A :class:`LocalStore` for ``file:///absolute/dir`` (``file://`` alone is an error here:
    the default directory is filled in by ``elastorm.durable.store.resolve_uri``)."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path:
        raise ValueError(f"durable store {uri!r}: expected file:///absolute/directory")
    return LocalStore(unquote(parts.path))
