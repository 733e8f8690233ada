"""The synthetic migration benchmark's topology on Storm's LocalCluster, briefly.

Talks to: a private ZooKeeper server and the LocalCluster that ``elastorm.runtime.local``
starts. One migration by each protocol of a 2,000-key group while tuples flow;
every tuple must be counted exactly once, each protocol used as asked, and the
measurements (replay found, pause, completion) must be there.
"""

from __future__ import annotations

import pytest

from drivers.synthetic import Settings, Step, SyntheticDriver, private_zookeeper
from elastorm.runtime.config import load_config
from elastorm.runtime.run import run_topology

pytestmark = pytest.mark.integration


# 50 s; with --slow (docs/benchmarks.md, "Slow tests"): CI's 40 minutes. In CI every
# protocol runs on the flights job (test_storm_elastic.py, test_storm_cluster.py) and the
# synthetic job's moves in the scaling test.
@pytest.mark.slow
def test_each_protocol_moves_the_hot_group_exactly_once_and_is_measured() -> None:
    plan = [
        Step(kind="migrate", protocol=p, replay=r)
        for p, r in (("cpa", 1000), ("cpal", 2000), ("direct", 500))
    ]
    driver = SyntheticDriver(plan, Settings(rate=600.0, keys=2000, warmup=2.0, settle=1.5))
    with private_zookeeper(load_config(), name="zookeeper-synthetic-test") as cfg:
        outcome = run_topology(cfg, "local", driver, timeout=100)
    assert outcome.ok, outcome.summary
    final = outcome.facts["final"]
    assert final["emitted"] == final["state_total"] > 2000
    assert final["hot_keys"] == [2000]
    records = outcome.facts["records"]
    assert [r["used"] for r in records] == ["cpa", "cpal", "direct"]
    for r in records:
        assert r["replayed"] is not None, r
        assert r["completion_ms"] > 0 and r["outputs"] > 0, r
        assert r["pause_ms"] is not None, r
    # CPA and CPAL replay what piled up since the requested checkpoint; direct
    # replays only what arrived while its full checkpoint travelled.
    # Direct's count depends on how long its checkpoint took (0 seen when it took less
    # than one hot tuple's gap), so only its bound is asserted.
    assert records[0]["replayed"] > 0
    assert records[1]["replayed"] >= 1600
    assert records[2]["replayed"] < records[1]["replayed"]
