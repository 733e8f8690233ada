"""The chaos harness's own faults, beyond the crash drivers the CI tests share
(``tests/integration/crash_driver.py``): ZooKeeper stopped during a recovery, and one
supervisor cut off (frozen) for a while.

Both reuse ``SupervisorLossDriver``'s choice of victims (nodes 1, 2, ... under the
elastic scheduler, never node0, whose supervisor runs the spout, op1, the relay and
the controller) and its timings (declared lost, restored, applying again), and only
change what happens to the victim.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from crash_driver import SupervisorLossDriver

from elastorm.runtime.errors import UserError
from elastorm.runtime.outcome import Outcome


class ZooKeeperOutageDriver(SupervisorLossDriver):
    """kill -9 of one supervisor with its workers, then the project's ZooKeeper stopped
    right away (SIGTERM, as ``elastorm cluster down`` stops it) and started again
    ``outage`` s later, while the controller recovers the lost node's key groups.

    The controller's decisions wait for ZooKeeper (its store holds them and flushes
    them when it is back), every task's session may expire meanwhile, and Storm's own
    daemons lose ZooKeeper too. The driver blocks during the outage (its own reads of
    the controller's status need ZooKeeper), so the timings it records start at the
    kill and include the outage.
    """

    def __init__(self, limit: int | None = None, outage: float = 10.0, **kwargs: Any) -> None:
        super().__init__(limit, lose=1, **kwargs)
        self.outage = outage
        self.outages: list[dict[str, float]] = []

    def _kill(self, victims: list[int]) -> list[int]:
        from elastorm.runtime import services
        from elastorm.runtime.config import load_config

        groups = super()._kill(victims)
        cfg = load_config()
        began = time.monotonic()
        if not services.stop(cfg, "zookeeper"):
            raise UserError("the project's ZooKeeper was not running: nothing to stop")
        stopped = time.monotonic() - began
        time.sleep(max(0.0, self.outage - stopped))
        services.ensure_zookeeper(cfg)
        if self._client is not None:  # the driver's own client reconnects on its own
            deadline = time.monotonic() + 60
            while not self._client.connected and time.monotonic() < deadline:
                time.sleep(0.1)
        answered = time.monotonic() - began
        self.outages.append({"stopped": round(stopped, 2), "answering": round(answered, 2)})
        return groups

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | {"outages": self.outages})


class FrozenSupervisorDriver(SupervisorLossDriver):
    """One supervisor, its workers and their Python processes cut off for ``cut`` s,
    then back: SIGSTOP of its whole process group, SIGCONT ``cut`` s later.

    This stands in for a network partition; it is not one. Like a cut network, it
    closes no connection (the kernel keeps the stopped processes' sockets open), so the
    controller finds the node lost only when its ZooKeeper sessions end, and the node
    comes back later with stale ownership: its tasks must find their fences and exit
    (Storm restarts them empty) instead of applying what was queued for them. Unlike a
    cut network, the frozen tasks do nothing meanwhile (a cut-off task would keep
    applying the tuples already in its queue).
    """

    def __init__(self, limit: int | None = None, cut: float = 30.0, **kwargs: Any) -> None:
        super().__init__(limit, lose=1, **kwargs)
        self.cut = cut
        self.frozen: list[dict[str, Any]] = []

    def _kill(self, victims: list[int]) -> list[int]:
        groups = self._process_groups(victims)
        for group in groups:
            os.killpg(group, signal.SIGSTOP)

        def thaw() -> None:
            for group in groups:
                try:
                    os.killpg(group, signal.SIGCONT)
                except ProcessLookupError:
                    pass

        timer = threading.Timer(self.cut, thaw)  # not a daemon: it fires even on failure
        timer.start()
        self.frozen.append({"tasks": victims, "groups": groups, "at": time.time()})
        return groups

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | {"frozen": self.frozen})
