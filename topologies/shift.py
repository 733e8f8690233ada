"""The shift job on real Storm: load shifts from op1 to op2 (correlation -1).

Madsen & Zhou 2015, section 7.2 (the experiment in which load shifts between nodes:
checkpoint allocation and load balancing).

generator (ShiftSpout) -> emitter --elastorm, direct--> op1, op2 (count per key,
10 key groups each, one task per node: node0, node1, node2)
(``ElasticTopology`` adds the relay, the controller and their direct streams)

As in the paper: op1's key groups start on node1, op2's on node2; node0 and
node2 are under a 70% external CPU load (emulated, see ``elastorm.storm.load``). The
controller allocates checkpoints after a warm-up with
``ELASTORM_STRATEGY`` (none, baseline, even, correlated) and then balances load
from the heartbeats. ``drivers.shift`` runs it and reports the share of
checkpoint-assisted migrations.
"""

from __future__ import annotations

import os

from streamparse import Grouping

from bolts.common import topology_config
from bolts.shift import ShiftCounter, ShiftEmitter
from controller.migration import ProjectController
from demos.options import ShiftOptions
from elastorm import ElasticTopology, keyed
from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.storm.elastic import STREAM
from spouts.shift import ShiftSpout

NODES = 3


class ShiftTopology(ElasticTopology):
    controller_bolt = ProjectController  # src/controller/
    config = topology_config(
        TopologyConfig(
            key_groups=10,
            checkpoint_interval_secs=2,
            initial_nodes={"op1": [1], "op2": [2]},
            sources_at_most_once=["generator"],  # a load generator: no replay, no guarantee
            external_load={"node0": 0.7, "node2": 0.7},
            controller=ControllerConfig(
                adapt=True,
                strategy=os.environ.get("ELASTORM_STRATEGY", "correlated"),
                warmup_secs=40,
                reallocate_secs=1e9,
                cpu_high=0.8,
                cpu_low=0.5,
                queue_high=50,
                queue_low=20,
                cooldown_secs=30,
                scale_in=False,
            ),
        ),
        ShiftOptions(),
    )

    generator = ShiftSpout.spec(par=1)
    emitter = ShiftEmitter.spec(inputs={generator: Grouping.SHUFFLE}, par=1)
    op1 = ShiftCounter.spec(name="op1", inputs={emitter[STREAM]: keyed()}, par=NODES)
    op2 = ShiftCounter.spec(name="op2", inputs={emitter[STREAM]: keyed()}, par=NODES)
