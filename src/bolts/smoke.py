"""Smoke-test bolt: counts what it receives and writes ``<output_dir>/smoke-<task>.json``."""

from __future__ import annotations

import json
import os

from streamparse import Bolt

from elastorm.config import TopologyConfig


class CounterBolt(Bolt):
    """Count and sum the numbers it gets; record which task got them."""

    def initialize(self, storm_conf, context):
        self.task = context["taskid"]
        out = TopologyConfig.from_conf(storm_conf).output_dir or "."
        self.path = os.path.join(out, f"smoke-{self.task}.json")
        self.received = 0
        self.total = 0
        self.wrong_payload = 0

    def process(self, tup):
        n, payload = tup.values
        if payload != {"n": n, "digits": [int(d) for d in str(n)]}:
            self.wrong_payload += 1
        self.received += 1
        self.total += n
        self._write()

    def _write(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(
                {
                    "task": self.task,
                    "received": self.received,
                    "total": self.total,
                    "wrong_payload": self.wrong_payload,
                },
                fh,
            )
        os.replace(tmp, self.path)
