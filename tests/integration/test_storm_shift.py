"""The controller on real Storm: the shifting load, and a ZooKeeper outage.

The shifting load is Madsen & Zhou 2015, section 7.2 (the experiment in which load shifts
between nodes: checkpoint allocation and load balancing).

Talks to: Storm's LocalCluster (real Storm 2.8 in one JVM) fed by ``sparse
submit``; the keyed tasks publish heartbeats to a real ZooKeeper server and the
controller bolt reads them, allocates checkpoints and migrates key groups from
them. Nothing is faked: the loads are measured in the tasks, node2's "external
load" throttles its tasks for real (``elastorm.storm.load``).

The outage test gives elastorm its own ZooKeeper (``elastorm.zookeeper.hosts``,
a private server this module starts) so stopping it does not stop Storm's.
"""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient

from drivers.shift import ShiftDriver, tally
from elastorm.controller.model import KeyGroupId
from elastorm.runtime import services
from elastorm.runtime.config import load_config
from elastorm.runtime.run import run_topology
from elastorm.zk.codec import decode_checkpoints, decode_routing
from elastorm.zk.layout import ZnodeLayout

pytestmark = pytest.mark.integration

OUTAGE = 20.0


# CPU per tuple of the counters here: at the default 400 us, op2's whole load (800
# tuples/s) needs 0.32 of a core, just above the 0.3 its node's 70% external load
# leaves it, so a quiet, fast machine never overloaded node2 within the run (seen on a
# fresh-clone CI run: 0 migrations). At 700 us node2 overloads once op2 has a bit over
# half the load (about 54 s in), on any machine; a slower one overloads it sooner.
WORK_US = 700


def test_the_controller_moves_load_off_the_overloaded_node_with_counts_exact() -> None:
    """The shift job under the correlated strategy: the controller allocates checkpoints
    from the loads it measured, node2 (70% external load) overloads as op2's share
    grows, and the controller moves op2's groups off it; every tuple counted once.

    Whether those moves were checkpoint-assisted (Madsen & Zhou 2015, section 7.2: the
    allocation put op2's checkpoints on node1 first) depends on the machine's speed, so
    it is measured, not asserted: ``bench/shift_bench.py`` (``docs/benchmarks.md``,
    "The controller on real Storm"). On a loaded machine node2 overloaded before the
    warm-up ended and the first round moved op2's groups direct (session 30, beside one
    CPU hog: 10 and 6 of 10 direct; the CI runs of sessions 28 and 29 failed the
    earlier form of this test, which asserted the assisted share)."""
    driver = ShiftDriver("correlated", duration=85, extra={"elastorm.shift.work_us": WORK_US})
    outcome = run_topology(load_config(), "local", driver, timeout=400)
    facts = outcome.facts
    print(outcome.summary, facts["orders"], facts["holder_moves"])  # the measured share
    assert outcome.ok, outcome.summary  # every tuple counted exactly once
    orders = [(o["key_group"], o["source"], o["protocol"]) for o in facts["orders"]]
    assert facts["migrations"] >= 1, outcome.summary
    # Only node2 overloaded: every move takes an op2 group off it.
    assert all(kg.startswith("op2/") and source == "node2" for kg, source, _ in orders), orders
    assert facts["finished"] == facts["migrations"]
    # The allocation ran, and no checkpoint sits on its own group's node (constraint 1).
    assert facts["allocated_at"] is not None, outcome.summary
    owners = {
        f"{op}/{g}": node for op, r in facts["routing"].items() for g, node in enumerate(r["nodes"])
    }
    assert len(owners) == len(facts["holders"]) == 20, (owners, facts["holders"])
    for kg, nodes in facts["holders"].items():
        assert nodes and owners[kg] not in nodes, (kg, nodes, owners[kg])


class Outage(threading.Thread):
    """Stops a ZooKeeper daemon for ``OUTAGE`` s once the job is counting; records
    what the counters did meanwhile."""

    def __init__(self, cfg, daemon, output_dir: str) -> None:
        super().__init__(daemon=True)
        self.cfg, self.zk, self.output_dir = cfg, daemon, output_dir
        self.counted_before: dict[str, int] = {}
        self.counted_after: dict[str, int] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 120
            while sum(tally(self.output_dir)[1].values()) < 5000:
                if time.monotonic() > deadline:
                    raise TimeoutError("the job never started counting")
                time.sleep(0.5)
            services.stop(self.cfg, self.zk.name, grace=5)
            assert not services.zookeeper_ok(self.zk.port)
            self.counted_before = tally(self.output_dir)[1]
            time.sleep(OUTAGE)
            self.counted_after = tally(self.output_dir)[1]
            services.start(self.cfg, self.zk)
            services.wait_until(
                lambda: services.zookeeper_ok(self.zk.port), self.zk.name, 30, None, None
            )
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.mark.slow  # 85-115 s; test_zk_outage's 20 s stop and chaos zk-stop run in CI/chaos
def test_zookeeper_stopped_20s_while_the_job_runs(tmp_path) -> None:
    from test_zk_outage import private_zookeeper, start_zookeeper

    cfg = load_config()
    zk = private_zookeeper(cfg, "zookeeper-shift-outage")
    start_zookeeper(cfg, zk)
    hosts = f"{services.LOOPBACK}:{zk.port}"
    out = tmp_path / "run"
    out.mkdir()
    outage = Outage(cfg, zk, str(out))
    driver = ShiftDriver("correlated", duration=60, extra={"elastorm.zookeeper.hosts": hosts})
    outage.start()
    try:
        outcome = run_topology(cfg, "local", driver, timeout=500, output_dir=out)
        outage.join(60)
        assert outage.error is None, outage.error
        # Tasks kept processing while ZooKeeper was down.
        gained = {
            op: outage.counted_after.get(op, 0) - outage.counted_before.get(op, 0)
            for op in ("op1", "op2")
        }
        assert sum(gained.values()) > 5000, (outage.counted_before, outage.counted_after)
        # Nothing lost or counted twice.
        assert outcome.ok, outcome.summary
        # The controller's decisions reached ZooKeeper once it was back: the persisted
        # routing and allocation are what it ended with.
        layout = ZnodeLayout(driver.topology)
        client = KazooClient(hosts=hosts)
        client.start(timeout=15)
        try:
            _, routing = decode_routing(client.get(layout.routing("op2"))[0])
            allocation = decode_checkpoints(client.get(layout.checkpoints)[0])
        finally:
            client.stop()
            client.close()
        holders = outcome.facts["holders"]
        for g in range(10):
            assert allocation.holders(KeyGroupId("op2", g)) == tuple(holders[f"op2/{g}"])
        final = outcome.facts["routing"]["op2"]
        assert (routing.epoch, list(routing.owners)) == (final["epoch"], final["owners"])
    finally:
        services.stop(cfg, zk.name, grace=5)
