"""Savepoints from the command line and at submit: ``elastorm savepoint`` and the
resolution of ``elastorm.restore_from`` (``elastorm.durable.savepoint`` decides).

:func:`take_savepoint` reads the emitters' restart points from the topology's ZooKeeper
*first*, then the durable sets (the order that makes the points covered). A running
topology is not drained nor asked for a fresh checkpoint: the sets are the newest
durable ones, each as old as its group's durable lag (``elastorm status`` /
the dashboard). :func:`restore_options` turns ``latest`` into such a savepoint, named
``latest-<time>``, and sets ``elastorm.restore_epoch`` from the savepoint, so every
component of the new submission reads one fixed set and numbers its checkpoints after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from elastorm.config import DurableConfig, TopologyConfig
from elastorm.durable.format import CorruptFile
from elastorm.durable.savepoint import LATEST, Savepoint, SavepointError, load, refusal, take
from elastorm.durable.store import DurableStore, StoreError, topology_store
from elastorm.errors import UserError
from elastorm.runtime.migrate import connected
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.replay import restart_points


def store_of(uri: str, *, home: str, topology: str) -> DurableStore:
    """The topology's durable store for option value ``uri``; ``UserError`` when the
    tier is off or the store has nothing of the topology."""
    store = topology_store(uri, home=home, topology=topology)
    if store is None:
        raise UserError(f"{topology}: the durable tier is off ({DurableConfig.key('uri')} = none)")
    try:
        if not store.list("operators"):
            raise UserError(
                f"{topology}: no durable store at {store.uri} (no keyed task of it wrote "
                "there; is the topology name right, and the durable tier on?)"
            )
    except StoreError as exc:
        raise UserError(f"{topology}: durable store {store.uri} unreachable: {exc}") from None
    return store


def take_savepoint(
    store: DurableStore,
    zookeeper: str,
    topology: str,
    name: str,
    *,
    progress: Callable[[str], None] = lambda text: None,
) -> tuple[Savepoint, list[str]]:
    """Take savepoint ``name``: the restart points from ZooKeeper, then the sets."""
    progress(f"reading the emitters' restart points of {topology} from ZooKeeper {zookeeper}")
    with connected(zookeeper) as client:
        points = restart_points(client, ZnodeLayout(topology))
    progress(f"{len(points)} restart points; listing the newest durable set of every key group")
    try:
        return take(store, name=name, now=time.time(), points=points)
    except (SavepointError, CorruptFile) as exc:
        raise UserError(f"savepoint of {topology} not taken: {exc}") from None


def restore_options(
    options: dict[str, object],
    *,
    topology: str,
    zookeeper: str,
    home: str,
    progress: Callable[[str], None] = lambda text: None,
) -> dict[str, object]:
    """``options`` of a submission of ``topology`` with ``elastorm.restore_from``
    resolved: ``latest`` taken as a savepoint now, ``elastorm.restore_epoch`` set from
    the savepoint; a changed key-group count is refused here, before submitting."""
    key = TopologyConfig.key("restore_from")
    name = options.get(key)
    if not name:
        return options
    uri = str(options.get(DurableConfig.key("uri"), DurableConfig().uri))
    store = store_of(uri, home=home, topology=topology)
    if name == LATEST:
        name = f"latest-{time.strftime('%Y%m%d-%H%M%S')}"
        sp, dropped = take_savepoint(store, zookeeper, topology, name, progress=progress)
        if dropped:
            progress(f"restart points not covered by the sets (replay from 0): {dropped}")
    else:
        try:
            sp = load(store, str(name))
        except (SavepointError, CorruptFile) as exc:
            raise UserError(str(exc)) from None
    key_groups = int(options.get(TopologyConfig.key("key_groups"), TopologyConfig().key_groups))
    for operator in sorted(sp.key_groups):
        why = refusal(sp, operator, key_groups)
        if why:
            raise UserError(why)
    progress(describe(sp))
    return {**options, key: sp.name, TopologyConfig.key("restore_epoch"): sp.first_epoch()}


def describe(sp: Savepoint, now: float | None = None) -> str:
    """One paragraph about a savepoint: its sets, restart points and age."""
    now = time.time() if now is None else now
    groups = ", ".join(
        f"{op}: {len(sp.sets.get(op, {}))}/{n} key groups"
        for op, n in sorted(sp.key_groups.items())
    )
    return (
        f"savepoint {sp.name!r} ({now - sp.taken_at:.0f} s old): {groups} with a durable "
        f"set (the rest start empty), {len(sp.points)} emitter restart points"
    )
