"""The controller's view of the tasks: watches ``tasks/`` and every task znode.

kazoo watch callbacks only mark what changed; the watcher's thread re-reads it
(setting the watch again), updates ``{znode name: TaskEntry}`` and turns the
difference into events with the pure :func:`elastorm.zk.view.diff_tasks`.
After every (re)connection, and every ``resync_interval`` s, it re-reads
everything, because kazoo forgets its watches when the connection drops.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from elastorm.controller.model import TaskRecord
from elastorm.zk.client import KAZOO_ERRORS, BackgroundLoop
from elastorm.zk.codec import ZnodeSchemaError, decode_task
from elastorm.zk.layout import ZkSettings, ZnodeLayout, ZnodeLayoutError, task_id_from_name
from elastorm.zk.view import (
    ClusterEvent,
    MalformedTask,
    TaskEntry,
    diff_tasks,
)

log = logging.getLogger(__name__)


class ClusterWatcher(BackgroundLoop):
    """Keeps the live tasks' records and reports joins and leaves as events.

    Events (``poll_events()`` or ``on_event``, the latter on the watcher's thread):
    :class:`~elastorm.zk.view.TaskJoined`, ``TaskLeft``, ``NodeJoined``,
    ``NodeLost`` (all of a node's task znodes gone) and ``MalformedTask``. A task
    that left is forgotten: the controller's failure detection works from these
    events (``elastorm.controller.failures``).
    """

    def __init__(
        self,
        *,
        layout: ZnodeLayout,
        client: KazooClient | None = None,
        settings: ZkSettings | None = None,
        on_event: Callable[[ClusterEvent], None] | None = None,
        resync_interval: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            client,
            layout=layout,
            settings=settings,
            name=f"elastorm-watcher-{layout.topology}",
            interval=min(1.0, resync_interval),
            on_event=on_event,
            clock=clock,
        )
        self._resync_interval = resync_interval
        self._entries: dict[str, TaskEntry] = {}
        self._bad: set[str] = set()
        self._dirty: set[str] = set()
        self._children_dirty = False
        self._resync = True
        self._last_resync = -float("inf")
        self.malformed = 0

    # -- what the controller reads (thread-safe, never blocks on ZooKeeper)

    def live(self) -> dict[int, TaskRecord]:
        """Task id -> latest record of every live task."""
        with self._lock:
            return {e.record.task_id: e.record for e in self._entries.values()}

    def synced(self) -> bool:
        """Whether the task znodes have been read in full at least once."""
        with self._lock:
            return self._last_resync > -float("inf")

    def incarnations(self) -> dict[int, int]:
        """Task id -> incarnation (its znode's creation zxid) of every live task."""
        with self._lock:
            return {e.record.task_id: e.incarnation for e in self._entries.values()}

    def stop(self, timeout: float = 2.0) -> None:
        """Stop watching (and close the client if the watcher owns it)."""
        self._halt(timeout)
        self._close_client()

    # -- kazoo callbacks: record and wake, nothing else

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._resync = True
        super()._on_state(state)

    def _on_children(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE:
            self._resync = True
        else:
            self._children_dirty = True
        self.wake()

    def _on_data(self, event: WatchedEvent) -> None:
        if event.path is None or event.type == EventType.NONE:
            self._resync = True
        else:
            with self._lock:
                self._dirty.add(posixpath.basename(event.path))
        self.wake()

    # -- the loop

    def _step(self) -> None:
        if not self._client.connected:
            return
        try:
            due = time.monotonic() - self._last_resync >= self._resync_interval
            if self._resync or due:
                self._full_resync()
                return
            if self._children_dirty:
                self._children_dirty = False
                self._read_children()
            with self._lock:
                dirty, self._dirty = self._dirty, set()
            if dirty:
                new = dict(self._entries)
                for name in sorted(dirty):
                    self._reread(new, name)
                self._apply(new)
        except KAZOO_ERRORS as exc:
            self._resync = True  # whatever we missed, read it all again
            log.debug("watcher: read failed (%r); will resync", exc)

    def _full_resync(self) -> None:
        self._resync = False
        with self._lock:
            self._dirty.clear()
        self._children_dirty = False
        names = self._children()
        new: dict[str, TaskEntry] = {}
        for name in names:
            self._reread(new, name)
        self._apply(new)
        self._last_resync = time.monotonic()

    def _children(self) -> list[str]:
        path = self._layout.tasks
        try:
            return self._client.get_children_async(path, watch=self._on_children).get(
                timeout=self._timeout
            )
        except NoNodeError:
            try:
                self._client.create_async(path, makepath=True).get(timeout=self._timeout)
            except NodeExistsError:
                pass
            return self._client.get_children_async(path, watch=self._on_children).get(
                timeout=self._timeout
            )

    def _read_children(self) -> None:
        names = set(self._children())
        new = {n: e for n, e in self._entries.items() if n in names}
        for name in sorted(names - set(new)):
            self._reread(new, name)
        self._apply(new)

    def _reread(self, entries: dict[str, TaskEntry], name: str) -> None:
        """Read task znode ``name`` into ``entries`` (or drop it: gone or malformed)."""
        path = f"{self._layout.tasks}/{name}"
        try:
            data, stat = self._client.get_async(path, watch=self._on_data).get(
                timeout=self._timeout
            )
        except NoNodeError:
            entries.pop(name, None)
            return
        try:
            record = decode_task(data)
            if task_id_from_name(name) != record.task_id:
                raise ZnodeSchemaError(f"znode {name} holds task {record.task_id}")
        except (ZnodeSchemaError, ZnodeLayoutError) as exc:
            # Keep the last good record: the znode exists, so the task is alive.
            if name in self._entries:
                entries[name] = self._entries[name]
            else:
                entries.pop(name, None)
            self.malformed += 1
            log.warning("watcher: task znode %s is malformed: %s", name, exc)
            if name not in self._bad:
                self._bad.add(name)
                self._emit(MalformedTask(name=name, reason=str(exc)))
            return
        self._bad.discard(name)
        entries[name] = TaskEntry(record=record, incarnation=stat.czxid)

    def _apply(self, new: dict[str, TaskEntry]) -> None:
        with self._lock:
            old = self._entries
            events = diff_tasks(old, new)
            self._entries = new
        for ev in events:
            self._emit(ev)
