"""The side-by-side's windowed word count in Bytewax 0.21 (run by ``run.py``).

Per word, how often it came in each 5-second tumbling window of event time; event
time is the word's position in the stream / 100. Reads the stream from a file, one
word a line; prints ``word start count`` per window. Usage, in the Bytewax
virtualenv: ``python -m bytewax.run bytewax_windowcount:flow`` with ``WORDS_FILE`` set.
"""

import os
from datetime import UTC, datetime, timedelta

import bytewax.operators as op
from bytewax.connectors.stdio import StdOutSink
from bytewax.dataflow import Dataflow
from bytewax.operators.windowing import EventClock, TumblingWindower, count_window
from bytewax.testing import TestingSource

ZERO = datetime(1970, 1, 1, tzinfo=UTC)
with open(os.environ["WORDS_FILE"]) as f:
    words = list(enumerate(f.read().split()))

flow = Dataflow("windowcount")
stream = op.input("words", flow, TestingSource(words))
# The watermark is the latest event time seen: a clock that never moves adds no system
# time to it, and no system-time wake-ups (windows close on items and at end of input).
clock = EventClock(
    lambda pw: ZERO + timedelta(seconds=pw[0] / 100), timedelta(0), lambda: ZERO, lambda t: None
)
windower = TumblingWindower(length=timedelta(seconds=5), align_to=ZERO)
counts = count_window("count", stream, clock, windower, key=lambda pw: pw[1])
lines = op.map("format", counts.down, lambda kv: f"{kv[0]} {kv[1][0] * 5} {kv[1][1]}")
op.output("print", lines, StdOutSink())
