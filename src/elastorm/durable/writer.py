"""The durable writer: checkpoints go to the store on a thread, so processing never waits.

Kwon et al. 2008 (SGuard) write checkpoints into a replicated DFS asynchronously; here
each keyed task's process has one :class:`DurableWriter`, a thread with a bounded
queue. :meth:`DurableWriter.offer` only appends (or merges) and returns: when the queue
is full, the new checkpoint is merged into its key group's newest pending one, or the
oldest two pending checkpoints of one group are merged to make room (merging loses
nothing: the result equals applying both). A failed write is retried, in order, with
backoff doubling up to ``retry_max_secs``. Under Peace (``gate``) the thread starts
writes only in its task's slot (``elastorm.durable.peace``). Which checkpoints are written
(``every``), compaction and retention are ``elastorm.durable.format``'s decisions.

Numbers for heartbeats and the dashboard: :meth:`DurableWriter.health` (writes, bytes,
errors, coalesced, queue) and :meth:`DurableWriter.lag` (per key group, how many
checkpoints and seconds the durable copy trails the newest).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from elastorm.config import DurableConfig
from elastorm.core.messages import CheckpointDelta, CheckpointId
from elastorm.durable.format import (
    CorruptFile,
    Manifest,
    Policy,
    checkpoint_file,
    due_for_base,
    encode_checkpoint,
    encode_manifest,
    first_manifest,
    follows,
    group_dir,
    merge,
    to_delete,
)
from elastorm.durable.peace import task_windows, until_open
from elastorm.durable.restore import load_latest, read_set
from elastorm.durable.store import DurableStore, StoreError
from elastorm.durable.submissions import SubmissionView

log = logging.getLogger(__name__)

Group = tuple[str, int]
"""(operator, key group)."""


class ChainBroken(Exception):
    """A delta does not follow the group's durable set: only a full checkpoint can go on."""


def write_checkpoint(
    store: DurableStore,
    policy: Policy,
    operator: str,
    current: Manifest | None,
    delta: CheckpointDelta,
) -> Manifest:
    """Write ``delta`` after the set ``current`` (its file, then its manifest); return the new set.

    A new base when :func:`~elastorm.durable.format.due_for_base` says so (compaction
    reads the current set back and merges it with ``delta``). Raises
    :class:`ChainBroken` if ``delta`` does not follow ``current``, ``StoreError`` if the
    store fails (nothing is half-visible: the manifest goes last).
    """
    if not follows(current, delta):
        have = None if current is None else current.checkpoint
        raise ChainBroken(f"{operator} group {delta.key_group}: {delta.checkpoint} on {have}")
    directory = group_dir(operator, delta.key_group)
    if due_for_base(current, delta, policy):
        if not delta.full:
            assert current is not None
            _, chain = read_set(store, directory, current.name)
            delta = functools.reduce(merge, [*chain, delta])
        data = encode_checkpoint(delta)
        name = checkpoint_file(delta)
        manifest = first_manifest(delta.key_group, name, data, dict(delta.watermarks))
    else:
        assert current is not None
        data = encode_checkpoint(delta)
        name = checkpoint_file(delta)
        manifest = current.then(name, data, dict(delta.watermarks))
    store.put(f"{directory}/{name}", data)
    store.put(f"{directory}/{manifest.name}", encode_manifest(manifest))
    return manifest


Pins = Callable[[str, int], frozenset[str]]
"""``(operator, key group) -> file names some savepoint needs`` (``SubmissionView.pins``)."""


def no_pins(operator: str, key_group: int) -> frozenset[str]:
    """No savepoint pins anything (a store with no savepoints)."""
    return frozenset()


def retire(store: DurableStore, operator: str, kept: list[Manifest], pins: Pins) -> list[str]:
    """Delete what no kept set (newest first) and no savepoint needs in the group's
    directory; the deleted names. ``pins`` is asked only when there is something to
    delete, just before (``elastorm.durable.savepoint``: a savepoint's files are pinned)."""
    if not kept:
        return []
    key_group = kept[0].key_group
    directory = group_dir(operator, key_group)
    names = store.list(directory)
    if not to_delete(names, kept):
        return []
    try:
        pinned = pins(operator, key_group)
    except CorruptFile as exc:  # cannot tell what a savepoint pins: delete nothing
        log.error("durable retention of %s skipped: a savepoint is unreadable: %s", directory, exc)
        return []
    gone = to_delete(names, kept, pinned)
    for name in gone:
        store.delete(f"{directory}/{name}")
    return gone


@dataclass
class _Pending:
    """A checkpoint waiting for the store; ``offers`` = the group's offer count it reflects."""

    group: Group
    delta: CheckpointDelta
    offers: int


@dataclass
class _GroupTrack:
    """Per key group: offers, what is durable, the writer's view of its sets."""

    offered: int = 0  # checkpoints offered (all, including ones ``every`` skips)
    durable: int = 0  # the offer count reflected by the newest durable set
    times: deque = field(default_factory=deque)  # (offer count, clock) not yet durable
    held_back: CheckpointDelta | None = None  # merged checkpoints ``every`` has not written
    newest: tuple[int, int] | None = None  # newest checkpoint id offered
    kept: list = field(default_factory=list)  # Manifests written, newest first
    read: bool = False  # the store's newest set was looked up (first write after start)


class DurableWriter:
    """One process's asynchronous writer of durable checkpoints (a daemon thread)."""

    def __init__(
        self,
        store: DurableStore,
        *,
        policy: Policy | None = None,
        every: int = 1,
        capacity: int = 64,
        retry_max_secs: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        gate: Callable[[], float] | None = None,
        pins: Pins = no_pins,
    ) -> None:
        if every < 1 or capacity < 1 or retry_max_secs <= 0:
            raise ValueError("every, capacity >= 1 and retry_max_secs > 0")
        self.store = store
        self.policy = Policy() if policy is None else policy
        self.every = every
        self.capacity = capacity
        self.retry_max_secs = retry_max_secs
        self.clock = clock
        self.gate = gate  # seconds until a write may start (Peace's slot); None: at once
        self.pins = pins  # what savepoints need of the store's files (retention keeps it)
        self._queue: deque[_Pending] = deque()
        self._tracks: dict[Group, _GroupTrack] = {}
        self._wants_full: set[Group] = set()
        self._written: dict[Group, tuple[CheckpointId, dict[str, int]]] = {}
        self.news = False  # something was written since the last ``written()``: cheap to poll
        self._stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._idle = True
        self._thread = threading.Thread(target=self._run, name="elastorm-durable", daemon=True)
        self._thread.start()

    # -- the task's side (never blocks on the store) ------------------------------------
    def offer(self, operator: str, delta: CheckpointDelta) -> None:
        """Hand over one checkpoint of ``operator``'s key group; returns at once."""
        group = (operator, delta.key_group)
        with self._lock:
            track = self._tracks.setdefault(group, _GroupTrack())
            if track.newest is not None and tuple(delta.checkpoint) <= track.newest:
                self._stats["duplicates"] += 1  # the same delta to a holder and a replica
                return
            track.newest = tuple(delta.checkpoint)
            track.offered += 1
            track.times.append((track.offered, self.clock()))
            track.held_back = delta if track.held_back is None else merge(track.held_back, delta)
            if track.offered % self.every and not delta.full:
                return
            delta, track.held_back = track.held_back, None
            self._enqueue(_Pending(group=group, delta=delta, offers=track.offered))
            self._wake.notify()

    def _enqueue(self, item: _Pending) -> None:
        """Append, or merge when full (the caller holds the lock)."""
        queue = self._queue
        if len(queue) >= self.capacity:
            for pending in reversed(queue):
                if pending.group == item.group:
                    pending.delta = merge(pending.delta, item.delta)
                    pending.offers = item.offers
                    self._stats["coalesced"] += 1
                    return
            if self._coalesce_oldest_pair():
                self._stats["coalesced"] += 1
            else:
                self._stats["overflow"] += 1  # more groups than slots: grow, never block
        queue.append(item)

    def _coalesce_oldest_pair(self) -> bool:
        """Merge the oldest pending checkpoint that has a later one of its group into it."""
        queue = self._queue
        seen: dict[Group, int] = {}
        for i, pending in enumerate(queue):
            if pending.group in seen:
                j = seen[pending.group]
                first = queue[j]
                pending.delta = merge(first.delta, pending.delta)
                del queue[j]
                return True
            seen[pending.group] = i
        return False

    def wants_full(self) -> set[Group]:
        """Groups whose durable chain broke (a delta lost or out of order): their owner
        should send a full checkpoint. Cleared by the call."""
        with self._lock:
            out, self._wants_full = self._wants_full, set()
            return out

    def written(self) -> dict[Group, tuple[CheckpointId, dict[str, int]]]:
        """Per group written since the last call: the newest durable checkpoint's id and
        upstream positions (the owner trims upstream no further: ``DurableWritten``).
        Cleared by the call."""
        with self._lock:
            out, self._written = self._written, {}
            self.news = False
            return out

    # -- numbers ------------------------------------------------------------------------
    def health(self) -> dict[str, int]:
        """Counts: writes, bytes, errors (failed attempts), coalesced, duplicates,
        chain_breaks, damaged, overflow, gated (waits for the Peace slot); and the
        queue's length now."""
        with self._lock:
            out = dict(self._stats)
            out["queue"] = len(self._queue) + (0 if self._idle else 1)
            return out

    def lag(self) -> dict[Group, tuple[int, float]]:
        """Per key group: (checkpoints, seconds) the durable copy trails the newest offered."""
        now = self.clock()
        with self._lock:
            return {
                g: (t.offered - t.durable, now - t.times[0][1] if t.times else 0.0)
                for g, t in sorted(self._tracks.items())
            }

    def drained(self) -> bool:
        """Whether nothing is queued or being written."""
        with self._lock:
            return self._idle and not self._queue

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (for up to ``timeout`` seconds), then stop the thread."""
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)

    # -- the writer thread --------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._idle = True
                    self._wake.wait()
                if not self._queue:
                    return
                wait = 0.0 if self.gate is None or self._closed else self.gate()
                if wait > 0:  # not our slot: offers go on queueing (and coalescing)
                    self._idle = True
                    self._stats["gated"] += 1
                    self._wake.wait(wait)
                    continue
                item = self._queue.popleft()
                self._idle = False
                track = self._tracks[item.group]
            self._write_until_done(item, track)

    def _write_until_done(self, item: _Pending, track: _GroupTrack) -> None:
        """Write ``item``, retrying with backoff until it is written or cannot be."""
        backoff = min(0.5, self.retry_max_secs)
        while True:
            try:
                self._write(item, track)
                return
            except ChainBroken as exc:
                log.error("durable checkpoint not written, asking for a full one: %s", exc)
                with self._lock:
                    self._stats["chain_breaks"] += 1
                    self._wants_full.add(item.group)
                return
            except (StoreError, OSError) as exc:
                with self._lock:
                    self._stats["errors"] += 1
                    if self._closed:
                        return
                    log.warning("durable write failed (retry in %.1f s): %s", backoff, exc)
                    self._wake.wait(backoff)
                backoff = min(backoff * 2, self.retry_max_secs)

    def _write(self, item: _Pending, track: _GroupTrack) -> None:
        operator, key_group = item.group
        if not track.read and not item.delta.full:
            track.kept = self._newest_set(operator, key_group)
        track.read = True
        current = track.kept[0] if track.kept else None
        manifest = write_checkpoint(self.store, self.policy, operator, current, item.delta)
        kept = [manifest, *track.kept][: self.policy.retain + 1]
        if len(kept) == self.policy.retain + 1:
            retire(self.store, operator, kept, self.pins)
        with self._lock:
            track.kept = kept
            track.durable = max(track.durable, item.offers)
            self._written[item.group] = (item.delta.checkpoint, dict(item.delta.watermarks))
            self.news = True
            while track.times and track.times[0][0] <= track.durable:
                track.times.popleft()
            self._stats["writes"] += 1
            self._stats["bytes"] += manifest.sizes[-1]

    def _newest_set(self, operator: str, key_group: int) -> list[Manifest]:
        """The store's newest intact set of the group, if any (the chain a delta continues)."""

        def damaged(_reason: str) -> None:
            with self._lock:
                self._stats["damaged"] += 1

        found = load_latest(self.store, operator, key_group, on_damage=damaged)
        return [] if found is None else [found.manifest]


def start_writer(
    config: DurableConfig,
    view: SubmissionView | None,
    *,
    task: int,
    tasks: Sequence[int],
    period_secs: float,
) -> DurableWriter | None:
    """A task process's writer for ``config`` into its submission's directory
    (``view.store``; ``None`` when the durable tier is off, ``view`` None). Under
    ``schedule = peace`` the writer of ``task`` starts writes only in its window of
    each ``period_secs`` cycle (:func:`peace_gate`; ``tasks``: every keyed task).
    """
    if view is None:
        return None
    gate = None
    if config.schedule == "peace" and period_secs > 0:
        gate = peace_gate(task, tasks, capacity=config.concurrent_writes, cycle_secs=period_secs)
    policy = Policy(
        compact_deltas=config.compact_deltas,
        compact_bytes=config.compact_bytes,
        retain=config.retain,
    )
    log.info("durable checkpoints go to %s (every %d)", view.store.uri, config.every)
    return DurableWriter(
        view.store,
        pins=view.pins,
        policy=policy,
        every=config.every,
        capacity=config.queue,
        retry_max_secs=config.retry_max_secs,
        gate=gate,
    )


def peace_gate(
    task: int,
    tasks: Sequence[int],
    *,
    capacity: int,
    cycle_secs: float,
    wall: Callable[[], float] = time.time,
) -> Callable[[], float]:
    """Seconds until ``task``'s Peace window opens (0 while open), read on ``wall``, the
    clock all tasks share; the windows are :func:`~elastorm.durable.peace.task_windows`
    of ``tasks``, so every task computes the same schedule without a message."""
    windows = task_windows(sorted({*tasks, task}), capacity=capacity, cycle_secs=cycle_secs)
    window = windows[task]
    log.info(
        "durable writes of task %d scheduled (Peace): %.2f-%.2f s of every %.2f s",
        task, window[0], window[1], cycle_secs,
    )  # fmt: skip
    return lambda: until_open(wall(), window, cycle_secs=cycle_secs)
