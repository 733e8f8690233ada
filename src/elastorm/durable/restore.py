"""Reading a key group back from the durable store: newest complete set first, older on damage.

An adapter over a :class:`~elastorm.durable.store.DurableStore`: the checks are
``elastorm.durable.format``'s. A truncated or corrupt file, or a manifest naming a
missing one, is logged at ERROR, counted, and the next older complete set is tried;
a store that does not answer (``StoreError``) is not damage and propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from elastorm.core.checkpoint import HeldCheckpoint
from elastorm.core.messages import CheckpointId
from elastorm.durable.format import (
    CorruptFile,
    Manifest,
    check_file,
    decode_checkpoint,
    decode_manifest,
    group_dir,
    manifests_newest_first,
    parse_name,
    rebuild,
)
from elastorm.durable.store import DurableStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class DurableCopy:
    """A key group rebuilt from the store: the copy, the set it came from, and how many
    newer sets were skipped as damaged."""

    copy: HeldCheckpoint
    manifest: Manifest
    skipped: int


def read_set(store: DurableStore, directory: str, manifest_name: str) -> tuple[Manifest, list]:
    """The manifest ``manifest_name`` and its checkpoints, each checked against it."""
    manifest = decode_manifest(store.get(f"{directory}/{manifest_name}"), name=manifest_name)
    chain = []
    for i, name in enumerate(manifest.files):
        data = store.get(f"{directory}/{name}")
        check_file(manifest, i, data)
        chain.append(decode_checkpoint(data, name=name))
    return manifest, chain


def load_latest(
    store: DurableStore,
    operator: str,
    key_group: int,
    *,
    on_damage: Callable[[str], None] = lambda reason: None,
) -> DurableCopy | None:
    """The newest intact complete set of ``key_group``, rebuilt; ``None`` if there is none.

    Each damaged set found on the way is logged at ERROR and passed to ``on_damage``.
    """
    directory = group_dir(operator, key_group)
    skipped = 0
    for name in manifests_newest_first(store.list(directory)):
        try:
            manifest, chain = read_set(store, directory, name)
            copy = rebuild(chain)
        except (CorruptFile, FileNotFoundError) as exc:
            skipped += 1
            reason = f"{store.uri}/{directory}/{name}: {exc}"
            log.error("durable set damaged, trying an older one: %s", reason)
            on_damage(reason)
            continue
        if skipped:
            log.error(
                "key group %s of %s restored from an older durable set %s (%d newer damaged)",
                key_group,
                operator,
                manifest.checkpoint,
                skipped,
            )
        return DurableCopy(copy=copy, manifest=manifest, skipped=skipped)
    return None


def newest_sets(
    store: DurableStore, operator: str, key_groups: Iterable[int]
) -> dict[int, CheckpointId]:
    """Of ``key_groups``, those with a set in the store: the newest set's checkpoint id
    (from its manifest's name; one ``list`` per group, nothing read). What the
    controller plans DURABLE restores from (``submissions.SubmissionView``); the
    target's ``submissions.load_for_restore`` falls back to an older set if this one
    turns out damaged. ``StoreError`` propagates."""
    out: dict[int, CheckpointId] = {}
    for g in sorted(set(key_groups)):
        names = manifests_newest_first(store.list(group_dir(operator, g)))
        parsed = parse_name(names[0]) if names else None
        if parsed is not None:
            out[g] = parsed[1]
    return out
