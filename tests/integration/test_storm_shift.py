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


def test_correlated_allocation_makes_every_migration_checkpoint_assisted() -> None:
    driver = ShiftDriver("correlated", duration=85, extra={"elastorm.shift.work_us": WORK_US})
    outcome = run_topology(load_config(), "local", driver, timeout=400)
    facts = outcome.facts
    assert outcome.ok, outcome.summary  # every tuple counted exactly once
    # At the allocation op2's checkpoints went to node1, where op1's load is leaving
    # (correlation -1); they started on node0 (the next node after node2). Under load
    # some stayed on node0, their groups' samples too sparse to move them (2 of 10 in
    # one fresh-clone CI run, 3 in another, a6f5076); what matters is that no op2
    # checkpoint went elsewhere and that every group the controller migrated found its
    # checkpoint on node1, so its move was assisted. (Not necessarily by a recorded
    # allocation round: a fresh-clone CI run, session 28, migrated op2/7 and op2/8
    # assisted though no round listed their holder move; the holder a move's protocol
    # is chosen by is the controller's, whatever placed it there.)
    op2_moves = {m["key_group"]: m["to"] for m in facts["holder_moves"] if "op2/" in m["key_group"]}
    assert set(op2_moves.values()) == {"node1"}, facts["holder_moves"]
    assert len(op2_moves) >= 6, facts["holder_moves"]
    # Node2 (70% external load) overloaded as op2's share grew; the controller moved
    # op2's groups to node1, each from the checkpoint already there.
    orders = [(o["key_group"], o["target"], o["protocol"]) for o in facts["orders"]]
    assert facts["migrations"] >= 1, outcome.summary
    assert all(kg.startswith("op2/") and target == "node1" for kg, target, _ in orders), orders
    assert facts["assisted_share"] == 1.0, (orders, facts["holder_moves"])
    assert facts["finished"] == facts["migrations"]


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
