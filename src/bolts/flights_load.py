"""Bolts of the flights-load job (``topologies/flights_load.py``): the shift job's
emitter, counters and controller, on the flights operators op2, op3 and op4."""

from __future__ import annotations

from bolts.shift import ShiftEmitter
from spouts.flights_load import OPERATORS


class FlightsLoadEmitter(ShiftEmitter):
    """Pass-through to op2, op3 and op4 by key group."""

    keyed_components = OPERATORS
