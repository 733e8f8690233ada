"""The chaos harness's own faults, beyond the crash drivers the CI tests share
(``tests/integration/crash_driver.py``): ZooKeeper stopped during a recovery, one
supervisor frozen for a while, and one cut off the network for a while.

Both reuse ``SupervisorLossDriver``'s choice of victims (nodes 1, 2, ... under the
elastic scheduler, never node0, whose supervisor runs the spout, op1, the relay and
the controller) and its timings (declared lost, restored, applying again), and only
change what happens to the victim.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import threading
import time
from typing import Any

from crash_driver import SupervisorLossDriver, _daemon_name
from owners import stale_outputs

from elastorm.errors import UserError
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


class NetworkCutDriver(SupervisorLossDriver):
    """The supervisor in the cluster's network namespace (``elastorm cluster up
    --netns-supervisor I``, ``runtime/netns.py``) cut off the network for ``cut`` s:
    ``ip link set <veth> down`` at the inner end of its only link, then up.

    A real cut: the node's processes run on and keep every connection open, but nothing
    passes either way (the host side sees silence: ``netns.link_command``). The
    controller finds the node lost when its ZooKeeper sessions end and restores its
    groups elsewhere, while the cut-off tasks go on applying what was already in their
    queues and their outputs wait in the kernel's send buffers. When the
    link is back, TCP delivers what waited: the tuples to them and their outputs to the
    sink, until each task reaches ZooKeeper, reads its fence and exits. ``cuts``
    records, per cut, the node's tasks (``"<task>.<incarnation>"`` by role, as the
    sink names senders) and, in ``outcome``, what the sink received from them after
    every group they owned was restored elsewhere (``owners.stale_outputs``).
    """

    def __init__(self, limit: int | None = None, cut: float = 30.0, **kwargs: Any) -> None:
        super().__init__(limit, lose=1, **kwargs)
        self.cut = cut
        self.cuts: list[dict[str, Any]] = []

    def _inside(self) -> str:
        """The namespaced supervisor's daemon name (the only node this driver may cut)."""
        from elastorm.runtime.cluster import node_name
        from elastorm.runtime.config import load_config
        from elastorm.runtime.netns import namespaced_supervisor

        index = namespaced_supervisor(load_config())
        if index is None:
            raise UserError("no supervisor runs in a network namespace: up --netns-supervisor")
        return node_name(index)

    def _candidates(self, owners: list[int]) -> list[int]:
        inside = self._inside()
        return [
            t
            for t in super()._candidates(owners)
            if _daemon_name(os.getpgid(self._pid_of(self.operator, t))) == inside
        ]

    def _kill(self, victims: list[int]) -> list[int]:
        from elastorm.runtime.config import load_config
        from elastorm.runtime.netns import set_link

        groups = self._process_groups(victims)
        senders = self._senders(set(groups))
        cfg = load_config()
        plan = set_link(cfg, up=False)
        at = time.time()
        timer = threading.Timer(self.cut, lambda: set_link(cfg, up=True))
        timer.start()  # not a daemon: the link comes back even if the run fails
        self.cuts.append({"tasks": victims, "link": plan.ns_veth, "at": at, "senders": senders})
        return groups

    def _senders(self, groups: set[int]) -> dict[str, list[str]]:
        """The tasks running in process groups ``groups`` now, by role, named as the
        sink names senders (``"<task>.<incarnation>"``, from the sink's ``seen``)."""
        from bolts.flights import SEEN_PER_INCARNATION

        seen: dict[str, dict[str, int]] = {}
        for path in glob.glob(os.path.join(self.output_dir, "sink-*.json")):
            with open(path, encoding="utf-8") as fh:
                for role, by_task in json.load(fh).get("seen", {}).items():
                    seen.setdefault(role, {}).update(by_task)
        out: dict[str, list[str]] = {}
        for path in glob.glob(os.path.join(self.output_dir, "counts", "*.json")):
            with open(path, encoding="utf-8") as fh:
                counts = json.load(fh)
            try:
                inside = os.getpgid(int(counts["pid"])) in groups
            except (KeyError, ProcessLookupError):
                continue
            task = str(counts["task"])
            if inside and task in seen.get(counts["role"], {}):
                incarnation = seen[counts["role"]][task] // SEEN_PER_INCARNATION
                out.setdefault(counts["role"], []).append(f"{task}.{incarnation}")
        return out

    def outcome(self, output_dir: str) -> Outcome:
        from demos.flights_results import read_results

        out = super().outcome(output_dir)
        arrivals: dict[str, dict[str, dict[str, list[int]]]] = {}
        for sink in read_results(output_dir).sinks:
            for role, by_sender in sink.get("arrivals", {}).items():
                arrivals.setdefault(role, {}).update(by_sender)
        for cut, loss in zip(self.cuts, self.losses, strict=False):
            cut["stale_outputs"] = stale_outputs(
                arrivals, cut["senders"], cut["at"] + loss["restored"]
            )
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | {"cuts": self.cuts})
