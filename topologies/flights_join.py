"""The join-and-window job: two keyed inputs joined by plane, then a tumbling window.

flights_spout --arrivals, keyed(tailnum)--> join_flights (correlated input)
              --airtimes, keyed(tailnum)-->
join_flights --keyed(tailnum)--> daily_windows (per plane and UTC day) --> join_sink

Both keyed bolts are written with elastorm's public API (``KeyedBolt``, ``keyed()``;
``bolts.flights_join``); ``ElasticTopology`` adds a router in front of each, the
relay and the controller. The spout (``spouts.flights_join``) sends each row's two sides
itself and replays into the router: every component between the file and the sink is
elastorm's to recover. ``join_flights`` is declared a join
(``elastorm.join_operators``), so the Output Fidelity model counts a flight as
lost when either of its sides is. ``ELASTORM_KEYED_TASKS`` tasks per keyed bolt
(default 3).
"""

from __future__ import annotations

from streamparse import Grouping

from bolts.common import env_int, flights_topology_config
from bolts.flights_join import AIRTIMES, ARRIVALS, DailyWindows, JoinFlights, JoinWindowSink
from controller.migration import ProjectController
from elastorm import ElasticTopology, keyed
from spouts.flights_join import SplitFlightsSpout

KEYED_TASKS = env_int("ELASTORM_KEYED_TASKS", 3, minimum=2)  # an owner and a holder at least


class FlightsJoinTopology(ElasticTopology):
    controller_bolt = ProjectController  # src/controller/
    config = flights_topology_config(join_operators=["join_flights"])

    flights_spout = SplitFlightsSpout.spec(par=1)
    join_flights = JoinFlights.spec(
        inputs={
            flights_spout[ARRIVALS]: keyed("tailnum"),
            flights_spout[AIRTIMES]: keyed("tailnum"),
        },
        par=KEYED_TASKS,
    )
    daily_windows = DailyWindows.spec(inputs={join_flights: keyed("tailnum")}, par=KEYED_TASKS)
    join_sink = JoinWindowSink.spec(inputs={daily_windows: Grouping.GLOBAL}, par=1)
