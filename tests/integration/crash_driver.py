"""The elastic flights job with a keyed task killed mid-migration: only the crash test
(``test_storm_crash.py``) runs it, so it lives with the tests, not in ``src/``."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from elastorm.runtime.drivers import ElasticFlightsDriver
from elastorm.runtime.errors import UserError
from elastorm.runtime.outcome import Outcome


class ElasticCrashDriver(ElasticFlightsDriver):
    """The elastic flights job with a task killed (``kill -9`` of its Python process)
    in the middle of a migration, on a real cluster.

    Every executor runs in a worker of its own so the kill takes down exactly one
    task, as a crashed process would; Storm
    restarts that worker and the task comes back empty. The controller restores
    its key groups from their checkpoint holders and the emitters' buffers. The run
    passes if every plane's totals still equal pandas'.
    """

    name = "flights_elastic"
    DEFAULT_SCRIPT = ((0.15, "cpa"), (0.3, "crash"), (0.7, "direct"))
    # Tuples in flight to the killed task reach its new, empty life and are rejected;
    # they are replayed from the emitters' buffers to the group's new owner.
    tolerated = {"op2": {"rejected"}}

    def __init__(self, limit: int | None = None, victim: str = "source", **kwargs: Any) -> None:
        super().__init__(limit, script=self.DEFAULT_SCRIPT, **kwargs)
        if victim not in ("source", "target"):
            raise ValueError("victim must be 'source' or 'target'")
        self.victim = victim
        self.kills: list[dict[str, Any]] = []

    def options(self, output_dir: str) -> dict[str, object]:
        self.output_dir = output_dir
        # Nimbus here schedules with the EvenScheduler, which spreads executors
        # round-robin over topology.workers: as many workers as executors puts each
        # executor in a worker of its own (no ackers: the job does not ack).
        return super().options(output_dir) | {
            "topology.workers": self.executors(),
            "topology.acker.executors": 0,
        }

    @staticmethod
    def executors() -> int:
        """Executors of the elastic flights topology (one task each)."""
        import importlib.util

        path = os.path.join(
            os.path.dirname(__file__), "..", "..", "topologies", "flights_elastic.py"
        )
        spec = importlib.util.spec_from_file_location("flights_elastic_topology", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        topology = module.FlightsElasticTopology
        return sum(c.common.parallelism_hint for c in topology.specs)

    def _migrate(self, index: int, protocol: str) -> dict[str, Any]:
        if protocol != "crash":
            return super()._migrate(index, protocol)
        return self._kill_mid_migration(index)

    def _kill_mid_migration(self, index: int) -> dict[str, Any]:
        import signal

        from elastorm.controller.requests import MigrationRequest, RequestState
        from elastorm.core.messages import Protocol
        from elastorm.runtime.migrate import connect, wait_until_movable
        from elastorm.zk.layout import ZnodeLayout
        from elastorm.zk.requests import read_request, submit_request

        if self._client is None:
            self._client = connect(self.zk_hosts)
        group = (index * 7 + 3) % self.key_groups
        status = wait_until_movable(
            self._client,
            self.topology,
            "sum_delays",
            group,
            assisted=True,
            timeout=self.migration_timeout,
        )
        # A CPAL can complete in 20-30 ms, faster than a kill lands once the request
        # reads "started" (seen on a loaded machine). So the victim is frozen first: a
        # frozen end cannot report MigrationDone, and the kill is mid-migration for sure.
        victim = status["owners"][group] if self.victim == "source" else status["holders"][group]
        pid = self._pid_of("sum_delays", int(victim))
        os.kill(pid, signal.SIGSTOP)
        try:
            request = MigrationRequest(
                operator="sum_delays", key_group=group, target="holder", protocol=Protocol.CPAL
            )
            name = submit_request(self._client, ZnodeLayout(self.topology), request)
            deadline = time.monotonic() + self.migration_timeout
            while (
                current := read_request(self._client, ZnodeLayout(self.topology), name)
            ).state in (RequestState.PENDING,):
                if time.monotonic() > deadline:
                    raise UserError(f"request {name} never started")
                time.sleep(0.02)
            if current.state not in (RequestState.STARTED, RequestState.STUCK):
                raise UserError(f"request {name}: {current.state.value} ({current.detail})")
            if int(victim) not in (current.source, current.target):
                raise UserError(f"request {name} moved task {current.source} -> {current.target}")
        finally:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        # Refused once the restarted task reports and its groups are restored; reported
        # stuck meanwhile if that takes longer than elastorm.migration_timeout_secs.
        while (current := read_request(self._client, ZnodeLayout(self.topology), name)).state in (
            RequestState.STARTED,
            RequestState.STUCK,
        ):
            if time.monotonic() > deadline + self.migration_timeout:
                raise UserError(f"request {name} neither done nor refused after the kill")
            time.sleep(0.1)
        restored_at = time.time()
        self.kills.append({"task": victim, "pid": pid, "group": group})
        return {
            "group": group,
            "asked": f"cpal, then kill -9 of the {self.victim} (task {victim}, pid {pid})",
            "used": "crash",
            "state": current.state.value,
            "source": current.source,
            "target": current.target,
            "ms": None,
            "detail": f"{current.detail}; answered {restored_at - killed_at:.1f} s after the kill",
            "epoch": status["epoch"],
        }

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | {"kills": self.kills})

    def _pid_of(self, component: str, task: int) -> int:
        path = os.path.join(self.output_dir, "counts", f"{component}-{task}.json")
        with open(path, encoding="utf-8") as fh:
            return int(json.load(fh)["pid"])

    def _migrations_ok(self) -> bool:
        # The crash step ends "refused" on purpose: its group was restored instead.
        crashed = [m for m in self.migrations if m["used"] == "crash"]
        others = [m for m in self.migrations if m["used"] != "crash"]
        return (
            len(self.migrations) == self.scripted
            and bool(crashed)
            and all(m["state"] == "refused" for m in crashed)
            and all(m["state"] == "done" and m["used"] == m["asked"] for m in others)
        )


class NodeLossDriver(ElasticCrashDriver):
    """The elastic flights job with ``lose`` op2 tasks killed at once, with their worker
    JVMs (kill -9 of both, as a dead node takes them), at 30% of the input.

    Nothing is migrating then. The controller must declare them lost from ZooKeeper
    (their sessions end) and restore their key groups on the tasks holding their
    checkpoints, without waiting for Storm to restart the workers. The victims are
    chosen so every group they own has its checkpoint on a survivor (one checkpoint
    per group: losing an owner and its holder together loses that group's state, which
    the fault zones of the placement are there to prevent). Passes if every plane's
    totals still equal pandas'.
    """

    def __init__(self, limit: int | None = None, lose: int = 1, **kwargs: Any) -> None:
        ElasticFlightsDriver.__init__(self, limit, script=((0.3, f"lose{lose}"),), **kwargs)
        self.victim = "node"
        self.lose = lose
        self.kills = []
        self.losses: list[dict[str, Any]] = []

    def _migrate(self, index: int, protocol: str) -> dict[str, Any]:
        from elastorm.runtime.migrate import connect, wait_for_status

        if self._client is None:
            self._client = connect(self.zk_hosts)
        status = wait_for_status(self._client, self.topology, "sum_delays", 60)
        victims = self._victims(status)
        pids = []
        for task in victims:
            pid = self._pid_of("sum_delays", task)
            pids += [_parent(pid), pid]
        killed_at = time.monotonic()
        for pid in pids:
            os.kill(pid, 9)
        while True:  # restored: no group owned by a dead task any more
            status = wait_for_status(self._client, self.topology, "sum_delays", 60)
            if not set(status["owners"]) & set(victims):
                break
            if time.monotonic() - killed_at > self.migration_timeout:
                raise UserError(f"groups of tasks {victims} not restored after the kill")
            time.sleep(0.05)
        seconds = time.monotonic() - killed_at
        self.kills.append({"tasks": victims, "pids": pids})
        self.losses.append({"tasks": victims, "restored_seconds": round(seconds, 2)})
        return {
            "group": None,
            "asked": f"kill -9 of tasks {victims} with their workers",
            "used": "lost",
            "state": "restored",
            "source": None,
            "target": None,
            "ms": round(seconds * 1000),
            "detail": f"every group restored {seconds:.2f} s after the kill",
            "epoch": status["epoch"],
        }

    def _victims(self, status: dict[str, Any]) -> list[int]:
        """``lose`` tasks none of which holds the checkpoint of a group another owns."""
        import itertools

        owners, holders = status["owners"], status["holders"]
        for combo in itertools.combinations(sorted(set(owners)), self.lose):
            if all(holders[g] not in combo for g, o in enumerate(owners) if o in combo):
                return list(combo)
        raise UserError(f"no {self.lose} tasks whose groups' checkpoints are all elsewhere")

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | {"losses": self.losses})

    def _migrations_ok(self) -> bool:
        return len(self.migrations) == self.scripted and all(
            m["state"] == "restored" for m in self.migrations
        )


def _parent(pid: int) -> int:
    """The parent process of ``pid`` (a ShellBolt's subprocess: its worker JVM)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])
