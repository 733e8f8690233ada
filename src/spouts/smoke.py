"""Smoke-test spout: emits 0..N-1 on a *direct* stream, spread over the counter's tasks.

Proves that a direct emit (what elastorm's routing needs) works through our submit
path on real Storm, and that tuples holding lists and maps survive the trip from
one worker to another (Kryo). Configured by ``elastorm.smoke.count`` (default 1000).
"""

from __future__ import annotations

import time

from streamparse import Spout, Stream

from demos.options import SmokeOptions


class NumberSpout(Spout):
    """Emit each number once, directly to task ``n mod len(counter tasks)``."""

    outputs = [Stream(fields=["n", "payload"], direct=True)]

    def initialize(self, storm_conf, context):
        self.count = SmokeOptions.from_conf(storm_conf).count
        self.next_n = 0
        counter_tasks = sorted(
            int(task) for task, comp in context["task->component"].items() if comp == "counter"
        )
        if not counter_tasks:
            raise ValueError("smoke topology has no 'counter' component")
        self.targets = counter_tasks

    def next_tuple(self):
        if self.next_n >= self.count:
            time.sleep(0.05)
            return
        n = self.next_n
        self.next_n += 1
        payload = {"n": n, "digits": [int(d) for d in str(n)]}
        self.emit([n, payload], direct_task=self.targets[n % len(self.targets)])
