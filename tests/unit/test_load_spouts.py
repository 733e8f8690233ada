"""The load generators of the controller experiments (shift, flights_load): pure parts."""

from __future__ import annotations

import pytest

from demos.options import FlightsLoadOptions, ShiftOptions
from elastorm.config import ConfigError
from spouts.flights_load import ramp_rate
from spouts.shift import share_to_op2


def test_shift_share_holds_then_ramps_to_one() -> None:
    assert share_to_op2(5, hold=10, ramp=100) == 0.0
    assert share_to_op2(60, hold=10, ramp=100) == pytest.approx(0.5)
    assert share_to_op2(500, hold=10, ramp=100) == 1.0
    assert share_to_op2(9, hold=10, ramp=0) == 0.0 and share_to_op2(10, hold=10, ramp=0) == 1.0


def test_flights_load_rate_ramps_linearly_and_stays() -> None:
    assert ramp_rate(0, 50, 650, 120) == 50
    assert ramp_rate(60, 50, 650, 120) == pytest.approx(350)
    assert ramp_rate(1000, 50, 650, 120) == 650
    assert ramp_rate(3, 50, 650, 0) == 650


def test_conf_defaults_and_clear_errors() -> None:
    assert ShiftOptions.from_conf({}).rate == 800.0
    assert FlightsLoadOptions.from_conf({"elastorm.flights_load.rate_end": "900"}).rate_end == 900
    with pytest.raises(ConfigError, match="elastorm.shift.rate = 'fast'"):
        ShiftOptions.from_conf({"elastorm.shift.rate": "fast"})
    with pytest.raises(ConfigError, match="elastorm.flights_load.ramp_secs = -1"):
        FlightsLoadOptions.from_conf({"elastorm.flights_load.ramp_secs": -1})
