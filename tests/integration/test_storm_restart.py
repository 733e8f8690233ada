"""Stop, restart and upgrade with state (issue 29, item 3), on the shared cluster:
(b) every supervisor killed with kill -9, Nimbus and ZooKeeper restarted, the flights
job resubmitted under the same name with ``elastorm.restore_from=latest``; (c) a
savepoint of the running job (``elastorm savepoint``), the topology killed and
resubmitted from it with changed code and settings. Both: every plane's op2 totals (the keyed
state) equal pandas'.

Talks to: the shared single-machine Storm cluster (Nimbus, supervisors, ZooKeeper, from
``elastorm cluster up``) and the project's HDFS (``conftest.hdfs_cluster``), where the
durable tier writes. The driver is ``restart_driver.py`` (the chaos harness's ``all-sup``
runs (b) too).
"""

from __future__ import annotations

import os

import pytest
from restart_driver import RestartDriver, first_jar, upgraded_jar, whole_cluster_lost
from shared_cluster import cluster_up

from elastorm.config import DurableConfig, TopologyConfig
from elastorm.durable.savepoint import load
from elastorm.durable.submissions import open_view, submission_records
from elastorm.runtime import hdfs, nimbus
from elastorm.runtime.cluster import CLUSTER_ENV
from elastorm.runtime.restore import store_of, take_savepoint
from elastorm.runtime.run import run_topology

pytestmark = pytest.mark.integration


# 107 s in session 28's CI: with --slow (CI's 40 minutes); the savepoint's upgraded
# resubmission (below) restores from the durable store in CI, and chaos all-sup kills
# every supervisor (docs/benchmarks.md, "Slow tests").
@pytest.mark.slow
def test_every_supervisor_killed_then_resubmitted_from_latest_is_exact(storm_cluster, hdfs_cluster):
    """(b): the whole cluster lost (kill -9), Nimbus and ZooKeeper restarted with their
    data, the old topology killed, the same name resubmitted from ``latest``."""
    cfg, _ = storm_cluster
    events: dict[str, object] = {}
    stop = whole_cluster_lost(cfg, lambda: cluster_up(cfg), events)
    driver = RestartDriver(cfg, stop, hdfs.store_uri(hdfs_cluster), limit=40_000, max_rate=1500.0)
    outcome = run_topology(cfg, CLUSTER_ENV, driver, timeout=900)
    assert driver.stopped and events["killed"], events
    assert outcome.ok, outcome.summary
    store = store_of(
        str(driver.submitted[DurableConfig.key("uri")]),
        home=str(cfg.home.resolve()),
        topology=driver.topology,
    )
    (latest,) = [n for n in store.list("savepoints") if n.startswith("latest-")]
    # Each submission wrote in its own directory; the restored one started from the
    # first one's sets (read there) and wrote its own.
    first, second = submission_records(store)[-2:]
    assert second.restored_from == latest[: -len(".json")]
    sp = load(store, second.restored_from)
    assert {s.submission for sets in sp.sets.values() for s in sets.values()} == {first.storm_id}
    assert open_view(store, second.storm_id).store.list("operators")


def test_a_savepoint_then_an_upgraded_resubmission_is_exact(storm_cluster, hdfs_cluster):
    """(c): a savepoint of the running job, the topology killed, the same name submitted
    again from the savepoint with changed code (op2's bolt: :data:`UPGRADE`) and changed
    settings (a checkpoint interval)."""
    cfg, _ = storm_cluster
    taken: dict[str, object] = {}

    def stop(driver: RestartDriver) -> None:
        store = store_of(
            str(driver.submitted[DurableConfig.key("uri")]),
            home=str(cfg.home.resolve()),
            topology=driver.topology,
        )
        sp, dropped = take_savepoint(store, cfg.zookeeper, driver.topology, "upgrade")
        taken.update(groups=sum(len(s) for s in sp.sets.values()), dropped=dropped)
        nimbus.kill(cfg.project, CLUSTER_ENV, driver.topology)
        jar = upgraded_jar(first_jar(cfg), cfg.home / "jars" / "topology-v2.jar")
        # The workers' virtualenv is this checkout's, with src/ installed editable: its
        # bolts/ would shadow the jar's (streamparse appends the jar's resources/ to
        # sys.path). A user's project is not installed, so the jar's code runs there;
        # here PYTHONPATH puts resources/ first, as it is for them.
        upgrade = {"topology.environment": {"PYTHONPATH": "resources:."}}  # cwd or its parent
        changes = TopologyConfig.overrides(checkpoint_interval_secs=2.0) | upgrade
        driver.resubmit("upgrade", jar=jar, **changes)

    driver = RestartDriver(cfg, stop, hdfs.store_uri(hdfs_cluster), limit=40_000, max_rate=1500.0)
    outcome = run_topology(cfg, CLUSTER_ENV, driver, timeout=900)
    assert driver.stopped and taken["groups"], taken
    assert outcome.ok, outcome.summary
    # the second submission's op2 tasks ran the new code (their mark), the first's not
    assert os.path.exists(os.path.join(driver.first_dir, "second", "upgraded-op2"))
    assert not os.path.exists(os.path.join(driver.first_dir, "upgraded-op2"))
