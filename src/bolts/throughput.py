"""The counters of the keyed-count throughput benchmark (bench/throughput.py).

Both count tuples per key and measure each tuple's end-to-end latency (now minus
the spout's stamp) in a :class:`~demos.latency_counts.LatencyCounts`,
written on every tick to ``<output_dir>/throughput-<task>.json``.

* :class:`PlainCounter`: a plain streamparse bolt (fields grouping on the key);
* :class:`KeyedCounter`: an elastorm ``KeyedBolt`` (state in key groups,
  checkpoints, routing, the relay and the controller beside it).
"""

from __future__ import annotations

import os

from streamparse import Bolt

from bolts.common import required_output_dir
from demos.latency_counts import LatencyCounts
from elastorm.core.keyed_state import ValueState
from elastorm.storm.keyed_bolt import KeyedBolt
from elastorm.storm.wire import use_elastorm_wire


def latency_counts(conf, context) -> LatencyCounts:
    """This task's counts, written to ``<output_dir>/throughput-<task>.json``."""
    task = int(context["taskid"])
    return LatencyCounts(os.path.join(required_output_dir(conf), f"throughput-{task}.json"))


class PlainCounter(Bolt):
    """Count per key in a dict; a plain streamparse bolt."""

    outputs: list = []

    def initialize(self, conf, context):
        use_elastorm_wire(self, conf)  # no acks if released on delivery
        self.counts: dict[str, int] = {}
        self.latency = latency_counts(conf, context)

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
        self.latency = latency_counts(conf, context)

    def process_keyed(self, key, values):
        self.count.update(self.count.value() + 1)
        self.latency.add(values[1])

    def process_tick(self, tup):
        super().process_tick(tup)
        self.latency.write()
