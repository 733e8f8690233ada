"""Each submission of a topology in a directory of its own, the way Flink keeps a job's
checkpoints under its job id.

Storm gives every submission of a name a new id (``storm.id``); the durable files of a
topology live under ``<elastorm.durable.uri>/<topology name>/`` (the *root*,
``store.resolve_uri``)::

    submissions/<storm id>.json       one per submission: when it started, and the
                                      savepoint it was restored from (if any)
    <storm id>/operators/<op>.json    key-group counts (``savepoint.record_operator``)
    <storm id>/<op>/g<group>/...      the sets (``format``), written by that submission only
    savepoints/<name>.json            savepoints, each set naming its submission

A new submission of an old name thus never writes next to, nor reads by mistake, an
older submission's files (whose routing epochs, restarted from 0 by a submission that
was not restored, would sort as newer). What a submission *has* of a group
(:class:`SubmissionView`) is its own newest set, else the set of the savepoint it was
restored from (the group's state as it started, until its first durable write here).
"Most recent" is the record's ``started_at`` (wall clock, written by the first keyed
task of the submission to start; ties by Storm id).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from elastorm.core.checkpoint import HeldCheckpoint
from elastorm.core.messages import CheckpointId, DurableLoaded
from elastorm.core.replay import RestartPoint
from elastorm.durable.format import CorruptFile, frame, group_dir, unframe
from elastorm.durable.restore import load_latest, newest_sets
from elastorm.durable.savepoint import (
    GroupSet,
    Savepoint,
    all_savepoints,
    group_set,
    load,
    load_group,
    newest_manifests,
    operators,
    pinned_files,
    take,
)
from elastorm.durable.store import DurableStore, StoreError, Within, check_path

log = logging.getLogger(__name__)

DIRECTORY = "submissions"
"""Where the root keeps one record per submission."""


@dataclass(frozen=True, kw_only=True)
class SubmissionRecord:
    """A submission of the topology: its Storm id, when its first keyed task started
    (wall-clock seconds), and the savepoint it was restored from (None: it started empty)."""

    storm_id: str
    started_at: float
    restored_from: str | None = None


def record_submission(root: DurableStore, record: SubmissionRecord) -> None:
    """Record a submission at the topology's ``root`` (every keyed task at its first
    start; the first one's record stays)."""
    path = f"{DIRECTORY}/{check_path(record.storm_id)}.json"
    try:
        root.get(path)
        return
    except FileNotFoundError:
        pass
    body = {"storm_id": record.storm_id, "started_at": record.started_at}
    body["restored_from"] = record.restored_from
    root.put(path, frame(json.dumps(body, sort_keys=True).encode("utf-8")))


def submission_records(root: DurableStore) -> list[SubmissionRecord]:
    """Every recorded submission, oldest first (``started_at``, then Storm id)."""
    out = []
    for name in root.list(DIRECTORY):
        if name.endswith(".json"):
            raw = json.loads(unframe(root.get(f"{DIRECTORY}/{name}"), name=name))
            out.append(
                SubmissionRecord(
                    storm_id=str(raw["storm_id"]),
                    started_at=float(raw["started_at"]),
                    restored_from=raw.get("restored_from"),
                )
            )
    return sorted(out, key=lambda r: (r.started_at, r.storm_id))


@dataclass(frozen=True)
class SubmissionView:
    """What submission ``storm_id`` has at the topology's ``root``: its own sets, else
    those of ``base``, the savepoint it was restored from."""

    root: DurableStore
    storm_id: str
    base: Savepoint | None = None

    @cached_property
    def store(self) -> DurableStore:
        """The submission's own directory, where it writes."""
        return Within(self.root, self.storm_id)

    def key_groups(self) -> dict[str, int]:
        """Its keyed operators and their key-group counts (the base's, then its own)."""
        base = dict(self.base.key_groups) if self.base is not None else {}
        return {**base, **operators(self.store)}

    def _base_sets(self, operator: str) -> dict[int, GroupSet]:
        return dict(self.base.sets.get(operator, {})) if self.base is not None else {}

    def newest_sets(self, operator: str, key_groups: Iterable[int]) -> dict[int, CheckpointId]:
        """Of ``key_groups``, those it has a set of: that set's checkpoint id (the
        controller plans DURABLE restores from these; listings only)."""
        groups = sorted(set(key_groups))
        out = {g: s.checkpoint for g, s in self._base_sets(operator).items() if g in groups}
        return {**out, **newest_sets(self.store, operator, groups)}

    def group_sets(self, operator: str, key_groups: int) -> dict[int, GroupSet]:
        """Per key group of ``operator``, the newest set it has (each own manifest read
        and checked), for a savepoint."""
        chosen = newest_manifests(
            {g: self.store.list(group_dir(operator, g)) for g in range(key_groups)}
        )
        own = {
            g: group_set(self.store, self.storm_id, operator, g, name) for g, name in chosen.items()
        }
        return {**self._base_sets(operator), **own}

    def load(self, operator: str, key_group: int) -> HeldCheckpoint | None:
        """The group rebuilt from its newest intact own set, else from its base set, else
        None. ``StoreError`` propagates."""
        found = load_latest(self.store, operator, key_group)
        if found is not None:
            return found.copy
        s = self._base_sets(operator).get(key_group)
        return None if s is None else load_group(self.root, operator, key_group, s)

    def pins(self, operator: str, key_group: int) -> frozenset[str]:
        """Its files of the group some savepoint names (retention leaves them)."""
        return pinned_files(all_savepoints(self.root), self.storm_id, operator, key_group)


def open_view(root: DurableStore, storm_id: str) -> SubmissionView:
    """The view of submission ``storm_id`` (its base read from its record, if any)."""
    records = {r.storm_id: r for r in submission_records(root)}
    record = records.get(storm_id)
    base = None
    if record is not None and record.restored_from:
        base = load(root, record.restored_from)
    return SubmissionView(root, storm_id, base)


def latest_view(root: DurableStore) -> SubmissionView | None:
    """The most recent submission that has a set of any group (own or from its base),
    or None: what ``elastorm.restore_from=latest`` starts from."""
    for record in reversed(submission_records(root)):
        view = open_view(root, record.storm_id)
        counts = view.key_groups()
        if any(view.newest_sets(op, range(n)) for op, n in counts.items()):
            return view
    return None


def save(
    view: SubmissionView, *, name: str, now: float, points: Mapping[str, RestartPoint]
) -> tuple[Savepoint, list[str]]:
    """Savepoint ``name`` of what ``view``'s submission has (:func:`savepoint.take`:
    its newest set of every group, the ``points`` they cover), at the topology's root."""
    counts = view.key_groups()
    sets = {op: view.group_sets(op, n) for op, n in sorted(counts.items())}
    return take(view.root, name=name, now=now, key_groups=counts, sets=sets, points=points)


def load_for_restore(
    view: SubmissionView,
    operator: str,
    key_group: int,
    epoch: int,
    *,
    retry_max_secs: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> DurableLoaded:
    """The DURABLE restore target's read, on a thread of its own (the task must not
    block): the group's newest intact copy (:meth:`SubmissionView.load`) as the
    ``DurableLoaded`` of routing epoch ``epoch``, or one with no copy (the group starts
    empty; upstream replays all of it). A store that does not answer is asked again, after
    0.5 s doubling up to ``retry_max_secs``: nothing else has the group."""
    backoff = min(0.5, retry_max_secs)
    where = view.store.uri
    while True:
        try:
            copy = view.load(operator, key_group)
            break
        except StoreError as exc:
            log.warning(
                "durable restore of %s/%d waits for the store (retry in %.1f s): %s",
                operator, key_group, backoff, exc,
            )  # fmt: skip
            sleep(backoff)
            backoff = min(backoff * 2, retry_max_secs)
        except CorruptFile as exc:  # the base set (a savepoint's) is damaged
            log.error("durable restore of %s/%d: %s", operator, key_group, exc)
            copy = None
            break
    if copy is None:
        log.warning(
            "durable restore of %s/%d: %s has no intact copy of it: it starts empty and "
            "upstream replays all it buffers of the group (none is trimmed past a durable "
            "copy; a gap left by a damaged copy stalls and is reported)",
            operator, key_group, where,
        )  # fmt: skip
        return DurableLoaded(
            key_group=key_group, epoch=epoch, checkpoint=None, entries={}, watermarks={}, out_seq={}
        )
    log.warning(
        "durable restore of %s/%d from %s at checkpoint %s (%d keys)",
        operator, key_group, where, copy.checkpoint, len(copy.entries),
    )  # fmt: skip
    return DurableLoaded(
        key_group=key_group,
        epoch=epoch,
        checkpoint=copy.checkpoint,
        entries=copy.entries,
        watermarks=copy.watermarks,
        out_seq=copy.out_seq,
    )
