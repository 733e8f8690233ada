"""Keyed-count throughput benchmark on key groups (bench/throughput.py).

spout --keyed("key")--> (router) --elastorm, direct--> counter: 2 tasks, all 20
key groups owned by the first (``elastorm.initial_nodes``), the second holds their
checkpoints (every 5 s); ``ElasticTopology`` adds the router, the relay and the
controller.
"""

from __future__ import annotations

from bolts.common import topology_config
from bolts.throughput import KeyedCounter
from controller.migration import ProjectController
from demos.options import ThroughputOptions
from elastorm import ElasticTopology, keyed
from elastorm.config import TopologyConfig
from spouts.throughput import ThroughputSpout


class ThroughputElastic(ElasticTopology):
    controller_bolt = ProjectController  # src/controller/
    config = topology_config(
        TopologyConfig(
            initial_nodes={"counter": [0]},
            sources_at_most_once=["spout"],  # a benchmark's load: no replay, no guarantee
        ),
        ThroughputOptions(),
    )

    spout = ThroughputSpout.spec(par=1)
    counter = KeyedCounter.spec(inputs={spout: keyed("key")}, par=2)
