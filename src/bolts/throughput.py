"""The counters of the keyed-count throughput benchmark (bench/throughput.py).

Both count tuples per key and measure each tuple's end-to-end latency (now minus
the spout's stamp) into a histogram of ``BUCKET_MS`` buckets; on every tick they
write ``<output_dir>/throughput-<task>.json`` with the cumulative tuple count and
histogram, which the driver differences between two reads.

* :class:`PlainCounter`: a plain streamparse bolt (fields grouping on the key);
* :class:`KeyedCounter`: an elastorm ``KeyedBolt`` (state in key groups,
  checkpoints, routing, the relay and the controller beside it).
"""

from __future__ import annotations

import os
import time

from streamparse import Bolt

from bolts.common import required_output_dir, write_json_atomic
from elastorm.core.keyed_state import ValueState
from elastorm.storm.keyed_bolt import KeyedBolt
from elastorm.storm.wire import use_elastorm_wire

BUCKET_MS = 0.1
TOP_BUCKET = 20000  # 2 s and above share the last bucket


class LatencyCounts:
    """Tuples seen and their latency histogram; written as one JSON file."""

    def __init__(self, conf, context) -> None:
        task = int(context["taskid"])
        self.path = os.path.join(required_output_dir(conf), f"throughput-{task}.json")
        self.tuples = 0
        self.histogram: dict[int, int] = {}

    def add(self, stamp: float) -> None:
        self.tuples += 1
        b = int((time.time() - stamp) * (1000 / BUCKET_MS))
        if b > TOP_BUCKET:
            b = TOP_BUCKET
        h = self.histogram
        h[b] = h.get(b, 0) + 1

    def write(self) -> None:
        write_json_atomic(
            self.path,
            {"at": time.time(), "tuples": self.tuples, "bucket_ms": BUCKET_MS,
             "histogram": self.histogram},
        )  # fmt: skip


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
