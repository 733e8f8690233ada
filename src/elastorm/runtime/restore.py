"""Savepoints from the command line and at submit: ``elastorm savepoint`` and the
resolution of ``elastorm.restore_from`` (``elastorm.durable.savepoint`` decides).

:func:`take_savepoint` reads the emitters' restart points from the topology's ZooKeeper
*first*, then the durable sets of the submission those znodes belong to (the order that
makes the points covered; each submission has its own directory,
``elastorm.durable.submissions``). A running topology is not drained nor asked for a
fresh checkpoint: the sets are the newest durable ones, each as old as its group's
durable lag (``elastorm status`` / the dashboard). :func:`restore_options` turns
``latest`` into such a savepoint of the most recent submission that has any set, named
``latest-<time>``, so every component of the new submission reads one fixed set.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from elastorm.config import DurableConfig, TopologyConfig
from elastorm.durable.format import CorruptFile
from elastorm.durable.savepoint import LATEST, Savepoint, SavepointError, load, refusal
from elastorm.durable.store import DurableStore, StoreError, topology_store
from elastorm.durable.submissions import latest_view, open_view, save, submission_records
from elastorm.errors import UserError
from elastorm.runtime.migrate import connected
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.replay import restart_points
from elastorm.zk.submission import read_submission


def store_of(uri: str, *, home: str, topology: str) -> DurableStore:
    """The root of the topology's durable store for option value ``uri``; ``UserError``
    when the tier is off or no submission of the topology wrote there."""
    store = topology_store(uri, home=home, topology=topology)
    if store is None:
        raise UserError(f"{topology}: the durable tier is off ({DurableConfig.key('uri')} = none)")
    try:
        if not submission_records(store):
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
    latest: bool = False,
    progress: Callable[[str], None] = lambda text: None,
) -> tuple[Savepoint, list[str]]:
    """Take savepoint ``name`` at the topology's root ``store``: the restart points from
    ZooKeeper, then the sets of the submission they belong to (the one its
    ``submission`` znode names). With ``latest``, of the most recent submission that has
    a set (``submissions.latest_view``); the points only if it is that same one."""
    progress(f"reading the emitters' restart points of {topology} from ZooKeeper {zookeeper}")
    layout = ZnodeLayout(topology)
    with connected(zookeeper) as client:
        points = restart_points(client, layout)
        recorded = read_submission(client, layout)
    current = recorded.storm_id if recorded is not None else None
    try:
        view = latest_view(store) if latest else None
        if view is None:
            if current is None:
                raise SavepointError(f"ZooKeeper {zookeeper} has no submission of {topology}")
            view = open_view(store, current)
        if view.storm_id != current:
            progress(
                f"the newest durable sets are of submission {view.storm_id}, ZooKeeper's "
                f"restart points of {current}: every emitter replays from its source's start"
            )
            points = {}
        progress(f"{len(points)} restart points; listing the newest durable set of every "
                 f"key group of submission {view.storm_id}")  # fmt: skip
        return save(view, name=name, now=time.time(), points=points)
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
    resolved: ``latest`` taken as a savepoint now (:func:`take_savepoint`); a changed
    key-group count is refused here, before submitting."""
    key = TopologyConfig.key("restore_from")
    name = options.get(key)
    if not name:
        return options
    uri = str(options.get(DurableConfig.key("uri"), DurableConfig().uri))
    store = store_of(uri, home=home, topology=topology)
    if name == LATEST:
        name = f"latest-{time.strftime('%Y%m%d-%H%M%S')}"
        sp, dropped = take_savepoint(
            store, zookeeper, topology, name, latest=True, progress=progress
        )
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
    return {**options, key: sp.name}


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


def restart_hint(sp: Savepoint) -> str:
    """How to start a new submission from ``sp`` (exactly the options it needs)."""
    return f"restart from it: sparse submit ... -o {TopologyConfig.key('restore_from')}={sp.name}"
