"""One knob for how hard the property tests try.

``ELASTORM_PROPERTY_SCALE`` multiplies every property test's example count: 1 in
the suite (CI), more in the long run (``bench/property_long.py``), since some
protocol bugs need thousands of generated interleavings to show.
"""

from __future__ import annotations

import os


def scale() -> int:
    raw = os.environ.get("ELASTORM_PROPERTY_SCALE", "1")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"ELASTORM_PROPERTY_SCALE must be a whole number, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"ELASTORM_PROPERTY_SCALE must be >= 1, got {value}")
    return value


def examples(n: int) -> int:
    """``n`` examples, times the scale."""
    return n * scale()
