"""Tuples seen and their end-to-end latency histogram, for the throughput benchmark.

The counters of ``bench/throughput.py`` (``bolts.throughput`` on Storm, and the
PyFlink keyed sum of ``bench/pyflink/keyed_sum.py``) keep one of these and write it
as ``throughput-<task>.json`` (cumulative count and histogram) about once a second;
the driver differences two reads. The histogram is keyed by each bucket's upper
edge in ms (:func:`bucket_edge`: 0.1 ms wide below 10 ms, 1 ms below 100 ms, 10 ms
below 2 s, then one bucket), so it stays under 400 buckets and writing it costs
the measured task well under a millisecond (0.1 ms buckets up to 2 s grew to
15,000 entries after a saturated phase, and their JSON held the task up for tens
of ms every second: that stall was the p99 the benchmark once reported). Beside
the histogram it keeps the highest latency of each second of arrival (the last
``SECONDS_KEPT`` seconds), so a tail can be placed in time: every second (a tick),
every 5 s (a checkpoint), once.
Without streamparse, so that PyFlink's Python worker can import it.
"""

from __future__ import annotations

import math
import time

from elastorm.files import write_json_atomic

TOP_MS = 2000.0  # 2 s and above share the last bucket
SECONDS_KEPT = 120  # per-second maxima kept (and written)


def bucket_edge(latency_ms: float) -> str:
    """The upper edge (ms, as the histogram's key) of the bucket of ``latency_ms``.

    >>> [bucket_edge(ms) for ms in (0.03, 3.21, 42.5, 300.1, 9e9)]
    ['0.1', '3.3', '43', '310', '2000']
    """
    if latency_ms < 10:
        return f"{max(1, math.ceil(latency_ms * 10)) / 10:.1f}"
    if latency_ms < 100:
        return str(math.ceil(latency_ms))
    if latency_ms < TOP_MS:
        return str(math.ceil(latency_ms / 10) * 10)
    return str(int(TOP_MS))


class LatencyCounts:
    """Tuples seen and their latency histogram; written whole to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tuples = 0
        self.histogram: dict[str, int] = {}
        self.worst: dict[int, float] = {}  # second of arrival -> highest latency, ms
        self._second = 0
        self._top = 0.0

    def add(self, stamp: float) -> None:
        """Count one tuple stamped ``stamp`` (``time.time()`` where it was made)."""
        now = time.time()
        ms = (now - stamp) * 1000
        self.tuples += 1
        b = bucket_edge(ms)
        h = self.histogram
        h[b] = h.get(b, 0) + 1
        second = int(now)
        if second != self._second:
            self._second, self._top = second, ms
        elif ms <= self._top:
            return
        self._top = ms
        self.worst[second] = round(ms, 2)
        if len(self.worst) > SECONDS_KEPT:
            del self.worst[min(self.worst)]

    def write(self) -> None:
        write_json_atomic(
            self.path,
            {
                "at": time.time(),
                "tuples": self.tuples,
                "histogram": self.histogram,
                "worst": self.worst,
            },
        )
