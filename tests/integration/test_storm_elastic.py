"""The flights job on elastorm key groups, with scripted direct, CPA and CPAL migrations
while it runs, on Storm's LocalCluster (real Storm 2.8 in one JVM, real ZooKeeper
server; requests reach the controller bolt through that ZooKeeper).

The cluster variant of the same check is in ``test_storm_cluster.py``.
"""

from __future__ import annotations

import pytest

from runtime.config import load_config
from runtime.drivers import ElasticFlightsDriver
from runtime.run import run_topology

pytestmark = pytest.mark.integration


def test_migrations_of_every_protocol_keep_every_plane_exact_on_local_cluster() -> None:
    driver = ElasticFlightsDriver(limit=None)
    outcome = run_topology(load_config(), "local", driver, timeout=400)
    assert outcome.ok, outcome.summary
    used = [m["used"] for m in outcome.facts["migrations"]]
    assert {"direct", "cpa", "cpal"} <= set(used), used
    assert all(m["state"] == "done" for m in outcome.facts["migrations"])
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
