"""Bolts of the flights-load job (``topologies/flights_load.py``): the shift job's
emitter and counters, on the flights operators op2, op3 and op4 (the wiring tells
the emitter which operators it feeds)."""
