"""The controller's watchdog (``elastorm.storm.watchdog``): a process that handles no
tuple for its limit is hung and ends itself (chaos durable-2 run 1 at a657153: a
leader silent for 11 minutes, its standby never leading)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from elastorm.storm.watchdog import EXIT_HUNG, Watchdog, stacks


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_it_fires_only_after_the_limit_without_a_beat() -> None:
    clock, fired = Clock(), []
    dog = Watchdog(120.0, fired.append, clock)
    for t in (30.0, 90.0, 200.0, 300.0):  # beats keep it quiet
        clock.now = t
        assert not dog.check()
        dog.beat()
    clock.now = 419.0
    assert not dog.check() and fired == []
    clock.now = 420.0
    assert dog.check() and fired == [120.0]


def test_the_stacks_name_every_thread() -> None:
    text = stacks()
    assert "thread MainThread:" in text and "test_the_stacks_name_every_thread" in text


def test_a_hung_process_writes_its_stacks_and_exits(tmp_path) -> None:
    # A real process whose main thread blocks forever: the watchdog ends it.
    script = textwrap.dedent(
        f"""
        import threading, time
        from pathlib import Path
        from elastorm.storm.watchdog import Watchdog, exit_hung
        Watchdog(0.5, exit_hung("controller", Path({str(tmp_path)!r}), 0.5)).start()
        threading.Event().wait()  # hung
        """
    )
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, timeout=60, capture_output=True)
    assert proc.returncode == EXIT_HUNG, proc.stderr
    (dump,) = tmp_path.glob("controller-hung-*.txt")
    assert "thread MainThread:" in dump.read_text()
