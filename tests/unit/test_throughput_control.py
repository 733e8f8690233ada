"""The throughput benchmark's rate control file (demos.throughput_control)."""

from __future__ import annotations

import math

from demos.throughput_control import POLL_SECS, RateControl
from elastorm.files import write_json_atomic


def test_unpaced_until_the_driver_asks_then_due_counts_from_the_change(tmp_path):
    control = RateControl(str(tmp_path), 0.0, now=10.0)
    assert control.due(10.0) == math.inf  # no file: the rate it started with
    write_json_atomic(str(tmp_path / "throughput-control.json"), {"rate": 100.0})
    assert control.due(10.1) == math.inf  # not re-read before POLL_SECS
    at = 10.0 + POLL_SECS
    assert control.due(at) == 0.0  # the new rate counts from when it was read
    assert control.due(at + 0.25) == 25.0
    control.sent(20)
    assert control.due(at + 0.25) == 5.0
    write_json_atomic(str(tmp_path / "throughput-control.json"), {"rate": "fast"})
    assert control.due(at + 1.0) == 80.0  # a bad file keeps the rate


def test_a_rate_set_at_start_is_paced_from_the_start(tmp_path):
    control = RateControl(str(tmp_path), 50.0, now=3.0)
    assert control.due(3.25) == 12.5
