"""The spout of the keyed-count throughput benchmark (bench/throughput.py).

Emits ``(key, stamp)`` tuples without tuple ids, round robin over
``elastorm.throughput.keys`` keys, ``elastorm.throughput.batch`` per call, at
``elastorm.throughput.rate`` tuples/s (0: as fast as Storm asks). ``stamp`` is
``time.time()`` at the emit: the counter measures end-to-end latency from it.
The driver changes the rate while the topology runs by writing
``<output_dir>/throughput-control.json`` (``{"rate": ...}``), re-read every
``CONTROL_POLL_SECS``.
"""

from __future__ import annotations

import json
import os
import time

from streamparse import Spout

from bolts.common import required_output_dir
from elastorm.examples.options import ThroughputOptions
from elastorm.storm.wire import use_elastorm_wire

CONTROL_FILE = "throughput-control.json"
CONTROL_POLL_SECS = 0.5


class ThroughputSpout(Spout):
    outputs = ["key", "stamp"]

    def initialize(self, conf, context):
        use_elastorm_wire(self, conf)  # batched emits (a no-op with Storm's serializer)
        options = ThroughputOptions.from_conf(conf)
        self.keys = [f"k{i}" for i in range(options.keys)]
        self.batch = options.batch
        self.control = os.path.join(required_output_dir(conf), CONTROL_FILE)
        self.rate = options.rate
        self.next_key = 0
        self.since = time.monotonic()  # when the current rate started
        self.sent_since = 0
        self.polled = 0.0

    def _poll(self, now: float) -> None:
        self.polled = now
        try:
            with open(self.control, encoding="utf-8") as f:
                rate = float(json.load(f)["rate"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if rate != self.rate:
            self.rate, self.since, self.sent_since = rate, now, 0

    def next_tuple(self):
        now = time.monotonic()
        if now - self.polled >= CONTROL_POLL_SECS:
            self._poll(now)
        count = self.batch
        if self.rate > 0:
            due = int((now - self.since) * self.rate) - self.sent_since
            if due <= 0:
                time.sleep(min(0.001, -due / self.rate + 1e-4))
                return
            count = min(count, due)
        keys, n, i = self.keys, len(self.keys), self.next_key
        emit = self.emit
        for _ in range(count):
            emit([keys[i], time.time()])
            i = i + 1 if i + 1 < n else 0
        self.next_key = i
        self.sent_since += count
