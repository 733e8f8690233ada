"""The synthetic job of the migration benchmark (bench/migration_bench.py).

Madsen & Zhou 2015, section 7.1 (migration latency and completion time, Figs. 5-6).

generator (rate-limited spout) -> emitter (pass-through, elastorm Emitter)
    --elastorm, direct by routing table--> counter (count per key, 20 key groups, 3 tasks)
(``ElasticTopology`` adds the relay, the controller and their direct streams)

Rates, key space and the hot key group come from ``elastorm.synthetic.*`` conf and
the driver's control file (``spouts.synthetic``).
"""

from __future__ import annotations

from streamparse import Grouping

from bolts.common import env_int, topology_config
from bolts.synthetic import SyntheticCounter, SyntheticEmitter
from controller.migration import ProjectController
from demos.options import SyntheticOptions
from elastorm import ElasticTopology, keyed
from elastorm.config import TopologyConfig
from elastorm.storm.elastic import STREAM
from spouts.synthetic import SyntheticSpout

KEYED_TASKS = env_int("ELASTORM_KEYED_TASKS", 3, minimum=3)  # owner, holder, a direct target


class SyntheticTopology(ElasticTopology):
    controller_bolt = ProjectController  # src/controller/
    # A benchmark's generator: no replay, no guarantee (elastorm.sources.at_most_once).
    config = topology_config(TopologyConfig(sources_at_most_once=["generator"]), SyntheticOptions())

    generator = SyntheticSpout.spec(par=1)
    emitter = SyntheticEmitter.spec(inputs={generator: Grouping.SHUFFLE}, par=1)
    counter = SyntheticCounter.spec(inputs={emitter[STREAM]: keyed()}, par=KEYED_TASKS)
