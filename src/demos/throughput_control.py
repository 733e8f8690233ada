"""The rate the throughput benchmark's driver asks its source for, while the job runs.

``bench/throughput.py`` writes ``<output_dir>/throughput-control.json``
(``{"rate": tuples/s}``, 0: as fast as it can); the source (the Storm spout
``spouts.throughput`` or the PyFlink job's map, ``bench/pyflink/keyed_sum.py``)
keeps a :class:`RateControl`, which re-reads it every ``POLL_SECS`` and says how
many tuples are due. Without streamparse, so that PyFlink's worker can import it.
"""

from __future__ import annotations

import json
import math
import os

CONTROL_FILE = "throughput-control.json"
POLL_SECS = 0.5


class RateControl:
    """The asked rate and the tuples sent since it was set, on a monotonic clock."""

    def __init__(self, output_dir: str, rate: float, now: float) -> None:
        self.path = os.path.join(output_dir, CONTROL_FILE)
        self.rate = rate
        self.since = now  # when the current rate was set
        self.sent_since = 0
        self.polled = -math.inf

    def due(self, now: float) -> float:
        """Tuples due by ``now`` at the asked rate and not sent yet (``inf`` while the
        rate is 0); re-reads the file every ``POLL_SECS``. A new rate counts from ``now``."""
        if now - self.polled >= POLL_SECS:
            self._poll(now)
        if self.rate <= 0:
            return math.inf
        return (now - self.since) * self.rate - self.sent_since

    def sent(self, count: int) -> None:
        self.sent_since += count

    def _poll(self, now: float) -> None:
        self.polled = now
        try:
            with open(self.path, encoding="utf-8") as f:
                rate = float(json.load(f)["rate"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if rate != self.rate:
            self.rate, self.since, self.sent_since = rate, now, 0
