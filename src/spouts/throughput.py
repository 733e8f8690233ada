"""The spout of the keyed-count throughput benchmark (bench/throughput.py).

Emits ``(key, stamp)`` tuples without tuple ids, round robin over
``elastorm.throughput.keys`` keys, ``elastorm.throughput.batch`` per call, at
``elastorm.throughput.rate`` tuples/s (0: as fast as Storm asks). ``stamp`` is
``time.time()`` at the emit: the counter measures end-to-end latency from it.
The driver changes the rate while the topology runs through
``<output_dir>/throughput-control.json``
(:class:`~demos.throughput_control.RateControl`).
"""

from __future__ import annotations

import math
import time

from streamparse import Spout

from bolts.common import required_output_dir
from demos.options import ThroughputOptions
from demos.throughput_control import RateControl
from elastorm.storm.wire import use_elastorm_wire


class ThroughputSpout(Spout):
    outputs = ["key", "stamp"]

    def initialize(self, conf, context):
        use_elastorm_wire(self, conf)  # batched emits (a no-op with Storm's serializer)
        options = ThroughputOptions.from_conf(conf)
        self.keys = [f"k{i}" for i in range(options.keys)]
        self.batch = options.batch
        self.control = RateControl(required_output_dir(conf), options.rate, time.monotonic())
        self.next_key = 0

    def next_tuple(self):
        due = self.control.due(time.monotonic())
        count = self.batch
        if due != math.inf:
            whole = int(due)
            if whole <= 0:
                time.sleep(min(0.001, -whole / self.control.rate + 1e-4))
                return
            count = min(count, whole)
        keys, n, i = self.keys, len(self.keys), self.next_key
        emit = self.emit
        for _ in range(count):
            emit([keys[i], time.time()])
            i = i + 1 if i + 1 < n else 0
        self.next_key = i
        self.control.sent(count)
