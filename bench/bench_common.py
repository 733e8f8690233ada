"""What the bench scripts share: the repository root, the commit a run measured, and
the fresh cluster a node-loss bench runs on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The short hash of the checked-out commit (named in every raw record)."""
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def node_loss_cluster(name: str, out: Path | None, *, tasks: int, supervisors: int, slots: int):
    """A fresh single-machine cluster for a bench that kills op2 workers: one executor
    per component but ``tasks`` op2 tasks (each in a worker of its own when the driver
    asks for it). Returns the config and the raw file (``out``, else
    ``docs/raw/<name>_<commit>.jsonl``, its directory made)."""
    from elastorm.runtime.cluster import down, up
    from elastorm.runtime.config import load_config

    os.environ["ELASTORM_PARALLELISM"] = "1"
    os.environ["ELASTORM_KEYED_TASKS"] = str(tasks)
    out = out or ROOT / "docs" / "raw" / f"{name}_{commit()}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg = load_config()
    down(cfg, wipe=True)
    up(cfg, supervisors=supervisors, slots=slots)
    return cfg, out


def completeness_cells(row: dict) -> tuple[str, float]:
    """A run's completeness as printed: its first 10 one-second bins, and the mean of
    the bins after them (a bin with no measure counts as NaN)."""
    c = [x if x is not None else float("nan") for x in row["completeness"]]
    return " ".join(f"{x:4.2f}" for x in c[:10]), sum(c[10:]) / max(1, len(c[10:]))


def print_ratios_to_none(rows: list[dict], secs: int) -> None:
    """Each arm's mean completeness over the first ``secs`` s after the kill, over the
    ``none`` arm's (when the run began with it)."""

    def first(row: dict) -> float:
        values = [x for x in row["completeness"][:secs] if x is not None]
        return sum(values) / len(values) if values else 0.0

    if rows and rows[0]["arm"] == "none":
        base = first(rows[0])
        for r in rows[1:]:
            ratio = first(r) / base if base else float("nan")
            print(f"{r['arm']}/none: mean completeness over the first {secs} s: {ratio:.2f}")
