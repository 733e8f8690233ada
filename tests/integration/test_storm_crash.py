"""kill -9 of a keyed task's Python process in the middle of a CPAL migration, on the
single-machine cluster (ZooKeeper + Nimbus + 2 supervisors, real workers).

Talks to: the real ZooKeeper, Nimbus and supervisor daemons of ``elastorm cluster
up``; the killed process is the real ShellBolt subprocess of one ``sum_delays``
task, found through its counts file. Storm restarts its worker (each executor has
a worker of its own here); the task comes back empty and the controller restores
its key groups from their checkpoint holders plus the emitters' buffers.
"""

from __future__ import annotations

import pytest

from runtime.cluster import down, up
from runtime.config import load_config
from runtime.drivers import ElasticCrashDriver
from runtime.run import run_topology

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster_with_room():
    cfg = load_config()
    down(cfg, wipe=True)
    up(cfg, supervisors=2, slots=6)  # one worker per executor: 10 of them here
    yield cfg
    down(cfg, wipe=True)


@pytest.mark.parametrize("victim", ["source", "target"])
def test_task_killed_mid_migration_comes_back_from_its_checkpoint(
    cluster_with_room, victim, monkeypatch
):
    # One worker per executor costs a JVM each: keep the job small for 2 cores.
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    driver = ElasticCrashDriver(limit=150_000, victim=victim, max_rate=1500.0)
    driver.migration_timeout = 180.0
    outcome = run_topology(cluster_with_room, "cluster", driver, timeout=900)
    assert outcome.ok, outcome.summary
    assert len(outcome.facts["kills"]) == 1
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
