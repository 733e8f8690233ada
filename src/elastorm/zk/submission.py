"""Which Storm submission a topology name's znodes belong to; a new submission sets an
earlier one's aside (docs/znodes.md, "Submissions").

elastorm's znodes live under the topology's *name* (``/elastorm/<name>``) and outlive
``sparse kill``, while Storm gives every submission of a name a new id (``storm.id``,
``<name>-<n>-<secs>``) and a restarted worker the same one. So every elastorm
component, before it reads or writes anything else, claims the name for its
submission (:func:`claim_submission`):

* the ``submission`` znode names this storm id: a restart of this submission, it
  resumes what is there (routing tables, holders, incarnations, restart points);
* it names another storm id (or none, with znodes left by an elastorm that did not
  record one): a new submission under an old name. It starts clean, as a new Flink
  job or Kafka Streams application id does: the earlier znodes are copied under
  ``archive/<old storm id>`` (kept for a savepoint / restore, deleted by ``elastorm
  forget``), deleted in one transaction that checks every version it copied, and the
  submission switched to this id, with one warning line naming what was set aside;
* nothing to set aside: this submission is recorded.

The first component of a submission to claim does the setting aside; the others find
their own id. Kept in place: ``submission``, ``archive/`` and ``scheduler/placement``
(written by Nimbus's scheduler for the submission being placed), and ephemeral znodes
with their ancestors: they end with their sessions, as after any restart.
Durable checkpoint files (``elastorm.durable``) are never touched.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from elastorm.zk.codec import (
    SetAside,
    Submission,
    ZnodeSchemaError,
    decode_routing,
    decode_submission,
    encode_submission,
)
from elastorm.zk.layout import ZnodeLayout

log = logging.getLogger(__name__)

UNRECORDED = "unrecorded"
"""Archive name for znodes an elastorm that recorded no submission left behind."""

KEPT = ("submission", "archive", "scheduler/placement")
"""Znodes (with their subtrees) a new submission leaves in place, relative to the base."""

CLAIM_ATTEMPTS = 5
"""Times a claim re-reads and retries when another writer raced it."""

_RACES = (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)


class Verdict(enum.Enum):
    """What a starting component does with the znodes it finds under its name."""

    FIRST = "first"  # nothing to set aside: record this submission
    RESUME = "resume"  # a restart of this submission: resume
    SET_ASIDE = "set_aside"  # an earlier submission's state: archive it, start clean


def verdict(recorded: str | None, storm_id: str, has_state: bool) -> Verdict:
    """The verdict for a component of submission ``storm_id`` that finds ``recorded``
    (None: no ``submission`` znode) and, when ``has_state``, znodes to set aside.

    >>> verdict("wc-3-17", "wc-3-17", True).value
    'resume'
    >>> verdict("wc-3-17", "wc-4-18", True).value
    'set_aside'
    >>> verdict(None, "wc-4-18", False).value
    'first'
    >>> verdict(None, "wc-4-18", True).value
    'set_aside'
    """
    if recorded == storm_id:
        return Verdict.RESUME
    return Verdict.SET_ASIDE if has_state else Verdict.FIRST


@dataclass(frozen=True, kw_only=True, slots=True)
class Znode:
    """One znode as read: its data, version and whether a session owns it."""

    data: bytes
    version: int
    ephemeral: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class SetAsidePlan:
    """How to set an earlier submission aside: ``creates`` (relative path, data), top
    down, copy it under ``archive``; ``deletes`` (relative path, version), bottom up,
    remove it; ``key_groups`` counts its routing tables' groups, ``moved`` its znodes."""

    archive: str
    creates: tuple[tuple[str, bytes], ...]
    deletes: tuple[tuple[str, int], ...]
    key_groups: int
    moved: int

    @property
    def empty(self) -> bool:
        return not self.deletes


def _kept(path: str) -> bool:
    return any(path == k or path.startswith(k + "/") for k in KEPT)


def _depth(path: str) -> int:
    return path.count("/")


def plan_set_aside(tree: Mapping[str, Znode], old: str | None) -> SetAsidePlan:
    """The plan that sets aside every persistent znode of ``tree`` (relative path ->
    znode, the base itself left out) but the ``KEPT`` ones, under
    ``archive/<old>`` (``archive/unrecorded`` if no submission was recorded).

    Ephemeral znodes stay (they end with their sessions, as after any restart), and
    so does every ancestor of a znode that stays; the archive copies what is deleted
    and its ancestors. A malformed routing table is moved like any znode, its groups
    not counted. O(n log n) in the znodes.
    """
    archive = f"archive/{old or UNRECORDED}"
    staying = {p for p, z in tree.items() if _kept(p) or z.ephemeral}
    staying |= {a for p in staying for a in _ancestors(p)}
    deleted = sorted((p for p in tree if p not in staying), key=_order)
    copied = sorted({a for p in deleted for a in (*_ancestors(p), p) if a in tree}, key=_order)
    creates = [(a, b"") for a in ("archive", archive) if a not in tree] if deleted else []
    creates += [(f"{archive}/{p}", tree[p].data) for p in copied]
    key_groups = 0
    for p in deleted:
        if p.startswith("controller/routing/") and _depth(p) == 2:
            try:
                key_groups += decode_routing(tree[p].data)[1].num_key_groups
            except ZnodeSchemaError:
                pass
    return SetAsidePlan(
        archive=archive,
        creates=tuple(creates),
        deletes=tuple((p, tree[p].version) for p in sorted(deleted, key=lambda p: (-_depth(p), p))),
        key_groups=key_groups,
        moved=len(deleted),
    )


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _order(path: str) -> tuple[int, str]:
    return (_depth(path), path)


# --------------------------------------------------------------------------- adapter


def read_tree(client: KazooClient, base: str) -> dict[str, Znode]:
    """Every znode under ``base`` (relative path -> znode), ``base`` itself left out;
    empty if there is no ``base``."""
    out: dict[str, Znode] = {}

    def walk(path: str, rel: str) -> None:
        try:
            children = client.get_children(path)
        except NoNodeError:
            return
        for name in sorted(children):
            child, child_rel = f"{path}/{name}", f"{rel}{name}"
            try:
                data, stat = client.get(child)
            except NoNodeError:
                continue  # gone meanwhile
            owner = getattr(stat, "ephemeralOwner", 0)
            out[child_rel] = Znode(data=data or b"", version=stat.version, ephemeral=owner != 0)
            walk(child, child_rel + "/")

    walk(base, "")
    return out


def read_submission(client: KazooClient, layout: ZnodeLayout) -> Submission | None:
    """The submission the topology's znodes belong to; None if none is recorded."""
    try:
        return decode_submission(client.get(layout.submission)[0])
    except NoNodeError:
        return None


def claim_submission(
    client: KazooClient,
    layout: ZnodeLayout,
    storm_id: str,
    clock: Callable[[], float] = time.time,
) -> Submission:
    """Claim the topology's znodes for submission ``storm_id`` (see the module
    docstring); returns the submission record now in ZooKeeper.

    Retries ``CLAIM_ATTEMPTS`` times when another writer raced it, then raises that
    kazoo error (callers retry ZooKeeper errors); ``ZnodeSchemaError`` if the
    ``submission`` znode is unreadable.
    """
    for attempt in range(CLAIM_ATTEMPTS):
        try:
            return _claim_once(client, layout, storm_id, clock)
        except _RACES:
            if attempt == CLAIM_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _claim_once(
    client: KazooClient, layout: ZnodeLayout, storm_id: str, clock: Callable[[], float]
) -> Submission:
    try:
        data, stat = client.get(layout.submission)
        recorded, version = decode_submission(data), stat.version
    except NoNodeError:
        recorded, version = None, None
    old = recorded.storm_id if recorded else None
    if old == storm_id:
        return recorded
    plan = plan_set_aside(read_tree(client, layout.base), old)
    found = verdict(old, storm_id, has_state=not plan.empty)
    if found is Verdict.FIRST:
        mine = Submission(storm_id=storm_id, since=clock())
        if version is None:
            client.create(layout.submission, encode_submission(mine), makepath=True)
        else:
            client.set(layout.submission, encode_submission(mine), version=version)
        return mine
    now = clock()
    mine = Submission(
        storm_id=storm_id,
        since=now,
        set_aside=SetAside(
            storm_id=old or UNRECORDED,
            key_groups=plan.key_groups,
            znodes=plan.moved,
            path=f"{layout.base}/{plan.archive}",
            at=now,
        ),
    )
    for path, data in plan.creates:
        try:
            client.create(f"{layout.base}/{path}", data)
        except NodeExistsError:  # copied by an attempt that lost a race: copy it again
            client.set(f"{layout.base}/{path}", data)
    tx = client.transaction()
    for path, v in plan.deletes:
        tx.delete(f"{layout.base}/{path}", version=v)
    if version is None:
        tx.create(layout.submission, encode_submission(mine))
    else:
        tx.set_data(layout.submission, encode_submission(mine), version=version)
    failed = [r for r in tx.commit() if isinstance(r, Exception)]
    if failed:
        real = [r for r in failed if not isinstance(r, RolledBackError)]
        raise (real or failed)[0]
    log.info(
        "elastorm: topology %s was submitted before as %s; its state (%d key groups, "
        "%d znodes) is set aside under %s and submission %s starts clean "
        "(`elastorm forget --topology %s` deletes it)",
        layout.topology,
        old or "an unrecorded submission",
        plan.key_groups,
        plan.moved,
        mine.set_aside.path,
        storm_id,
        layout.topology,
    )
    return mine
