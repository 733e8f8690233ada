"""The join-and-window job's bolts, written with elastorm's public keyed-bolt API.

``spouts.flights_join`` sends each flights row as its two sides; ``JoinFlights``
(a ``KeyedBolt``, correlated-input: ``elastorm.join_operators``) joins them by plane
on the row id; ``DailyWindows`` (a ``KeyedBolt``) keeps per plane and UTC day the
joined flights, delay sum and air minutes and sends each window's current totals
with a tentative mark; ``JoinWindowSink`` keeps the latest totals per window.

Exactly once at the window: a restored join re-sends the joined rows it applied
after its checkpoint. Per plane the joined rows come in row order (both sides of a
row are sent one after the other through one router task), so the window keeps the
highest row it applied per plane and skips any row not above it.
"""

from __future__ import annotations

import json
import os
import time

from streamparse import Bolt, Stream

from bolts.common import Counters, required_output_dir, write_json_atomic
from demos.flights_join import (
    AIR,
    ARRIVAL,
    add_to_window,
    join_side,
    window_of,
)
from elastorm import KeyedBolt, MapState, ValueState, output_id_fields

ARRIVALS, AIRTIMES = "arrivals", "airtimes"
JOINED_FIELDS = ["tailnum", "row", "arr_delay", "air_time", "ts"]
WINDOW_FIELDS = ["tailnum", "day", "flights", "delay", "air", "tentative"]


class CountedKeyedBolt(KeyedBolt):
    """A keyed bolt that writes its counts file (pid, owned groups, outputs) on ticks,
    as the flights bolts do, so a driver can find and watch its tasks."""

    def initialize(self, conf, context):
        self.counters = Counters.from_conf(conf, context, self.role)
        self.outputs_sent = 0
        super().initialize(conf, context)

    def on_applied(self, applied):
        super().on_applied(applied)
        self.outputs_sent += len(applied.result) if applied.emit_output else 0

    def process_tick(self, tup):
        super().process_tick(tup)
        extra = self.counters.extra
        extra["owned"] = list(self.coordinator.owned())
        extra["replicas"] = list(self.coordinator.replicas())
        extra["outputs"] = self.outputs_sent
        self.counters.write()


class JoinFlights(CountedKeyedBolt):
    """Joins a plane's arrivals and air times on the row id."""

    role = "join"
    # With output ids: a joined row lost on the way (its task killed, also as a move's
    # source) is sent again, and the window applies each once (docs/failures.md).
    outputs = [Stream(fields=output_id_fields(JOINED_FIELDS))]
    pending = ValueState(default=None)  # row id -> [side, values...] not joined yet

    def process_keyed(self, key, values):
        # [position, tailnum, row, arr_delay] or [position, tailnum, row, air_time, ts]
        _, _, row, *rest = values
        side = AIR if len(rest) == 2 else ARRIVAL
        pending, joined = join_side(self.pending.value() or {}, side, row, rest)
        if pending:
            self.pending.update(pending)
        else:
            self.pending.clear()
        if joined is not None:
            self.emit([key, row, *joined])


class DailyWindows(CountedKeyedBolt):
    """Per plane and UTC day: joined flights, arrival delay sum, air minutes."""

    role = "window"
    outputs = [Stream(fields=WINDOW_FIELDS)]
    days = MapState()  # day start (str) -> [flights, delay, air]

    def process_keyed(self, key, values):
        # A joined row sent again (a restored join's replay, a resend) never gets here:
        # elastorm skips a repeat by its output id. Rows come in any order.
        _, _, arr_delay, air_time, ts = values[: len(JOINED_FIELDS)]
        day = str(window_of(ts))
        totals = add_to_window(self.days.get(day), arr_delay, air_time)
        self.days.put(day, totals)
        self.emit([key, int(day), *totals, self.tentative])

    def rectify_keyed(self, key):
        for day, totals in sorted(self.days.items()):
            self.emit([key, int(day), *totals, False])


class JoinWindowSink(Bolt):
    """The windows' latest totals (the larger flight count wins: it reflects more of
    the window's flights; an equal count replaces the mark), written every tick to
    ``<output_dir>/join-sink-<task>.json`` with ``tentative`` (windows whose total
    held came from a tentative update), ``tentative_updates`` and ``rectified`` (how
    many tentative totals a final one replaced), and ``timeline``: per wall-clock
    second, the flights newly reflected in the totals.

    The file is also the sink's state: a restarted sink task (Storm restarts a plain
    bolt empty) reads its last file back, and the larger count still wins, so the
    windows no update reaches after the restart are not forgotten (chaos
    ``join/zk-stop``, session 32: every worker restarted and the sink's file lost every
    window the keyed bolts had finished with). What came after its last write (at most
    a tick) is lost with the task: a plain bolt's outputs are not sent again."""

    def initialize(self, conf, context):
        out = required_output_dir(conf)
        self.path = os.path.join(out, f"join-sink-{context['taskid']}.json")
        self.windows: dict[str, list] = {}  # "tailnum|day" -> [flights, delay, air, tentative]
        self.tentative_updates = 0
        self.rectified = 0
        self.timeline: dict[int, int] = {}
        try:
            with open(self.path, encoding="utf-8") as fh:
                last = json.load(fh)
        except FileNotFoundError:
            return
        self.windows = last["windows"]
        self.tentative_updates, self.rectified = last["tentative_updates"], last["rectified"]
        self.timeline = {int(second): n for second, n in last["timeline"].items()}

    def process(self, tup):
        tailnum, day, flights, delay, air, tentative = tup.values
        key = f"{tailnum}|{day}"
        old = self.windows.get(key)
        self.tentative_updates += bool(tentative)
        if old is not None and flights < old[0]:
            return
        if old is not None and flights == old[0]:
            if old[3] and not tentative:
                self.rectified += 1
            tentative = old[3] and tentative
        grew = flights - (old[0] if old else 0)
        if grew:
            second = int(time.time())
            self.timeline[second] = self.timeline.get(second, 0) + grew
        self.windows[key] = [flights, delay, air, bool(tentative)]

    def process_tick(self, tup):
        write_json_atomic(
            self.path,
            {
                "written_at": time.time(),
                "windows": self.windows,
                "tentative_updates": self.tentative_updates,
                "rectified": self.rectified,
                "timeline": self.timeline,
            },
        )
