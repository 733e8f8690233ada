"""The join job's spout: the flights rows as their two sides, arrivals and air times.

Each well-formed row becomes up to two tuples (``demos.flights_join.split_flight``; an
NA side is not sent), on the streams the join's router subscribes to by ``keyed``:

- ``arrivals``: ``[position, tailnum, row, arr_delay]``
- ``airtimes``: ``[position, tailnum, row, air_time, ts]``

``position`` is ``2 * row`` for the arrival and ``2 * row + 1`` for the air time: it
grows with every tuple, so the spout is replayable straight into the router (the
positions a row's sides take are the row's, whether sent or not). Splitting in a
plain bolt behind the spout, as the job did until session 32, put a component no
replay passes between the spout and the router: a restarted spout began again at
row 0 and its rows were applied twice (chaos ``join/zk-stop``, ``docs/failures.md``).
Everything else (rows read, malformed rows, stats, pacing) is ``FlightsSpout``'s.
"""

from __future__ import annotations

from streamparse import Stream

from bolts.common import ERROR_FIELDS, ERRORS_STREAM
from bolts.flights_join import AIRTIMES, ARRIVALS
from demos.flights_join import split_flight
from elastorm.storm.replay import REWIND
from spouts.flights import FlightsSpout

SIDES = 2  # tuple positions per row: the arrival's, then the air time's


class SplitFlightsSpout(FlightsSpout):
    """``FlightsSpout`` emitting each row's two sides (see the module docstring)."""

    positions_per_row = SIDES
    outputs = [
        Stream(fields=["position", "tailnum", "row", "arr_delay"], name=ARRIVALS),
        Stream(fields=["position", "tailnum", "row", "air_time", "ts"], name=AIRTIMES),
        Stream(fields=ERROR_FIELDS, name=ERRORS_STREAM),
        REWIND,
    ]

    def emit_parsed(self, row_no: int, parsed: tuple) -> None:
        tailnum, _, arr_delay, air_time, ts = parsed
        arrival, air = split_flight(row_no, tailnum, arr_delay, air_time, ts)
        if arrival is not None:
            self.emit([SIDES * row_no, *arrival], stream=ARRIVALS)
        if air is not None:
            self.emit([SIDES * row_no + 1, *air], stream=AIRTIMES)
