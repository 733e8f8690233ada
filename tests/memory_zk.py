"""Enough of a kazoo client, in memory, for ``elastorm.zk.requests.RequestBoard`` and the
client side (submit, read, withdraw): a dict of znodes with versions. Unit and property
tests of the request lifecycle use it; integration tests talk to a real ZooKeeper."""

from __future__ import annotations

from types import SimpleNamespace

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError


class MemoryZk:
    connected = True

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.versions: dict[str, int] = {}
        self.ephemeral: set[str] = set()  # gone with the creator's session
        self._seq = 0

    def ensure_path(self, path: str) -> None:
        self.nodes.setdefault(path, b"")
        self.versions.setdefault(path, 0)

    def create(
        self, path: str, data: bytes = b"", *, sequence=False, makepath=False, ephemeral=False
    ) -> str:
        if sequence:
            self._seq += 1
            path = f"{path}{self._seq:010d}"
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path], self.versions[path] = data, 0
        if ephemeral:
            self.ephemeral.add(path)
        return path

    def get(self, path: str):
        if path not in self.nodes:
            raise NoNodeError()
        return self.nodes[path], SimpleNamespace(version=self.versions[path])

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        if path not in self.nodes:
            raise NoNodeError()
        if version != -1 and version != self.versions[path]:
            raise BadVersionError()
        self.nodes[path] = data
        self.versions[path] += 1

    def delete(self, path: str, version: int = -1) -> None:
        if version != -1 and version != self.versions.get(path):
            raise BadVersionError()
        del self.nodes[path], self.versions[path]

    def exists(self, path: str):
        return SimpleNamespace(version=self.versions[path]) if path in self.nodes else None

    def get_children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError()
        prefix = path.rstrip("/") + "/"
        return [
            p[len(prefix) :]
            for p in self.nodes
            if p.startswith(prefix) and "/" not in p[len(prefix) :]
        ]
