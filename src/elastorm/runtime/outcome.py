"""What every topology driver gives ``elastorm.runtime.run``: progress lines and an ``Outcome``.

The drivers (``elastorm.runtime.drivers``, ``elastorm.runtime.shift_driver``,
``elastorm.runtime.synthetic_driver``) each import these from here, never from one another,
so a module that picks a driver by topology name can import them all without an
import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Called with one progress line while a driver waits for its run to finish.
Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a finished run printed and whether its check passed."""

    summary: str
    ok: bool
    facts: dict[str, Any]
