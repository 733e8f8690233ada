"""The flights job with op2 on elastorm key groups.

Madsen & Zhou 2015, sections 3-5 (system model, architecture, state migration) and 7
(the evaluation on the 2013 flights data).

flights_spout -> extract_delays (op1) --default, by the routing table's task--> sum_delays (op2)
                                      --default (same tuples), fields(key)--> air_share (op3)
                                      --sample, global--> sampled_delay_share (op4)
                                      --elastorm, direct (toState, syncGroup...)--> sum_delays
sum_delays --elastorm_relay--> relay --elastorm--> sum_delays (checkpoints to holders, acks),
           extract_delays (trims, processedAllReplay)  [the relay breaks backpressure cycles]
sum_delays --elastorm_reports--> controller --elastorm--> extract_delays, sum_delays
op2, op3, op4, errors --> results_sink

op2 has ``elastorm.key_groups`` key groups (20) on ``ELASTORM_KEYED_TASKS`` tasks
(default 3); each key group checkpoints every ``elastorm.checkpoint_interval_secs``
(5). ``elastorm migrate`` moves key groups while it runs.
"""

from __future__ import annotations

from streamparse import Grouping, Topology
from streamparse.thrift import GlobalStreamId

from bolts.common import env_int, flights_topology_config
from bolts.flights import (
    SAMPLE_STREAM,
    AirShare,
    ResultsSink,
    SampledDelayShare,
    results_sink_inputs,
)
from bolts.flights_elastic import (
    CONTROLLER,
    OP1,
    OP2,
    RELAY_COMPONENT,
    ElasticExtractDelays,
    KeyedSumDelays,
)
from elastorm.controller.bolt import OPERATORS_KEY, MigrationControllerBolt
from elastorm.storm.elastic import RELAY, REPORTS, STREAM, RelayBolt, by_task
from spouts.flights import FlightsSpout

PARALLELISM = env_int("ELASTORM_PARALLELISM", 2)
KEYED_TASKS = env_int("ELASTORM_KEYED_TASKS", 3, minimum=2)  # an owner and a holder at least


def _from(component: str) -> GlobalStreamId:
    """The ``elastorm`` stream of a component declared later (cycles are by name)."""
    return GlobalStreamId(componentId=component, streamId=STREAM)


class FlightsElasticTopology(Topology):
    config = {**flights_topology_config(), OPERATORS_KEY: {OP2: [OP1]}}

    flights_spout = FlightsSpout.spec(par=1)
    extract_delays = ElasticExtractDelays.spec(
        inputs={
            flights_spout: Grouping.SHUFFLE,
            _from(RELAY_COMPONENT): Grouping.DIRECT,
            _from(CONTROLLER): Grouping.DIRECT,
        },
        par=PARALLELISM,
    )
    sum_delays = KeyedSumDelays.spec(
        inputs={
            extract_delays: by_task(),
            extract_delays[STREAM]: Grouping.DIRECT,
            _from(RELAY_COMPONENT): Grouping.DIRECT,
            _from(CONTROLLER): Grouping.DIRECT,
        },
        par=KEYED_TASKS,
    )
    relay = RelayBolt.spec(name=RELAY_COMPONENT, inputs={sum_delays[RELAY]: Grouping.GLOBAL}, par=1)
    controller = MigrationControllerBolt.spec(inputs={sum_delays[REPORTS]: Grouping.GLOBAL}, par=1)
    air_share = AirShare.spec(inputs={extract_delays: Grouping.fields("key")}, par=PARALLELISM)
    sampled_delay_share = SampledDelayShare.spec(
        inputs={extract_delays[SAMPLE_STREAM]: Grouping.GLOBAL}, par=1
    )
    results_sink = ResultsSink.spec(
        inputs=results_sink_inputs(
            flights_spout, extract_delays, sum_delays, air_share, sampled_delay_share
        ),
        par=1,
    )
