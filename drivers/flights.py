"""Driver of the flights job (``topologies/flights.py``): done when every emitted tuple
reached the sink; checked against pandas (``demos.flights_reference``)."""

from __future__ import annotations

import time

from demos.options import EXAMPLE_SECTIONS, FlightsOptions
from elastorm.config import TopologyConfig
from elastorm.errors import as_user_error
from elastorm.runtime.drivers import DriverArgs
from elastorm.runtime.outcome import Outcome, Progress


class FlightsDriver:
    """The flights job: done when every emitted tuple reached the sink; checked by pandas."""

    name = "flights"
    sections = EXAMPLE_SECTIONS
    keyed: frozenset[str] = frozenset()  # roles on elastorm key groups (see completeness)
    replayed = False  # the spout or op1 may replay rows (see completeness)
    tolerated: dict[str, set[str]] = {}  # error reasons expected in this run, per role
    topology: str = ""  # set by runtime.run before submitting
    zk_hosts: str = ""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.first_rows_at: float | None = None  # monotonic time the spout was first seen reading
        self.complete_at: float | None = None

    def options(self, output_dir: str) -> dict[str, object]:
        opts = TopologyConfig.overrides(output_dir=output_dir)
        if self.limit is not None:
            opts |= FlightsOptions.overrides(limit=self.limit)
        return opts

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        from demos.flights_results import (
            IncompleteRunError,
            progress_line,
            wait_until_complete,
        )

        def report(result, unmet) -> None:
            now = time.monotonic()
            if self.first_rows_at is None and result.spout_total("rows_read") > 0:
                self.first_rows_at = now
            if not unmet:
                self.complete_at = now
            self.on_poll(result)
            progress(progress_line(result, unmet))

        with as_user_error(IncompleteRunError):
            wait_until_complete(
                output_dir,
                timeout,
                poll=1.0,
                progress_callback=report,
                keyed=self.keyed,
                replayed=self.replayed,
            )

    def on_poll(self, result) -> None:
        """Called after every poll of a running job (the elastic driver migrates here)."""

    def outcome(self, output_dir: str) -> Outcome:
        from demos.flights_reference import compute_reference
        from demos.flights_results import compare, format_summary, read_results

        result = read_results(output_dir)
        report = compare(result, compute_reference(limit=self.limit), tolerated=self.tolerated)
        facts = {"rows": result.spout_total("rows_read"), "planes": len(result.planes())}
        if self.first_rows_at is not None and self.complete_at is not None:
            # From the first poll that saw rows to the poll that saw completion (1 s polls).
            facts["processing_seconds"] = round(self.complete_at - self.first_rows_at, 2)
        return Outcome(summary=format_summary(result, report), ok=report.ok, facts=facts)


def make_driver(args: DriverArgs) -> FlightsDriver:
    """``elastorm local flights [--limit N]``: the first N rows (default: all)."""
    return FlightsDriver(args.limit)
