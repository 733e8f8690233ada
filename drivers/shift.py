"""Driver of the shifting-load job (``topologies/shift.py``).

The job is Madsen & Zhou 2015, section 7.2 (the experiment in which load shifts between
nodes: checkpoint allocation and load balancing).

Submits it with one checkpoint-allocation strategy, waits until the spout has
stopped and every tuple it sent is counted, then reports the controller's
metrics: migrations ordered and how many were checkpoint-assisted, the share of
usable checkpoints while a node was overloaded, and whether every operator's
count equals what the spout sent to it (nothing lost, nothing twice).
"""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any

from demos.options import EXAMPLE_SECTIONS, ShiftOptions
from elastorm.config import STRATEGIES, ControllerConfig, TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.drivers import DriverArgs
from elastorm.runtime.outcome import Outcome, Progress


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def counts(output_dir: str) -> list[dict[str, Any]]:
    """Every component task's counts file."""
    return [_read(p) for p in sorted(glob.glob(os.path.join(output_dir, "counts", "*.json")))]


def tally(output_dir: str) -> tuple[dict[str, int], dict[str, int], bool]:
    """(sent per operator, counted per operator, spout done) from the counts files.

    Counted = the sum over each operator's tasks of the totals of the key groups
    it owns (a group owned by two tasks mid-migration would count twice and show
    as a mismatch, never as a false match).
    """
    sent: dict[str, int] = {}
    counted: dict[str, int] = {}
    done = False
    for c in counts(output_dir):
        extra = c.get("extra", {})
        if c.get("role") == "spout":
            sent = {k: int(v) for k, v in extra.get("sent", {}).items()}
            done = bool(extra.get("done"))
        elif c.get("role") == "counter":
            op = c["component"]
            counted[op] = counted.get(op, 0) + sum(int(v) for v in extra.get("totals", {}).values())
    return sent, counted, done


class ShiftDriver:
    """Runs the shift job for ``duration`` s at ``rate`` tuples/s with ``strategy``."""

    name = "shift"
    sections = EXAMPLE_SECTIONS
    topology: str = ""
    zk_hosts: str = ""

    def __init__(
        self,
        strategy: str = "correlated",
        *,
        duration: float = 110.0,
        ramp: float = 100.0,
        rate: float = 800.0,
        warmup: float = 40.0,
        extra: dict[str, object] | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise UserError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy = strategy
        self.duration, self.ramp, self.rate, self.warmup = duration, ramp, rate, warmup
        self.extra = dict(extra or {})

    def options(self, output_dir: str) -> dict[str, object]:
        return (
            TopologyConfig.overrides(output_dir=output_dir)
            | ControllerConfig.overrides(strategy=self.strategy, warmup_secs=self.warmup)
            | self.job_options()
            | self.extra
        )

    def job_options(self) -> dict[str, object]:
        return ShiftOptions.overrides(
            duration_secs=self.duration, ramp_secs=self.ramp, rate=self.rate
        )

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        deadline = time.monotonic() + timeout
        while True:
            sent, counted, done = tally(output_dir)
            metrics = _read(os.path.join(output_dir, "controller-metrics.json"))
            progress(
                f"sent {sent}, counted {counted}, migrations ordered "
                f"{len(metrics.get('orders', []))}" + (" (spout done)" if done else "")
            )
            if done and sent and all(counted.get(op) == n for op, n in sent.items()):
                time.sleep(2)  # one more counts write of every task
                return
            if time.monotonic() > deadline:
                raise UserError(
                    f"shift job incomplete after {timeout:.0f} s: sent {sent}, counted {counted}"
                )
            time.sleep(1)

    def outcome(self, output_dir: str) -> Outcome:
        sent, counted, done = tally(output_dir)
        m = _read(os.path.join(output_dir, "controller-metrics.json"))
        orders = m.get("orders", [])
        assisted = [o for o in orders if o["protocol"] != "direct"]
        usable = [s for _, s in m.get("usable_samples", [])]
        exact = done and bool(sent) and all(counted.get(op) == n for op, n in sent.items())
        facts = {
            "strategy": self.strategy,
            "sent": sent,
            "counted": counted,
            "exact": exact,
            "migrations": len(orders),
            "assisted": len(assisted),
            "assisted_share": len(assisted) / len(orders) if orders else None,
            "finished": len(m.get("finished", [])),
            "usable_share_mean": sum(usable) / len(usable) if usable else None,
            "usable_rounds": len(usable),
            "holders": m.get("holders", {}),
            "routing": m.get("routing", {}),
            "holder_moves": m.get("holder_moves", []),
            "allocated_at": m.get("allocated_at"),
            "orders": orders,
            "accumulated_seconds": m.get("accumulated_latency"),
        }
        share, mean = facts["assisted_share"], facts["usable_share_mean"]
        summary = (
            f"strategy {self.strategy}: {len(orders)} migrations, {len(assisted)} "
            f"checkpoint-assisted ({'-' if share is None else f'{share:.0%}'}); usable "
            f"checkpoints while overloaded "
            f"{'-' if mean is None else f'{mean:.0%}'} over {len(usable)} rounds; "
            f"counts {'exact' if exact else f'WRONG: sent {sent}, counted {counted}'}"
        )
        return Outcome(summary=summary, ok=exact, facts=facts)


def make_driver(args: DriverArgs) -> ShiftDriver:
    """``elastorm local shift [--strategy S]``: 110 s of shifting load."""
    return ShiftDriver(args.strategy)
