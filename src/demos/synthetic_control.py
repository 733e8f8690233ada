"""The synthetic job's control file: the driver changes rates and hot keys while it runs.

The driver (``drivers.synthetic``) writes it; the spout
(``spouts.synthetic``) reads it on every batch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from elastorm.files import write_json_atomic

CONTROL_FILE = "synthetic-control.json"


def read_control(output_dir: str) -> dict[str, Any]:
    """The driver's control file, or ``{}`` if absent or half-written."""
    try:
        with open(os.path.join(output_dir, CONTROL_FILE), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_control(output_dir: str, control: Mapping[str, Any]) -> None:
    """Write the control file atomically (the driver's side)."""
    write_json_atomic(os.path.join(output_dir, CONTROL_FILE), dict(control))
