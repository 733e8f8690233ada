"""One chaos scenario as a test, marked ``slow`` (run with ``pytest --slow``; CI leaves
it out): a supervisor frozen for 30 s under load (``bench/chaos_drivers.py``,
``FrozenSupervisorDriver``), while ``bench/owners.py`` samples who owns each key group.
``bench/chaos.py`` runs this and the other scenarios several times for the table.

Talks to: the real ZooKeeper, Nimbus and supervisor daemons of ``elastorm cluster
up`` (three supervisors: the shared cluster's plus one started here), and the real
worker processes it stops and continues.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from elastorm.runtime.provision import LocalSupervisors
from elastorm.runtime.run import run_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos_drivers import FrozenSupervisorDriver  # noqa: E402
from owners import OwnerSampler  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_frozen_supervisor_never_leaves_two_owners_and_loses_nothing(storm_cluster, monkeypatch):
    cfg = storm_cluster[0]
    monkeypatch.setenv("ELASTORM_PARALLELISM", "1")
    monkeypatch.setenv("ELASTORM_KEYED_TASKS", "3")
    supervisors = LocalSupervisors(cfg)
    added = supervisors.spare(3 - len(supervisors.live()))
    supervisors.start(added, timeout=120)
    driver = FrozenSupervisorDriver(limit=100_000, cut=30.0, max_rate=1500.0)
    driver.migration_timeout = 120.0
    sampler = OwnerSampler(f"127.0.0.1:{cfg.zookeeper_port}", driver)
    sampler.start()
    try:
        outcome = run_topology(cfg, "cluster", driver, timeout=900)
    finally:
        sampler.stop()
        for name in added:
            supervisors.stop(name)
    assert outcome.ok, outcome.summary
    owners = sampler.summary()
    assert owners["samples"] > 100, owners
    assert owners["two_owners"] == [], owners
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
