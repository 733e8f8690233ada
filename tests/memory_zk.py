"""Enough of a kazoo client, in memory, for ``elastorm.zk.requests.RequestBoard`` and the
client side (submit, read, withdraw), and for a submission's claim and ``elastorm forget``
(``elastorm.zk.submission``): a dict of znodes with versions, ephemeral owners and
all-or-nothing transactions. Unit and property tests use it; integration tests talk to a
real ZooKeeper. Parents are checked only where ZooKeeper's checks matter to the callers:
``makepath`` creates them, ``delete`` refuses a znode with children."""

from __future__ import annotations

from types import SimpleNamespace

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)


class MemoryZk:
    connected = True

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.versions: dict[str, int] = {}
        self.owners: dict[str, int] = {}  # path -> session of an ephemeral znode
        self.session = 1
        self._seq = 0

    def ensure_path(self, path: str) -> None:
        self.nodes.setdefault(path, b"")
        self.versions.setdefault(path, 0)

    def create(
        self, path: str, data: bytes = b"", *, ephemeral=False, sequence=False, makepath=False
    ) -> str:
        if sequence:
            self._seq += 1
            path = f"{path}{self._seq:010d}"
        if path in self.nodes:
            raise NodeExistsError()
        if makepath:
            parts = path.split("/")
            for i in range(2, len(parts)):
                self.ensure_path("/".join(parts[:i]))
        self.nodes[path], self.versions[path] = data, 0
        if ephemeral:
            self.owners[path] = self.session
        return path

    def _stat(self, path: str) -> SimpleNamespace:
        return SimpleNamespace(version=self.versions[path], ephemeralOwner=self.owners.get(path, 0))

    def get(self, path: str):
        if path not in self.nodes:
            raise NoNodeError()
        return self.nodes[path], self._stat(path)

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        if path not in self.nodes:
            raise NoNodeError()
        if version != -1 and version != self.versions[path]:
            raise BadVersionError()
        self.nodes[path] = data
        self.versions[path] += 1

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if path not in self.nodes:
            raise NoNodeError()
        if recursive:
            for child in self.get_children(path):
                self.delete(f"{path}/{child}", recursive=True)
        elif self.get_children(path):
            raise NotEmptyError()
        if version != -1 and version != self.versions.get(path):
            raise BadVersionError()
        del self.nodes[path], self.versions[path]
        self.owners.pop(path, None)

    def exists(self, path: str):
        return self._stat(path) if path in self.nodes else None

    def transaction(self) -> MemoryTransaction:
        return MemoryTransaction(self)

    def get_children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError()
        prefix = path.rstrip("/") + "/"
        return [
            p[len(prefix) :]
            for p in self.nodes
            if p.startswith(prefix) and "/" not in p[len(prefix) :]
        ]


class MemoryTransaction:
    """kazoo's ``TransactionRequest``: the operations apply all or none; ``commit``
    returns one result per operation, the failed one's error and ``RolledBackError``
    for the others."""

    def __init__(self, zk: MemoryZk) -> None:
        self._zk = zk
        self._ops: list = []

    def create(self, path: str, value: bytes = b"") -> None:
        self._ops.append(lambda zk: zk.create(path, value))

    def delete(self, path: str, version: int = -1) -> None:
        self._ops.append(lambda zk: zk.delete(path, version=version))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._ops.append(lambda zk: zk.set(path, value, version=version))

    def check(self, path: str, version: int) -> None:
        def op(zk: MemoryZk) -> None:
            if path not in zk.nodes:
                raise NoNodeError()
            if zk.versions[path] != version:
                raise BadVersionError()

        self._ops.append(op)

    def commit(self) -> list:
        saved = (dict(self._zk.nodes), dict(self._zk.versions), dict(self._zk.owners))
        results: list = []
        for op in self._ops:
            try:
                results.append(op(self._zk))
            except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) as exc:
                self._zk.nodes, self._zk.versions, self._zk.owners = saved
                return (
                    [RolledBackError() for _ in results]
                    + [exc]
                    + [RolledBackError() for _ in self._ops[len(results) + 1 :]]
                )
        return results
