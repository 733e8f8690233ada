"""Bolts of the shift job: two counting operators whose loads are correlated -1.

The job is Madsen & Zhou 2015, section 7.2 (the experiment in which load shifts between
nodes: checkpoint allocation and load balancing).

``generator -> emitter (KeyedEmitting, two keyed operators) --elastorm, direct-->
op1, op2 (KeyedOperator: count per key, one task per node)``; what op1 and op2
send goes through the relay; their reports go to the controller, which runs the
:class:`elastorm.controller.loop.ControllerLoop` (heartbeats in, checkpoint holders and
migrations out). Each counter task writes, with its counts, the total count of
every key group it owns, so a driver can check that every tuple the spout sent
was counted exactly once whatever moved where.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from bolts.common import CountingBolt
from demos.options import ShiftOptions
from elastorm.core.actions import Applied, Rejected
from elastorm.core.errors import MigrationProtocolError
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
)


def add_one(current: int | None, value: Any) -> int:
    """The counters' fold: one more tuple of the key."""
    return (current or 0) + 1


class ShiftEmitter(KeyedEmitting, CountingBolt):
    """Pass-through: each ``(key, operator, stamp)`` goes to that operator's owner task."""

    role = "emitter"
    outputs = [MESSAGE_STREAM]
    streams = (STREAM,)

    def setup(self, conf: Mapping[str, Any]) -> None:
        self.setup_emitting(conf, self.context)

    def handle(self, tup):
        if tup.stream != STREAM:
            key, operator, stamp = tup.values
            if operator not in self.emitters:
                self.counters.error("unknown_operator")
                return
            self.emit_keyed(key, 1, float(stamp), operator=operator)
            self.counters.out[STREAM] += 1
            return
        try:
            for action in self.receive_elastorm(tup):
                if isinstance(action, Rejected):
                    self.counters.error("rejected_control")
        except (ValueError, MigrationProtocolError):
            self.counters.error("bad_control")

    def command_failed(self, message, reason: str) -> None:
        """Counted like a refused or malformed protocol tuple."""
        self.counters.error("rejected_control")

    def on_tick(self) -> None:
        self.tick_emitting()


class ShiftCounter(KeyedOperator, CountingBolt):
    """Counts tuples per key in key groups; see the module docstring."""

    role = "counter"
    outputs = [RELAY_STREAM, REPORT_STREAM]
    streams = (RELAY, REPORTS)

    def setup(self, conf: Mapping[str, Any]) -> None:
        self.setup_keyed(conf, self.context, fold(add_one))
        self.work = ShiftOptions.from_conf(conf).work_us / 1e6

    def handle(self, tup):
        self.receive_elastorm(tup)

    def on_applied(self, applied: Applied) -> None:
        # The operator's computation: ``elastorm.shift.work_us`` of CPU per tuple.
        # Nothing goes downstream: the count is the state.
        if self.work:
            end = time.perf_counter() + self.work
            while time.perf_counter() < end:
                pass

    def on_tick(self) -> None:
        self.tick_keyed()
        totals = {}
        for g in self.coordinator.owned():
            state = self.coordinator.state(g)
            if state is not None:
                totals[str(g)] = sum(state.items().values())
        self.counters.extra = {
            "node": self.node,
            "owned": list(self.coordinator.owned()),
            "held": sorted(self.coordinator.held),
            "totals": totals,
            "idled": round(self.load_meter.idled, 3),
            "heartbeats": self.heartbeat_health(),
            "at": time.time(),
        }
