"""A new submission starting from a savepoint (``elastorm.durable.savepoint``): the
components' side of ``elastorm.restore_from``.

Every component of a first start reads the same savepoint from the topology's durable
store: a keyed task starts each group it owns from the group's set
(:func:`restore_keyed`), an emitter behind a replayable source from its restart point,
a replayable spout from the oldest position its emitters need (:func:`restored_points`).
``latest`` is resolved into a savepoint before submitting
(``elastorm.runtime.restore.restore_options``), so that every component reads one fixed
set; a component that finds ``latest`` here refuses to start, saying what to do
instead. Every component numbers its routing epochs from the savepoint's
:meth:`~Savepoint.first_epoch` (:func:`first_epoch`), so the new submission's
checkpoints sort after the sets it started from (which it still falls back to:
``durable.submissions``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from elastorm.config import ConfigError, TopologyConfig
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.replay import RestartPoint
from elastorm.durable.format import CorruptFile
from elastorm.durable.savepoint import (
    LATEST,
    Savepoint,
    SavepointError,
    load,
    load_group,
    record_operator,
    refusal,
)
from elastorm.durable.store import HOME_DIR, DurableStore, topology_store
from elastorm.durable.submissions import SubmissionRecord, SubmissionView, record_submission
from elastorm.zk.layout import submission_id

log = logging.getLogger(__name__)


def savepoint_of(store: DurableStore | None, config: TopologyConfig) -> Savepoint | None:
    """The savepoint this submission starts from (None: it starts empty).

    Raises ``ConfigError`` when it cannot be used: the durable tier is off,
    ``latest`` was not resolved at submit, or the savepoint is missing or damaged.
    """
    name = config.restore_from
    if not name:
        return None
    key = TopologyConfig.key("restore_from")
    if store is None:
        raise ConfigError(f"{key} = {name!r} needs the durable tier (elastorm.durable.uri)")
    if name == LATEST:
        raise ConfigError(
            f"{key} = {LATEST!r} cannot be read by a running component (each would see "
            "other sets); it is resolved before submitting "
            "(elastorm.runtime.restore.restore_options). With sparse submit: kill this "
            "submission, run `elastorm savepoint --topology <topology name>` (it takes the "
            "newest durable sets), then submit again with the "
            f"`-o {key}=<savepoint name>` it prints"
        )
    try:
        return load(store, name)
    except (SavepointError, CorruptFile) as exc:  # refused like any other bad option
        raise ConfigError(f"{key} = {name!r}: {exc}") from exc


def restore_keyed(
    root: DurableStore,
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
    copies = {g: load_group(root, operator, g, sets[g]) for g in coordinator.owned() if g in sets}
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
        "home": os.path.abspath(HOME_DIR),
    }


def durable_store(conf: Mapping[str, Any], config: TopologyConfig) -> DurableStore | None:
    """The topology's durable store root (savepoints, every submission's directory), or
    ``None`` when the tier is off."""
    return topology_store(config.durable.uri, **durable_root(conf))


def durable_savepoint(conf: Mapping[str, Any], config: TopologyConfig) -> Savepoint | None:
    """:func:`savepoint_of` for a component with Storm conf ``conf`` (opens the store)."""
    if not config.restore_from:
        return None
    return savepoint_of(durable_store(conf, config), config)


def first_epoch(saved: Savepoint | None) -> int:
    """The first routing epoch of a submission restored from ``saved`` (None: not
    restored, 0): above every checkpoint in it. Every component computes the same."""
    return 0 if saved is None else saved.first_epoch()


def durable_view(conf: Mapping[str, Any], config: TopologyConfig) -> SubmissionView | None:
    """This submission's view of the durable store (it writes in its own directory,
    ``<root>/<storm id>``, and falls back to its savepoint's sets), or ``None`` when off."""
    saved = durable_savepoint(conf, config)  # refuses a restore with the tier off
    root = durable_store(conf, config)
    return None if root is None else SubmissionView(root, submission_id(conf), saved)


def record_start(
    view: SubmissionView, config: TopologyConfig, operator: str, key_groups: int
) -> None:
    """A keyed task's first start: record the submission (when, restored from what) and
    ``operator``'s key-group count, for a later savepoint or ``latest``."""
    record = SubmissionRecord(
        storm_id=view.storm_id, started_at=time.time(), restored_from=config.restore_from
    )
    record_submission(view.root, record)
    record_operator(view.store, operator, key_groups)
