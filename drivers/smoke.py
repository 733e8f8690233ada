"""Driver of the smoke topology (``topologies/smoke.py``): N numbers sent by direct
emit, split over two counter tasks; done when all are counted, checked by their sum."""

from __future__ import annotations

import glob
import json
import os

from demos.options import EXAMPLE_SECTIONS, SmokeOptions
from elastorm.config import TopologyConfig
from elastorm.runtime.drivers import DriverArgs
from elastorm.runtime.outcome import Outcome, Progress


class SmokeDriver:
    """The smoke topology: N numbers sent by direct emit, split over two counter tasks."""

    name = "smoke"
    sections = EXAMPLE_SECTIONS
    topology: str = ""  # set by runtime.run before submitting
    zk_hosts: str = ""

    def __init__(self, count: int = 1000) -> None:
        self.count = count

    def options(self, output_dir: str) -> dict[str, object]:
        return TopologyConfig.overrides(output_dir=output_dir) | SmokeOptions.overrides(
            count=self.count
        )

    def _read(self, output_dir: str) -> list[dict]:
        files = sorted(glob.glob(os.path.join(output_dir, "smoke-*.json")))
        return [json.loads(open(path).read()) for path in files]

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        from elastorm.runtime.services import wait_until

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


def make_driver(args: DriverArgs) -> SmokeDriver:
    """``elastorm local smoke [--limit N]``: N numbers (default 1000)."""
    return SmokeDriver(args.limit or 1000)
