"""The throughput benchmark's keyed count in PyFlink's Python DataStream API.

Runs in the PyFlink virtualenv (``bench/pyflink/venv.py``), started by
``bench/throughput.py``'s ``pyflink`` variants, the same job as its Storm
topologies at the same parallelism (1):

    sequence source (Java) -> map (Python): (key, stamp), paced by the control file
        -> key_by(key) -> KeyedProcessFunction (Python): count in ValueState

The map plays the Storm spout: keys ``k0..k<keys-1>`` round robin, ``stamp`` =
``time.time()``, as fast as it can while ``throughput-control.json``'s rate is 0,
else at that rate (``demos.throughput_control``). The keyed function counts per key in a
``ValueState`` and keeps a :class:`~demos.latency_counts.LatencyCounts`,
written to ``<out>/throughput-<subtask>.json`` about once a second while tuples
arrive, the file the Storm counters write. Runs until killed.

Usage (inside the venv, with the repository's ``src`` on ``PYTHONPATH``)::

    python bench/pyflink/keyed_sum.py OUT_DIR [--keys 1000] [--mode process|thread]
"""

from __future__ import annotations

import argparse
import os
import site
import sys
import time

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import KeyedProcessFunction, MapFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from demos.latency_counts import LatencyCounts
from demos.throughput_control import RateControl

WRITE_SECS = 1.0


class PacedKeys(MapFunction):
    """Sequence number -> ``(key, stamp)``, at the control file's rate (0: unpaced)."""

    def __init__(self, out_dir: str, keys: int) -> None:
        self.out_dir = out_dir
        self.n = keys

    def open(self, runtime_context: RuntimeContext) -> None:
        self.keys = [f"k{i}" for i in range(self.n)]
        self.next_key = 0
        self.control = RateControl(self.out_dir, 0.0, time.monotonic())

    def map(self, value):
        control = self.control
        due = control.due(time.monotonic())
        if due < 1:
            time.sleep((1 - due) / control.rate)
        control.sent(1)
        i = self.next_key
        self.next_key = i + 1 if i + 1 < self.n else 0
        return self.keys[i], time.time()


class KeyedCount(KeyedProcessFunction):
    """Count per key in Flink's keyed ``ValueState``; latency into ``LatencyCounts``."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        try:
            task = runtime_context.get_index_of_this_subtask()
        except AttributeError:  # thread mode in PyFlink 2.3 calls a method Flink 2 removed
            task = 0  # parallelism 1
        self.latency = LatencyCounts(os.path.join(self.out_dir, f"throughput-{task}.json"))
        self.written = 0.0

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        self.count.update((self.count.value() or 0) + 1)
        latency = self.latency
        latency.add(value[1])
        if latency.tuples & 255 == 0:
            now = time.time()
            if now - self.written >= WRITE_SECS:
                latency.write()
                self.written = now
        return iter(())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--mode", choices=("process", "thread"), default="process")
    args = parser.parse_args()
    # Thread mode runs the functions in an interpreter embedded in the JVM (pemja), which
    # starts from the base installation's paths: hand it this virtualenv's packages.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [*site.getsitepackages(), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    config = Configuration()
    config.set_string("python.execution-mode", args.mode)
    config.set_string("python.executable", sys.executable)  # the workers: this venv's
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    sequence = env.from_source(
        NumberSequenceSource(0, 2**62), WatermarkStrategy.no_watermarks(), "sequence", Types.LONG()
    )
    pairs = sequence.map(
        PacedKeys(args.out_dir, args.keys),
        output_type=Types.TUPLE([Types.STRING(), Types.DOUBLE()]),
    )
    counted = pairs.key_by(lambda t: t[0], key_type=Types.STRING()).process(
        KeyedCount(args.out_dir), output_type=Types.LONG()
    )
    counted.print()
    env.execute("keyed_count")


if __name__ == "__main__":
    main()
