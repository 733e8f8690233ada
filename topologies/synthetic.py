"""The synthetic job of the migration benchmark (bench/migration_bench.py).

Madsen & Zhou 2015, section 7.1 (migration latency and completion time, Figs. 5-6).

generator (rate-limited spout) -> emitter (pass-through, elastorm Emitter)
    --elastorm, direct by routing table--> counter (count per key, 20 key groups, 3 tasks)
counter --elastorm_relay--> relay --elastorm--> counter (checkpoints, acks),
        emitter (trims, processedAllReplay); counter --elastorm_reports--> controller
controller --elastorm--> counter, emitter

Rates, key space and the hot key group come from ``elastorm.synthetic.*`` conf and
the driver's control file (``spouts.synthetic``).
"""

from __future__ import annotations

from streamparse import Grouping, Topology
from streamparse.thrift import GlobalStreamId

from bolts.common import env_int, topology_config
from bolts.synthetic import (
    CONTROLLER,
    RELAY_COMPONENT,
    SyntheticController,
    SyntheticCounter,
    SyntheticEmitter,
)
from elastorm.config import TopologyConfig
from elastorm.examples.options import SyntheticOptions
from elastorm.storm.elastic import RELAY, REPORTS, STREAM, RelayBolt
from spouts.synthetic import SyntheticSpout

KEYED_TASKS = env_int("ELASTORM_KEYED_TASKS", 3, minimum=3)  # owner, holder, a direct target


def _from(component: str) -> GlobalStreamId:
    return GlobalStreamId(componentId=component, streamId=STREAM)


class SyntheticTopology(Topology):
    config = topology_config(TopologyConfig(), SyntheticOptions())

    generator = SyntheticSpout.spec(par=1)
    emitter = SyntheticEmitter.spec(
        inputs={
            generator: Grouping.SHUFFLE,
            _from(RELAY_COMPONENT): Grouping.DIRECT,
            _from(CONTROLLER): Grouping.DIRECT,
        },
        par=1,
    )
    counter = SyntheticCounter.spec(
        inputs={
            emitter[STREAM]: Grouping.DIRECT,
            _from(RELAY_COMPONENT): Grouping.DIRECT,
            _from(CONTROLLER): Grouping.DIRECT,
        },
        par=KEYED_TASKS,
    )
    relay = RelayBolt.spec(name=RELAY_COMPONENT, inputs={counter[RELAY]: Grouping.GLOBAL}, par=1)
    controller = SyntheticController.spec(inputs={counter[REPORTS]: Grouping.GLOBAL}, par=1)
