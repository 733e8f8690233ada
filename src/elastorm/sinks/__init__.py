"""Sinks that commit each output of a keyed bolt exactly once (``docs/sinks.md``).

* ``commits``: which outputs to write (pure: output ids, committed sets, the plan);
* ``stores``: the databases (SQLite, PostgreSQL) and the one commit path;
* ``bolt``: :class:`Sink`, the bolt (its database: ``elastorm.sinks.store``).

The bolt loads on first use, so the pure parts import without streamparse.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"Sink": "elastorm.sinks.bolt"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'elastorm.sinks' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
