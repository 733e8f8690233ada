"""Test helpers: a copy of the project's configuration files to break, free ports, and
a loopback server that answers what a test needs (no real daemon)."""

from __future__ import annotations

import json
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


def copy_project(dest: Path) -> Path:
    """config.json and project.clj of the project, copied into ``dest`` (the Maven
    poms are package data of elastorm, not part of a project)."""
    for name in ("config.json", "project.clj"):
        shutil.copy(PROJECT / name, dest / name)
    return dest


def edit_config(project: Path, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to the parsed config.json of ``project`` and write it back."""
    raw = json.loads((project / "config.json").read_text())
    change(raw)
    (project / "config.json").write_text(json.dumps(raw))


def free_port() -> int:
    """A loopback port nothing listens on (in config.json's allowed range)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if 1024 <= port <= 65000:
            return port


@contextmanager
def serving(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback server calling ``handle`` on each connection; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                handle(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()
