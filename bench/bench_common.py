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
