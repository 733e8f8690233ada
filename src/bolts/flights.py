"""The flights job's operators and sink (Madsen & Zhou 2015, section 7:
the paper's evaluation on the 2013 flights data).

``spout -> op1 ExtractDelays -> op2 SumDelays, op3 AirShare (fields grouping on
key = tailnum), op4 SampledDelayShare (samples) -> ResultsSink``.

op2-op4 keep cumulative totals and send them to the sink as *update* tuples
``(role, seen, updates, ids, tentative)``: ``seen`` is how many input tuples the
sending task has processed, ``updates`` the current totals ``[key, year, *totals]``
of every key changed since the previous update, ``ids`` the row ids op4 sampled
since its previous update (empty for op2/op3), ``tentative`` the keys of
``updates`` whose totals are tentative (the elastic op2 while state it depends on
is being recovered, Su & Zhou 2016; it sends them again, final, afterwards).
Updates go out every ``flush_every`` input tuples and on every tick, so the sink
holds exact totals once the last update of each task has arrived, which the runner
detects by comparing ``seen`` with the upstream counts (see
``demos.flights_results``). Totals are idempotent (the latest wins), so a
later update repairs a lost one for the keys it carries.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Mapping
from typing import Any

from streamparse import Stream

from bolts.common import (
    ERROR_FIELDS,
    ERRORS_STREAM,
    CountingBolt,
    error_detail,
    write_json_atomic,
)
from demos.flights_schema import TUPLE_FIELDS
from demos.options import FlightsOptions
from elastorm.core.replay import Positions

SAMPLE_STREAM = "sample"
UPDATE_FIELDS = ["role", "seen", "updates", "ids", "tentative"]

ERROR_EXAMPLES = 5  # per (role, reason) kept by the sink

_BAD_INPUT = (TypeError, ValueError, IndexError, KeyError, AttributeError)

log = logging.getLogger(__name__)


class OperatorBolt(CountingBolt):
    """A flights operator: never crashes on bad input, reports it on ``errors``."""

    outputs = [Stream(fields=UPDATE_FIELDS), Stream(fields=ERROR_FIELDS, name=ERRORS_STREAM)]
    streams = ("default", ERRORS_STREAM)

    def process(self, tup):
        try:
            super().process(tup)
        except _BAD_INPUT as exc:
            values = tup.values
            tuple_id = values[0] if isinstance(values, (list, tuple)) and values else None
            self.emit_error(tuple_id, "bad_tuple", f"{type(exc).__name__}: {values!r}")


class ExtractDelays(OperatorBolt):
    """op1: drops NA arrival delays (to ``errors``), forwards the rest, samples.

    Forwarded tuples keep the spout's ``(id, key, value, ts)``. Sampling for op4:
    a size-1 reservoir over the tuples forwarded since the last sample (each is
    kept with probability 1/n, a seeded ``random.Random``), emitted on the
    ``sample`` stream when ``elastorm.flights.sample_interval_ms`` (200 ms) has
    passed. The clock is read on every forwarded tuple and on every tick, so a
    sample is late by at most the gap between tuples (or one tick once the input
    stops). The reservoir is emptied by each sample.
    """

    role = "op1"
    outputs = [
        Stream(fields=TUPLE_FIELDS),
        Stream(fields=TUPLE_FIELDS, name=SAMPLE_STREAM),
        Stream(fields=ERROR_FIELDS, name=ERRORS_STREAM),
    ]
    streams = ("default", SAMPLE_STREAM, ERRORS_STREAM)

    def setup(self, conf: Mapping[str, Any]) -> None:
        options = FlightsOptions.from_conf(conf)
        self.sample_interval = options.sample_interval_ms / 1000.0
        self.random = random.Random(f"{options.sample_seed}:{self.counters.task}").random
        self.candidate = None
        self.since_sample = 0
        self.next_sample_at = self.clock() + self.sample_interval
        self.counters.extra["pending_sample"] = False

    def handle(self, tup):
        values = tup.values
        if values[2][1] is None:
            self.emit_error(values[0], "na_arr_delay", values[1])
            return
        self.forward(values)
        self.since_sample += 1
        if self.random() * self.since_sample < 1.0:
            self.candidate = values
        if self.clock() >= self.next_sample_at:
            self.emit_sample()

    def forward(self, values) -> None:
        """Send a tuple with a delay on to op2 and op3 (one ``default`` emit here)."""
        self.emit(values)
        self.counters.out["default"] += 1

    def emit_sample(self) -> None:
        if self.candidate is not None:
            self.emit(self.candidate, stream=SAMPLE_STREAM)
            self.counters.out[SAMPLE_STREAM] += 1
            self.candidate = None
            self.since_sample = 0
        self.next_sample_at = self.clock() + self.sample_interval

    def on_tick(self) -> None:
        if self.clock() >= self.next_sample_at:
            self.emit_sample()
        self.counters.extra["pending_sample"] = self.candidate is not None


class TotalsBolt(OperatorBolt):
    """Keeps totals per ``(key, year)`` and sends batched updates to the sink."""

    flush_every: int | None = None  # None: ``elastorm.flights.flush_every``

    def setup(self, conf: Mapping[str, Any]) -> None:
        if self.flush_every is None:
            self.flush_every = FlightsOptions.from_conf(conf).flush_every
        self.totals: dict[tuple[str, int], list[int]] = {}
        self.dirty: set[tuple[str, int]] = set()
        self.ids: list[int] = []
        self.emitted_seen = 0
        self.positions = Positions()

    def process(self, tup):
        # A replay (a restarted spout or op1 sends rows again) repeats positions: the
        # row id grows along every path from the spout, so each is counted once.
        position = tup.values[0] if tup.values else None
        if isinstance(position, int) and not self.positions.admit(
            f"{tup.component}:{tup.task}", position
        ):
            self.counters.extra["replayed_dropped"] = self.positions.dropped
            return
        super().process(tup)
        if self.counters.tuples_in - self.emitted_seen >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Emit one update with the current totals of every changed key."""
        seen = self.counters.tuples_in
        if seen == self.emitted_seen:
            return
        totals = self.totals
        updates = [[key, year, *totals[key, year]] for key, year in self.dirty]
        self.emit([self.role, seen, updates, self.ids, []])
        self.counters.out["default"] += 1
        self.dirty = set()
        self.ids = []
        self.emitted_seen = seen

    def on_tick(self) -> None:
        self.flush()

    zero: tuple[int, ...] = ()

    def key(self, values) -> tuple[str, int]:
        """The state key of an input tuple: ``(tailnum, year)``."""
        return values[1], values[2][0]

    def fold(self, totals: list[int], values) -> None:
        """Add one input to ``totals``; must raise before changing anything on bad input."""
        raise NotImplementedError

    def handle(self, tup):
        values = tup.values
        k = self.key(values)
        t = self.totals.get(k)
        new = t is None
        if new:
            t = list(self.zero)
        self.fold(t, values)
        if new:
            self.totals[k] = t
        self.dirty.add(k)


class SumDelays(TotalsBolt):
    """op2: per ``(tailnum, year)``: sum of ``arr_delay`` (minutes) and flight count."""

    role = "op2"
    zero = (0, 0)

    def fold(self, totals, values):
        totals[0] += values[2][1]
        totals[1] += 1


class AirShare(TotalsBolt):
    """op3: per ``(tailnum, year)``: air minutes, flights with air time, NA air times.

    The share of the year a plane spent in the air is
    ``air_minutes / minutes_in_year(year)``; the integer sum is what is kept and
    checked, the share is derived from it.
    """

    role = "op3"
    zero = (0, 0, 0)

    def fold(self, totals, values):
        air = values[2][2]
        if air is None:
            totals[2] += 1
        else:
            totals[0] += air
            totals[1] += 1


class SampledDelayShare(TotalsBolt):
    """op4: per year, samples received and how many were delayed (``arr_delay > 0``).

    Emits an update for every sample (samples are rare: one per op1 task per
    200 ms) carrying the sampled row id, so the result can be checked exactly
    against the rows that were sampled as well as statistically against the
    whole file.
    """

    role = "op4"
    flush_every = 1
    zero = (0, 0)

    def key(self, values):
        return "*", values[2][0]

    def fold(self, totals, values):
        delayed = 1 if values[2][1] > 0 else 0
        totals[0] += 1
        totals[1] += delayed
        self.ids.append(values[0])


#: A keyed task's ``seen`` is ``incarnation * SEEN_PER_INCARNATION + tuples in``, so a
#: restarted task's updates (counting from 0 again) are still newer than its last life's.
SEEN_PER_INCARNATION = 10**12


class ResultsSink(CountingBolt):
    """One task (global grouping) holding the latest totals and all error counts.

    Writes ``<output_dir>/sink-<task>.json`` atomically on every tick when
    something changed and every ``elastorm.sink.write_every`` tuples:
    ``totals[role][tailnum][year] = [...]`` (op2: delay sum, flights; op3: air
    minutes, flights with air time, NA air times; op4: samples, delayed),
    ``seen[role][source task]`` (the newest ``seen`` applied), ``errors[role][reason]``,
    ``error_examples[role][reason] = [[id, detail], ...]``, ``sample_ids`` and
    ``na_arr_delay_by_plane[tailnum]``: op1's NA ``arr_delay`` rows per plane (their
    ``detail`` is the tailnum), so a plane whose every flight has an NA delay, and
    which therefore has no op2/op3 totals, is still reported by name;
    ``tentative[role]``: the keys whose total held now came from a tentative update
    (empty once recovery rectified them) and ``tentative_updates[role]``: how many
    tentative key updates arrived; ``arrivals[role]["<task>.<incarnation>"][second]`` =
    ``[updates, totals replaced]``: when each sender's updates came (wall-clock second)
    and how many key totals they replaced, so the chaos harness can count what a
    cut-off owner still delivered after its groups were restored elsewhere (the
    incarnation, ``seen // SEEN_PER_INCARNATION``, tells it from its restarted self).
    An update older than one already applied from the same task is skipped and
    counted as ``stale_update``.
    """

    role = "sink"
    outputs: list[Stream] = []
    streams = ()

    def setup(self, conf: Mapping[str, Any]) -> None:
        self.write_every = FlightsOptions.from_conf(conf).sink_write_every
        self.path = os.path.join(self.output_dir, f"sink-{self.counters.task}.json")
        self.totals: dict[str, dict[str, dict[str, list[int]]]] = {}
        self.seen: dict[str, dict[str, int]] = {}
        self.errors: dict[str, dict[str, int]] = {}
        self.error_examples: dict[str, dict[str, list[list[Any]]]] = {}
        self.sample_ids: list[int] = []
        self.na_arr_delay_by_plane: dict[str, int] = {}
        self.tentative: dict[str, set[str]] = {}  # role -> keys whose total is tentative
        self.tentative_updates: dict[str, int] = {}  # role -> tentative key updates received
        self.arrivals: dict[str, dict[str, dict[str, list[int]]]] = {}
        self.error_positions = Positions()
        self.write()

    def process(self, tup):
        try:
            super().process(tup)
        except _BAD_INPUT as exc:
            self.counters.error("bad_tuple")
            log.warning("sink: bad tuple %r: %s", tup, exc)
        self.unwritten += 1
        if self.unwritten >= self.write_every:
            self.write()

    def handle(self, tup):
        if tup.stream == ERRORS_STREAM:
            tuple_id, role, reason, detail = tup.values
            if isinstance(tuple_id, int) and not self.error_positions.admit(
                f"{tup.component}:{tup.task}", tuple_id
            ):
                return  # a replayed row's error, counted when it first came
            by_reason = self.errors.setdefault(role, {})
            by_reason[reason] = by_reason.get(reason, 0) + 1
            examples = self.error_examples.setdefault(role, {}).setdefault(reason, [])
            if len(examples) < ERROR_EXAMPLES:
                examples.append([tuple_id, error_detail(detail)])
            if role == "op1" and reason == "na_arr_delay" and isinstance(detail, str):
                by_plane = self.na_arr_delay_by_plane
                by_plane[detail] = by_plane.get(detail, 0) + 1
            return
        role, seen, updates, ids, tentative = tup.values
        seen_by_task = self.seen.setdefault(role, {})
        task = str(tup.task)
        sender = f"{task}.{seen // SEEN_PER_INCARNATION}"
        by_second = self.arrivals.setdefault(role, {}).setdefault(sender, {})
        arrived = by_second.setdefault(str(int(time.time())), [0, 0])
        arrived[0] += 1
        if seen <= seen_by_task.get(task, -1):
            self.counters.error("stale_update")
            return
        totals = self.totals.setdefault(role, {})
        marked = set(tentative)
        if marked:
            self.tentative_updates[role] = self.tentative_updates.get(role, 0) + len(marked)
        for key, year, *rest in updates:
            by_year = totals.get(key)
            if by_year is None:
                by_year = totals[key] = {}
            old = by_year.get(str(year))
            # op2's flight count only grows, so the larger one is the newer total. This
            # matters when a key group moves: its old and new owner both send updates.
            if role != "op2" or old is None or rest[1] >= old[1]:
                by_year[str(year)] = rest
                arrived[1] += 1
                held = self.tentative.setdefault(role, set())  # keys held tentative
                if key not in marked:
                    held.discard(key)
                elif old is None or role != "op2" or rest[1] > old[1]:
                    held.add(key)  # (an equal count reflects the same tuples: mark kept)
        seen_by_task[task] = seen
        if ids:
            self.sample_ids.extend(ids)

    def on_tick(self) -> None:
        if self.unwritten:
            self.write()

    def write(self) -> None:
        write_json_atomic(
            self.path,
            {
                "role": self.role,
                "component": self.counters.component,
                "task": self.counters.task,
                "written_at": time.time(),
                "tuples_in": self.counters.tuples_in,
                "seen": self.seen,
                "totals": self.totals,
                "errors": self.errors,
                "error_examples": self.error_examples,
                "sample_ids": self.sample_ids,
                "na_arr_delay_by_plane": self.na_arr_delay_by_plane,
                "tentative": {r: sorted(keys) for r, keys in self.tentative.items() if keys},
                "tentative_updates": self.tentative_updates,
                "arrivals": self.arrivals,
            },
        )
        self.unwritten = 0


def results_sink_inputs(spout, op1, op2, op3, op4) -> dict:
    """The sink's inputs in a flights topology: totals of op2-op4, every errors stream."""
    from streamparse import Grouping

    return {
        op2: Grouping.GLOBAL,
        op3: Grouping.GLOBAL,
        op4: Grouping.GLOBAL,
        **{component[ERRORS_STREAM]: Grouping.GLOBAL for component in (spout, op1, op2, op3, op4)},
    }
