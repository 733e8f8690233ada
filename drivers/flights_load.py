"""Driver of the flights-load job (``topologies/flights_load.py``): the shifting-load
experiment (``drivers.shift``) on the real flights rows."""

from __future__ import annotations

from demos.options import FlightsLoadOptions
from drivers.shift import ShiftDriver
from elastorm.config import TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.drivers import DriverArgs
from elastorm.runtime.outcome import Outcome


class FlightsLoadDriver(ShiftDriver):
    """The flights-load job (Madsen & Zhou 2015, section 7.3, on Storm) with
    ``key_groups`` per operator; ``rate`` is the rows/s the ramp ends at."""

    name = "flights_load"

    def __init__(
        self,
        strategy: str = "correlated",
        *,
        key_groups: int = 16,
        duration: float = 200.0,
        ramp: float = 180.0,
        rate: float = 600.0,
        warmup: float = 60.0,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(
            strategy, duration=duration, ramp=ramp, rate=rate, warmup=warmup, extra=extra
        )
        if key_groups < 1:
            raise UserError(f"key groups must be >= 1, got {key_groups}")
        self.key_groups = key_groups

    def job_options(self) -> dict[str, object]:
        return TopologyConfig.overrides(key_groups=self.key_groups) | FlightsLoadOptions.overrides(
            duration_secs=self.duration, ramp_secs=self.ramp, rate_end=self.rate
        )

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        out.facts["key_groups"] = self.key_groups
        return Outcome(
            summary=f"{self.key_groups} key groups/operator, {out.summary}",
            ok=out.ok,
            facts=out.facts,
        )


def make_driver(args: DriverArgs) -> FlightsLoadDriver:
    """``elastorm local flights_load [--strategy S]``: 200 s of the flights load."""
    return FlightsLoadDriver(args.strategy)
