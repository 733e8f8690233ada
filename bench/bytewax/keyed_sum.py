"""The throughput benchmark's keyed count in Bytewax, the Python peer of issue 34.

Runs in the Bytewax virtualenv (``.elastorm/bytewax-venv``, built from
``bench/side_by_side/bytewax-requirements.txt`` by ``bench/pyflink/venv.py``'s
``built()``), started by ``bench/throughput.py``'s ``bytewax`` variant, the same job
as its Storm topologies and PyFlink's at the same parallelism (one worker):

    source (Python): (key, stamp), paced by the control file
        -> key_on(key) -> stateful_flat_map: count per key in Bytewax's keyed state

The source plays the Storm spout: keys ``k0..k<keys-1>`` round robin, ``stamp`` =
``time.time()``, in batches of up to ``BATCH`` (Bytewax's own unit of input) as fast
as it can while ``throughput-control.json``'s rate is 0, else at that rate
(``demos.throughput_control``). The keyed step counts per key and keeps a
:class:`~demos.latency_counts.LatencyCounts`, written to ``<out>/throughput-0.json``
about once a second while tuples arrive, the file the Storm counters write. Runs
until killed.

Usage (inside the venv, with the repository's ``src`` on ``PYTHONPATH``)::

    KEYED_SUM_OUT=OUT_DIR python -m bytewax.run bench/bytewax/keyed_sum.py:flow
"""

from __future__ import annotations

import os
import time

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition

from demos.latency_counts import LatencyCounts
from demos.throughput_control import RateControl

OUT_DIR = os.environ.get("KEYED_SUM_OUT", ".")
KEYS = int(os.environ.get("KEYED_SUM_KEYS", "1000"))
BATCH = 100  # tuples per next_batch at most
WRITE_SECS = 1.0


class _PacedKeys(StatelessSourcePartition):
    """``(key, stamp)`` pairs, round robin over the keys, at the control file's rate."""

    def __init__(self) -> None:
        self.keys = [f"k{i}" for i in range(KEYS)]
        self.next_key = 0
        self.control = RateControl(OUT_DIR, 0.0, time.monotonic())

    def next_batch(self) -> list[tuple[str, float]]:
        due = self.control.due(time.monotonic())
        if due < 1:
            time.sleep((1 - due) / self.control.rate)
            due = 1
        n = int(min(due, BATCH))
        self.control.sent(n)
        batch = []
        i = self.next_key
        for _ in range(n):
            batch.append((self.keys[i], time.time()))
            i = i + 1 if i + 1 < KEYS else 0
        self.next_key = i
        return batch


class PacedKeys(DynamicSource):
    """One partition per worker (one worker here)."""

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _PacedKeys:
        return _PacedKeys()


class _Nothing(StatelessSinkPartition):
    def write_batch(self, items: list) -> None:
        pass


class Nothing(DynamicSink):
    """A dataflow needs an output; the count step emits nothing into it."""

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Nothing:
        return _Nothing()


LATENCY = LatencyCounts(os.path.join(OUT_DIR, "throughput-0.json"))
_written = [0.0]


def count(state: int | None, pair: tuple[str, float]) -> tuple[int, list]:
    """Count the key's pair in its state; the latency into ``LATENCY``."""
    LATENCY.add(pair[1])
    if LATENCY.tuples & 255 == 0:
        now = time.time()
        if now - _written[0] >= WRITE_SECS:
            LATENCY.write()
            _written[0] = now
    return (state or 0) + 1, []


flow = Dataflow("keyed_count")
pairs = op.input("pairs", flow, PacedKeys())
keyed = op.key_on("key", pairs, lambda pair: pair[0])
counted = op.stateful_flat_map("count", keyed, count)
op.output("nothing", counted, Nothing())
