"""Files a run shares between processes (drivers, bolts): written whole or not at all."""

from __future__ import annotations

import json
import os
from typing import Any


def write_json_atomic(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so readers see the old or the new file whole."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, separators=(",", ":"))
    os.replace(tmp, path)
