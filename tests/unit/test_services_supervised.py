"""A supervised daemon (Nimbus) is started again when it exits after its start-up, as
Storm asks ("run under supervision"); one that fails its first start-up is not
restarted in a loop but fails at once, as an unsupervised one does. Real processes,
a stand-in daemon (a shell line) instead of a JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from elastorm.runtime.services import supervised


def test_a_daemon_that_exits_after_its_start_up_is_started_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    daemon = ["/bin/sh", "-c", f"echo run >> {runs}; exit 7"]
    proc = subprocess.Popen(
        supervised(daemon, "nimbus", grace=0, pause=0.1),
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while (runs.read_text().count("run") if runs.exists() else 0) < 3:
            assert time.monotonic() < deadline, "not started three times in 20 s"
            assert proc.poll() is None, "the supervising loop ended"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        stderr = proc.communicate()[1].decode()
    assert "nimbus exited with status 7; starting it again in 0.1 s" in stderr


def test_a_daemon_that_fails_its_first_start_up_is_not_restarted(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    daemon = ["/bin/sh", "-c", f"echo run >> {runs}; exit 3"]
    proc = subprocess.run(supervised(daemon, "nimbus", grace=30, pause=0.1), timeout=20)
    assert proc.returncode == 3
    assert runs.read_text().count("run") == 1


def test_stopping_the_session_stops_the_loop_and_the_daemon(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    daemon = ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"]
    proc = subprocess.Popen(supervised(daemon, "nimbus", grace=0), start_new_session=True)
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pidfile.read_text())
    os.killpg(proc.pid, signal.SIGTERM)  # what services.stop sends first
    assert proc.wait(timeout=10) != 0
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child):
        assert time.monotonic() < deadline, "the daemon outlived its supervising loop"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "Z"


def test_a_stop_waits_for_the_daemons_own_shutdown(tmp_path: Path) -> None:
    """``services.stop`` sends SIGTERM to the session, waits while the pid it started
    (the loop) lives, then SIGKILLs: the loop must live until the daemon has shut down,
    and not start it again (a Nimbus killed mid-shutdown kept its leader lock)."""
    runs, done = tmp_path / "runs", tmp_path / "done"
    daemon = [
        "/bin/sh", "-c",
        f"echo run >> {runs}; trap 'sleep 1; echo done > {done}; exit 0' TERM; "
        "while :; do sleep 0.05; done",
    ]  # fmt: skip
    proc = subprocess.Popen(
        supervised(daemon, "nimbus", grace=0, pause=0.1), start_new_session=True
    )
    deadline = time.monotonic() + 10
    while not runs.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)  # the daemon's trap is set
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None and not done.exists()  # still shutting down: still there
    assert proc.wait(timeout=10) == 143
    assert done.read_text() == "done\n" and runs.read_text().count("run") == 1
