"""kill -9 of a keyed task's Python process in the middle of a CPAL migration, on the
single-machine cluster (ZooKeeper + Nimbus + 2 supervisors, real workers).

Talks to: the real ZooKeeper, Nimbus and supervisor daemons of ``elastorm cluster
up``; the killed process is the real ShellBolt subprocess of one ``sum_delays``
task, found through its counts file. Storm restarts its worker (each executor has
a worker of its own here); the task comes back empty and the controller restores
its key groups from their checkpoint holders plus the emitters' buffers.

Also: kill -9 of the leading controller bolt's process in the shift job (issue 4: its
successor resumes from the decisions it persisted in ZooKeeper; with the default
``elastorm.controller.standbys`` = 1 that is the standby task, else Storm's restart).
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from crash_driver import (
    DurableLossDriver,
    ElasticCrashDriver,
    EveryTaskLossDriver,
    JoinSupervisorLossDriver,
    NameNodeOutageDriver,
    ReplicaLossDriver,
    SupervisorLossDriver,
    UpstreamKillDriver,
    WireLossDriver,
)
from shared_cluster import SLOTS

from drivers.shift import ShiftDriver
from elastorm.runtime.provision import LocalSupervisors
from elastorm.runtime.run import default_store_uri, run_topology

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster_with_room(storm_cluster):
    """The shared cluster: six slots per supervisor, one worker per executor here."""
    return storm_cluster[0]


# Both kills run with --slow (docs/benchmarks.md, "Slow tests") and, three times per
# chaos table, as bench/chaos.py's cpal-source and cpal-target: CI's 40 minutes.
@pytest.mark.slow
@pytest.mark.parametrize("victim", ["source", "target"])
def test_task_killed_mid_migration_comes_back_from_its_checkpoint(
    cluster_with_room, victim, monkeypatch
):
    # One worker per executor costs a JVM each: keep the job small for 2 cores.
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    # 90,000 rows (150,000 until session 22): 40 s of CI less, still a minute of input
    # after the crash for the restored group to be seen applying again.
    driver = ElasticCrashDriver(limit=90_000, victim=victim, max_rate=1500.0)
    driver.migration_timeout = 180.0
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=900)
    assert outcome.ok, outcome.summary
    assert len(outcome.facts["kills"]) == 1
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary


def _controller_pids(home: str) -> set[int]:
    """The controller bolt's Python processes of this checkout's cluster (a worker's
    subprocess runs in that worker's directory under ``home``), not another's: elastorm's
    ``MigrationControllerBolt`` or a project's subclass (this one's ``ProjectController``,
    ``src/controller/``)."""
    import subprocess

    out = subprocess.run(
        ["pgrep", "-f", r"\.(MigrationControllerBolt|ProjectController)$"],
        capture_output=True,
        text=True,
    ).stdout
    ours = set()
    for pid in (int(p) for p in out.split()):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(home):
                ours.add(pid)
        except OSError:  # gone meanwhile
            pass
    return ours


class KillController(threading.Thread):
    """kill -9 the leading controller bolt's Python process (the pid in its leader znode)
    once it has allocated checkpoints; ``successor``: the pid that leads next (the
    standby's, started before the kill, or the killed task's restart)."""

    def __init__(self, output_dir: str, home: str, driver) -> None:
        super().__init__(daemon=True)
        self.output_dir = output_dir
        self.home = home
        self.driver = driver  # its topology and zk_hosts, once the run has set them
        self.killed: int | None = None
        self.before: set[int] = set()  # the controller processes at the kill
        self.successor: int | None = None
        self.took_over_after: float | None = None  # s from the kill
        self.error: BaseException | None = None

    def _leader_pid(self, client) -> int | None:
        from kazoo.exceptions import NoNodeError

        from elastorm.zk.codec import decode_leader
        from elastorm.zk.layout import ZnodeLayout

        try:
            data, _ = client.get(ZnodeLayout(self.driver.topology).leader)
        except NoNodeError:
            return None
        return decode_leader(data).pid

    def run(self) -> None:
        import json
        import signal

        path = os.path.join(self.output_dir, "controller-metrics.json")
        try:
            # The clock starts once the controller runs (its metrics file appears):
            # submitting and starting ten workers on a loaded 2-core machine took
            # longer than the whole allowance when it counted from the submission.
            started = time.monotonic()
            while not os.path.exists(path):
                if time.monotonic() - started > 420:
                    raise TimeoutError("the controller never started")
                time.sleep(0.5)
            deadline = time.monotonic() + 150
            while True:
                try:
                    with open(path, encoding="utf-8") as f:
                        if json.load(f).get("allocated_at"):
                            break
                except (OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("the controller never allocated checkpoints")
                time.sleep(0.5)
            time.sleep(3)  # the store writes behind: let it reach ZooKeeper
            from elastorm.runtime.migrate import connect

            client = connect(self.driver.zk_hosts)
            try:
                pid = self._leader_pid(client)
                assert pid in _controller_pids(self.home), pid
                self.before = _controller_pids(self.home)
                os.kill(pid, signal.SIGKILL)
                killed_at, self.killed = time.monotonic(), pid
                while self.successor is None:
                    if time.monotonic() > deadline + 60:
                        raise TimeoutError("no controller took over")
                    time.sleep(0.1)
                    leader = self._leader_pid(client)
                    if leader is not None and leader != pid:
                        self.successor = leader
                self.took_over_after = time.monotonic() - killed_at
            finally:
                client.stop()
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.mark.slow  # 150-175 s; chaos lose-1-ctl kills the controller on every job
def test_a_killed_controller_resumes_from_its_persisted_decisions(cluster_with_room, tmp_path):
    """The shift job (Madsen & Zhou 2015, section 7.2), one worker per executor; kill -9 of
    the controller bolt's process once it has allocated checkpoints: Storm restarts its
    worker, the new controller loads routing and holders from ZooKeeper and carries on."""
    out = tmp_path / "run"
    out.mkdir()
    driver = ShiftDriver(
        "correlated",
        duration=95,
        # One worker per executor (11 with the standby controller): out of the elastic
        # scheduler (see crash_driver).
        extra={
            "topology.workers": 11,
            "topology.acker.executors": 0,
            "elastorm.elastic_scheduling": False,
        },
    )
    killer = KillController(str(out), str(cluster_with_room.home), driver)
    killer.start()
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=600, output_dir=out)
    killer.join(30)
    assert killer.error is None, killer.error
    # Another controller leads after the kill: with the default (no standby) the killed
    # task's restart; with elastorm.controller.standbys = 1 the standby.
    assert killer.killed is not None and killer.successor not in (None, killer.killed)
    after = killer.took_over_after
    print(f"controller {killer.killed} killed; {killer.successor} led {after:.1f} s later")
    facts = outcome.facts
    assert outcome.ok, outcome.summary
    # The new controller took over routing and holders from ZooKeeper: op2's groups
    # end on node1 at a routing epoch past the 10 migrations (a controller starting
    # afresh would begin at epoch 0 with op2 on node2), and it never had to move op2's
    # checkpoints from their start-up node0 to node1 again.
    #
    # Whether its own moves are checkpoint-assisted is not asserted: which holder has
    # a group's newest checkpoint lives only in the controller's memory (the holders'
    # reports), and an owner that is overloaded by then checkpoints late (its ticks
    # wait behind its backlog), so on a quiet machine the restarted controller ordered
    # all 10 moves direct after waiting settle_secs + defer_secs (docs/controller.md,
    # known limitations).
    op2 = facts["routing"]["op2"]
    assert op2["epoch"] >= 10 and len(set(op2["owners"])) == 1, op2
    assert not [
        m
        for m in facts["holder_moves"]
        if m["key_group"].startswith("op2/") and (m["from"], m["to"]) == ("node0", "node1")
    ], facts["holder_moves"]
    assert {o["target"] for o in facts["orders"]} <= {"node1"}, facts["orders"]


def _on_three_supervisors(cfg, driver):
    """Run ``driver`` (which kills supervisors, naming them in ``killed``) on three
    supervisors, then leave the cluster as it was: the killed ones back (their pid
    files gone first), the added ones gone."""
    supervisors = LocalSupervisors(cfg)
    added = supervisors.spare(3 - len(supervisors.live()))
    supervisors.start(added, timeout=120)
    try:
        return run_topology(cfg, "cluster", driver, timeout=900)
    finally:
        for name in driver.killed:
            supervisors.stop(name)
        back = [n for n in driver.killed if n not in added]
        if back:  # the shared cluster's own, with its slots (not the added ones' 2:
            # session 29's CI left supervisor-1 with 2 ports, and the next test that
            # needed more on it, the own-parallelism user-project test, stalled)
            LocalSupervisors(cfg, slots=SLOTS).start(back, timeout=120)
        for name in added:
            supervisors.stop(name)


@pytest.mark.parametrize("lose", [1])
def test_killed_supervisors_are_restored_from_checkpoints_before_storm_restarts_them(
    cluster_with_room, lose, monkeypatch
):
    """kill -9 of ``lose`` supervisors at once, with their workers and Python processes,
    under the elastic scheduler (three supervisors, one op2 task each): declared lost
    from ZooKeeper, their groups restored on the checkpoint holders, totals exact.
    (Two at once: ``test_an_owner_and_its_holder_killed_together_are_restored_from_hdfs``,
    which restores from memory holders and from the durable store in one recovery;
    chaos ``sup-2`` and ``sup-3``.)"""
    cfg = cluster_with_room
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    monkeypatch.setenv("ELASTORM_KEYED_TASKS", "3")
    # 60,000 rows: the kill at 30% leaves 28 s of input after it (150,000 until session
    # 22, 90,000 until session 30: CI's 40 minutes).
    driver = SupervisorLossDriver(limit=60_000, lose=lose, max_rate=1500.0)
    driver.migration_timeout = 120.0
    outcome = _on_three_supervisors(cfg, driver)
    assert outcome.ok, outcome.summary
    assert len(driver.killed) == lose, driver.killed
    [loss] = outcome.facts["losses"]
    print(
        f"lost tasks {loss['tasks']}: declared {loss['detected']} s, restored "
        f"{loss['restored']} s, applying again {loss['progress']} s after the kill"
    )
    assert len(loss["tasks"]) == lose
    assert loss["detected"] <= loss["restored"]
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
    # With one op1 task a restore ends on its one toState, in the same step as its
    # replay, so its final values replace the tentative ones before any flush: the sink
    # may see none (0 in the 20:08 run). None may be left tentative, whatever happened.
    print("tentative op2 updates at the sink:", outcome.facts["tentative_updates"])
    assert "no total left tentative at the sink: got {}" in outcome.summary


def test_every_keyed_task_killed_at_once_comes_back_from_the_durable_store(
    cluster_with_room, monkeypatch
):
    """kill -9 of both op2 tasks (and their workers) while the controller lives: no copy
    in memory survives. The controller declares them lost and lives on (session 23: its
    planner raised "every node failed" and the controller died); as Storm restarts the
    workers, the restarted tasks read every group back from the durable store (the
    default ``file://`` one) and the emitters replay the rest: op2 exact for every plane
    (the plain op3 and op4 in the killed workers restart empty: not checked)."""
    cfg = cluster_with_room
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    monkeypatch.setenv("ELASTORM_KEYED_TASKS", "2")
    driver = EveryTaskLossDriver(40_000, uri=default_store_uri(cfg), max_rate=1500.0)
    driver.migration_timeout = 180.0
    outcome = run_topology(cfg, "cluster", driver, timeout=600)
    [loss] = outcome.facts["losses"]
    print(f"every op2 task lost: {loss}; from the store: {outcome.facts['from_store']}")
    print(outcome.summary)
    assert outcome.ok, outcome.summary
    assert len(loss["tasks"]) == 2, loss
    assert loss["detected"] <= loss["restored"]
    assert outcome.facts["from_store"], "no key group was restored from the durable store"
    assert outcome.facts["wrong"] == 0 and not outcome.facts["tentative"], outcome.summary


def test_an_owner_and_its_holder_killed_together_are_restored_from_hdfs(
    cluster_with_room, hdfs_cluster, monkeypatch
):
    """kill -9 of two of three supervisors at once, one owning key groups whose only
    in-memory checkpoints the other holds (issue 29 (a)): those groups are restored from
    their durable checkpoints on the project's HDFS (replication 3), the emitters replay
    from the positions those name, and every plane's totals equal pandas'."""
    from elastorm.runtime import hdfs

    cfg = cluster_with_room
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    monkeypatch.setenv("ELASTORM_KEYED_TASKS", "3")
    driver = DurableLossDriver(60_000, uri=hdfs.store_uri(hdfs_cluster), max_rate=1500.0)
    driver.migration_timeout = 120.0
    outcome = _on_three_supervisors(cfg, driver)
    assert outcome.ok, outcome.summary
    assert len(driver.killed) == 2, driver.killed
    [loss] = outcome.facts["losses"]
    print(f"lost tasks {loss['tasks']} (groups {loss['groups']}); from HDFS: "
          f"{outcome.facts['from_store']}; {outcome.summary}")  # fmt: skip
    for e in outcome.facts["restores"]:  # from HDFS against from a memory holder
        print(f"group {e['key_group']}: {e['protocol']} restore in {e['completion']} s")
    assert outcome.facts["from_store"], "no key group was restored from the durable store"
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
    assert "no total left tentative at the sink: got {}" in outcome.summary


@pytest.mark.slow  # 100 s; test_hdfs_store's stopped NameNode runs in CI
def test_a_namenode_stopped_20_s_mid_run_stalls_nothing_and_loses_nothing(
    cluster_with_room, hdfs_cluster, monkeypatch
):
    """The NameNode of the durable store stopped for 20 s while the elastic flights job
    runs and migrates by CPA and CPAL (issue 29 (d)): processing and the in-memory
    checkpoints go on, both migrations complete as asked, the durable writes are
    retried until the NameNode is back and then every key group's durable copy moves
    on; every plane's totals equal pandas'."""
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    driver = NameNodeOutageDriver(90_000, cfg=hdfs_cluster, max_rate=1500.0)
    driver.migration_timeout = 120.0
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=900)
    print(outcome.summary, outcome.facts["outage"])
    assert outcome.ok, outcome.summary
    assert outcome.facts["outage"]["down_secs"] >= 20.0
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary


# 111 s in session 28's CI: with --slow (CI's 40 minutes); the one-supervisor kill, the
# every-keyed-task loss and chaos join/lose-1 stay (docs/benchmarks.md, "Slow tests").
@pytest.mark.slow
def test_the_join_and_window_job_stays_exact_when_two_supervisors_die_at_once(
    cluster_with_room, monkeypatch
):
    """The join-and-window job (two KeyedBolts in a row, ``topologies/flights_join.py``)
    under the elastic scheduler on three supervisors: kill -9 of two of them at once at
    30% of the input (no replicas). Every lost group of both bolts is restored from its
    checkpoint on node0; the join's restore re-sends joined rows, which the window
    skips; every plane-day window equals pandas' and none is left tentative."""
    cfg = cluster_with_room
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    monkeypatch.setenv("ELASTORM_KEYED_TASKS", "3")
    driver = JoinSupervisorLossDriver(30_000, lose=2, max_rate=800.0)
    outcome = _on_three_supervisors(cfg, driver)
    assert outcome.ok, outcome.summary
    assert len(driver.killed) == 2, driver.killed
    loss = outcome.facts["loss"]
    print(
        f"killed {loss['supervisors']} (tasks {loss['victims']}); every group back "
        f"{loss.get('restored_secs')} s after; {outcome.summary}"
    )
    assert outcome.facts["check"]["tentative_left"] == 0


# Out of CI until it passes: at 49b0cff it failed with "tasks [8, 10]: not restored and
# applying after the kill", as the chaos harness's lose-1 / lose-2 runs (op2 workers
# killed under Storm's scheduler) do; an open issue-14/18 bug (docs/failures.md).
@pytest.mark.slow
def test_lost_tasks_with_active_replicas_are_promoted_and_totals_stay_exact(
    cluster_with_room, monkeypatch
):
    """Partially active replication (Su & Zhou 2016) on the real cluster: every op2 task
    gets active replicas (budget covers all), then kill -9 of two op2 workers at once
    whose groups all have a replica on a survivor. The controller promotes the replicas
    (the emitters' replays only fill what they had not yet applied), and every plane's
    totals equal pandas'."""
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    monkeypatch.setenv("ELASTORM_KEYED_TASKS", "4")
    driver = ReplicaLossDriver(limit=150_000, lose=2, max_rate=1500.0)
    driver.migration_timeout = 120.0
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=900)
    assert outcome.ok, outcome.summary
    [loss] = outcome.facts["losses"]
    print(
        f"lost tasks {loss['tasks']} (groups {loss['groups']}, all replicated): declared "
        f"{loss['detected']} s, promoted {loss['restored']} s, applying again "
        f"{loss['progress']} s after the kill"
    )
    assert sorted(outcome.facts["replicated"]) == sorted(loss["groups"]) and loss["groups"]
    print("controller recoveries:", outcome.facts["recoveries"])
    print("controller replication:", outcome.facts["replication"])
    promoted = {g for r in outcome.facts["recoveries"] for g in r["promoted"]}
    assert set(loss["groups"]) <= promoted, outcome.facts["recoveries"]
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
    # Outputs made while the promoted groups' replays ran reached the sink marked
    # tentative; the run passed only once every one was rectified by a final total.
    print("tentative op2 updates at the sink:", outcome.facts["tentative_updates"])
    assert "no total left tentative at the sink: got {}" in outcome.summary


# CI kills the spout; op1's kill runs with --slow and, three times per chaos table, as
# bench/chaos.py's op1 (docs/benchmarks.md, "Chaos"): CI's 40 minutes.
@pytest.mark.parametrize("victim", ["spout", pytest.param("op1", marks=pytest.mark.slow)])
def test_killed_spout_or_emitter_recovers_by_replay(cluster_with_room, victim, monkeypatch):
    """kill -9 of the spout's or op1's worker: the spout replays from where op1's
    restart points say, nothing is lost and nothing is counted twice."""
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    # 60,000 rows: the kill at 30% leaves 28 s of input for the restarted worker to
    # replay into (150,000 until session 22, a minute more of CI for nothing checked).
    driver = UpstreamKillDriver(limit=60_000, victim=victim, max_rate=1500.0)
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=900)
    assert outcome.ok, outcome.summary
    assert len(outcome.facts["kills"]) == 1
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary


def test_tuples_lost_between_live_workers_are_resent_and_totals_stay_exact(cluster_with_room):
    """Fault injection loses 500 of op1's data messages to op2 on the wire (every 7th
    from the 2,000th): op2's tasks see the sequence gaps, ask op1 to resend from its
    output buffer, and every plane's totals still equal pandas' (issue 14)."""
    driver = WireLossDriver(limit=30_000, max_rate=1500.0)
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=300)
    print(outcome.summary)  # shown with -rP: the raw record of the run
    assert outcome.ok, outcome.summary
    assert outcome.facts["wire_lost"] == 500 * len(driver.counts("extract_delays"))
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary


def test_rows_lost_between_the_spout_and_a_live_emitter_are_rewound_and_totals_stay_exact(
    cluster_with_room,
):
    """Fault injection loses 400 of the spout's rows to op1 on the wire (every 3rd
    from the 3,000th emit): op1's tasks see their link numbers skip, ask the spout to
    rewind, admit nothing more from it until the marker, and every plane's totals
    still equal pandas' (issue 14)."""
    driver = WireLossDriver(
        limit=30_000, max_rate=1500.0, on="spout", drop=400, start=3_000, every=3
    )
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=300)
    print(outcome.summary)  # shown with -rP: the raw record of the run
    assert outcome.ok, outcome.summary
    assert outcome.facts["spout_wire_lost"] == 400 == outcome.facts["link_lost"]
    assert outcome.facts["spout_rewinds"] >= 1 and outcome.facts["link_rewinds"] >= 1
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
