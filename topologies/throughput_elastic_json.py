"""``topologies/throughput_elastic.py`` on the JSON wire (bench/throughput.py's
``elastic_json``): every Python component started with ``-s json``
(``elastorm.multilang.encoding``; msgpack by default), and elastorm's JVM serializer
with it.
"""

from __future__ import annotations

from bolts.common import topology_config
from bolts.throughput import KeyedCounter
from controller.migration import ProjectController
from demos.options import ThroughputOptions
from elastorm import ElasticTopology, keyed
from elastorm.config import TopologyConfig
from spouts.throughput import ThroughputSpout


class ThroughputElasticJson(ElasticTopology):
    controller_bolt = ProjectController  # src/controller/
    config = topology_config(
        TopologyConfig(
            initial_nodes={"counter": [0]},
            multilang_encoding="json",
            sources_at_most_once=["spout"],  # a benchmark's load: no replay, no guarantee
        ),
        ThroughputOptions(),
    )

    spout = ThroughputSpout.spec(par=1)
    counter = KeyedCounter.spec(inputs={spout: keyed("key")}, par=2)
