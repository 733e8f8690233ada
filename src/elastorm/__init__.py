"""elastorm: elastic, fault-tolerant keyed state for Python topologies on Apache Storm.

What a user imports (``from elastorm import ...``):

* :class:`KeyedBolt`, :class:`ValueState`, :class:`MapState`: a keyed bolt and its
  per-key states (``elastorm.storm.keyed_bolt``, ``elastorm.core.keyed_state``);
* :class:`ElasticTopology`, :func:`keyed`: a streamparse topology whose keyed inputs
  elastorm wires (``elastorm.storm.topology``).

Layout: ``core`` (sans-IO: key groups, routing, state, the migration protocols;
imports no adapter), ``controller`` (placement, adaptation, recovery planners and
the controller bolt), ``zk`` (ZooKeeper), ``storm`` (Storm adapters), ``runtime``
(the ``elastorm`` command), ``jobs`` (the offline Spark job), ``examples`` (the
pure parts of the example jobs). The names below load on first use, so importing
``elastorm.core`` never pulls in Storm.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "KeyedBolt": "elastorm.storm.keyed_bolt",
    "ElasticTopology": "elastorm.storm.topology",
    "keyed": "elastorm.storm.topology",
    "ValueState": "elastorm.core.keyed_state",
    "MapState": "elastorm.core.keyed_state",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'elastorm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
