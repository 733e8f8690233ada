"""The flights job as a streamparse topology (Madsen & Zhou 2015, section 7:
the paper's evaluation on the 2013 flights data).

flights_spout --default--> extract_delays (op1, shuffle)
extract_delays --default--> sum_delays (op2), air_share (op3)   fields grouping on key
extract_delays --sample---> sampled_delay_share (op4)           global
op2, op3, op4 --default--> results_sink                         global
flights_spout, op1..op4 --errors--> results_sink                global

Parallelism: ``PARALLELISM`` tasks for op1-op3 (env ``ELASTORM_PARALLELISM``,
default 2); one for the spout (it reads the file in order), op4 and the sink.

The topology config turns on tick tuples every second (the bolts flush their
batched updates and counters on ticks). ``elastorm.output_dir`` must be given at
submit (``-o elastorm.output_dir=/abs/dir``) or through the environment variable
``ELASTORM_OUTPUT_DIR`` when this module is imported; ``ELASTORM_FLIGHTS_LIMIT``
likewise sets ``elastorm.flights.limit``.
"""

from __future__ import annotations

from streamparse import Grouping, Topology

from bolts.common import env_int, flights_topology_config
from bolts.flights import (
    SAMPLE_STREAM,
    AirShare,
    ExtractDelays,
    ResultsSink,
    SampledDelayShare,
    SumDelays,
    results_sink_inputs,
)
from spouts.flights import FlightsSpout

PARALLELISM = env_int("ELASTORM_PARALLELISM", 2)


class FlightsTopology(Topology):
    config = flights_topology_config()

    flights_spout = FlightsSpout.spec(par=1)
    extract_delays = ExtractDelays.spec(inputs=[flights_spout], par=PARALLELISM)
    sum_delays = SumDelays.spec(inputs={extract_delays: Grouping.fields("key")}, par=PARALLELISM)
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
