"""The flights job with op2 on elastorm key groups.

Madsen & Zhou 2015, sections 3-5 (system model, architecture, state migration) and 7
(the evaluation on the 2013 flights data).

flights_spout --default, by task (row id mod op1's tasks), numbered per link--> extract_delays
extract_delays (op1) --default, by the routing table's task--> sum_delays (op2)
                     --default (same tuples), fields(key)--> air_share (op3)
                     --sample, global--> sampled_delay_share (op4)
                     --elastorm, direct (toState, syncGroup...)--> sum_delays
op2, op3, op4, errors --> results_sink

``ElasticTopology`` adds the relay, the controller and their direct streams
(``elastorm.storm.topology``).

op2 has ``elastorm.key_groups`` key groups (20) on ``ELASTORM_KEYED_TASKS`` tasks
(default 3); each key group checkpoints every ``elastorm.checkpoint_interval_secs``
(5). ``elastorm migrate`` moves key groups while it runs.
"""

from __future__ import annotations

from streamparse import Grouping

from bolts.common import env_int, flights_topology_config
from bolts.flights import (
    SAMPLE_STREAM,
    AirShare,
    ResultsSink,
    SampledDelayShare,
    results_sink_inputs,
)
from bolts.flights_elastic import ElasticExtractDelays, KeyedSumDelays
from controller.migration import ProjectController
from elastorm import ElasticTopology, keyed
from elastorm.storm.elastic import by_task
from spouts.flights import LinkedFlightsSpout

PARALLELISM = env_int("ELASTORM_PARALLELISM", 2)
KEYED_TASKS = env_int("ELASTORM_KEYED_TASKS", 3, minimum=2)  # an owner and a holder at least


class FlightsElasticTopology(ElasticTopology):
    controller_bolt = ProjectController  # src/controller/
    config = flights_topology_config()

    # The spout picks op1's task of each row and numbers each link, so op1 sees a row
    # lost on the wire and asks for a rewind (docs/failures.md).
    flights_spout = LinkedFlightsSpout.spec(par=1)
    extract_delays = ElasticExtractDelays.spec(inputs={flights_spout: by_task()}, par=PARALLELISM)
    sum_delays = KeyedSumDelays.spec(inputs={extract_delays: keyed()}, par=KEYED_TASKS)
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
