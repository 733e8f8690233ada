"""The quickstart and the plain flights job on Storm's LocalCluster (real Storm 2.8 in
one JVM, real ZooKeeper server).

Talks to: the ZooKeeper server and the LocalCluster that ``elastorm.runtime.local`` starts.
"""

from __future__ import annotations

import pytest

from drivers.flights import FlightsDriver
from drivers.quickstart import QuickstartDriver
from drivers.smoke import SmokeDriver
from elastorm.runtime.config import load_config
from elastorm.runtime.run import run_topology

pytestmark = pytest.mark.integration

QUICKSTART_ROWS = 150_000


def test_direct_emits_reach_the_chosen_task_on_local_cluster() -> None:
    outcome = run_topology(load_config(), "local", SmokeDriver(2000), timeout=300)
    assert outcome.ok, outcome.summary
    assert outcome.facts["received"] == 2000


def test_quickstart_migrates_by_cpal_kills_a_keyed_task_and_matches_pandas() -> None:
    """``bin/quickstart``'s run: a live CPAL migration, then kill -9 of an op2 task's
    Python process, which the LocalCluster leaves dead; its key groups are restored on
    their checkpoint holders, and every plane's totals still equal pandas'. On the first
    QUICKSTART_ROWS rows (the command reads them all; its faults come at shares of
    the input, so the same happens, in half the time)."""
    driver = QuickstartDriver(limit=QUICKSTART_ROWS)
    outcome = run_topology(load_config(), "local", driver, timeout=600)
    assert outcome.ok, outcome.summary
    assert outcome.facts["rows"] == QUICKSTART_ROWS
    cpal, kill = outcome.facts["migrations"]
    assert (cpal["used"], cpal["state"]) == ("cpal", "done")
    assert (kill["used"], kill["state"]) == ("kill", "restored")
    assert outcome.facts["kill"]["groups"], outcome.facts["kill"]
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
    assert "What happened:" in outcome.summary


def test_plain_flights_job_on_local_cluster_matches_pandas_for_every_plane() -> None:
    """``elastorm local flights``, the job without key groups, on the first 50,000 rows."""
    outcome = run_topology(load_config(), "local", FlightsDriver(limit=50_000), timeout=300)
    assert outcome.ok, outcome.summary
    assert outcome.facts["rows"] == 50_000
    assert "op2 delay sum and flights per plane-year: all" in outcome.summary
