"""Savepoints: a consistent set of durable checkpoints plus the emitters' restart points,
for a new submission (same or upgraded code) to start from.

A savepoint is taken *without draining the job*, from the durable tier alone: for every
keyed operator and key group, the newest complete durable set (its manifest, which names
the upstream positions it reflects, ``watermarks``, and carries the output counters), and
for every emitter behind a replayable source its durable restart point (``core.replay``:
the source positions after which it resumes, with its sequence counters there). A new
submission with ``elastorm.restore_from`` starts each key group from its set, each such
emitter from its restart point (so it numbers every replayed tuple as before) and each
replayable spout from the oldest position any emitter needs (``replay_start``); the
restored watermarks drop what the sets already reflect: nothing lost, nothing twice.

Consistency: an emitter's restart point is durable only once every tuple it counts is
trimmed, and trims never pass a group's durable copy, so a restart point read *before*
the sets are listed is covered by them. :func:`consistent_points` checks it anyway
against the sets' watermarks and drops a point that is not covered (that emitter then
replays from the source's start, numbering from 1 again: slower, still exact).

Each submission of a topology writes its sets in a directory of its own, named by its
Storm id (``<topology root>/<storm id>/<operator>/g<group>/``,
``elastorm.durable.submissions``), so a savepoint records, per set, the submission whose
directory holds it (:class:`GroupSet`): a restored submission reads the old one's files
and writes its own. The savepoint file, ``savepoints/<name>.json`` at the topology's
root, is framed like every durable file (``format.frame``) and written last; retention
never deletes a file it names (:func:`pinned_files`). This module decides and encodes;
:func:`take` and :func:`load` are the thin store adapters around it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from elastorm.core.checkpoint import HeldCheckpoint
from elastorm.core.errors import ElastormError
from elastorm.core.replay import RestartPoint
from elastorm.durable.format import (
    CorruptFile,
    Manifest,
    decode_manifest,
    frame,
    group_dir,
    manifests_newest_first,
    parse_name,
    rebuild,
    unframe,
)
from elastorm.durable.restore import read_set
from elastorm.durable.store import DurableStore

DIRECTORY = "savepoints"
"""Where a topology's savepoints live in its store."""

OPERATORS = "operators"
"""Where each keyed task records its operator's key-group count (``<operator>.json``):
a savepoint needs no ZooKeeper to know which groups there are."""

LATEST = "latest"
"""``elastorm.restore_from`` value: the newest complete set of every group, no savepoint."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class SavepointError(ElastormError):
    """A savepoint cannot be taken or used (named, missing, or not fit for this topology)."""


def check_name(name: str) -> str:
    """``name`` if it is a valid savepoint name (letters, digits, ``_.-``; not ``latest``)."""
    if not _NAME.match(name) or name == LATEST:
        raise SavepointError(
            f"bad savepoint name {name!r}: 1-100 letters, digits, '_', '.', '-' (not {LATEST!r})"
        )
    return name


def savepoint_path(name: str) -> str:
    """The store path of savepoint ``name``."""
    return f"{DIRECTORY}/{check_name(name)}.json"


@dataclass(frozen=True, kw_only=True)
class GroupSet:
    """One key group's durable set in a savepoint: the submission (Storm id) whose
    directory holds it, its manifest and the files it needs."""

    submission: str
    manifest: str
    files: tuple[str, ...]
    watermarks: Mapping[str, int] = field(default_factory=dict)

    @property
    def checkpoint(self) -> tuple[int, int]:
        parsed = parse_name(self.manifest)
        assert parsed is not None, self.manifest
        return parsed[1]


@dataclass(frozen=True, kw_only=True)
class Savepoint:
    """A consistent set: per operator its key-group count and each group's set (groups
    with no durable copy yet are absent: they start empty), and per emitter task
    (``component:task``) its restart point. ``taken_at`` is wall-clock seconds."""

    name: str
    taken_at: float
    key_groups: Mapping[str, int]
    sets: Mapping[str, Mapping[int, GroupSet]]
    points: Mapping[str, RestartPoint] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for op, groups in self.sets.items():
            if op not in self.key_groups:
                raise ValueError(f"savepoint {self.name}: sets of {op} but no key-group count")
            bad = [g for g in groups if not 0 <= g < self.key_groups[op]]
            if bad:
                raise ValueError(f"savepoint {self.name}: {op} groups {bad} out of range")

    def first_epoch(self) -> int:
        """A routing epoch above every checkpoint in the savepoint: the new submission's
        checkpoints (numbered in its epochs) then sort after the sets it starts from."""
        epochs = [s.checkpoint[0] for groups in self.sets.values() for s in groups.values()]
        return max(epochs, default=-1) + 1

    def point_of(self, component: str, task: int) -> RestartPoint | None:
        """The restart point of emitter ``component``'s ``task`` (None: from the start)."""
        return self.points.get(f"{component}:{task}")


# -- decisions -----------------------------------------------------------------------


def newest_manifests(listings: Mapping[int, Iterable[str]]) -> dict[int, str]:
    """Per key group, the newest manifest among its directory's file names (groups with
    none are left out). Damage is not looked at here: :func:`take` reads each one."""
    out = {}
    for g, names in sorted(listings.items()):
        newest = manifests_newest_first(names)
        if newest:
            out[g] = newest[0]
    return out


def covered(source: str, point: RestartPoint, marks: Mapping[str, Mapping[int, Mapping]]) -> bool:
    """Whether every tuple ``point`` counts (numbered under ``source``) is reflected by
    the sets' watermarks ``marks`` (``{operator: {group: {source: seq}}}``). A group
    with no set reflects nothing: a point that counts tuples to it is not covered."""
    for op, groups in point.counters.items():
        for g, seq in groups.items():
            if seq > marks.get(op, {}).get(g, {}).get(source, 0):
                return False
    return True


def consistent_points(
    points: Mapping[str, RestartPoint], sets: Mapping[str, Mapping[int, GroupSet]]
) -> tuple[dict[str, RestartPoint], list[str]]:
    """The restart points the sets cover (:func:`covered`), and the emitters dropped (they
    replay from the source's start instead). Sorted, deterministic."""
    marks = {op: {g: s.watermarks for g, s in groups.items()} for op, groups in sets.items()}
    kept, dropped = {}, []
    for source, point in sorted(points.items()):
        if covered(source, point, marks):
            kept[source] = point
        else:
            dropped.append(source)
    return kept, dropped


def refusal(savepoint: Savepoint, operator: str, key_groups: int) -> str | None:
    """Why ``operator`` with ``key_groups`` key groups cannot start from ``savepoint``
    (None: it can). The key-group count is fixed for a topology's life: a key's group
    is ``crc32(key) mod G``, so another ``G`` would put keys in groups whose state is
    elsewhere. An operator the savepoint does not know starts empty."""
    saved = savepoint.key_groups.get(operator)
    if saved is None or saved == key_groups:
        return None
    return (
        f"savepoint {savepoint.name!r} has {saved} key groups for {operator}, this "
        f"submission {key_groups} (elastorm.key_groups): the key-group count cannot "
        f"change across a restore; submit with elastorm.key_groups={saved}"
    )


def pinned_files(
    savepoints: Iterable[Savepoint], submission: str, operator: str, key_group: int
) -> frozenset[str]:
    """The file names of ``operator``'s ``key_group`` in ``submission``'s directory that
    some savepoint needs: retention (``format.to_delete``) must leave them."""
    out: set[str] = set()
    for sp in savepoints:
        s = sp.sets.get(operator, {}).get(key_group)
        if s is not None and s.submission == submission:
            out.update((s.manifest, *s.files))
    return frozenset(out)


# -- encoding ------------------------------------------------------------------------


def _point_json(p: RestartPoint) -> dict:
    return {
        "positions": dict(p.positions),
        "counters": {op: {str(g): n for g, n in gs.items()} for op, gs in p.counters.items()},
        "state": dict(p.state),
    }


def encode(sp: Savepoint) -> bytes:
    """A savepoint as a framed JSON file."""
    body = {
        "name": sp.name,
        "taken_at": sp.taken_at,
        "key_groups": dict(sp.key_groups),
        "sets": {
            op: {
                str(g): {
                    "submission": s.submission,
                    "manifest": s.manifest,
                    "files": list(s.files),
                    "watermarks": s.watermarks,
                }
                for g, s in sorted(groups.items())
            }
            for op, groups in sp.sets.items()
        },
        "points": {src: _point_json(p) for src, p in sorted(sp.points.items())},
    }
    return frame(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def decode(data: bytes, *, name: str = "savepoint") -> Savepoint:
    """Inverse of :func:`encode`; :class:`CorruptFile` on anything else."""
    body = unframe(data, name=name)
    try:
        raw = json.loads(body)
        return Savepoint(
            name=str(raw["name"]),
            taken_at=float(raw["taken_at"]),
            key_groups={str(op): int(n) for op, n in raw["key_groups"].items()},
            sets={
                str(op): {
                    int(g): GroupSet(
                        submission=str(s["submission"]),
                        manifest=str(s["manifest"]),
                        files=tuple(str(f) for f in s["files"]),
                        watermarks={str(k): int(v) for k, v in s["watermarks"].items()},
                    )
                    for g, s in groups.items()
                }
                for op, groups in raw["sets"].items()
            },
            points={
                str(src): RestartPoint(
                    positions={str(k): int(v) for k, v in p["positions"].items()},
                    counters={
                        str(op): {int(g): int(n) for g, n in gs.items()}
                        for op, gs in p["counters"].items()
                    },
                    state=dict(p["state"]),
                )
                for src, p in raw["points"].items()
            },
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{name}: not a savepoint: {exc}") from None


# -- the store adapters --------------------------------------------------------------


def record_operator(store: DurableStore, operator: str, key_groups: int) -> None:
    """Record ``operator``'s key-group count in a submission's directory ``store`` (a
    keyed task at start), once."""
    path = f"{OPERATORS}/{operator}.json"
    data = frame(json.dumps({"key_groups": key_groups}).encode("utf-8"))
    try:
        if store.get(path) == data:
            return
    except FileNotFoundError:
        pass
    store.put(path, data)


def operators(store: DurableStore) -> dict[str, int]:
    """The keyed operators recorded in a submission's directory, with their key-group counts."""
    out = {}
    for name in store.list(OPERATORS):
        if name.endswith(".json"):
            body = unframe(store.get(f"{OPERATORS}/{name}"), name=name)
            out[name[: -len(".json")]] = int(json.loads(body)["key_groups"])
    return out


def group_set(
    store: DurableStore, submission: str, operator: str, key_group: int, manifest: str
) -> GroupSet:
    """The :class:`GroupSet` of manifest ``manifest`` of a group in ``store``, the
    directory of ``submission`` (the manifest read and checked: a damaged one raises
    rather than a savepoint silently picking an older set)."""
    m = decode_manifest(store.get(f"{group_dir(operator, key_group)}/{manifest}"), name=manifest)
    return GroupSet(
        submission=submission, manifest=m.name, files=m.files, watermarks=dict(m.watermarks)
    )


def take(
    root: DurableStore,
    *,
    name: str,
    now: float,
    key_groups: Mapping[str, int],
    sets: Mapping[str, Mapping[int, GroupSet]],
    points: Mapping[str, RestartPoint],
) -> tuple[Savepoint, list[str]]:
    """Take savepoint ``name`` at the topology's ``root``: the ``sets`` (one submission's
    newest, ``SubmissionView.group_sets``) and the ``points`` they cover, written last.
    ``points`` must be read *before* the sets are listed (see the module docstring).
    Returns the savepoint and the emitters whose points were dropped."""
    check_name(name)
    if not key_groups:
        raise SavepointError(f"{root.uri} has no keyed operator recorded: nothing to save")
    kept, dropped = consistent_points(points, sets)
    sp = Savepoint(name=name, taken_at=now, key_groups=key_groups, sets=sets, points=kept)
    root.put(savepoint_path(name), encode(sp))
    return sp, dropped


def load(store: DurableStore, name: str) -> Savepoint:
    """Savepoint ``name`` of the store's topology; :class:`SavepointError` if there is none."""
    try:
        data = store.get(savepoint_path(name))
    except FileNotFoundError:
        have = [n[: -len(".json")] for n in store.list(DIRECTORY) if n.endswith(".json")]
        raise SavepointError(
            f"no savepoint {name!r} in {store.uri} (there are: {', '.join(have) or 'none'})"
        ) from None
    return decode(data, name=name)


def all_savepoints(store: DurableStore) -> list[Savepoint]:
    """Every savepoint in the store (for pinning); an unreadable one raises: never unpin
    what it might name by skipping it."""
    return [
        decode(store.get(f"{DIRECTORY}/{n}"), name=n)
        for n in store.list(DIRECTORY)
        if n.endswith(".json")
    ]


def load_group(root: DurableStore, operator: str, key_group: int, s: GroupSet) -> HeldCheckpoint:
    """The key group as of its set ``s`` (read from its submission's directory under the
    topology's ``root``), rebuilt and checked (``CorruptFile`` if damaged: a restore
    never falls back silently to another point than the savepoint's)."""
    manifest: Manifest
    directory = f"{s.submission}/{group_dir(operator, key_group)}"
    manifest, chain = read_set(root, directory, s.manifest)
    del manifest
    return rebuild(chain)
