"""One user at a time of a configuration's fixed ports on this machine.

Storm's and ZooKeeper's ports are fixed in ``config.json``: two checkouts running
cluster work at once on the same ports share one cluster without knowing it (one
attaches to the other's ZooKeeper or Nimbus, and same-second topology names collide:
session 31's two CIs, where one's ``sparse submit -f`` killed the other's topology).
A long-running user (the test suite, the chaos harness) holds this lock for its
whole run; a second one stops at once, naming the holder.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig


def lock_path(cfg: ElastormConfig) -> Path:
    """The machine-wide lock file of ``cfg``'s ZooKeeper port (its other ports go with it)."""
    return Path(f"/tmp/elastorm-ports-{cfg.zookeeper_port}.lock")


@contextmanager
def hold_ports(cfg: ElastormConfig, what: str) -> Iterator[None]:
    """Hold the lock of ``cfg``'s ports while the block runs; ``UserError`` at once if
    another process holds it (the message names it: ``what``, pid and home)."""
    path = lock_path(cfg)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise UserError(
                f"ZooKeeper port {cfg.zookeeper_port} is in use by another run ({holder}; "
                f"lock {path}): wait for it, or give this checkout other ports in "
                "config.json"
            ) from None
        handle.truncate(0)
        handle.write(f"{what}, pid {os.getpid()}, home {cfg.home}\n")
        handle.flush()
        yield
