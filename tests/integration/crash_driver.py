"""The elastic flights job with a keyed task killed mid-migration: only the crash test
(``test_storm_crash.py``) runs it, so it lives with the tests, not in ``src/``."""

from __future__ import annotations

import glob
import json
import os
import threading
import time
from typing import Any

from demos.flights_results import read_results
from drivers.flights_elastic import ElasticFlightsDriver
from drivers.flights_join import JoinWindowDriver, read_join_sink
from elastorm.config import TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.outcome import Outcome


class FlightsJob(ElasticFlightsDriver):
    """The elastic flights job as the fault drivers below see it: which keyed operator
    they hit, its other components by role, and where its tasks' process ids, task ids,
    progress and input's end are read (the job's counts files and sinks).

    Every fault driver derives from this through ``ElasticCrashDriver``; another job
    (``bench/chaos_jobs.py``) puts a class of its own between them (``class
    X(NodeLossDriver, UserJob)`` with ``UserJob(FlightsJob)``: Python's method order
    puts it after the fault's classes and before this one), so one fault's code runs
    on every job."""

    #: Components a fault may kill, by role (``UpstreamKillDriver``'s victims).
    components = {"spout": "flights_spout", "op1": "extract_delays"}

    def executors(self) -> int:
        """Executors of the job's topology (one task each)."""
        import importlib.util

        path = os.path.join(os.path.dirname(__file__), "..", "..", "topologies", f"{self.name}.py")
        spec = importlib.util.spec_from_file_location(f"{self.name}_topology", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        topology = next(v for v in vars(module).values() if getattr(v, "thrift_bolts", None))
        return sum(c.common.parallelism_hint for c in topology.specs)

    def _pid_of(self, component: str, task: int) -> int:
        path = os.path.join(self.output_dir, "counts", f"{component}-{task}.json")
        with open(path, encoding="utf-8") as fh:
            return int(json.load(fh)["pid"])

    def _tasks(self, component: str) -> list[int]:
        """The task ids of ``component`` that have written a counts file."""
        counts = os.listdir(os.path.join(self.output_dir, "counts"))
        prefix = f"{component}-"
        # Not a file being replaced meanwhile (``<name>.json.tmp-<random>``).
        ours = (n for n in counts if n.startswith(prefix) and n.endswith(".json"))
        return [int(n[len(prefix) : -len(".json")]) for n in ours]

    def _input_ended_at(self) -> float | None:
        """When the last spout task read its last row (wall clock); None before."""
        spouts = read_results(self.output_dir).spouts
        if not spouts or not all(s.get("exhausted") for s in spouts):
            return None
        return max(float(s.get("exhausted_at", time.time())) for s in spouts)

    def _progress(self, status: dict[str, Any], groups: list[int], since: float) -> float | None:
        """Seconds from ``since`` (wall clock) until every group in ``groups`` had applied
        a tuple at its new owner after taking over (the owners' counts files say when);
        None while one has not yet."""
        latest = since
        for g in groups:
            path = os.path.join(
                self.output_dir, "counts", f"{self.operator}-{status['owners'][g]}.json"
            )
            try:
                with open(path, encoding="utf-8") as fh:
                    taken, first = json.load(fh)["extra"]["takeovers"][str(g)]
            except (OSError, KeyError, ValueError):
                return None
            if taken < since:
                return None  # an earlier takeover of the group
            latest = max(latest, first)
        return latest - since

    def _tentative_updates(self, output_dir: str) -> Any:
        """The sink's op2 updates still tentative at the end (made while state was
        recovering, Su & Zhou 2016)."""
        return read_results(output_dir).tentative_updates("op2")

    #: Wait for and check only the keyed operator (op2): set by a fault that kills the
    #: plain bolts beside it, which restart empty (no guarantee, docs/failures.md).
    keyed_only = False

    def wait(self, output_dir: str, timeout: float, progress: Any) -> None:
        """Every plane's totals (``ElasticFlightsDriver.wait``), or with
        :attr:`keyed_only` until op2's count every flight, none tentative (CI, session
        24: op3 stopped at 17,214 of 39,208 after every op2 task died and the run waited
        out its timeout)."""
        if not self.keyed_only:
            return super().wait(output_dir, timeout, progress)
        from demos.flights_reference import compute_reference

        want = sum(c for _, c in compute_reference(limit=self.limit).delay.values())
        deadline = time.monotonic() + timeout
        try:
            while True:
                result = read_results(output_dir)
                self.on_poll(result)
                counted = result.flights_in_totals("op2")
                progress(f"op2 totals count {counted} of {want} flights")
                if not self.script and counted == want and not result.still_tentative("op2"):
                    return
                if time.monotonic() > deadline:
                    raise UserError(f"op2 counts {counted} of {want} flights after {timeout:.0f} s")
                time.sleep(1.0)
        finally:
            self._close_client()

    def outcome(self, output_dir: str) -> Outcome:
        """Every plane against pandas, or with :attr:`keyed_only` op2 alone
        (``restart_driver.op2_outcome``)."""
        if not self.keyed_only:
            return super().outcome(output_dir)
        from restart_driver import op2_outcome

        result = read_results(output_dir)
        out = op2_outcome(self.limit, result.totals("op2"), result.still_tentative("op2"), "op2")
        return Outcome(summary=out.summary, ok=out.ok and self._migrations_ok(), facts=out.facts)


class ElasticCrashDriver(FlightsJob):
    """The elastic flights job with a task killed (``kill -9`` of its Python process)
    in the middle of a migration, on a real cluster.

    Every executor runs in a worker of its own so the kill takes down exactly one
    task, as a crashed process would; Storm
    restarts that worker and the task comes back empty. The controller restores
    its key groups from their checkpoint holders and the emitters' buffers. The run
    passes if every plane's totals still equal pandas'.
    """

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
        # Out of the elastic scheduler (it puts one task of each keyed operator per node
        # and the rest beside node0's), Storm's own scheduler spreads executors
        # round-robin over topology.workers: as many workers as executors puts each
        # executor in a worker of its own (no ackers: the job does not ack).
        return (
            super().options(output_dir)
            | TopologyConfig.overrides(elastic_scheduling=False)
            | {"topology.workers": self.executors(), "topology.acker.executors": 0}
        )

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
            self.operator,
            group,
            assisted=True,
            timeout=self.migration_timeout,
        )
        # A CPAL can complete in 20-30 ms, faster than a kill lands once the request
        # reads "started" (seen on a loaded machine). So the victim is frozen first: a
        # frozen end cannot report MigrationDone, and the kill is mid-migration for sure.
        victim = status["owners"][group] if self.victim == "source" else status["holders"][group]
        pid = self._pid_of(self.operator, int(victim))
        os.kill(pid, signal.SIGSTOP)
        try:
            request = MigrationRequest(
                operator=self.operator, key_group=group, target="holder", protocol=Protocol.CPAL
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
    JVMs (kill -9 of both, as a dead node takes them), at ``first`` of the input (30%),
    and again every ``every`` of it for ``rounds`` rounds (``bench/recovery.py``).

    Nothing is migrating then. The controller must declare them lost from ZooKeeper
    (their sessions end) and restore their key groups on the tasks holding their
    checkpoints, without waiting for Storm to restart the workers. The victims are
    chosen so every group they own has its checkpoint on a survivor (one checkpoint
    per group: losing an owner and its holder together loses that group's state, which
    the fault zones of the placement are there to prevent). Each round records, from
    the kill: ``detected`` (the controller's status lists them lost), ``restored`` (no
    group owned by a dead task, none still moving), ``progress`` (every restored group
    has applied a tuple at its new owner, by the owner's own clock) and, between
    rounds, ``back`` (Storm restarted them and they joined again); with
    ``with_controller``, also ``leading`` (another leader znode than the killed
    controller's: its standby's, or its own restart's). Passes if every plane's totals
    still equal pandas'.
    """

    def __init__(
        self,
        limit: int | None = None,
        lose: int = 1,
        rounds: int = 1,
        every: float = 0.12,
        first: float = 0.3,
        with_controller: bool = False,
        **kwargs: Any,
    ) -> None:
        script = tuple((first + i * every, f"lose{lose}") for i in range(rounds))
        ElasticFlightsDriver.__init__(self, limit, script=script, **kwargs)
        self.victim = "node"
        self.lose = lose
        self.with_controller = with_controller
        self.killed_leader: str | None = None  # with_controller: the controller killed
        self._killed_czxid: int | None = None  # and its leader znode
        self.kills = []
        self.losses: list[dict[str, Any]] = []

    def _migrate(self, index: int, protocol: str) -> dict[str, Any]:
        from elastorm.runtime.migrate import connect, wait_for_status

        if self._client is None:
            self._client = connect(self.zk_hosts)
        status = wait_for_status(self._client, self.topology, self.operator, 60)
        calm = time.monotonic() + self.migration_timeout
        # No kill while a restore is in flight (it still needs its source's checkpoint)
        # or before the victims' groups have their newest checkpoint on a survivor.
        while status["moving"] or not (victims := self._victims(status)):
            if time.monotonic() > calm:
                bare = [g for g, newest in enumerate(status["assisted"]) if not newest]
                raise UserError(
                    f"no {self.lose} tasks to kill: groups {status['moving']} moving, or "
                    "no tasks whose groups' newest checkpoints are all elsewhere (groups "
                    f"{bare} without one; owners {status['owners']}, holders "
                    f"{status['holders']}, lost {status.get('lost')})"
                )
            time.sleep(0.1)
            status = wait_for_status(self._client, self.topology, self.operator, 60)
        owned = [g for g, o in enumerate(status["owners"]) if o in victims]
        load = os.getloadavg()[0]  # the machine is shared: say how busy it was
        killed_at, killed_wall = time.monotonic(), time.time()
        pids = self._kill(victims)
        seen: dict[str, float] = {}
        while "progress" not in seen:
            status = wait_for_status(self._client, self.topology, self.operator, 60)
            now = time.monotonic() - killed_at
            if self.with_controller and "leading" not in seen and self._successor():
                seen["leading"] = now
            if "detected" not in seen and set(victims) <= set(status.get("lost", ())):
                seen["detected"] = now
            moving = set(status["moving"]) & set(owned)
            if "restored" not in seen and self._restored(status, victims, moving, seen):
                seen["restored"] = now
                seen.setdefault("detected", now)  # restored implies declared lost
            if "restored" in seen:
                progress = self._progress(status, owned, killed_wall)
                ended = None if progress is not None else self._input_ended_at()
                if ended is not None:
                    # The input ended: what the groups missed was replayed during the
                    # restore, and no new tuple will come to show them applying. Also
                    # when the restore ended just before the last row (CI at a6f5076:
                    # 50 ms before it, and the run waited for a tuple for 180 s).
                    progress = seen["after_input"] = max(seen["restored"], ended - killed_wall)
                if progress is not None:
                    seen["progress"] = progress
            if now > self.migration_timeout:
                raise UserError(
                    f"tasks {victims}: not restored and applying after the kill (reached "
                    f"{seen or 'nothing'}; groups {owned}: owners "
                    f"{[status['owners'][g] for g in owned]}, moving "
                    f"{sorted(set(status['moving']) & set(owned))}, lost {status.get('lost')})"
                )
            time.sleep(0.05)
        if len(self.losses) + 1 < self.scripted:  # another round follows: let them come back
            while set(victims) & set(status.get("lost", ())):
                if time.monotonic() - killed_at > self.migration_timeout + 120:
                    raise UserError(f"tasks {victims} never came back after the kill")
                time.sleep(0.2)
                status = wait_for_status(self._client, self.topology, self.operator, 60)
            seen["back"] = time.monotonic() - killed_at
        timings = {k: round(v, 3) for k, v in seen.items()}
        self.kills.append({"tasks": victims, "pids": pids})
        self.losses.append(
            {
                "tasks": victims,
                "groups": owned,
                "loadavg_1m": round(load, 1),
                **({"killed_leader": self.killed_leader} if self.with_controller else {}),
                **timings,
            }
        )
        return {
            "group": None,
            "asked": f"kill -9 of tasks {victims} with their workers",
            "used": "lost",
            "state": "restored",
            "source": None,
            "target": None,
            "ms": round(seen["restored"] * 1000),
            "detail": f"every group restored {seen['restored']:.2f} s after the kill",
            "epoch": status["epoch"],
        }

    def _kill(self, victims: list[int]) -> list[int]:
        """kill -9 of each victim's Python process and its worker JVM, and with
        ``with_controller`` the controller's too (the node that hosts it is lost with
        them: its successor resumes from ZooKeeper); the pids killed."""
        pids = []
        for task in victims:
            pid = self._pid_of(self.operator, task)
            pids += [_parent(pid), pid]
        if self.with_controller:
            from elastorm.zk.codec import decode_leader
            from elastorm.zk.layout import ZnodeLayout

            data, stat = self._client.get(ZnodeLayout(self.topology).leader)
            leader = decode_leader(data)
            self.killed_leader, self._killed_czxid = leader.controller, stat.czxid
            pids += [_parent(leader.pid), leader.pid]
        pids = list(dict.fromkeys(pids))  # Storm may have put two in one worker
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass  # died with its worker JVM, killed just before
        return pids

    def _successor(self) -> str | None:
        """The controller that leads now if its leader znode is not the one killed (a
        standby took over, or the killed one's restart did), else None."""
        from kazoo.exceptions import NoNodeError

        from elastorm.zk.codec import decode_leader
        from elastorm.zk.layout import ZnodeLayout

        try:
            data, stat = self._client.get(ZnodeLayout(self.topology).leader)
        except NoNodeError:
            return None
        if stat.czxid == self._killed_czxid:
            return None
        return decode_leader(data).controller

    def _victims(self, status: dict[str, Any]) -> list[int]:
        """``lose`` tasks whose groups all have their newest checkpoint on a task outside
        them (empty if there are none yet: just after a recovery, the re-placed holders
        still wait for their first checkpoint)."""
        import itertools

        owners, holders, newest = status["owners"], status["holders"], status["assisted"]
        for combo in itertools.combinations(self._candidates(owners), self.lose):
            mine = [g for g, o in enumerate(owners) if o in combo]
            if all(holders[g] not in combo and newest[g] for g in mine):
                return list(combo)
        return []

    def _candidates(self, owners: list[int]) -> list[int]:
        """The tasks that may be killed: any owner."""
        return sorted(set(owners))

    def _restored(
        self, status: dict[str, Any], victims: list[int], moving: set[int], seen: dict
    ) -> bool:
        """Whether the victims' groups are restored: none owned by a victim, none moving
        (``seen``: the times reached so far)."""
        return not set(status["owners"]) & set(victims) and not moving

    def outcome(self, output_dir: str) -> Outcome:
        """Adds ``losses`` and the sink's ``tentative_updates`` of op2 (updates made while
        state was recovering, Su & Zhou 2016; the run passes only if none is left)."""
        out = super().outcome(output_dir)
        tentative = self._tentative_updates(output_dir)
        facts = {"losses": self.losses, "tentative_updates": tentative}
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | facts)

    def _migrations_ok(self) -> bool:
        return len(self.migrations) == self.scripted and all(
            m["state"] == "restored" for m in self.migrations
        )


class WatchesDurableRestores:
    """A loss driver's mixin: after its kill, a watcher of the controller's status
    records every key group it shows restored by a ``durable`` migration (in flight or
    ended): ``facts["from_store"]``, and every ended restore: ``facts["restores"]``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.from_store: set[int] = set()  # key groups seen restored by a DURABLE move
        self.restores: dict[tuple[int, int], dict] = {}  # ended restores, by (group, epoch)
        self._watching = threading.Event()

    def _kill(self, victims: list[int]) -> list[int]:
        """The kill, then the watcher."""
        killed = super()._kill(victims)
        self._watching.set()
        threading.Thread(target=self._watch_durable, daemon=True).start()
        return killed

    def _watch_durable(self) -> None:
        from kazoo.exceptions import KazooException

        from elastorm.runtime.migrate import wait_for_status

        client = self._client  # the driver's, set to None once the run is waited for
        while self._watching.is_set() and self._client is client:
            try:
                status = wait_for_status(client, self.topology, self.operator, 10)
            except (UserError, KazooException):  # a loaded ZooKeeper drops the connection
                time.sleep(0.5)
                continue
            for m in (*status.get("migrations", ()), *status.get("ended", ())):
                if m.get("protocol") == "durable":
                    self.from_store.add(int(m["key_group"]))
            for e in status.get("ended", ()):
                if e["protocol"] in ("durable", "restore"):
                    self.restores[(e["key_group"], e["epoch"])] = e
            time.sleep(0.1)

    def outcome(self, output_dir: str) -> Outcome:
        """Adds ``from_store``: the key groups the controller restored from the store."""
        self._watching.clear()
        out = super().outcome(output_dir)
        facts = {"from_store": sorted(self.from_store), "restores": list(self.restores.values())}
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | facts)


class EveryTaskLossDriver(WatchesDurableRestores, NodeLossDriver):
    """Every op2 task killed at once (kill -9 of its Python process and worker JVM) while
    the controller lives, once the durable store (``uri``, absolute) has a set of every
    group: no copy in memory survives.

    The controller must declare them lost without dying (in session 23 its planner
    raised "every node failed") and keep their groups waiting; as Storm restarts the
    workers, each restarted task gets groups back from the store (onto itself, or
    another restarted task) and the emitters replay from the copies' positions.
    ``restored``: every victim recovered (none listed lost) and nothing moving. Passes
    if every plane's totals equal pandas'."""

    keyed_only = True  # flights: op3 and op4 die with node0's worker, restarting empty

    def __init__(self, limit: int | None = None, *, uri: str, **kwargs: Any) -> None:
        tasks = int(os.environ.get("ELASTORM_KEYED_TASKS", "3"))
        super().__init__(limit, lose=tasks, **kwargs)
        self.uri = uri
        self._store = None

    def options(self, output_dir: str) -> dict[str, object]:
        from elastorm.config import DurableConfig

        return super().options(output_dir) | DurableConfig.overrides(uri=self.uri)

    def _victims(self, status: dict[str, Any]) -> list[int]:
        """Every owner, once the store has a set of every group (empty until then)."""
        from elastorm.durable.store import topology_store
        from elastorm.durable.submissions import latest_view

        owners = status["owners"]
        if self._store is None:
            self._store = topology_store(self.uri, home="/", topology=self.topology)
        view = latest_view(self._store)
        stored = {} if view is None else view.newest_sets(self.operator, range(len(owners)))
        return sorted(set(owners)) if len(stored) == len(owners) else []

    def _restored(
        self, status: dict[str, Any], victims: list[int], moving: set[int], seen: dict
    ) -> bool:
        lost = set(status.get("lost", ()))
        return "detected" in seen and not moving and not set(victims) & lost

    def outcome(self, output_dir: str) -> Outcome:
        """The job's outcome (on flights: op2 alone, :attr:`FlightsJob.keyed_only`) and
        the groups restored from the store."""
        self._watching.clear()
        out = super().outcome(output_dir)
        facts = {"from_store": sorted(self.from_store)}
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | facts)


class ReplicaLossDriver(NodeLossDriver):
    """:class:`NodeLossDriver` with active replicas (Su & Zhou 2016): the controller plans
    a replica for ``budget`` op2 tasks (every one by default) and the ``lose`` tasks
    killed at once are ones whose every key group has a live replica on a survivor.
    Their groups must be promoted on the replicas (no restore from a checkpoint), and
    every plane's totals still equal pandas'. ``facts["promoted"]``: the groups that
    were replicated when the kill came."""

    def __init__(self, limit: int | None = None, *, budget: int = 99, **kwargs: Any) -> None:
        super().__init__(limit, **kwargs)
        self.budget = budget
        self.promoted: list[int] = []

    def options(self, output_dir: str) -> dict[str, object]:
        from elastorm.config import ControllerConfig

        return super().options(output_dir) | ControllerConfig.overrides(
            replication_budget=self.budget, warmup_secs=5.0, replan_secs=5.0
        )

    def _victims(self, status: dict[str, Any]) -> list[int]:
        """``lose`` tasks whose every group has a started replica on a task outside them."""
        import itertools

        owners, replicas = status["owners"], status.get("replicas", {})
        moving = set(status["moving"])
        for combo in itertools.combinations(sorted(set(owners)), self.lose):
            mine = [g for g, o in enumerate(owners) if o in combo]
            if all(
                str(g) in replicas and replicas[str(g)] not in combo and g not in moving
                for g in mine
            ):
                self.promoted = mine
                return list(combo)
        return []

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        try:
            with open(os.path.join(output_dir, "controller-metrics.json"), encoding="utf-8") as fh:
                metrics = json.load(fh)
        except (OSError, ValueError):
            metrics = {}
        facts = {
            "replicated": self.promoted,
            "recoveries": metrics.get("recoveries", []),
            "replication": metrics.get("replication"),
        }
        return Outcome(summary=out.summary, ok=out.ok, facts=out.facts | facts)


BEFORE = 10.0  # seconds of output before the kill that make the baseline rate
AFTER = 40  # one-second bins after the kill


def op2_counts(output_dir: str) -> dict[int, tuple[float, int, list[int], list[int]]]:
    """op2 task -> (written_at, outputs, owned groups, replicated groups) from its counts."""
    out = {}
    for path in glob.glob(os.path.join(output_dir, "counts", "sum_delays-*.json")):
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        extra = data.get("extra", {})
        task = int(path.rsplit("-", 1)[1].split(".")[0])
        owned, shadows = extra.get("owned", []), extra.get("replicas", [])
        out[task] = (float(data["written_at"]), int(extra.get("outputs", 0)), owned, shadows)
    return out


class Sampler(threading.Thread):
    """Reads the op2 counts every 0.25 s: per task, the outputs at each write."""

    def __init__(self, output_dir: str, until: float) -> None:
        super().__init__(daemon=True)
        self.output_dir, self.until = output_dir, until
        self.samples: dict[int, dict[float, int]] = {}  # task -> written_at -> outputs
        self.snapshot: dict[int, tuple[float, int, list[int], list[int]]] = {}

    def run(self) -> None:
        while time.time() < self.until:
            counts = op2_counts(self.output_dir)
            self.snapshot = counts
            for task, (at, outputs, _, _) in counts.items():
                self.samples.setdefault(task, {})[at] = outputs
            time.sleep(0.25)

    def rate_bins(self, since: float, until: float) -> list[float]:
        """Outputs per second in one-second bins over [since, until), summed over tasks;
        a task that restarted (its count fell) counts from its new life's start."""
        bins = [0.0] * max(0, int(until - since))
        for series in self.samples.values():
            points = sorted(series.items())
            for (_, n0), (t1, n1) in zip(points, points[1:], strict=False):
                grew = n1 - n0 if n1 >= n0 else n1
                i = int(t1 - since)
                if 0 <= i < len(bins):
                    bins[i] += grew
        return bins


class CompletenessDriver(ReplicaLossDriver):
    """For ``bench/replication_runtime.py``: the ``lose`` busiest op2 tasks (most outputs
    so far) whose groups all have their holder (a replica is its group's holder) on a
    survivor are killed, whatever the budget, so every arm loses the same kind of
    tasks and none loses state; op2's outputs are sampled from ``BEFORE`` s before the
    kill to ``AFTER`` s after it (:class:`Sampler`). The controller loop runs in every
    arm (``strategy=baseline``), so each writes its metrics."""

    def options(self, output_dir: str) -> dict[str, object]:
        from elastorm.config import ControllerConfig

        return super().options(output_dir) | ControllerConfig.overrides(strategy="baseline")

    def _victims(self, status: dict[str, Any]) -> list[int]:
        import itertools

        owners, holders = status["owners"], status["holders"]
        newest, moving = status["assisted"], set(status["moving"])
        replicas = status.get("replicas", {})
        busy = {t: c[1] for t, c in op2_counts(self.output_dir).items()}
        best: list[int] = []
        for combo in itertools.combinations(sorted(set(owners)), self.lose):
            mine = [g for g, o in enumerate(owners) if o in combo]
            ok = all(holders[g] not in combo and newest[g] and g not in moving for g in mine)
            if ok and sum(busy.get(t, 0) for t in combo) > sum(busy.get(t, 0) for t in best):
                best = list(combo)
        if best:
            mine = [g for g, o in enumerate(owners) if o in best]
            self.replicated_at_kill = {g: replicas[str(g)] for g in mine if str(g) in replicas}
            self.owners_at_kill = list(owners)
            self.sampler = Sampler(self.output_dir, time.time() + BEFORE + AFTER + 5)
            self.sampler.start()
            time.sleep(BEFORE)  # let the sampler see the baseline
            self.killed_at = time.time()
        return best


class SupervisorLossDriver(NodeLossDriver):
    """``NodeLossDriver`` with whole nodes lost: kill -9 of the supervisor daemons that
    run ``lose`` logical nodes, with every worker and Python process they launched (one
    process group each), under elastorm's elastic scheduler.

    The scheduler binds logical node ``i`` (the ``i``-th op2 task) to a supervisor and
    puts the spout, op1, op3, op4, the sink, the relay and the controller beside node0,
    which is never a victim: the victims are op2 tasks of nodes 1, 2, ... With
    ``lose`` > 1 the victims' nodes are one fault zone (``elastorm.fault_zones``), so
    the allocation keeps their groups' checkpoints on the survivors, as a rack's nodes
    would be configured. ``killed`` names the supervisors killed (the caller starts
    them again).
    """

    def __init__(self, limit: int | None = None, lose: int = 1, **kwargs: Any) -> None:
        super().__init__(limit, lose=lose, **kwargs)
        self.killed: list[str] = []

    def options(self, output_dir: str) -> dict[str, object]:
        from elastorm.controller.model import node_name

        self.output_dir = output_dir
        zones = {node_name(i): "rack" for i in range(1, self.lose + 1)} if self.lose > 1 else {}
        return super(ElasticCrashDriver, self).options(output_dir) | TopologyConfig.overrides(
            fault_zones=zones
        )

    def _candidates(self, owners: list[int]) -> list[int]:
        return sorted(set(owners))[1:]  # node0 runs everything else

    def _kill(self, victims: list[int]) -> list[int]:
        groups = self._process_groups(victims)
        names = [_daemon_name(g) for g in groups]
        for group in groups:
            os.killpg(group, 9)
        self.killed += names
        return groups

    def _process_groups(self, victims: list[int]) -> list[int]:
        """The process groups of the supervisors running ``victims`` (each launched by
        a supervisor of its own, never node0's)."""
        keep = os.getpgid(self._pid_of(self.operator, min(self._tasks(self.operator))))
        groups = sorted({os.getpgid(self._pid_of(self.operator, t)) for t in victims})
        names = [_daemon_name(g) for g in groups]
        if keep in groups or not all(n.startswith("supervisor-") for n in names):
            raise UserError(f"tasks {victims} do not run on supervisors of their own: {names}")
        return groups


class DurableLossDriver(WatchesDurableRestores, SupervisorLossDriver):
    """Two whole nodes lost at once, the owner *and* the checkpoint holder of the same
    key groups among them, so those groups survive only in the durable store
    (Kwon et al. 2008: checkpoints in a replicated DFS): ``uri`` is its
    ``elastorm.durable.uri`` (the project's HDFS in the test).

    Node2 is a fault zone of its own and every other node (``ELASTORM_KEYED_TASKS``
    of them) one zone, so node1's groups keep their checkpoints on node2 and the kill
    of nodes 1 and 2 leaves node1's groups with no copy in memory anywhere. The
    controller must restore them from the store (``DURABLE`` restores, counted in
    ``facts["from_store"]``) and the emitters replay from the positions the durable
    checkpoints name: every plane's totals still equal pandas'."""

    def __init__(self, limit: int | None = None, *, uri: str, **kwargs: Any) -> None:
        super().__init__(limit, lose=2, **kwargs)
        self.uri = uri
        self._store = None

    def options(self, output_dir: str) -> dict[str, object]:
        from elastorm.config import DurableConfig
        from elastorm.controller.model import node_name

        self.output_dir = output_dir
        nodes = int(os.environ.get("ELASTORM_KEYED_TASKS", "3"))
        zones = {node_name(i): "b" if i == 2 else "a" for i in range(nodes)}
        return (
            super(ElasticCrashDriver, self).options(output_dir)
            | TopologyConfig.overrides(fault_zones=zones)
            | DurableConfig.overrides(uri=self.uri)
        )

    def _victims(self, status: dict[str, Any]) -> list[int]:
        """The tasks of nodes 1 and 2 once every group they own has its newest checkpoint
        in memory on node0 or a set in the durable store, and at least one has its
        holder among them (empty until then)."""
        from elastorm.durable.store import topology_store
        from elastorm.durable.submissions import latest_view

        owners, holders, newest = status["owners"], status["holders"], status["assisted"]
        combo = self._candidates(owners)[:2]  # the tasks of nodes 1 and 2
        if len(combo) != 2 or status["moving"]:
            return []
        mine = [g for g, o in enumerate(owners) if o in combo]
        doubly = [g for g in mine if holders[g] in combo]
        if self._store is None:  # an hdfs:// uri: no home needed
            self._store = topology_store(self.uri, home="/", topology=self.topology)
        view = latest_view(self._store)  # this run's submission, once a keyed task started
        stored = {} if view is None else view.newest_sets(self.operator, doubly)
        ready = all(g in stored for g in doubly) and all(newest[g] for g in mine if g not in doubly)
        return combo if doubly and ready else []


class NameNodeOutageDriver(ElasticFlightsDriver):
    """The elastic flights job writing its durable checkpoints to the project's HDFS,
    with the NameNode stopped for ``outage`` s from ``at`` of the input (issue 29 (d)),
    or with ``datanode`` given, that DataNode killed for ``outage`` s instead (a
    replicated write goes on with the others: issue 29, item 5), and the scripted CPA
    and CPAL migrations during it.

    Processing and the in-memory checkpoints must go on (the migrations are
    checkpoint-assisted), the durable writes wait and are retried in order, and once
    the NameNode is back every key group's durable copy moves past the one it had
    before the stop. ``facts["durable"]``: per group, the newest durable checkpoint
    before the stop and at the end."""

    # s after the outage for every durable copy to move on (retries back off to 30 s)
    CATCH_UP = 120.0

    def __init__(
        self,
        limit: int,
        *,
        cfg: Any,
        outage: float = 20.0,
        at: float = 0.2,
        datanode: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(limit, script=((at + 0.05, "cpa"), (at + 0.1, "cpal")), **kwargs)
        from elastorm.runtime import hdfs

        self.cfg, self.outage, self.at, self.datanode = cfg, outage, at, datanode
        self.uri = hdfs.store_uri(cfg)
        self.before: dict[int, Any] = {}
        self.after: dict[int, Any] = {}
        self.stopped: dict[str, float] = {}
        self._thread: threading.Thread | None = None

    def options(self, output_dir: str) -> dict[str, object]:
        from elastorm.config import DurableConfig

        return super().options(output_dir) | DurableConfig.overrides(uri=self.uri)

    def _newest(self) -> dict[int, Any]:
        from elastorm.durable.store import topology_store
        from elastorm.durable.submissions import latest_view

        store = topology_store(self.uri, home="/", topology=self.topology)
        view = latest_view(store)  # this run's submission, once a keyed task started
        return {} if view is None else view.newest_sets(self.operator, range(self.key_groups))

    def _stop_namenode(self) -> None:
        from elastorm.runtime import hdfs

        began = time.monotonic()
        if self.datanode is None:
            hdfs.namenode(self.cfg, "stop")
        else:
            hdfs.datanode(self.cfg, "kill", self.datanode)
        self.stopped["stop"] = round(time.monotonic() - began, 3)
        time.sleep(max(0.0, self.outage - (time.monotonic() - began)))
        if self.datanode is None:
            hdfs.namenode(self.cfg, "start")
        else:
            hdfs.datanode(self.cfg, "start", self.datanode)
        self.stopped["down_secs"] = round(time.monotonic() - began, 3)

    def on_poll(self, result) -> None:
        if self._thread is None and result.spout_total("rows_read") >= self.at * self.limit:
            self.before = self._newest()
            self._thread = threading.Thread(target=self._stop_namenode, daemon=True)
            self._thread.start()
        super().on_poll(result)

    def wait(self, output_dir: str, timeout: float, progress) -> None:
        """The job's own wait, then, with the topology still running (its writers retry
        what the outage held back), until the NameNode is back and every group's durable
        copy moved past the one it had before the stop (at most ``CATCH_UP`` s)."""
        super().wait(output_dir, timeout, progress)
        if self._thread is not None:
            self._thread.join(timeout=180)  # a NameNode restart took 42 s in one CI run
        deadline = time.monotonic() + self.CATCH_UP
        while time.monotonic() < deadline:
            self.after = self._newest()
            if self.before and all(self.after.get(g, (0, 0)) > c for g, c in self.before.items()):
                return
            time.sleep(1.0)

    def outcome(self, output_dir: str) -> Outcome:
        """Adds ``durable`` and fails the run unless every group's durable copy moved on."""
        out = super().outcome(output_dir)
        after = self.after
        stale = sorted(g for g, c in self.before.items() if not after.get(g, (0, 0)) > c)
        what = "NameNode" if self.datanode is None else f"DataNode {self.datanode}"
        line = (
            f"{what} down {self.stopped.get('down_secs')} s; durable copies of "
            f"{len(self.before)} groups before it, "
            + (f"groups {stale} never written again" if stale else "every one written again")
        )
        facts = {"durable": {"before": self.before, "after": after}, "outage": self.stopped}
        ok = out.ok and bool(self.before) and not stale and "down_secs" in self.stopped
        return Outcome(summary=out.summary + "\n" + line, ok=ok, facts=out.facts | facts)


class UpstreamKillDriver(ElasticCrashDriver):
    """The elastic flights job with the spout's or op1's worker killed (kill -9 of its
    Python process and its worker JVM) at 30% of the input.

    Storm restarts the worker. A restarted spout resumes at the oldest restart point
    of op1's tasks; a restarted op1 resumes from its own restart point and asks the
    spout to replay. Tuples in flight to or from the dead task are lost on the way
    and come again in the replay; what had arrived is dropped downstream as a
    repeat. Passes if every plane's totals still equal pandas'.
    """

    replayed = True

    def __init__(self, limit: int | None = None, victim: str = "op1", **kwargs: Any) -> None:
        ElasticFlightsDriver.__init__(self, limit, script=((0.3, "kill"),), **kwargs)
        if victim not in self.components:
            raise ValueError(f"victim must be one of {sorted(self.components)}")
        self.victim = victim
        self.kills = []

    def _migrate(self, index: int, protocol: str) -> dict[str, Any]:
        component = self.components[self.victim]
        task = min(self._tasks(component))
        pid = self._pid_of(component, task)
        pids = [_parent(pid), pid]
        for each in pids:
            os.kill(each, 9)
        self.kills.append({"component": component, "task": task, "pids": pids})
        return {
            "group": None,
            "asked": f"kill -9 of {component} task {task} with its worker",
            "used": "kill",
            "state": "killed",
            "source": None,
            "target": None,
            "ms": None,
            "detail": f"pids {pids}",
            "epoch": None,
        }

    def _migrations_ok(self) -> bool:
        return len(self.migrations) == self.scripted and all(
            m["state"] == "killed" for m in self.migrations
        )


class WireLossDriver(ElasticFlightsDriver):
    """The elastic flights job with tuples lost on the wire between live workers.

    Storm drops tuples between live workers only in rare races (a worker reassigned
    while its peer sends: docs/failures.md), so the loss is injected
    (``elastorm.chaos.drop_tuples``, every ``every``-th from the ``start``-th), each
    numbered but never sent:

    - ``on="emitter"``: each op1 task loses ``drop`` of its data messages to op2,
      buffered; the rows still reach op3. op2's tasks see the sequence gaps and ask
      op1 to resend (``elastorm.resend_after_secs``).
    - ``on="spout"``: the spout loses ``drop`` of its rows to op1 (the link numbers
      skip). op1's tasks see the skips and ask the spout for a rewind; the other
      op1 task drops the rows replayed to it as repeats.

    Passes if every plane's totals still equal pandas' and the losses really
    happened and were recovered from. ``drop=0`` is the same job without loss (a
    baseline).
    """

    def __init__(
        self, limit: int | None = None, *, drop: int = 500, start: int = 2_000, every: int = 7,
        on: str = "emitter", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(limit, script=(), **kwargs)
        self.drop, self.start, self.every, self.on = drop, start, every, on

    def options(self, output_dir: str) -> dict[str, object]:
        self.output_dir = output_dir
        return super().options(output_dir) | TopologyConfig.overrides(
            chaos_drop_tuples=self.drop,
            chaos_drop_from=self.start,
            chaos_drop_every=self.every,
            chaos_drop_on=self.on,
        )

    def counts(self, component: str) -> dict[int, dict[str, Any]]:
        """Task -> the ``extra`` of its counts file."""
        out = {}
        for path in glob.glob(os.path.join(self.output_dir, "counts", f"{component}-*.json")):
            with open(path, encoding="utf-8") as fh:
                out[int(path.rsplit("-", 1)[1].split(".")[0])] = json.load(fh).get("extra", {})
        return out

    def outcome(self, output_dir: str) -> Outcome:
        base = super().outcome(output_dir)
        if self.on == "spout":
            return self._spout_outcome(base)
        op1 = {t: e.get("emitter", {}) for t, e in self.counts("extract_delays").items()}
        op2 = {t: e.get("resend_requests", 0) for t, e in self.counts("sum_delays").items()}
        lost = sum(h.get("wire_lost", 0) for h in op1.values())
        resent = sum(h.get("resent", 0) for h in op1.values())
        asked = sum(op2.values())
        wanted = self.drop * len(op1)
        line = (
            f"wire loss: op1 tasks {sorted(op1)} lost {lost} data messages on purpose "
            f"(want {wanted}); op2 asked for a resend {asked} times; op1 resent {resent} tuples"
        )
        # With drop=0 (the baseline) nothing is lost, and nothing needs resending.
        ok = base.ok and lost == wanted and (not self.drop or (asked > 0 and resent >= lost))
        facts = base.facts | {"wire_lost": lost, "resend_requests": asked, "resent": resent}
        return Outcome(summary=base.summary + "\n" + line, ok=ok, facts=facts)

    def _spout_outcome(self, base: Outcome) -> Outcome:
        spouts = {t: e.get("replay", {}) for t, e in self.counts("flights_spout").items()}
        op1 = {t: e.get("emitter", {}) for t, e in self.counts("extract_delays").items()}
        lost = sum(r.get("wire_lost", 0) for r in spouts.values())
        rewinds = sum(r.get("rewinds", 0) for r in spouts.values())
        rewound = sum(r.get("rows_rewound", 0) for r in spouts.values())
        found = sum(h.get("link_lost", 0) for h in op1.values())
        asked = sum(h.get("link_rewinds", 0) for h in op1.values())
        dropped = sum(h.get("replay_dropped", 0) for h in op1.values())
        waiting = sorted(t for t, h in op1.items() if h.get("link_waits"))
        wanted = self.drop * len(spouts)
        line = (
            f"spout wire loss: spout tasks {sorted(spouts)} lost {lost} rows to op1 on purpose "
            f"(want {wanted}); op1 tasks {sorted(op1)} found {found} link numbers missing and "
            f"asked for {asked} rewinds; the spout rewound {rewinds} times over {rewound} "
            f"rows; op1 dropped {dropped} rows (repeats, or sent before a rewind); "
            f"op1 tasks still waiting for a marker: {waiting}"
        )
        ok = (
            base.ok
            and lost == wanted
            and found == lost
            and not waiting
            and (not self.drop or (asked > 0 and rewinds > 0))
        )
        facts = base.facts | {
            "spout_wire_lost": lost,
            "link_lost": found,
            "link_rewinds": asked,
            "spout_rewinds": rewinds,
            "rows_rewound": rewound,
            "op1_dropped": dropped,
        }
        return Outcome(summary=base.summary + "\n" + line, ok=ok, facts=facts)


def _daemon_name(pid: int) -> str:
    """The ``-Ddaemon.name`` of an elastorm-started JVM (``services.daemon_command``)."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        args = fh.read().decode(errors="replace").split("\0")
    return next((a.split("=", 1)[1] for a in args if a.startswith("-Ddaemon.name=")), "?")


def _parent(pid: int) -> int:
    """The parent process of ``pid`` (a ShellBolt's subprocess: its worker JVM)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


JOIN_OPERATORS = ("join_flights", "daily_windows")


class JoinSupervisorLossDriver(JoinWindowDriver):
    """The join-and-window job (``topologies/flights_join.py``) with ``lose`` whole nodes
    lost at once at ``kill_at`` of the input: kill -9 of the supervisors of logical
    nodes 1..``lose`` (each runs one task of each keyed operator under the elastic
    scheduler), with every worker and Python process they launched.

    The victims' nodes are one fault zone, so checkpoints and active replicas of their
    groups sit on node0, which runs everything else. The kill waits until no group
    is moving and every group the victims own has its newest checkpoint (or a started
    replica) on node0. ``budget``: the controller's replication budget in keyed tasks
    (0: every lost group is restored from its checkpoint). Passes if every window's
    totals equal pandas' (``JoinWindowDriver``)."""

    def __init__(
        self,
        limit: int | None = 60_000,
        *,
        lose: int = 2,
        budget: int = 0,
        kill_at: float = 0.3,
        **kwargs: Any,
    ) -> None:
        super().__init__(limit, **kwargs)
        self.lose, self.budget, self.kill_at = lose, budget, kill_at
        self.killed: list[str] = []
        self.loss: dict[str, Any] = {}
        self._client = None

    def options(self, output_dir: str) -> dict[str, object]:
        from elastorm.config import ControllerConfig
        from elastorm.controller.model import node_name

        zones = {node_name(i): "rack" for i in range(1, self.lose + 1)}
        return (
            super().options(output_dir)
            | TopologyConfig.overrides(fault_zones=zones)
            | ControllerConfig.overrides(
                strategy="baseline",
                replication_budget=self.budget,
                warmup_secs=5.0,
                replan_secs=5.0,
            )
        )

    def _statuses(self) -> dict[str, dict[str, Any]]:
        from elastorm.runtime.migrate import connect, wait_for_status

        if self._client is None:
            self._client = connect(self.zk_hosts)
        return {op: wait_for_status(self._client, self.topology, op, 60) for op in JOIN_OPERATORS}

    def _victims(self, statuses: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
        """Per operator, the tasks of nodes 1..lose (node ``i`` runs each operator's
        ``i``-th task)."""
        return {op: sorted(s["tasks"])[1 : self.lose + 1] for op, s in statuses.items()}

    def _ready(self, statuses, victims) -> bool:
        """No group moving, and each group a victim owns has its newest checkpoint or a
        started replica outside the victims."""
        for op, s in statuses.items():
            dead = set(victims[op])
            replicas = s.get("replicas", {})
            if s["moving"]:
                return False
            for g, owner in enumerate(s["owners"]):
                if owner not in dead:
                    continue
                replica = replicas.get(str(g))
                held = s["holders"][g] not in dead and s["assisted"][g]
                if not (held or (replica is not None and replica not in dead)):
                    return False
        return True

    def on_poll(self, spout: dict[str, Any], sink: dict[str, Any]) -> None:
        if self.killed:
            self._watch_recovery()
            return
        if spout.get("rows_read", 0) < self.kill_at * (self.limit or 336_776):
            return
        deadline = time.monotonic() + 120
        statuses = self._statuses()
        victims = self._victims(statuses)
        while not self._ready(statuses, victims):
            if time.monotonic() > deadline:
                raise UserError(f"no moment to kill nodes 1..{self.lose}: {statuses}")
            time.sleep(0.2)
            statuses = self._statuses()
        groups = self._process_groups(victims)
        self.loss = {
            "victims": victims,
            "owned": {  # operator -> victim task -> the groups it owned
                op: {str(t): [g for g, o in enumerate(s["owners"]) if o == t] for t in victims[op]}
                for op, s in statuses.items()
            },
            "replicated_at_kill": {
                op: {g: r for g, r in s.get("replicas", {}).items()} for op, s in statuses.items()
            },
            "rows_read_at_kill": spout.get("rows_read", 0),
            "replication_at_kill": self._metrics().get("replication"),
            "loadavg_1m": round(os.getloadavg()[0], 1),
        }
        self.killed = [_daemon_name(g) for g in groups]
        self.loss["killed_at"] = time.time()
        for group in groups:
            os.killpg(group, 9)
        self.loss["supervisors"] = self.killed

    def _process_groups(self, victims: dict[str, list[int]]) -> list[int]:
        """The process groups of the supervisors running ``victims``: ``lose`` of them,
        none the spout's (node0's)."""
        where = {
            f"{op}-{t}": os.getpgid(self._pid_of(op, t))
            for op in JOIN_OPERATORS
            for t in self._tasks(op)
        }
        keep = os.getpgid(self._pid_of("flights_spout", min(self._tasks("flights_spout"))))
        groups = sorted({where[f"{op}-{t}"] for op in victims for t in victims[op]})
        names = [_daemon_name(g) for g in groups]
        if (
            keep in groups
            or len(groups) != self.lose
            or not all(n.startswith("supervisor-") for n in names)
        ):
            seen = {k: _daemon_name(g) for k, g in sorted(where.items())}
            raise UserError(
                f"tasks {victims} are not on {self.lose} supervisors without the spout "
                f"({_daemon_name(keep)}): {seen}"
            )
        return groups

    def _watch_recovery(self) -> None:
        """Seconds from the kill until no victim owns a group and none moves."""
        if "restored_secs" in self.loss:
            return
        statuses = self._statuses()
        victims = self.loss["victims"]
        if all(
            not s["moving"] and not set(s["owners"]) & set(victims[op])
            for op, s in statuses.items()
        ):
            self.loss["restored_secs"] = round(time.time() - self.loss["killed_at"], 2)

    def _metrics(self) -> dict[str, Any]:
        """The controller's last published metrics (empty before its first write)."""
        path = os.path.join(self.output_dir, "controller-metrics.json")
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return {}

    def _tasks(self, component: str) -> list[int]:
        prefix = f"{component}-"
        names = os.listdir(os.path.join(self.output_dir, "counts"))
        return [
            int(n[len(prefix) : -len(".json")])
            for n in names
            if n.startswith(prefix) and n.endswith(".json")
        ]

    def _pid_of(self, component: str, task: int) -> int:
        path = os.path.join(self.output_dir, "counts", f"{component}-{task}.json")
        with open(path, encoding="utf-8") as fh:
            return int(json.load(fh)["pid"])

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        if self._client is not None:
            self._client.stop()
            self._client.close()
        metrics = self._metrics()
        facts = {
            "loss": self.loss,
            "recoveries": metrics.get("recoveries", []),
            "replication": metrics.get("replication"),
            "timeline": read_join_sink(output_dir).get("timeline", {}),
        }
        ok = out.ok and len(self.killed) == self.lose
        return Outcome(summary=out.summary, ok=ok, facts=out.facts | facts)
