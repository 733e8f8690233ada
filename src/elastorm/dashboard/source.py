"""The dashboard's reads (I/O): ZooKeeper through ``elastorm.zk``, Nimbus through
``elastorm.runtime.nimbus``, the controller's figures in ZooKeeper; one :class:`Snapshot`
every ``interval`` seconds, folded by a :class:`Tracker` into the latest view.

It only reads: a ``ClusterWatcher`` for the task znodes (watches, so a vanished
task shows at once), and per refresh one read of each operator's ``status``, its
``alive`` znode, the request board (new or unfinished requests only), the
store's checkpoint allocation, the scheduler's binding and the controller's rescale
progress. Nimbus is asked every ``storm_interval`` seconds on
a thread of its own, so a slow Nimbus never delays the page.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

from elastorm.controller.problems import TopologyFacts
from elastorm.controller.scaling import Binding, RescaleProgress
from elastorm.core.auth import Keyring
from elastorm.dashboard.view import LagLimits, Snapshot, Tracker, build_view
from elastorm.errors import UserError
from elastorm.zk.client import make_client
from elastorm.zk.layout import ZkSettings, ZnodeLayout
from elastorm.zk.problems import zk_facts
from elastorm.zk.reader import (
    CountingReads,
    RequestCache,
    controller_running,
    list_topologies,
    read_checkpoint_allocation,
    read_figures,
    read_operator_status,
    read_requests,
    read_routing_tables,
    read_scaling,
    status_operators,
)
from elastorm.zk.requests import ZK_ERRORS
from elastorm.zk.watcher import ClusterWatcher

log = logging.getLogger(__name__)

FACTS_EVERY = 2.0  # s between reads of the topology's problems in ZooKeeper


class DashboardSource:
    """Reads one topology every ``interval`` s on a daemon thread; ``view()`` is the latest
    view (thread-safe), ``wait_newer(seq)`` blocks until a newer one exists;
    ``lag_limits``: when the view highlights a key group's durable lag; ``keyring``: the
    topology's secret, which its actions write and sign with (reading needs none)."""

    def __init__(
        self,
        *,
        hosts: str,
        topology: str | None,
        interval: float = 0.5,
        nimbus: tuple[str, int] | None = None,
        storm_interval: float = 5.0,
        lag_limits: LagLimits | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        self.settings = ZkSettings(hosts=hosts, keyring=keyring)
        self.lag_limits = LagLimits() if lag_limits is None else lag_limits
        self.topology = topology
        self.interval = interval
        self.nimbus = nimbus
        self.storm_interval = storm_interval
        self.client = make_client(self.settings)
        self.reads = CountingReads(self.client)
        self.tracker = Tracker()
        self._cache = RequestCache()
        self._watcher: ClusterWatcher | None = None
        self._last_live: dict[int, Any] = {}
        self._departed: dict[int, Any] = {}
        self._view: dict[str, Any] | None = None
        self._storm: tuple[dict | None, str | None] = (
            None,
            "not asked yet" if nimbus else "no Nimbus to ask (-e none)",
        )
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._wake = threading.Event()  # an action changed ZooKeeper: read it now
        self._threads: list[threading.Thread] = []
        self.refresh_seconds = 0.0
        self._storm_facts: TopologyFacts | None = None  # Nimbus's part, from its thread
        self._zk_facts: TopologyFacts | None = None
        self._facts_at = -float("inf")

    # -- lifecycle

    def start(self) -> None:
        """Connect in the background and start reading; returns at once."""
        self.client.start_async()
        self._threads = [threading.Thread(target=self._run, name="dashboard-zk", daemon=True)]
        if self.nimbus is not None:
            self._threads.append(
                threading.Thread(target=self._run_storm, name="dashboard-nimbus", daemon=True)
            )
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(5)
        if self._watcher is not None:
            self._watcher.stop()
        self.client.stop()
        self.client.close()

    def refresh_now(self) -> None:
        """Read again at once, not at the next interval: an action the page asked for
        (a drain, a scale) has just changed what the page shows."""
        self._wake.set()

    # -- what the server reads

    def view(self) -> dict[str, Any] | None:
        with self._cond:
            return self._view

    def wait_newer(self, seq: int, timeout: float) -> dict[str, Any] | None:
        """The latest view once its ``seq`` exceeds ``seq`` (or after ``timeout``)."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._stop.is_set() or (self._view is not None and self._view["seq"] > seq),
                timeout,
            )
            return self._view

    # -- the loops

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self._refresh()
            except ZK_ERRORS as exc:
                log.warning("dashboard: ZooKeeper read failed (%r); retrying", exc)
            except Exception:
                log.exception("dashboard: refresh failed")
            self.refresh_seconds = time.monotonic() - began
            self._wake.wait(max(0.0, self.interval - self.refresh_seconds))
            self._wake.clear()

    def _pick_topology(self) -> str | None:
        if self.topology is None and self.client.connected:
            names = list_topologies(self.reads)
            if names:
                self.topology = names[-1]
                log.info("dashboard: showing topology %s (of %s)", self.topology, names)
        return self.topology

    def _refresh(self) -> None:
        topology = self._pick_topology()
        if topology is None:
            return
        if self._watcher is None:
            self._watcher = ClusterWatcher(
                layout=ZnodeLayout(topology), client=self.client, settings=self.settings
            )
            self._watcher.start()
        connected = self.client.connected
        statuses, controllers, requests, allocation, routing = {}, {}, [], None, {}
        figures = None
        binding, rescale = Binding(), RescaleProgress()
        if connected:
            for op in status_operators(self.reads, topology):
                status = read_operator_status(self.reads, topology, op)
                if status is not None:
                    statuses[op] = status
                    controllers[op] = controller_running(self.reads, topology, op)
            requests = read_requests(self.reads, topology, self._cache)
            layout = ZnodeLayout(topology)
            allocation = read_checkpoint_allocation(self.reads, layout)
            routing = read_routing_tables(self.reads, layout)
            binding, rescale = read_scaling(self.reads, layout)
            figures = read_figures(self.reads, topology)
        storm, storm_error = self._storm
        facts = self._facts(topology, connected)
        live = self._watcher.live()
        snap = Snapshot(
            topology=topology,
            at=time.time(),
            live=live,
            departed=self._departed_since(live),
            statuses=statuses,
            controllers=controllers,
            requests=requests,
            checkpoints=allocation,
            routing=routing,
            binding=binding,
            rescale=rescale,
            storm=storm,
            storm_error=storm_error,
            controller_metrics=figures,
            zk_connected=connected,
            zk_reads=self.reads.reads,
            facts=facts,
        )
        self.tracker.observe(snap)
        view = build_view(snap, self.tracker, limits=self.lag_limits)
        view["refresh_seconds"] = round(self.refresh_seconds, 4)
        with self._cond:
            self._view = view
            self._cond.notify_all()

    def _facts(self, topology: str, connected: bool) -> TopologyFacts | None:
        """What ``elastorm status`` reads of the topology's problems: Nimbus's part from the
        Nimbus thread, ZooKeeper's read again every ``FACTS_EVERY`` s."""
        now = time.time()
        storm = self._storm_facts
        if connected and now - self._facts_at >= FACTS_EVERY:
            try:
                self._zk_facts = zk_facts(self.client, TopologyFacts(topology=topology, now=now))
                self._facts_at = now
            except ZK_ERRORS as exc:
                log.warning("dashboard: problem facts not read (%r)", exc)
        if self._zk_facts is None:
            return storm
        if storm is None or storm.topology != topology:
            return replace(self._zk_facts, now=now)
        zk = self._zk_facts
        return replace(
            storm,
            now=now,
            elastic_state=zk.elastic_state,
            refusal=zk.refusal,
            start_failures=zk.start_failures,
            statuses=zk.statuses,
            controller_alive=zk.controller_alive,
        )

    def _departed_since(self, live: dict[int, Any]) -> dict[int, Any]:
        """Tasks seen live before and gone now, with their last record (what a lost
        task owned), until they are back; at most one entry per task id."""
        for task, record in self._last_live.items():
            if task not in live:
                self._departed[task] = record
        for task in live:
            self._departed.pop(task, None)
        self._last_live = dict(live)
        return dict(self._departed)

    def _run_storm(self) -> None:
        from elastorm.runtime.nimbus import cluster_summary, storm_facts

        host, port = self.nimbus
        while not self._stop.is_set():
            try:
                self._storm = (cluster_summary(host, port), None)
            except UserError as exc:
                self._storm = (None, str(exc))
            except Exception as exc:  # thrift errors of every kind: show, never crash
                self._storm = (None, f"{type(exc).__name__}: {exc}")
            if self.topology is not None and self._storm[0] is not None:
                try:
                    blank = TopologyFacts(topology=self.topology, now=time.time())
                    self._storm_facts = storm_facts(host, port, blank)
                except Exception as exc:  # the summary above still shows; facts stay as read
                    log.warning("dashboard: Nimbus's topology info not read (%r)", exc)
            self._stop.wait(self.storm_interval)
