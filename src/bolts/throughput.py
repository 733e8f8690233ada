"""The counters of the keyed-count throughput benchmark (bench/throughput.py).

Both count tuples per key and measure each tuple's end-to-end latency (now minus
the spout's stamp) into a histogram keyed by each bucket's upper edge in ms
(:func:`bucket_edge`: 0.1 ms wide below 10 ms, 1 ms below 100 ms, 10 ms below
2 s, then one bucket); on every tick they write
``<output_dir>/throughput-<task>.json`` with the cumulative tuple count and
histogram, which the driver differences between two reads. The histogram stays
under 400 buckets, so writing it costs the measured task well under a
millisecond (0.1 ms buckets up to 2 s grew to 15,000 entries after a saturated
phase, and their JSON held the task up for tens of ms every second: that stall
was the p99 the benchmark reported).

* :class:`PlainCounter`: a plain streamparse bolt (fields grouping on the key);
* :class:`KeyedCounter`: an elastorm ``KeyedBolt`` (state in key groups,
  checkpoints, routing, the relay and the controller beside it).
"""

from __future__ import annotations

import math
import os
import time

from streamparse import Bolt

from bolts.common import required_output_dir, write_json_atomic
from elastorm.core.keyed_state import ValueState
from elastorm.storm.keyed_bolt import KeyedBolt
from elastorm.storm.wire import use_elastorm_wire

TOP_MS = 2000.0  # 2 s and above share the last bucket


def bucket_edge(latency_ms: float) -> str:
    """The upper edge (ms, as the histogram's key) of the bucket of ``latency_ms``.

    >>> [bucket_edge(ms) for ms in (0.03, 3.21, 42.5, 300.1, 9e9)]
    ['0.1', '3.3', '43', '310', '2000']
    """
    if latency_ms < 10:
        return f"{max(1, math.ceil(latency_ms * 10)) / 10:.1f}"
    if latency_ms < 100:
        return str(math.ceil(latency_ms))
    if latency_ms < TOP_MS:
        return str(math.ceil(latency_ms / 10) * 10)
    return str(int(TOP_MS))


class LatencyCounts:
    """Tuples seen and their latency histogram; written as one JSON file."""

    def __init__(self, conf, context) -> None:
        task = int(context["taskid"])
        self.path = os.path.join(required_output_dir(conf), f"throughput-{task}.json")
        self.tuples = 0
        self.histogram: dict[str, int] = {}

    def add(self, stamp: float) -> None:
        self.tuples += 1
        b = bucket_edge((time.time() - stamp) * 1000)
        h = self.histogram
        h[b] = h.get(b, 0) + 1

    def write(self) -> None:
        write_json_atomic(
            self.path,
            {"at": time.time(), "tuples": self.tuples, "histogram": self.histogram},
        )


class PlainCounter(Bolt):
    """Count per key in a dict; a plain streamparse bolt."""

    outputs: list = []

    def initialize(self, conf, context):
        use_elastorm_wire(self, conf)  # no acks if released on delivery
        self.counts: dict[str, int] = {}
        self.latency = LatencyCounts(conf, context)

    def process(self, tup):
        key, stamp = tup.values
        self.counts[key] = self.counts.get(key, 0) + 1
        self.latency.add(stamp)

    def process_tick(self, tup):
        self.latency.write()


class KeyedCounter(KeyedBolt):
    """Count per key in elastorm key-group state."""

    count = ValueState(default=0)

    def initialize(self, conf, context):
        super().initialize(conf, context)
        self.latency = LatencyCounts(conf, context)

    def process_keyed(self, key, values):
        self.count.update(self.count.value() + 1)
        self.latency.add(values[1])

    def process_tick(self, tup):
        super().process_tick(tup)
        self.latency.write()
