"""The flights job on Storm's LocalCluster (real Storm 2.8 in one JVM, real ZooKeeper server).

Talks to: the ZooKeeper server and the LocalCluster that ``elastorm.runtime.local`` starts.
"""

from __future__ import annotations

import pytest

from drivers.flights import FlightsDriver
from drivers.smoke import SmokeDriver
from elastorm.runtime.config import load_config
from elastorm.runtime.run import run_topology

pytestmark = pytest.mark.integration

ALL_ROWS = 336_776


def test_direct_emits_reach_the_chosen_task_on_local_cluster() -> None:
    outcome = run_topology(load_config(), "local", SmokeDriver(2000), timeout=300)
    assert outcome.ok, outcome.summary
    assert outcome.facts["received"] == 2000


def test_flights_job_on_local_cluster_matches_pandas_for_every_plane() -> None:
    outcome = run_topology(load_config(), "local", FlightsDriver(limit=None), timeout=400)
    assert outcome.ok, outcome.summary
    assert outcome.facts["rows"] == ALL_ROWS
    assert outcome.facts["planes"] > 4000
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
