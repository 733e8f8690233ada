"""Per-topology drivers: what to pass at submit, when a run is done, how to check it.

A driver knows one topology's output files; ``runtime.run`` does the rest (jar,
cluster, submit, wait, kill) the same way for every topology.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.errors import UserError

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a finished run printed and whether its check passed."""

    summary: str
    ok: bool
    facts: dict[str, Any]


class FlightsDriver:
    """The flights job: done when every emitted tuple reached the sink; checked by pandas."""

    name = "flights"

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.first_rows_at: float | None = None  # monotonic time the spout was first seen reading
        self.complete_at: float | None = None

    def options(self, output_dir: str) -> dict[str, object]:
        opts: dict[str, object] = {"elastorm.output_dir": output_dir}
        if self.limit is not None:
            opts["elastorm.flights.limit"] = self.limit
        return opts

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        from runtime.flights_results import IncompleteRunError, wait_until_complete

        def report(result, unmet) -> None:
            now = time.monotonic()
            if self.first_rows_at is None and result.spout_total("rows_read") > 0:
                self.first_rows_at = now
            if not unmet:
                self.complete_at = now
            progress(
                f"spout rows {result.spout_total('rows_read')}, "
                f"op1 in {result.tuples_in('op1')}, sink op2 {result.seen('op2')}; "
                + (unmet[0] if unmet else "complete")
            )

        try:
            wait_until_complete(output_dir, timeout, poll=1.0, progress_callback=report)
        except IncompleteRunError as exc:
            raise UserError(str(exc)) from None

    def outcome(self, output_dir: str) -> Outcome:
        from jobs.flights_reference import compute_reference
        from runtime.flights_results import compare, format_summary, read_results

        result = read_results(output_dir)
        report = compare(result, compute_reference(limit=self.limit))
        facts = {"rows": result.spout_total("rows_read"), "planes": len(result.totals("op2"))}
        if self.first_rows_at is not None and self.complete_at is not None:
            # From the first poll that saw rows to the poll that saw completion (1 s polls).
            facts["processing_seconds"] = round(self.complete_at - self.first_rows_at, 2)
        return Outcome(summary=format_summary(result, report), ok=report.ok, facts=facts)


class SmokeDriver:
    """The smoke topology: N numbers sent by direct emit, split over two counter tasks."""

    name = "smoke"

    def __init__(self, count: int = 1000) -> None:
        self.count = count

    def options(self, output_dir: str) -> dict[str, object]:
        return {"elastorm.output_dir": output_dir, "elastorm.smoke.count": self.count}

    def _read(self, output_dir: str) -> list[dict]:
        files = sorted(glob.glob(os.path.join(output_dir, "smoke-*.json")))
        return [json.loads(open(path).read()) for path in files]

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        from runtime.services import wait_until

        def done() -> bool:
            got = sum(part["received"] for part in self._read(output_dir))
            progress(f"{got} of {self.count} numbers counted")
            return got >= self.count

        wait_until(done, "smoke topology", timeout)

    def outcome(self, output_dir: str) -> Outcome:
        parts = self._read(output_dir)
        received = sum(p["received"] for p in parts)
        total = sum(p["total"] for p in parts)
        want = self.count * (self.count - 1) // 2
        wrong = sum(p["wrong_payload"] for p in parts)
        ok = received == self.count and total == want and len(parts) == 2 and wrong == 0
        lines = [f"task {p['task']}: {p['received']} numbers, sum {p['total']}" for p in parts]
        lines.append(
            f"check: {received} numbers (want {self.count}), sum {total} (want {want}), "
            f"{len(parts)} tasks (want 2), {wrong} payloads damaged (want 0): "
            f"{'OK' if ok else 'FAILED'}"
        )
        return Outcome(
            summary="\n".join(lines), ok=ok, facts={"received": received, "tasks": len(parts)}
        )


def driver_for(topology: str, limit: int | None) -> FlightsDriver | SmokeDriver:
    """The driver of a topology in ``topologies/``."""
    if topology == "flights":
        return FlightsDriver(limit)
    if topology == "smoke":
        return SmokeDriver(limit or 1000)
    raise UserError(f"unknown topology {topology!r} (have: flights, smoke)")
