"""The flights load on real Storm, through three keyed operators.

Madsen & Zhou 2015, section 7.3 (the flights load: checkpoint-assisted migrations and usable
checkpoints).

generator (FlightsLoadSpout: flights rows at a ramping rate) -> emitter
    --elastorm, direct--> op2 (delays per plane), op3 (air time per plane),
                          op4 (a sampled plane every 200 ms)
op2, op3, op4: a count per key in key groups, one task per node (node0..node3)
(``ElasticTopology`` adds the relay, the controller and their direct streams)

As in the paper, op2 and op3 start on the "operator" nodes (node0-2) and op4 on
its own (node3); the operator nodes have little spare CPU (an emulated external
load, see ``elastorm.storm.load``), so the rising load overloads them and the controller
moves key groups to node3. ``drivers.flights_load.FlightsLoadDriver`` runs it
with a key-group count and a checkpoint-allocation strategy.
"""

from __future__ import annotations

from streamparse import Grouping

from bolts.common import topology_config
from bolts.shift import ShiftCounter, ShiftEmitter
from controller.migration import ProjectController
from demos.options import FlightsLoadOptions, ShiftOptions
from elastorm import ElasticTopology, keyed
from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.storm.elastic import STREAM
from spouts.flights_load import FlightsLoadSpout

NODES = 4


class FlightsLoadTopology(ElasticTopology):
    controller_bolt = ProjectController  # src/controller/
    config = topology_config(
        TopologyConfig(
            key_groups=16,
            checkpoint_interval_secs=2,
            initial_nodes={"op2": [0, 1, 2], "op3": [0, 1, 2], "op4": [3]},
            sources_at_most_once=["generator"],  # a load generator: no replay, no guarantee
            external_load={"node0": 0.8, "node1": 0.8, "node2": 0.8},
            controller=ControllerConfig(
                adapt=True,
                strategy="correlated",
                warmup_secs=60,
                reallocate_secs=1e9,
                cpu_high=0.8,
                cpu_low=0.5,
                queue_high=50,
                queue_low=20,
                cooldown_secs=60,
                scale_in=False,
            ),
        ),
        ShiftOptions(work_us=1000),
        FlightsLoadOptions(),
    )

    generator = FlightsLoadSpout.spec(par=1)
    emitter = ShiftEmitter.spec(inputs={generator: Grouping.SHUFFLE}, par=1)
    op2 = ShiftCounter.spec(name="op2", inputs={emitter[STREAM]: keyed()}, par=NODES)
    op3 = ShiftCounter.spec(name="op3", inputs={emitter[STREAM]: keyed()}, par=NODES)
    op4 = ShiftCounter.spec(name="op4", inputs={emitter[STREAM]: keyed()}, par=NODES)
