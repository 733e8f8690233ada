"""The flights job in one process: the real components, wired by direct method calls.

No Storm: ``Pipeline`` connects spout -> op1 -> op2/op3/op4 -> sink the way
``topologies/flights.py`` does (shuffle, fields grouping on the key, global) with
one FIFO queue, so per-channel order is kept as in Storm. Tests use it to check
the components end to end; ``bench/flights_throughput.py`` uses it as the
no-Storm baseline.
"""

from __future__ import annotations

import io
import tempfile
import zlib
from collections import deque

from pystorm.component import Tuple

from bolts.flights import (
    AirShare,
    ExtractDelays,
    ResultsSink,
    SampledDelayShare,
    SumDelays,
)
from demos.options import FlightsOptions
from elastorm.config import TopologyConfig
from spouts.flights import FlightsSpout

TICK = Tuple("tick", "__system", "__tick", -1, (1,))


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make(cls, conf, *, task=1, component=None, clock=None):
    """Initialize ``cls`` as Storm would, with ``emit`` captured in ``.emitted``."""
    comp = cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    comp.emitted = []
    comp.emit = lambda values, stream=None, **_: comp.emitted.append(
        (stream or "default", list(values))
    )
    if clock is not None:
        comp.clock = clock
    comp.initialize(conf, {"taskid": task, "componentid": component or cls.role})
    return comp


def tup(values, *, stream="default", component="upstream", task=1):
    return Tuple(None, component, stream, task, tuple(values))


def drain(comp):
    out, comp.emitted = comp.emitted, []
    return out


class Pipeline:
    """spout -> op1 x p -> op2 x p, op3 x p (fields on key), op4, sink (global)."""

    def __init__(self, conf, *, parallelism=2, clock=None, seconds_per_batch=0.05):
        self.clock = clock or FakeClock()
        self.seconds_per_batch = seconds_per_batch
        task_ids = iter(range(1, 100))

        def tasks(cls, n):
            return [make(cls, conf, task=next(task_ids), clock=self.clock) for _ in range(n)]

        self.spout = tasks(FlightsSpout, 1)[0]
        self.op1 = tasks(ExtractDelays, parallelism)
        self.op2 = tasks(SumDelays, parallelism)
        self.op3 = tasks(AirShare, parallelism)
        self.op4 = tasks(SampledDelayShare, 1)[0]
        self.sink = tasks(ResultsSink, 1)[0]
        self.bolts = [*self.op1, *self.op2, *self.op3, self.op4, self.sink]
        self.queue: deque = deque()
        self._shuffle = 0

    def _targets(self, source, stream, values):
        if stream == "errors":
            return [self.sink]
        if source is self.spout:
            self._shuffle += 1
            return [self.op1[self._shuffle % len(self.op1)]]
        if source in self.op1:
            if stream == "sample":
                return [self.op4]
            n = zlib.crc32(values[1].encode()) % len(self.op2)
            return [self.op2[n], self.op3[n]]
        return [self.sink]

    def _send(self, source):
        for stream, values in drain(source):
            for target in self._targets(source, stream, values):
                self.queue.append((target, tup(values, stream=stream, task=source.counters.task)))

    def _pump(self):
        while self.queue:
            target, t = self.queue.popleft()
            target.process(t)
            self._send(target)

    def tick(self):
        for bolt in self.bolts:
            bolt.process_tick(TICK)
            self._send(bolt)
            self._pump()

    def run(self, max_batches=100_000):
        for _ in range(max_batches):
            if self.spout.exhausted:
                break
            self.spout.next_tuple()
            self._send(self.spout)
            self._pump()
            self.clock.advance(self.seconds_per_batch)
        self.clock.advance(1.0)
        self.tick()
        self.tick()
        return self


def run_pipeline(path: str, limit: int | None = None, output_dir: str | None = None) -> int:
    """Run the whole job over ``path`` (first ``limit`` rows); return the rows the spout read."""
    with tempfile.TemporaryDirectory() as tmp:
        conf = TopologyConfig.overrides(output_dir=output_dir or tmp) | FlightsOptions.overrides(
            path=path
        )
        if limit is not None:
            conf |= FlightsOptions.overrides(limit=limit)
        return Pipeline(conf).run(max_batches=10**9).spout.row_no
