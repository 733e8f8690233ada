"""Scale a keyed job live on the single-machine cluster: 2 -> 3 -> 2 nodes in CI, and
2 -> 3 -> 4 -> 3 -> 2 under ``--slow`` (up to four nodes; minutes longer).

Talks to: the real ZooKeeper server, Nimbus (running elastorm's ElasticScheduler) and
supervisor daemons that ``elastorm cluster up`` starts; ``elastorm.runtime.scale``
starts and stops supervisors 2 and 3 through the local provisioner, exactly as
``elastorm scale --nodes N`` does. The synthetic job (one keyed operator, 4 tasks =
at most 4 nodes, 20 key groups) starts on nodes 0 and 1 and must end with exact
totals; after each step Nimbus's assignment must show one counter task per node.
"""

from __future__ import annotations

import os

import pytest

from drivers.synthetic import Settings, Step, SyntheticDriver
from elastorm.runtime.cluster import CLUSTER_ENV, node_of_port
from elastorm.runtime.config import env_nimbus
from elastorm.runtime.nimbus import executor_nodes
from elastorm.runtime.provision import LocalSupervisors
from elastorm.runtime.run import run_topology

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "steps",
    [(3, 2), pytest.param((3, 4, 3, 2), marks=pytest.mark.slow)],
    ids=("2-3-2", "2-3-4-3-2"),
)
def test_keyed_job_scales_with_exact_totals_and_one_task_per_node(
    storm_cluster, monkeypatch, tmp_path, steps
) -> None:
    cfg, _ = storm_cluster
    monkeypatch.setenv("ELASTORM_KEYED_TASKS", "4")
    host, port = env_nimbus(cfg.project, CLUSTER_ENV)
    driver = SyntheticDriver(
        [Step(kind="scale", nodes=n, tag=f"to {n}") for n in steps],
        Settings(
            rate=800.0,
            keys=100_000,
            preload_rate=20_000.0,
            hot_share=0.3,
            extra={
                "elastorm.initial_nodes": {"counter": [0, 1]},
                "elastorm.controller.join_settle_secs": 8.0,
            },
        ),
    )
    driver.provisioner = LocalSupervisors(cfg, slots=2)
    driver.assignments = lambda: executor_nodes(
        host, port, driver.topology, lambda _, p: node_of_port(cfg, p)
    )
    try:
        outcome = run_topology(cfg, CLUSTER_ENV, driver, timeout=600, output_dir=tmp_path)
    finally:
        for name in ("supervisor-2", "supervisor-3"):
            driver.provisioner.stop(name)
    print(outcome.summary)
    assert outcome.ok, outcome.summary
    scales = [r for r in outcome.facts["records"] if r["kind"] == "scale"]
    assert [r["nodes"] for r in scales] == list(steps)
    placed = set()
    for r in scales:
        # Nimbus's assignment: every node that owns key groups runs exactly one counter task
        # that owns any; the others (surplus) own nothing and wait in the idle worker.
        counter = r["assignment_after"]["counter"]
        tasks = sorted(t for tasks in counter.values() for t in tasks)
        assert len(tasks) == len(set(tasks)) == 4, counter  # all 4, each placed once
        placed |= set(tasks)
        owning = set(r["owners"])
        assert len(r["owned"]) == r["nodes"], r["owned"]
        for name in r["owned"]:
            assert len(owning & set(counter[name])) == 1, (name, counter, r["owners"])
        assert len(owning) == r["nodes"]
        # Every node wanted carries some key groups.
        counts = [sum(ops.values()) for ops in r["owned"].values()]
        assert min(counts) >= 1
    assert len(placed) == 4, placed  # the same four tasks at every step
    assert os.path.exists(tmp_path / "records.json")
