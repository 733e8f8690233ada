"""A new submission starting from a savepoint (``elastorm.durable.savepoint``): the
components' side of ``elastorm.restore_from``.

Every component of a first start reads the same savepoint from the topology's durable
store: a keyed task starts each group it owns from the group's set
(:func:`restore_keyed`), an emitter behind a replayable source from its restart point,
a replayable spout from the oldest position its emitters need (:func:`restored_points`).
``latest`` is resolved into a savepoint at submit (``elastorm.runtime.restore``), so that
every component reads one fixed set; a component that finds ``latest`` here, or a
routing epoch not above the savepoint's checkpoints, refuses to start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from elastorm.config import ConfigError, TopologyConfig
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.replay import RestartPoint
from elastorm.durable.savepoint import LATEST, Savepoint, load, load_group, refusal
from elastorm.durable.store import DurableStore, topology_store

log = logging.getLogger(__name__)


def savepoint_of(store: DurableStore | None, config: TopologyConfig) -> Savepoint | None:
    """The savepoint this submission starts from (None: it starts empty).

    Raises ``ConfigError`` when it cannot be used: the durable tier is off, ``latest``
    was not resolved at submit, or ``elastorm.restore_epoch`` is not above its checkpoints.
    """
    name = config.restore_from
    if not name:
        return None
    key = TopologyConfig.key("restore_from")
    if store is None:
        raise ConfigError(f"{key} = {name!r} needs the durable tier (elastorm.durable.uri)")
    if name == LATEST:
        raise ConfigError(
            f"{key} = {LATEST!r} is resolved at submit (elastorm run, or "
            "elastorm.runtime.restore.restore_options); submitted without it"
        )
    sp = load(store, name)
    if config.restore_epoch < sp.first_epoch():
        raise ConfigError(
            f"{TopologyConfig.key('restore_epoch')} = {config.restore_epoch}: savepoint "
            f"{name!r} needs at least {sp.first_epoch()} (set at submit from the savepoint)"
        )
    return sp


def restore_keyed(
    store: DurableStore,
    sp: Savepoint,
    operator: str,
    coordinator: TaskCoordinator,
    *,
    epoch: int,
) -> list[int]:
    """Start every key group ``coordinator`` owns from its set in ``sp`` (read and checked
    now, before the first tuple; a damaged file raises: never start empty silently).
    Refuses (``ConfigError``) a key-group count other than the savepoint's."""
    why = refusal(sp, operator, coordinator.num_key_groups)
    if why:
        raise ConfigError(why)
    sets = sp.sets.get(operator, {})
    copies = {g: load_group(store, operator, g, sets[g]) for g in coordinator.owned() if g in sets}
    restored = coordinator.start_from(copies, epoch=epoch)
    log.warning(
        "task %s of %s: key groups %s restored from savepoint %s (others start empty)",
        coordinator.task, operator, restored, sp.name,
    )  # fmt: skip
    return restored


def restored_points(
    sp: Savepoint, emitters: Mapping[str, Iterable[int]]
) -> list[RestartPoint | None]:
    """The restart points of the emitter tasks ``{component: tasks}`` in ``sp`` (None:
    that one replays from the start), for a spout's ``replay_start``."""
    return [sp.point_of(c, t) for c, tasks in sorted(emitters.items()) for t in tasks]


def durable_root(conf: Mapping[str, Any]) -> dict[str, str]:
    """Where the topology's store is: its name, and the home a bare ``file://`` means."""
    return {
        "topology": str(conf.get("topology.name", "topology")),
        "home": os.path.abspath(".elastorm"),
    }


def durable_store(conf: Mapping[str, Any], config: TopologyConfig) -> DurableStore | None:
    """The topology's durable store, for reading (the controller plans DURABLE restores
    from it, a restored submission reads its savepoint), or ``None`` when off."""
    return topology_store(config.durable.uri, **durable_root(conf))


def durable_savepoint(conf: Mapping[str, Any], config: TopologyConfig) -> Savepoint | None:
    """:func:`savepoint_of` for a component with Storm conf ``conf`` (opens the store)."""
    if not config.restore_from:
        return None
    return savepoint_of(durable_store(conf, config), config)
