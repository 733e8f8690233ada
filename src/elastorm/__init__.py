"""elastorm: elastic, fault-tolerant keyed state for Python topologies on Apache Storm.

What a user imports (``from elastorm import ...``):

* :class:`KeyedBolt`, :class:`ValueState`, :class:`MapState`, :class:`WindowState`: a
  keyed bolt and its per-key states (``elastorm.storm.keyed_bolt``,
  ``elastorm.core.keyed_state``); :class:`TumblingWindow`, :class:`SlidingWindow`,
  :class:`SessionWindow`, :class:`Window`: event-time windows (``elastorm.core.windows``);
* :class:`ElasticTopology`, :func:`keyed`: a streamparse topology whose keyed inputs
  elastorm wires (``elastorm.storm.topology``);
* :class:`GeneratedSpout`, :class:`LinesSpout`, :class:`ReplayableSpout`: sources with
  a position and a replay from it, which a spout feeding a keyed bolt must be
  (``elastorm.storm.sources``, ``elastorm.storm.replay``).
* :func:`output_id_fields`, :class:`Sink`: a keyed bolt's outputs with stable ids,
  and a sink that commits each id once, into SQLite or PostgreSQL
  (``elastorm.sinks``, ``docs/sinks.md``).
* :func:`query_state`: one key's current state in a keyed operator of a running
  topology, as ``elastorm state`` prints it (``elastorm.runtime.state``).

Layers, bottom to top (imports point down only; the ``layers`` contract of
import-linter in ``pyproject.toml`` checks it in CI): ``core`` (sans-IO: key groups,
routing, state, the migration protocols); ``replication``, ``config``, ``files``,
``errors`` (pure models, the one typed configuration, small helpers);
``controller`` (the pure planners and the decision loop: no I/O); ``zk``
(ZooKeeper adapters); ``storm`` (streamparse adapters, the controller bolt and its
runtime); ``runtime``, ``jobs`` and ``sinks`` (the ``elastorm`` command, the offline
Spark job, the exactly-once sinks); ``dashboard`` (the live page). The names below
load on first use, so importing ``elastorm.core`` never pulls in Storm.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "KeyedBolt": "elastorm.storm.keyed_bolt",
    "ElasticTopology": "elastorm.storm.topology",
    "keyed": "elastorm.storm.topology",
    "GeneratedSpout": "elastorm.storm.sources",
    "LinesSpout": "elastorm.storm.sources",
    "ReplayableSpout": "elastorm.storm.replay",
    "output_id_fields": "elastorm.storm.elastic",
    "Sink": "elastorm.sinks",
    "query_state": "elastorm.runtime.state",
    "ValueState": "elastorm.core.keyed_state",
    "MapState": "elastorm.core.keyed_state",
    "WindowState": "elastorm.core.keyed_state",
    "TumblingWindow": "elastorm.core.windows",
    "SlidingWindow": "elastorm.core.windows",
    "SessionWindow": "elastorm.core.windows",
    "Window": "elastorm.core.windows",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'elastorm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
