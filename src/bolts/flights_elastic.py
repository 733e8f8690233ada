"""The flights job on elastorm: op2 (delay sum per plane and year) keeps its state in
key groups that can move between tasks while the job runs.

``extract_delays`` (op1) feeds ``sum_delays`` through an elastorm ``Emitter``
(routing table, sequence numbers, output buffers) instead of a fields grouping;
``sum_delays`` keeps ``tailnum -> {year: [delay_sum, flights]}`` in a
``TaskCoordinator`` and checkpoints each key group every
``elastorm.checkpoint_interval_secs`` onto its holder; ``controller`` carries out
migration requests. op3, op4 and the sink are the plain job's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamparse import Stream

from bolts.common import ERROR_FIELDS, ERRORS_STREAM
from bolts.flights import (
    SAMPLE_STREAM,
    SEEN_PER_INCARNATION,
    UPDATE_FIELDS,
    ExtractDelays,
    OperatorBolt,
)
from demos.flights_schema import TUPLE_FIELDS
from demos.options import FlightsOptions
from elastorm.core.actions import Applied, MigrationDone, Rejected
from elastorm.core.errors import MigrationProtocolError
from elastorm.core.outputs import LatestValues
from elastorm.core.state import fold
from elastorm.storm.elastic import (
    MESSAGE_STREAM,
    RELAY,
    RELAY_STREAM,
    REPORT_STREAM,
    REPORTS,
    STREAM,
    KeyedEmitting,
    KeyedOperator,
    carrier_fields,
)


def add_delay(current: dict[str, list[int]] | None, value: list) -> dict[str, list[int]]:
    """op2's fold: ``value = [row id, year, arr_delay]`` into ``{year: [sum, flights]}``.

    Returns a new dict (checkpoint fragments keep the latest value per key, so the
    current one must not change under them).
    """
    _, year, delay = value
    totals = dict(current) if current else {}
    delay_sum, flights = totals.get(str(year), (0, 0))
    totals[str(year)] = [delay_sum + delay, flights + 1]
    return totals


class ElasticExtractDelays(KeyedEmitting, ExtractDelays):
    """op1 feeding op2 by key group and op3 as before (fields grouping), with one
    emit per row: op2's data message rides in it (``emit_keyed(carry=...)``)."""

    outputs = [
        Stream(fields=carrier_fields(TUPLE_FIELDS)),
        Stream(fields=TUPLE_FIELDS, name=SAMPLE_STREAM),
        Stream(fields=ERROR_FIELDS, name=ERRORS_STREAM),
        MESSAGE_STREAM,
    ]
    streams = ("default", SAMPLE_STREAM, ERRORS_STREAM, STREAM)

    def setup(self, conf: Mapping[str, Any]) -> None:
        super().setup(conf)
        self.setup_emitting(conf, self.context)
        resumed = self.resumed_state
        if resumed:  # counts as of the restart point; the replay adds the rest
            counters = self.counters
            counters.tuples_in = resumed["tuples_in"]
            counters.out["default"] = counters.out[STREAM] = resumed["forwarded"]
            counters.out[ERRORS_STREAM] = sum(resumed["errors"].values())
            counters.errors = dict(resumed["errors"])

    def replay_state(self) -> dict[str, Any]:
        """op1's counts are a function of its inputs; its samples (taken by the clock)
        are not, and are not resumed."""
        counters = self.counters
        return {
            "tuples_in": counters.tuples_in,
            "forwarded": counters.out["default"],
            "errors": dict(counters.errors),
        }

    def process(self, tup):
        if tup.stream == STREAM:  # protocol traffic is not an input of op1
            try:
                rest = self.receive_elastorm(tup)
            except (ValueError, MigrationProtocolError) as exc:
                self.emit_error(None, "bad_control", f"{type(exc).__name__}: {exc}")
                return
            for action in rest:
                if isinstance(action, Rejected):
                    self.emit_error(None, "rejected_control", action.reason)
            return
        tup = self.replay_admit(tup)
        if tup is None:
            return
        super().process(tup)
        self.replay_done()

    def command_failed(self, message, reason: str) -> None:
        """Counted like a refused or malformed protocol tuple."""
        self.emit_error(None, "rejected_control", f"{type(message).__name__}: {reason}")

    def on_tick(self) -> None:
        super().on_tick()
        self.tick_emitting()
        self.counters.extra["emitter"] = self.emitter_health()

    def forward(self, values) -> None:
        """One emit for op2 and op3: the row carries op2's data message."""
        row_id, key, (year, arr_delay, _), ts = values
        self.emit_keyed(key, [row_id, year, arr_delay], ts, carry=values)
        self.counters.out["default"] += 1
        self.counters.out[STREAM] += 1


class KeyedSumDelays(KeyedOperator, OperatorBolt):
    """op2 on key groups: per tailnum and year, the sum of arrival delays and flights.

    Sends the sink batched updates ``[tailnum, year, delay_sum, flights]`` of the
    keys it changed (every ``elastorm.flights.flush_every`` applied tuples and on
    ticks). Outputs of replayed tuples are not sent (the old owner sent them).
    """

    role = "op2"
    outputs = [
        Stream(fields=UPDATE_FIELDS),
        Stream(fields=ERROR_FIELDS, name=ERRORS_STREAM),
        RELAY_STREAM,
        REPORT_STREAM,
    ]
    streams = ("default", ERRORS_STREAM, RELAY, REPORTS)

    def setup(self, conf: Mapping[str, Any]) -> None:
        self.flush_every = FlightsOptions.from_conf(conf).flush_every
        self.setup_keyed(conf, self.context, fold(add_delay))
        self.latest = LatestValues()  # key -> totals owed to the sink
        self.applied = 0
        self.outputs = 0  # applied tuples whose outputs were this task's to send
        self.flushed_at = 0
        self.flushes = 0  # updates sent in this incarnation (their ``seen``)

    def handle(self, tup):
        self.receive_elastorm(tup)
        if self.applied - self.flushed_at >= self.flush_every:
            self.flush()

    def on_applied(self, applied: Applied) -> None:
        self.applied += 1
        self.outputs += applied.emit_output  # an active replica's are suppressed
        self.latest.applied(applied)

    def on_rejected(self, rejected: Rejected) -> None:
        self.emit_error(None, "rejected", rejected.reason)

    def on_report(self, report) -> None:
        # Taking a group over: send the totals of the keys applied quietly here (their
        # last update may be missing a tuple, elastorm.core.outputs explains how), and after
        # a RESTORE of every key (the old owner's unflushed updates died with it).
        if isinstance(report, MigrationDone):
            m = self.coordinator.machine(report.key_group)
            self.latest.reported(report, m.state, tentative=m.tentative)

    def on_protocol_error(self, message, exc) -> None:
        self.emit_error(None, "protocol_error", f"{type(message).__name__}: {exc}")

    def flush(self) -> None:
        self.latest.settle(self.coordinator)  # rectify what is no longer tentative
        if not self.latest:
            return
        values, marked = self.latest.take_marked()
        updates = [
            [key, int(year), *totals]
            for key, by_year in values.items()
            for year, totals in by_year.items()
        ]
        # The sink drops an update whose ``seen`` is not above the last from this task;
        # a restarted task counts from 0 again, so its incarnation leads. It counts
        # updates, not input tuples: a takeover's values (a durable copy loaded off the
        # task's thread) are flushed with no tuple in between, and an equal ``seen``
        # made the sink drop them (the HDFS restore test, CI and under load).
        self.flushes += 1
        seen = self.incarnation * SEEN_PER_INCARNATION + self.flushes
        self.emit([self.role, seen, updates, [], sorted(marked)])
        self.counters.out["default"] += 1
        self.flushed_at = self.applied

    def on_tick(self) -> None:
        self.tick_keyed()
        self.flush()
        self.counters.extra["owned"] = list(self.coordinator.owned())
        self.counters.extra["outputs"] = self.outputs
        self.counters.extra["resend_requests"] = self.coordinator.stats["resend_requests"]
        self.counters.extra["replicas"] = list(self.coordinator.replicas())
        self.counters.extra["held"] = sorted(self.coordinator.held)
        self.counters.extra["heartbeats"] = self.heartbeat_health()
        self.counters.extra["durable"] = self.durable_health()
        # [took over at, first tuple applied at] (wall clock) per key group taken over
        self.counters.extra["takeovers"] = {str(g): list(t) for g, t in self.takeovers.items()}
