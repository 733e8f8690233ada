"""A hung controller process ends itself, so a standby takes over instead of a silent stall.

Chaos ``durable-2`` run 1 at a657153 (load average 114-179 on 2 cores): after three
op2 tasks were lost in 15 s and restarted, the leading controller logged nothing for
11 minutes, ordered nothing and reported nothing stuck, while its ZooKeeper session
(kept by kazoo's own thread) stayed alive, so its standby never led and the job
stayed 941 flights short (``docs/raw/chaos_s17_a657153_durable2_run1_logs.txt``). A
controller handles a tuple at least every tick (1 s); one that has handled none for
``elastorm.controller.watchdog_secs`` is hung. The watchdog then writes every thread's
stack to a file beside the worker's and to the log, and exits the process: Storm
restarts the worker, and the standby leads once the old session ends (the path chaos
``lose-1-ctl`` tests). The exit does not wait on the log: a process blocked writing
to Storm could block its logging too.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

EXIT_HUNG = 76  # the process's exit status when the watchdog ends it


def stacks() -> str:
    """Every thread's current stack, as text."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f"thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}"
        for ident, frame in sys._current_frames().items()
    )


class Watchdog:
    """Calls ``on_hung(idle_secs)`` once no :meth:`beat` came for ``limit`` seconds."""

    def __init__(
        self,
        limit: float,
        on_hung: Callable[[float], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.on_hung = on_hung
        self.clock = clock
        self.last = clock()

    def beat(self) -> None:
        """The watched thread made progress."""
        self.last = self.clock()

    def check(self) -> bool:
        """Whether the watched thread is hung now; calls ``on_hung`` if so."""
        idle = self.clock() - self.last
        if idle < self.limit:
            return False
        self.on_hung(idle)
        return True

    def start(self) -> None:
        """Check on a daemon thread, a few times per ``limit``, until it fires."""

        def run() -> None:
            while not self.check():
                time.sleep(max(0.5, min(5.0, self.limit / 4)))

        threading.Thread(target=run, name="elastorm-watchdog", daemon=True).start()


def exit_hung(what: str, dump_dir: Path, limit: float) -> Callable[[float], None]:
    """The ``on_hung`` of a process that must end when hung: stacks to
    ``dump_dir/<what>-hung-<pid>.txt`` and the log, then ``os._exit`` within 5 s even if
    logging blocks."""

    def on_hung(idle: float) -> None:
        text = stacks()
        path = dump_dir / f"{what}-hung-{os.getpid()}.txt"
        try:
            path.write_text(text)
        except OSError:
            path = Path("(not written)")
        timer = threading.Timer(5.0, os._exit, args=(EXIT_HUNG,))
        timer.daemon = True
        timer.start()
        log.critical(
            "%s: no tuple handled for %.0f s (elastorm.controller.watchdog_secs = %s): "
            "exiting so Storm restarts it and a standby leads; stacks in %s:\n%s",
            what, idle, limit, path, text,
        )  # fmt: skip
        os._exit(EXIT_HUNG)

    return on_hung
