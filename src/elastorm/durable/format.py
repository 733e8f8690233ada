"""The durable checkpoint format (Kwon et al. 2008: checkpoints in a DFS): sans-IO, bytes only.

Per (topology, operator, key group) one directory, ``<operator>/g<group>`` in the
topology's store (``elastorm.durable.store.resolve_uri``),
holding whole files that are never overwritten (each name carries its checkpoint id
``(epoch, number)``, zero-padded so names sort in checkpoint order):

- ``base-<epoch>-<number>.ckpt``: a full checkpoint (every key of the group);
- ``delta-<epoch>-<number>.ckpt``: the keys updated since the previous checkpoint;
- ``manifest-<epoch>-<number>.json``: the complete set as of that checkpoint, i.e. a base
  and the deltas after it, in order. Written last: a set is complete once its manifest
  exists, so a crash between a file and its manifest leaves the previous set readable.

Every file is framed the same way: ``MAGIC``, then the body's length and CRC-32
(big-endian, 4 bytes each), then the body; a truncated or corrupt file fails
:func:`unframe` with :class:`CorruptFile`. A checkpoint's body is the checkpoint
message itself (``CheckpointDelta`` in ``elastorm.core.messages``' JSON, the codec that
carries it to the in-memory holder), so it names the same upstream positions
(``watermarks``: per upstream channel, the last sequence it reflects) and output
counters. Nothing here reads a clock or a store: the writer and the reader are adapters
(``elastorm.durable.writer``, ``elastorm.durable.restore``).
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from elastorm.core.checkpoint import HeldCheckpoint, full_copy
from elastorm.core.errors import ElastormError
from elastorm.core.messages import CheckpointDelta, CheckpointId, from_json, to_json

MAGIC = b"ELDUR1\n"
_HEADER = struct.Struct(">II")  # body length, CRC-32 of the body
_NAME = re.compile(r"^(base|delta|manifest)-(\d{10})-(\d{10})\.(ckpt|json)$")


class CorruptFile(ElastormError):
    """A durable file is truncated, corrupt or not what its name says."""


# -- framing -------------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    """``body`` with the header that lets a reader detect truncation and corruption."""
    return MAGIC + _HEADER.pack(len(body), zlib.crc32(body)) + body


def unframe(data: bytes, *, name: str = "file") -> bytes:
    """The body of a framed file; :class:`CorruptFile` if truncated or its CRC differs."""
    head = len(MAGIC) + _HEADER.size
    if len(data) < head or not data.startswith(MAGIC):
        raise CorruptFile(f"{name}: no durable-checkpoint header ({len(data)} bytes)")
    length, crc = _HEADER.unpack_from(data, len(MAGIC))
    body = data[head:]
    if len(body) != length:
        raise CorruptFile(f"{name}: truncated or padded: {len(body)} bytes, header says {length}")
    if zlib.crc32(body) != crc:
        raise CorruptFile(f"{name}: CRC-32 mismatch")
    return body


# -- names ---------------------------------------------------------------------------


def group_dir(operator: str, key_group: int) -> str:
    """The directory of one key group's files in its topology's store."""
    return f"{operator}/g{key_group:05d}"


def file_name(kind: str, checkpoint: CheckpointId) -> str:
    """``base``/``delta``/``manifest`` file name of ``checkpoint`` (sorts in checkpoint order)."""
    epoch, number = checkpoint
    ext = "json" if kind == "manifest" else "ckpt"
    return f"{kind}-{epoch:010d}-{number:010d}.{ext}"


def parse_name(name: str) -> tuple[str, CheckpointId] | None:
    """``(kind, checkpoint)`` of a durable file name, ``None`` for anything else."""
    m = _NAME.match(name)
    if m is None or (m.group(1) == "manifest") != (m.group(4) == "json"):
        return None
    return m.group(1), (int(m.group(2)), int(m.group(3)))


# -- checkpoints ---------------------------------------------------------------------


def encode_checkpoint(delta: CheckpointDelta) -> bytes:
    """One checkpoint (full: a base; else a delta) as a framed file."""
    return frame(to_json(delta).encode("utf-8"))


def decode_checkpoint(data: bytes, *, name: str = "checkpoint") -> CheckpointDelta:
    """Inverse of :func:`encode_checkpoint`; :class:`CorruptFile` on anything else."""
    body = unframe(data, name=name)
    try:
        message = from_json(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptFile(f"{name}: {exc}") from None
    if not isinstance(message, CheckpointDelta):
        raise CorruptFile(f"{name}: a {type(message).__name__}, not a checkpoint")
    return message


def checkpoint_file(delta: CheckpointDelta) -> str:
    """The file name ``delta`` is stored under."""
    return file_name("base" if delta.full else "delta", delta.checkpoint)


def merge(older: CheckpointDelta, newer: CheckpointDelta) -> CheckpointDelta:
    """One checkpoint equal to applying ``older`` then ``newer`` (``newer`` must follow it).

    Used to coalesce pending writes and to compact a set into a new base. O(keys of newer).
    """
    if newer.base != older.checkpoint and not newer.full:
        raise CorruptFile(
            f"group {older.key_group}: {newer.checkpoint} on base {newer.base} does not "
            f"follow {older.checkpoint}"
        )
    if newer.full:
        return newer
    entries = dict(older.entries)
    entries.update(newer.entries)
    return CheckpointDelta(
        key_group=newer.key_group,
        checkpoint=newer.checkpoint,
        base=older.base,
        entries=entries,
        watermarks=dict(newer.watermarks),
        out_seq=dict(newer.out_seq),
    )


def rebuild(chain: Sequence[CheckpointDelta]) -> HeldCheckpoint:
    """The key group as of the chain's last checkpoint: a base, then deltas in order.

    Raises :class:`CorruptFile` if the chain does not start with a base or a delta does
    not follow its predecessor. The result is what an in-memory holder would hold.
    """
    if not chain or not chain[0].full:
        raise CorruptFile("a durable set must start with a base")
    whole = chain[0]
    for delta in chain[1:]:
        if delta.full:
            raise CorruptFile(f"group {delta.key_group}: a base inside a set at {delta.checkpoint}")
        whole = merge(whole, delta)
    return full_copy(whole)


# -- manifests -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """The complete set of one key group as of ``checkpoint``: ``files`` (a base, then
    deltas, oldest first) with each file's size and CRC-32, and the set's upstream
    positions (``watermarks``, as in its newest checkpoint)."""

    key_group: int
    checkpoint: CheckpointId
    files: tuple[str, ...]
    sizes: tuple[int, ...]
    crcs: tuple[int, ...]
    watermarks: dict[str, int]

    def __post_init__(self) -> None:
        if not self.files or not self.files[0].startswith("base-"):
            raise ValueError(f"group {self.key_group}: a set starts with a base, got {self.files}")
        if not len(self.files) == len(self.sizes) == len(self.crcs):
            raise ValueError("files, sizes and crcs must be as long as each other")
        last = parse_name(self.files[-1])
        if last is None or last[1] != tuple(self.checkpoint):
            raise ValueError(f"the set's last file {self.files[-1]} is not {self.checkpoint}")

    @property
    def name(self) -> str:
        return file_name("manifest", self.checkpoint)

    @property
    def base(self) -> CheckpointId:
        """The checkpoint of the set's base."""
        parsed = parse_name(self.files[0])
        assert parsed is not None
        return parsed[1]

    @property
    def deltas(self) -> int:
        return len(self.files) - 1

    @property
    def delta_bytes(self) -> int:
        return sum(self.sizes[1:])

    def then(self, name: str, data: bytes, watermarks: dict[str, int]) -> Manifest:
        """The next set: this one plus the delta ``name`` (``data`` its framed bytes)."""
        parsed = parse_name(name)
        assert parsed is not None and parsed[0] == "delta", name
        return Manifest(
            key_group=self.key_group,
            checkpoint=parsed[1],
            files=(*self.files, name),
            sizes=(*self.sizes, len(data)),
            crcs=(*self.crcs, zlib.crc32(data)),
            watermarks=dict(watermarks),
        )


def first_manifest(key_group: int, name: str, data: bytes, watermarks: dict[str, int]) -> Manifest:
    """A set of just the base ``name`` (``data`` its framed bytes)."""
    parsed = parse_name(name)
    assert parsed is not None and parsed[0] == "base", name
    return Manifest(
        key_group=key_group,
        checkpoint=parsed[1],
        files=(name,),
        sizes=(len(data),),
        crcs=(zlib.crc32(data),),
        watermarks=dict(watermarks),
    )


def encode_manifest(manifest: Manifest) -> bytes:
    """A manifest as a framed JSON file."""
    body = {
        "key_group": manifest.key_group,
        "checkpoint": list(manifest.checkpoint),
        "files": list(manifest.files),
        "sizes": list(manifest.sizes),
        "crcs": list(manifest.crcs),
        "watermarks": manifest.watermarks,
    }
    return frame(json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8"))


def decode_manifest(data: bytes, *, name: str = "manifest") -> Manifest:
    """Inverse of :func:`encode_manifest`; :class:`CorruptFile` on anything else."""
    body = unframe(data, name=name)
    try:
        raw = json.loads(body)
        epoch, number = raw["checkpoint"]
        return Manifest(
            key_group=int(raw["key_group"]),
            checkpoint=(int(epoch), int(number)),
            files=tuple(raw["files"]),
            sizes=tuple(int(s) for s in raw["sizes"]),
            crcs=tuple(int(c) for c in raw["crcs"]),
            watermarks={str(k): int(v) for k, v in raw["watermarks"].items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptFile(f"{name}: not a manifest: {exc}") from None


def check_file(manifest: Manifest, index: int, data: bytes) -> None:
    """Raise :class:`CorruptFile` unless ``data`` is the manifest's ``index``-th file as written."""
    name = manifest.files[index]
    if len(data) != manifest.sizes[index] or zlib.crc32(data) != manifest.crcs[index]:
        raise CorruptFile(f"group {manifest.key_group}: {name} differs from its manifest")


def manifests_newest_first(names: Iterable[str]) -> list[str]:
    """The manifest names among ``names``, newest checkpoint first."""
    found = [(p[1], n) for n in names if (p := parse_name(n)) is not None and p[0] == "manifest"]
    return [n for _, n in sorted(found, reverse=True)]


# -- the writer's decisions ----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Policy:
    """When to compact (a new base after ``compact_deltas`` deltas or ``compact_bytes``
    bytes of them) and how many older complete sets to keep (``retain``)."""

    compact_deltas: int = 20
    compact_bytes: int = 64 << 20
    retain: int = 1

    def __post_init__(self) -> None:
        if self.compact_deltas < 1 or self.compact_bytes < 1 or self.retain < 0:
            raise ValueError(f"bad durable policy {self}")


def due_for_base(current: Manifest | None, delta: CheckpointDelta, policy: Policy) -> bool:
    """Whether ``delta`` must be written as a new base: it is full, it does not follow
    the current set (a new chain), or the set has reached the compaction limits."""
    if delta.full or current is None or delta.base != current.checkpoint:
        return True
    return current.deltas >= policy.compact_deltas or current.delta_bytes >= policy.compact_bytes


def follows(current: Manifest | None, delta: CheckpointDelta) -> bool:
    """Whether ``delta`` can be written at all: full, or on the current set's checkpoint."""
    return delta.full or (current is not None and delta.base == current.checkpoint)


def to_delete(
    names: Iterable[str], kept: Sequence[Manifest], pinned: frozenset[str] = frozenset()
) -> list[str]:
    """Retention: the files no kept manifest needs, among ``names`` (one group's directory).

    ``kept`` are the newest complete sets to keep (newest first). Deleted: every manifest
    older than the oldest kept one, and every checkpoint file older than the oldest kept
    set's base, except the ``pinned`` ones (a savepoint names them). Nothing newer than
    the newest kept manifest is touched (another writer, e.g. the group's next owner, may
    be writing it). Sorted, deterministic.
    """
    if not kept:
        return []
    oldest = kept[-1]
    out = []
    for name in names:
        parsed = parse_name(name)
        if parsed is None or name in pinned:
            continue
        kind, checkpoint = parsed
        if kind == "manifest" and checkpoint < tuple(oldest.checkpoint):
            out.append(name)
        elif kind != "manifest" and checkpoint < oldest.base:
            out.append(name)
    return sorted(out)
