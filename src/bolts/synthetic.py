"""Bolts of the synthetic migration benchmark (Madsen & Zhou 2015,
section 7.1: migration latency and completion time, Figs. 5-6).

``generator -> emitter (KeyedEmitting) --elastorm, direct--> counter (KeyedOperator, 3
tasks) --reports--> controller``; what the counter sends goes through the relay. The
emitter is a pass-through: Storm spouts cannot receive tuples, and an elastorm
emitter must receive trims and commands.

The counter sums a count per key and measures, for the *hot* key group only
(``elastorm.synthetic.hot_group``, the one the benchmark migrates), the latency of
every tuple whose output it emits (``Applied.emit_output``: replays and CPAL
shadow processing produce no output, so they do not count): now minus the
spout's stamp, and now minus the emitter's stamp (the same tuple's latency without
its wait in the emitter's queue), kept per 100 ms bucket of output time as
``[max, count, sum, max from emitter, sum from emitter]`` and appended to
``latency-<task>.jsonl`` on ticks.

Checkpoints: the cold groups every ``elastorm.checkpoint_interval_secs``; the hot
group once when a task first owns it and then only when the driver asks (the
``checkpoint`` counter of the control file), so the driver decides how many of
its tuples wait in the emitter's buffer (the replay size) when it migrates.

Every non-data message of the hot group at the counter, and every ``Migrate``,
``ProcessedAllReplay`` and ``ToStateAck`` at the emitter (of any key group), is timed
(``events-<task>.jsonl``): where a migration's time goes.

For the rescale benchmark (``bench/rescale_bench.py``) it also records, for *every*
key group, the 20 ms buckets in which it emitted an output and each output's latency
(1 ms histogram per second of output time), appended to ``outputs-<task>.jsonl`` on
ticks (:class:`OutputLog`): the longest gap in any key group's output and the
latency percentiles are computed from them, across tasks, after the run. Its
counters carry the durable tier's lag, which the resubmit way waits on before it takes
a savepoint (``elastorm savepoint``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from bolts.common import CountingBolt
from demos.options import SyntheticOptions
from elastorm.config import TopologyConfig
from elastorm.core.actions import Applied
from elastorm.core.errors import MigrationProtocolError
from elastorm.core.messages import Migrate
from elastorm.core.state import Step, fold
from elastorm.storm.elastic import (
    MESSAGE_STREAM,
    RELAY,
    RELAY_STREAM,
    REPORT_STREAM,
    REPORTS,
    STREAM,
    KeyedEmitting,
    KeyedOperator,
    from_wire,
)
from spouts.synthetic import read_control

log = logging.getLogger(__name__)

BUCKET_SECS = 0.1


def add_count(current: int | None, value: list) -> int:
    """The counter's fold: ``value = [increment, spout stamp, emitter stamp]``."""
    return (current or 0) + value[0]


def counting_step(work_us: float) -> Step:
    """The counter's step: :func:`add_count`, after spinning ``work_us`` microseconds of
    CPU (``elastorm.synthetic.work_us``: an operator whose cost grows with its input,
    for the autoscaler's load ramp). Spent on every tuple folded in, replays and a
    CPAL target's shadow processing included, as a real operator's work would be."""
    if work_us <= 0:
        return fold(add_count)
    spin = work_us / 1e6
    clock = time.thread_time  # CPU, not wall time: the cost holds on a crowded machine

    def combine(current: int | None, value: list) -> int:
        end = clock() + spin
        while clock() < end:
            pass
        return add_count(current, value)

    return fold(combine)


def message_type(text: str | list) -> str:
    """The ``type`` of a wire message without decoding it (``to_wire`` puts it first;
    a ``Data`` is a list)."""
    if type(text) is list:
        return "Data"
    return text[9 : text.find('"', 9)] if text.startswith('{"type":"') else "?"


class LatencyBuckets:
    """Per ``width``-second bucket of output time: ``[max, count, sum, hop max, hop sum]``
    of latencies (s) measured from the spout and from the emitter ("hop")."""

    __slots__ = ("width", "open")

    def __init__(self, width: float = BUCKET_SECS) -> None:
        self.width = width
        self.open: dict[int, list[float]] = {}

    def add(self, now: float, latency: float, hop: float) -> None:
        b = int(now / self.width)
        row = self.open.get(b)
        if row is None:
            self.open[b] = [latency, 1, latency, hop, hop]
        else:
            if latency > row[0]:
                row[0] = latency
            row[1] += 1
            row[2] += latency
            if hop > row[3]:
                row[3] = hop
            row[4] += hop

    def drain(self, now: float) -> list[list[float]]:
        """Remove and return the buckets that ended before ``now``, as rows
        ``[bucket index, max ms, count, sum ms, hop max ms, hop sum ms]`` in time order."""
        current = int(now / self.width)
        rows = []
        for b in sorted(b for b in self.open if b < current):
            top, count, total, hop_top, hop_total = self.open.pop(b)
            ms = [round(v * 1000, 3) for v in (top, total, hop_top, hop_total)]
            rows.append([b, ms[0], int(count), ms[1], ms[2], ms[3]])
        return rows


OUTPUT_BUCKET_SECS = 0.02


class OutputLog:
    """Per key group, the ``OUTPUT_BUCKET_SECS`` buckets with an output, each with the
    earliest stamp bucket of the tuples output in it, and the stamp buckets of all of
    them (the group's input, as it reached the sink); per second of output time, a
    histogram of latencies in whole ms (module docstring).

    Rows: ``{"out": [[group, bucket, earliest stamp bucket]], "in": [[group, stamp
    bucket]], "lat": [[second, ms, count]]}``. The stamps say whether a silent group had
    input waiting (``drivers.synthetic.output_gaps``: its stall) or none to output.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.buckets: dict[tuple[int, int], int] = {}
        self.stamps: set[tuple[int, int]] = set()
        self.latency: dict[tuple[int, int], int] = {}

    def add(self, now: float, key_group: int, latency: float) -> None:
        slot = (key_group, int(now / OUTPUT_BUCKET_SECS))
        stamp = int((now - latency) / OUTPUT_BUCKET_SECS)
        earliest = self.buckets.get(slot)
        if earliest is None or stamp < earliest:
            self.buckets[slot] = stamp
        self.stamps.add((key_group, stamp))
        slot = (int(now), int(latency * 1000))
        self.latency[slot] = self.latency.get(slot, 0) + 1

    def flush(self) -> None:
        if not self.buckets and not self.latency:
            return
        row = {
            "out": [[g, b, sb] for (g, b), sb in sorted(self.buckets.items())],
            "in": sorted(self.stamps),
            "lat": [[sec, ms, n] for (sec, ms), n in sorted(self.latency.items())],
        }
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
        self.buckets, self.stamps, self.latency = {}, set(), {}


class CheckpointPlan:
    """Which owned groups a counter task checkpoints on a tick.

    Cold groups: when first owned, then every ``interval`` seconds (none if 0).
    The hot group: when first owned here, and whenever the driver's request
    counter passes the last one this task saw while owning it; or, with
    ``hot_on_request`` False, like a cold group. Any group also when its holder
    changed since its last checkpoint here: the new holder has no copy, and a
    controller waits for one before a checkpoint-assisted move to it.
    """

    def __init__(self, hot: int, interval: float, hot_on_request: bool = True) -> None:
        self.hot = hot if hot_on_request else -1
        self.interval = interval
        self.last: dict[int, float] = {}
        self.holder: dict[int, int | None] = {}
        self.seen_request = 0

    def due(
        self,
        now: float,
        owned: Iterable[int],
        requested: int,
        holders: Mapping[int, int | None] | None = None,
    ) -> list[int]:
        groups = []
        for g in owned:
            last = self.last.get(g)
            holder = holders.get(g) if holders is not None else None
            if g == self.hot:
                take = last is None or requested > self.seen_request
            else:
                take = last is None or (self.interval > 0 and now - last >= self.interval)
            if take or (holders is not None and holder != self.holder.get(g, holder)):
                groups.append(g)
                self.last[g] = now
            self.holder[g] = holder
        self.seen_request = max(self.seen_request, requested)
        return groups


class EventLog:
    """Timed protocol events, appended to ``<dir>/events-<task>.jsonl`` on flush."""

    def __init__(self, output_dir: str, task: int) -> None:
        self.path = os.path.join(output_dir, f"events-{task}.jsonl")
        self.task = task
        self.rows: list[dict[str, Any]] = []

    def add(self, **row: Any) -> None:
        self.rows.append({"task": self.task, **row})

    def flush(self) -> None:
        if self.rows:
            with open(self.path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in self.rows)
            self.rows = []


class SyntheticEmitter(KeyedEmitting, CountingBolt):
    """Pass-through: each ``(key, stamp)`` goes to the counter's owner of its group,
    with the emitter's own stamp added."""

    role = "emitter"
    outputs = [MESSAGE_STREAM]
    streams = (STREAM,)
    auto_ack = True

    def setup(self, conf: Mapping[str, Any]) -> None:
        self.setup_emitting(conf, self.context)
        self.hot = SyntheticOptions.from_conf(conf).hot_group
        self.events = EventLog(self.output_dir, self.counters.task)

    def handle(self, tup):
        if tup.stream != STREAM:
            key, stamp = tup.values
            self.emit_keyed(key, [1, stamp, time.time()], stamp)
            self.counters.out[STREAM] += 1
            return
        text = tup.values[0]
        kind = message_type(text)
        # ToStateAck: the next chunk of a toState
        timed = from_wire(text) if kind in ("Migrate", "ProcessedAllReplay", "ToStateAck") else None
        self._timed(kind, timed, lambda: self.receive_elastorm(tup))

    def receive_command(self, message) -> None:
        """The controller's commands (from this task's mailbox), timed like the rest."""
        kind = type(message).__name__
        timed = message if isinstance(message, Migrate) else None
        self._timed(kind, timed, lambda: super(SyntheticEmitter, self).receive_command(message))

    def command_failed(self, message, reason: str) -> None:
        self.counters.error("rejected")

    def _timed(self, kind: str, timed, receive) -> None:
        """Handle a protocol message with ``receive``; a move's messages are logged
        with the time taken, the group's buffer and how many tuples it replayed."""
        replayed = self.emitter.stats["replayed"]
        buffered = self.emitter.buffer.size(timed.key_group) if timed else 0
        started = time.perf_counter()
        try:
            rest = receive()
        except (ValueError, MigrationProtocolError) as exc:
            log.error("emitter: %s: %s", type(exc).__name__, exc)
            self.counters.error("bad_control")
            return
        ms = (time.perf_counter() - started) * 1000
        if rest:
            self.counters.error("rejected", len(rest))
        if timed is not None:
            self.events.add(
                at=time.time(),
                type=kind,
                key_group=timed.key_group,
                epoch=timed.epoch,
                protocol=timed.protocol.value if isinstance(timed, Migrate) else None,
                buffered=buffered,
                replayed=self.emitter.stats["replayed"] - replayed,
                ms=round(ms, 3),
            )
            self.events.flush()

    def on_tick(self) -> None:
        self.tick_emitting()
        self.counters.extra["buffer_hot"] = self.emitter.buffer.size(self.hot)
        self.counters.extra["buffered"] = len(self.emitter.buffer)
        self.counters.extra["stats"] = dict(self.emitter.stats)


class SyntheticCounter(KeyedOperator, CountingBolt):
    """Count per key on key groups; latency of the hot group's outputs (module docstring)."""

    role = "counter"
    outputs = [RELAY_STREAM, REPORT_STREAM]
    streams = (RELAY, REPORTS)
    wall = staticmethod(time.time)

    def setup(self, conf: Mapping[str, Any]) -> None:
        interval = TopologyConfig.from_conf(conf).checkpoint_interval_secs
        # The coordinator takes no checkpoints on its own: CheckpointPlan decides.
        no_ticks = {TopologyConfig.key("checkpoint_interval_secs"): 0}
        options = SyntheticOptions.from_conf(conf)
        self.setup_keyed({**conf, **no_ticks}, self.context, counting_step(options.work_us))
        self.hot = options.hot_group
        self.plan = CheckpointPlan(self.hot, interval, options.hot_on_request)
        self.hot_marker = f'"key_group":{self.hot},'
        self.latency = LatencyBuckets()
        task = self.counters.task
        self.latency_path = os.path.join(self.output_dir, f"latency-{task}.jsonl")
        self.events = EventLog(self.output_dir, task)
        self.outputs_hot = 0
        self.output_log = OutputLog(os.path.join(self.output_dir, f"outputs-{task}.jsonl"))

    def handle(self, tup):
        text = tup.values[0]
        if type(text) is list or self.hot_marker not in text[:64]:  # a Data is a list
            self.receive_elastorm(tup)
            return
        started = time.perf_counter()
        self.receive_elastorm(tup)
        self.events.add(
            at=self.wall(),
            type=message_type(text),
            chars=len(text),
            ms=round((time.perf_counter() - started) * 1000, 3),
        )

    def on_applied(self, applied: Applied) -> None:
        if not applied.emit_output:
            return
        now = self.wall()
        value = applied.item.value
        self.output_log.add(now, applied.key_group, now - value[1])
        if applied.key_group == self.hot:
            self.latency.add(now, now - value[1], now - value[2])
            self.outputs_hot += 1

    def on_tick(self) -> None:
        self.tick_keyed()  # the start-up report (the coordinator's own checkpoints are off)
        control = read_control(self.output_dir)
        coordinator = self.coordinator
        owned = coordinator.owned()
        holders = {g: coordinator.machine(g).holder for g in owned}
        for g in self.plan.due(self.clock(), owned, int(control.get("checkpoint", 0)), holders):
            self.perform(coordinator.checkpoint(g))
            if g == self.hot:
                self.events.add(
                    at=self.wall(), type="checkpoint_taken", request=self.plan.seen_request
                )
        rows = self.latency.drain(self.wall())
        if rows:
            with open(self.latency_path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        self.events.flush()
        self.output_log.flush()
        extra = self.counters.extra
        extra["owned"] = list(coordinator.owned())
        extra["held"] = sorted(coordinator.held)
        extra["hot_phase"] = coordinator.phase(self.hot).value
        extra["outputs_hot"] = self.outputs_hot
        extra["checkpoint_request_seen"] = self.plan.seen_request
        extra["heartbeats"] = self.heartbeat_health()
        extra["durable"] = self.durable_health()
        if control.get("final"):
            extra["state_total"] = sum(
                sum(coordinator.state(g).items().values()) for g in coordinator.live()
            )
            extra["live"] = list(coordinator.live())
            state = coordinator.state(self.hot)
            extra["hot_keys"] = len(state) if state is not None else None
