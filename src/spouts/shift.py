"""The spout of the shift job: load shifts from one operator to another.

The job is Madsen & Zhou 2015, section 7.2 (the experiment in which load shifts between
nodes: checkpoint allocation and load balancing).

Emits ``(key, operator, stamp)`` at ``elastorm.shift.rate`` tuples/s. Each tuple
goes to operator ``op2`` with probability ``p(t)`` and to ``op1`` otherwise,
where ``p`` grows linearly from 0 to 1 over ``elastorm.shift.ramp_secs`` seconds
after a ``elastorm.shift.hold_secs`` start (the paper: one percent more each
second, all on operator 2 after 100 s), so the two operators' loads are
correlated -1. Keys are drawn uniformly from ``elastorm.shift.keys`` keys.
The counters spend ``elastorm.shift.work_us`` of CPU on each tuple (the
operator's computation; the paper's job only counts, but on our shared machine a
bare count is too cheap for a 70%-loaded node to run out of CPU).
After ``elastorm.shift.duration_secs`` (0: never) the spout stops emitting; its
counts file then says ``done`` with how many tuples went to each operator, which
the driver checks against the operators' state.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from streamparse import Stream

from demos.options import ShiftOptions
from spouts.synthetic import PacedSpout, Pacer

OPERATORS = ("op1", "op2")
FIELDS = ["key", "operator", "stamp"]


def share_to_op2(elapsed: float, hold: float, ramp: float) -> float:
    """``p(t)``: 0 during the hold, then linear up to 1 over ``ramp`` seconds (0: a step)."""
    if ramp <= 0:
        return 1.0 if elapsed >= hold else 0.0
    return min(1.0, max(0.0, (elapsed - hold) / ramp))


class ShiftSpout(PacedSpout):
    """Rate-limited generator of the shifting load; see the module docstring."""

    outputs = [Stream(fields=FIELDS)]

    def setup(self, storm_conf: Mapping[str, Any]) -> None:
        task = self.counters.task
        self.cfg = ShiftOptions.from_conf(storm_conf)
        self.random = random.Random(int(self.cfg.seed) * 1000 + task)
        self.keys = [f"k{i}" for i in range(int(self.cfg.keys))]
        self.sent = dict.fromkeys(OPERATORS, 0)
        self.start = self.clock()
        self.pacer = Pacer(self.cfg.rate, self.start)
        self.done = False

    def next_tuple(self):
        now = self.clock()
        if now >= self.counters.next_write:
            self.write_counts()
        elapsed = now - self.start
        duration = self.cfg.duration_secs
        if self.done or (duration and elapsed >= duration):
            if not self.done:
                self.done = True
                self.write_counts()
            self.sleep(0.05)
            return
        n = min(self.pacer.due(now), int(self.cfg.batch))
        if n == 0:
            self.sleep(min(0.005, 1.0 / max(self.pacer.rate, 1.0)))
            return
        p = share_to_op2(elapsed, self.cfg.hold_secs, self.cfg.ramp_secs)
        rnd, keys, wall = self.random.random, self.keys, self.wall()
        for _ in range(n):
            op = "op2" if rnd() < p else "op1"
            self.emit([keys[int(rnd() * len(keys))], op, wall])
            self.sent[op] += 1
        self.pacer.sent += n
        self.counters.out["default"] += n

    def write_counts(self) -> None:
        self.counters.extra = {
            "sent": dict(self.sent),
            "done": self.done,
            "share_to_op2": share_to_op2(
                self.clock() - self.start, self.cfg.hold_secs, self.cfg.ramp_secs
            ),
        }
        self.counters.write()
