"""The chaos harness: the failure scenarios, each run several times, every run checked
against pandas for tuples lost and counted twice.

Each scenario is one of the crash drivers in ``tests/integration/crash_driver.py``
(the CI tests run each once), on the single-machine cluster with every executor in
a worker of its own:

* ``cpal-source`` / ``cpal-target``: kill -9 of a keyed task in the middle of a CPAL
  migration, as its source or its target (Storm restarts it; the controller
  restores its groups);
* ``lose-1`` / ``lose-2``: kill -9 of one or two op2 workers at once (declared lost
  from ZooKeeper, restored on the checkpoint holders before Storm restarts them);
  ``lose-1-ctl``: one, with the leading controller's worker (its standby takes over
  once the leader's session ends, resumes from ZooKeeper and restores the task's
  groups; the run's ``leading`` is when another controller led);
* ``replica-2`` / ``replica-2-ctl``: active replicas for every op2 task, two op2
  workers killed at once (promoted on their replicas), the second with the
  controller's worker;
* ``spout`` / ``op1``: kill -9 of the spout's or op1's worker (recovery by replay);
* ``sup-1`` / ``sup-2`` / ``sup-3``: kill -9 of one, two or three supervisors at once
  with their workers (``SupervisorLossDriver``, elastic scheduler, one op2 task per
  supervisor; the killed ones are started again after the run);
* ``zk-stop``: kill -9 of one supervisor, then the project's ZooKeeper stopped right
  away and started again 10 s later (``bench/chaos_drivers.py``);
* ``freeze-30`` / ``freeze-10``: one supervisor's process group stopped (SIGSTOP) for
  30 or 10 s, then continued (``FrozenSupervisorDriver``);
* ``netcut-30`` / ``netcut-10``: the supervisor in the cluster's network namespace cut
  off the network for 30 or 10 s (its veth link down, then up;
  ``NetworkCutDriver``). With either chosen, the cluster is brought up with its last
  supervisor in a namespace (``elastorm cluster up --netns-supervisor 3``; root only);
* ``durable-2``: the durable tier on the project's HDFS, an op2 owner and the holder of
  its groups killed together (``DurableLossDriver``: restored from HDFS);
  ``namenode-20`` / ``datanode-20``: the NameNode stopped, or one of the three
  DataNodes killed, for 20 s mid-run (``NameNodeOutageDriver``). With any of them
  chosen, the harness starts the project's HDFS (``elastorm hdfs up``);
* ``all-sup``: every supervisor killed with its workers, Nimbus and ZooKeeper
  restarted, the job resubmitted from ``latest`` on the durable tier
  (``RestartDriver``, ``tests/integration/restart_driver.py``); only op2 (the keyed
  state) is checked: op3, a plain bolt, restarts empty.

    .venv/bin/python bench/chaos.py --runs 3

With ``--jobs``, the same faults run on the user project's topologies too
(``bench/chaos_jobs.py``): ``wordcount`` (the tutorial's), ``chained`` (the word
counts into a second keyed operator keyed by first letter, with a non-idempotent count)
``chained-stage2`` (the same, the fault on the second operator), ``windows`` (the
windowed count with every window kind) and ``join`` (this repository's join-and-window
job, the faults of keyed state only, checked per plane-day window against pandas: a
flight missing counts lost, one over counts twice). Their scenarios
are named ``<job>/<fault>`` (``wordcount/lose-1``; the faults are the job's ``faults``,
``sink`` a kill -9 of the sink's worker, ``router`` of the router elastorm puts before
the last keyed operator: fed by the first keyed operator in ``chained``); each is
checked at its sink's committed rows against a fold of the stream in one process
(``sink``: rows checked, lost, twice):

    .venv/bin/python bench/chaos.py --jobs wordcount chained chained-stage2 \\
        --scenarios lose-1 spout sink --runs 3 --out docs/raw/chaos_<commit>_user.jsonl

For every flights run it counts, per (plane, year), the flights in op2's and op3's final
totals against pandas: ``lost`` sums what is missing, ``twice`` what is extra. During
every run ``OwnerSampler`` (``bench/owners.py``) reads the keyed tasks' heartbeats 5
times a second and records any key group claimed by two tasks at one routing epoch
(``two_owners``), and any old owner still claiming a group 5 s after another task took
it at a newer epoch, or, for a CPA/CPAL source, after the controller last waited for it
to finish (``stale_owners``). A network cut also counts what the sink received
from the cut-off node's tasks after their groups were restored elsewhere
(``faults.cuts[].stale_outputs``). Each record keeps the 1-minute load average at the
run's start and end (``loadavg_1m``: the machine is shared) and the seconds until the
killed topology's workers had exited (``workers_gone_after``: the next run waits for
them, up to 240 s, since its workers take the same slot ports), and a run not complete
after ``--timeout`` s (900) counts as failed. Prints one line per run and a table per
scenario; writes every run to ``--out`` (JSON lines, default
``docs/raw/chaos_<commit>.jsonl``). Exit status 1 if any run lost or duplicated a
tuple, saw two or stale owners, or failed its checks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench_common import ROOT, commit
from chaos_table import markdown, ratios, scenario_rows

sys.path.insert(0, str(ROOT / "tests" / "integration"))  # the crash drivers live with the tests
sys.path.insert(0, str(ROOT))  # the project\'s drivers/


def _scenarios(
    limit: int, rate: float, bring_up: Callable[[], object], job: type | None = None
) -> dict[str, Callable[[], Any]]:
    """Each scenario's driver factory on ``job`` (a ``chaos_jobs.UserJob``; None: the
    flights job, with every scenario); ``bring_up`` starts the harness's cluster again."""
    from chaos_drivers import FrozenSupervisorDriver, NetworkCutDriver, ZooKeeperOutageDriver
    from chaos_jobs import on_job
    from crash_driver import (
        DurableLossDriver,
        ElasticCrashDriver,
        EveryTaskLossDriver,
        NameNodeOutageDriver,
        NodeLossDriver,
        ReplicaLossDriver,
        SupervisorLossDriver,
        UpstreamKillDriver,
    )
    from restart_driver import RestartDriver, whole_cluster_lost

    from elastorm.runtime.run import default_store_uri

    def crash(victim: str):
        driver = on_job(ElasticCrashDriver, job)(limit=limit, victim=victim, max_rate=rate)
        driver.migration_timeout = 180.0
        return driver

    def lose(kind: type = NodeLossDriver, **kwargs: Any):
        driver = on_job(kind, job)(limit=limit, max_rate=rate, **kwargs)
        # With the controller killed too, its standby leads one ZooKeeper session later;
        # with elastorm.controller.standbys = 0 nothing is restored before Storm restarts
        # its worker (115 s at load average 70 in one run).
        driver.migration_timeout = 300.0 if kwargs.get("with_controller") else 120.0
        return driver

    def kill(victim: str):
        return on_job(UpstreamKillDriver, job)(limit=limit, victim=victim, max_rate=rate)

    every = {
        "cpal-source": lambda: crash("source"),
        "cpal-target": lambda: crash("target"),
        "lose-1": lambda: lose(lose=1),
        "lose-2": lambda: lose(lose=2),
        "lose-1-ctl": lambda: lose(lose=1, with_controller=True),
        # Every task of the keyed operator at once, the controller alive: from the store.
        "all-keyed": lambda: lose(EveryTaskLossDriver, uri=default_store_uri(_hdfs_cfg())),
        "replica-2": lambda: lose(ReplicaLossDriver, lose=2),
        "replica-2-ctl": lambda: lose(ReplicaLossDriver, lose=2, with_controller=True),
        "spout": lambda: kill("spout"),
        "op1": lambda: kill("op1"),
        "sink": lambda: kill("sink"),
        "router": lambda: kill("router"),
        "sup-1": lambda: lose(SupervisorLossDriver, lose=1),
        "sup-2": lambda: lose(SupervisorLossDriver, lose=2),
        "sup-3": lambda: lose(SupervisorLossDriver, lose=3),
        "zk-stop": lambda: lose(ZooKeeperOutageDriver, outage=10.0),
        "freeze-30": lambda: lose(FrozenSupervisorDriver, cut=30.0),
        # Longer than a session (4 s), shorter than Storm's ShellBolt timeout (30 s): the
        # thawed tasks must stop themselves on their fences; after 30 s Storm kills them.
        "freeze-10": lambda: lose(FrozenSupervisorDriver, cut=10.0),
        "netcut-30": lambda: lose(NetworkCutDriver, cut=30.0),
        "netcut-10": lambda: lose(NetworkCutDriver, cut=10.0),
        # The durable tier on the project's HDFS (issue 29): started when one is chosen.
        "durable-2": lambda: lose(DurableLossDriver, uri=_hdfs_uri()),
        "namenode-20": lambda: NameNodeOutageDriver(limit, cfg=_hdfs_cfg(), max_rate=rate),
        "datanode-20": lambda: NameNodeOutageDriver(
            limit, cfg=_hdfs_cfg(), datanode=0, max_rate=rate
        ),
        "all-sup": lambda: RestartDriver(
            _hdfs_cfg(),
            whole_cluster_lost(_hdfs_cfg(), bring_up, {}),
            _hdfs_uri(),
            limit=limit,
            max_rate=rate,
        ),
    }
    if job is None:
        return {name: make for name, make in every.items() if name not in ("sink", "router")}
    return {f"{job.label}/{name}": every[name] for name in job.faults}


def _chosen(asked: list[str] | None, scenarios: Mapping[str, Any]) -> list[str]:
    """The scenarios to run, in ``scenarios``' order: every one if none is ``asked``;
    else each asked by its full name, or by its fault's name alone (on every job).

    >>> _chosen(["lose-1", "wordcount/spout"], {"lose-1": 0, "wordcount/lose-1": 0,
    ...                                         "wordcount/spout": 0, "spout": 0})
    ['lose-1', 'wordcount/lose-1', 'wordcount/spout']
    """
    if not asked:
        return list(scenarios)
    return [n for n in scenarios if n in asked or n.split("/")[-1] in asked]


def _hdfs_cfg():
    from elastorm.runtime.config import load_config

    return load_config()


def _hdfs_uri() -> str:
    from elastorm.runtime import hdfs

    return hdfs.store_uri(_hdfs_cfg())


#: Scenarios that need the cluster's last supervisor in a network namespace.
NETCUT = ("netcut-30", "netcut-10")
#: Scenarios that need the project's HDFS.
HDFS = ("durable-2", "namenode-20", "datanode-20", "all-sup")
SUPERVISORS = 4


#: What a run's outcome says about its faults (kills, losses and their timings, outages).
FAULT_FACTS = ("kills", "losses", "outages", "frozen", "cuts", "from_store", "restores", "outage")


def _restart(supervisors, killed: list[str], shape: dict[str, Any]) -> None:
    """Start the supervisors a run killed again, and any other daemon that is no longer
    running (a supervisor that exited on its own after a network cut; Nimbus, which halts
    itself when ZooKeeper is gone a while: "Halting process: Error while processing
    event", seen after ``chained/zk-stop`` in session 20), so the next run has all of
    them: the cluster brought up again in its ``shape`` (idempotent)."""
    from elastorm.runtime.cluster import node_name, up

    gone = [node_name(i) for i in range(SUPERVISORS) if node_name(i) not in supervisors.live()]
    for name in dict.fromkeys([*killed, *gone]):
        supervisors.stop(name)  # its pid file
    up(**shape)


def _workers_of(topology: str) -> list[int]:
    """Processes of ``topology``'s workers still running (their JVMs and Python
    children name it: ``-Dstorm.id=<name>-<n>-<time>``)."""
    mark = f"-Dstorm.id={topology}-".encode()
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and mark in Path(f"/proc/{entry}/cmdline").read_bytes():
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def _kill_again(cfg: Any, topology: str, timeout: float = 180.0) -> None:
    """Kill ``topology`` until Nimbus no longer lists it: the run's own kill can fail
    (Nimbus unreachable just after a ZooKeeper stop, at load 60: session 23's
    ``join/zk-stop``), and a topology left running halves the next run's machine."""
    from elastorm.runtime import nimbus
    from elastorm.runtime.cluster import CLUSTER_ENV
    from elastorm.runtime.config import env_nimbus

    deadline = time.monotonic() + timeout
    while True:
        try:
            host, port = env_nimbus(cfg.project, CLUSTER_ENV)
            listed = nimbus.nimbus_client(host, port).getClusterInfo().topologies
            if all(t.name != topology for t in listed):
                return
            print(f"{topology} still runs: killing it again", flush=True)
            nimbus.kill(cfg.project, CLUSTER_ENV, topology)
            why = "still listed"
        except Exception as exc:  # Nimbus away: try again until the deadline
            why = repr(exc)
        if time.monotonic() > deadline:
            print(f"{topology}: not killed in {timeout:.0f} s ({why})", flush=True)
            return
        time.sleep(5.0)


def _wait_gone(topology: str, timeout: float = 240.0) -> float | None:
    """Seconds until the killed ``topology``'s workers exited (None: some still run
    after ``timeout``). The next run's workers take the same slot ports: started
    while the old ones still held them, they failed to bind and restarted for 600 s
    on a machine at load 170-250."""
    began = time.monotonic()
    while _workers_of(topology):
        if time.monotonic() - began > timeout:
            return None
        time.sleep(2.0)
    return round(time.monotonic() - began, 1)


def balance(
    got: Mapping[tuple[str, int], tuple[int, ...]],
    want: Mapping[tuple[str, int], tuple],
    count: Callable[[tuple], int],
) -> tuple[int, int, int]:
    """``(checked, lost, twice)``: tuples the reference counts, and how many of them the
    job's totals miss or count more than once (per key, by ``count`` of the totals).

    >>> balance({("a", 1): (5, 2)}, {("a", 1): (9, 3), ("b", 1): (1, 1)}, lambda t: t[1])
    (4, 2, 0)
    """
    checked = lost = twice = 0
    for key in set(got) | set(want):
        expected = count(want[key]) if key in want else 0
        seen = count(got[key]) if key in got else 0
        checked += expected
        lost += max(0, expected - seen)
        twice += max(0, seen - expected)
    return checked, lost, twice


def _rounds(chosen: list[str], runs: int, cfg: Any, shape: dict[str, Any]):
    """``(round, scenario)`` in the order to run them: the scenarios without HDFS, then
    the HDFS ones, each phase on a cluster brought up afresh (``shape`` is updated to the
    phase's, for drivers that restart the cluster); the netcut scenarios get their last
    supervisor in a network namespace."""
    from elastorm.runtime.cluster import down, up

    plain = [n for n in chosen if n not in HDFS]
    stored = [n for n in chosen if n in HDFS]
    for names in (plain, stored):
        if not names:
            continue
        namespaced = SUPERVISORS - 1 if set(names) & set(NETCUT) else None
        down(cfg, wipe=True)
        # the elastic scheduler binds one op2 task to each supervisor
        shape.update(cfg=cfg, supervisors=SUPERVISORS, slots=6, netns_supervisor=namespaced)
        up(**shape)
        yield from ((i, name) for i in range(runs) for name in names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (3)")
    parser.add_argument(
        "--jobs",
        nargs="+",
        default=["flights"],
        help="flights (default) and/or user jobs: "
        "wordcount, chained, chained-stage2, windows, join (bench/chaos_jobs.py)",
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        help="which (default: all of each job's); a fault name "
        "alone (lose-1) names it on every job chosen, job/fault one job's",
    )
    parser.add_argument("--limit", type=int, default=150_000, help="flights rows per run")
    parser.add_argument("--rate", type=float, default=1500.0, help="flights rows/s (1500)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--until", help="start no run after this UTC time, HH:MM (the cluster slot is shared)"
    )
    parser.add_argument(
        "--baseline", help="a scenario run beside the others: restore times relative to it"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds a run may take before it counts as failed (900)",
    )
    args = parser.parse_args(argv)
    from chaos_jobs import USER_JOBS, user_imports, user_project

    chosen_up: dict[str, Any] = {}  # the cluster's shape, once chosen below
    bad_jobs = sorted(set(args.jobs) - {"flights", *USER_JOBS})
    if bad_jobs:
        parser.error(f"unknown jobs {bad_jobs}; known: flights, {', '.join(USER_JOBS)}")
    scenarios: dict[str, Callable[[], Any]] = {}
    for job in args.jobs:
        scenarios |= _scenarios(args.limit, args.rate, lambda: up(**chosen_up), USER_JOBS.get(job))
    chosen = _chosen(args.scenarios, scenarios)
    unknown = sorted(
        set(args.scenarios or ()) - set(scenarios) - {n.split("/")[-1] for n in chosen}
    )
    if unknown or not chosen or args.runs < 1 or args.timeout <= 0:
        parser.error(
            f"unknown scenarios {unknown}; known: {sorted(scenarios)}; --runs >= 1; --timeout > 0"
        )

    from owners import OwnerSampler

    from demos.flights_reference import compute_reference
    from demos.flights_results import read_results
    from elastorm.runtime import hdfs
    from elastorm.runtime.cluster import down, up
    from elastorm.runtime.config import load_config
    from elastorm.runtime.portlock import hold_ports
    from elastorm.runtime.provision import LocalSupervisors
    from elastorm.runtime.run import run_topology

    os.environ["ELASTORM_PARALLELISM"] = "1"  # one worker per executor costs a JVM each
    # lose-2 needs two survivors holding copies; sup-3 a node beside the three it kills
    os.environ["ELASTORM_KEYED_TASKS"] = "4"
    measured = commit()  # once: commits made while the harness runs are not measured
    out = args.out or ROOT / "docs" / "raw" / f"chaos_{measured}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    reference = compute_reference(limit=args.limit) if "flights" in args.jobs else None
    cfg = load_config()
    ports = ExitStack()  # the cluster's ports are this run's until it ends (portlock)
    ports.enter_context(hold_ports(cfg, "bench/chaos.py"))
    project = user_project(cfg.home) if set(args.jobs) - {"flights"} else None
    supervisors = LocalSupervisors(cfg, slots=6)
    runs: list[dict] = []
    with_hdfs = bool(set(chosen) & set(HDFS))
    if with_hdfs:
        hdfs.down(cfg, wipe=True)
        hdfs.up(cfg)
    try:
        # Round by round, so a run cut short by --until has every scenario at least once;
        # the HDFS scenarios in a phase of their own without the network namespace (its
        # supervisor cannot reach the HDFS on loopback: durable-2 stalled so at cc09e88).
        for i, name in _rounds(chosen, args.runs, cfg, chosen_up):
            if args.until and time.strftime("%H:%M", time.gmtime()) >= args.until:
                print(f"{args.until} UTC: no further runs", flush=True)
                break
            driver = scenarios[name]()
            job = name.split("/")[0] if "/" in name else "flights"
            began, load_start = time.monotonic(), os.getloadavg()[0]  # the machine is shared
            sampler = OwnerSampler(cfg.zookeeper, driver)
            sampler.start()
            try:
                if job == "flights" or not USER_JOBS[job].in_user_project:
                    outcome = run_topology(cfg, "cluster", driver, timeout=args.timeout)
                else:  # the same path, from the user project's copy
                    with user_imports(project):
                        outcome = run_topology(
                            load_config(project), "cluster", driver, timeout=args.timeout
                        )
                ok, output_dir, error = outcome.ok, outcome.facts["output_dir"], None
            except Exception as exc:  # a run that never completes is a result too
                ok, output_dir, error = False, None, f"{type(exc).__name__}: {exc}"
            finally:
                sampler.stop()
                _restart(supervisors, getattr(driver, "killed", []), chosen_up)
                if driver.topology:
                    _kill_again(cfg, driver.topology)
                gone = _wait_gone(driver.topology) if driver.topology else None
            record: dict[str, Any] = {
                "commit": measured, "job": job, "scenario": name, "run": i, "ok": ok,
                "seconds": round(time.monotonic() - began, 1), "error": error,
                "loadavg_1m": {"start": round(load_start, 1),
                               "end": round(os.getloadavg()[0], 1)},
                "owners": sampler.summary(),
                "workers_gone_after": gone,
                "faults": None if error else {k: outcome.facts.get(k) for k in FAULT_FACTS},
            }  # fmt: skip
            if not ok and error is None:  # why: the driver's own checks (its summary)
                record["summary"] = outcome.summary
                record["migrations"] = outcome.facts.get("migrations")
            if output_dir is not None and job != "flights":
                record["sink"] = outcome.facts["sink"]  # its committed rows against the fold
            elif job != "flights" and getattr(driver, "output_dir", None):
                # what the sink had committed when the run gave up (lost: not yet, or never)
                record["sink"] = driver.committed_check() | {"at_error": True}
            elif output_dir is not None:
                # a driver over several submissions merges their sinks' totals itself
                totals = getattr(driver, "totals", read_results(output_dir).totals)
                for role, want, count in (
                    ("op2", reference.delay, lambda t: t[1]),
                    ("op3", reference.air, lambda t: t[1] + t[2]),
                ):
                    if role not in getattr(driver, "roles", ("op2", "op3")):
                        continue
                    checked, lost, twice = balance(totals(role), want, count)
                    record[role] = {"checked": checked, "lost": lost, "twice": twice}
            runs.append(record)
            with out.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)
    finally:
        down(cfg, wipe=True)
        if with_hdfs:
            hdfs.down(cfg, wipe=True)
        ports.close()

    rows = scenario_rows(runs)
    print("\n" + markdown(rows))
    if args.baseline:
        print("\n" + "\n".join(ratios(rows, args.baseline)))
    bad = any(
        r["ok"] < r["runs"] or r["lost"] or r["twice"] or r["two_owners"] or r["stale"]
        for r in rows
    )
    print(f"raw: {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
