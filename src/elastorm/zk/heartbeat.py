"""A task's heartbeat: its ephemeral znode, refreshed with its load.

The task's processing never waits for ZooKeeper: the publisher runs on its own
thread, each ZooKeeper call has a timeout, and what happens to the session
(disconnected, expired, registered again) arrives as a :class:`SessionEvent`
(``poll_events()`` or ``on_event``) and in ``state()``, never as an exception.
The registration's state is a sans-IO machine (``elastorm.core.sessions``): this
adapter does the ZooKeeper calls and feeds it what it saw.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from elastorm.controller.failures import UNSEEN
from elastorm.controller.model import Heartbeat, TaskIdentity, TaskRecord
from elastorm.core.sessions import PublisherInput, PublisherState, RegistrationMachine
from elastorm.zk.client import KAZOO_ERRORS, BackgroundLoop, session_id
from elastorm.zk.codec import encode_task
from elastorm.zk.layout import ZkSettings, ZnodeLayout

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionEvent:
    """The publisher went from ``previous`` to ``state`` at ``at`` (the clock's time)."""

    state: PublisherState
    previous: PublisherState
    at: float
    detail: str = ""


def default_identity(*, task_id: int, operator: str, node_id: str, zone: str | None = None):
    """A ``TaskIdentity`` for this process (host name and pid filled in)."""
    return TaskIdentity(
        task_id=task_id,
        operator=operator,
        node_id=node_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        zone=zone,
    )


class HeartbeatPublisher(BackgroundLoop):
    """Registers ``tasks/<task-id>`` (ephemeral) and refreshes it every interval.

    ``heartbeat()`` is called on the publisher's thread every
    ``settings.heartbeat_interval`` s; it must be quick and safe to call from
    another thread (return an immutable :class:`Heartbeat` built from values the
    task swaps in atomically). If it raises, the previous heartbeat is published
    again and ``callback_errors`` counts it. ``client`` may be shared (then the
    caller starts and closes it); without one the publisher owns its client.
    """

    def __init__(
        self,
        *,
        layout: ZnodeLayout,
        identity: TaskIdentity,
        heartbeat: Callable[[], Heartbeat],
        settings: ZkSettings | None = None,
        client: KazooClient | None = None,
        on_event: Callable[[SessionEvent], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = settings or ZkSettings()
        super().__init__(
            client,
            layout=layout,
            settings=settings,
            name=f"elastorm-heartbeat-{identity.task_id}",
            interval=settings.heartbeat_interval,
            on_event=on_event,
            clock=clock,
        )
        self._path = layout.task(identity.task_id)
        self._identity = identity
        self._heartbeat_fn = heartbeat
        self._czxid: int | None = None  # creation zxid of the znode we last registered
        self._incarnations: list[int] = []  # every znode this process registered
        self._fence_watched = False
        self._expired = False  # check the fence before registering again
        self._registration = RegistrationMachine()
        self._session: int | None = None  # session our znode was created in
        self._last = Heartbeat()
        self._seq = 0
        self.published = 0
        self.failures = 0
        self.callback_errors = 0

    @property
    def path(self) -> str:
        return self._path

    def state(self) -> PublisherState:
        """The registration state (never blocks)."""
        return self._registration.state

    @property
    def incarnation(self) -> int | None:
        """The creation zxid of the znode last registered (``None`` before the first)."""
        return self._czxid

    @property
    def client(self) -> KazooClient:
        return self._client

    @property
    def layout(self) -> ZnodeLayout:
        return self._layout

    def fence(self, detail: str) -> None:
        """Go ``FENCED`` for good: the controller declared this incarnation lost (told
        over another channel than the fence znode, e.g. ``elastorm.storm.liveness``)."""
        self._feed(PublisherInput.FENCED, detail)

    def health(self) -> dict[str, int]:
        """Counts since start, for the task's counters file: heartbeats ``published``,
        ZooKeeper ``failures``, ``callback_errors`` (a heartbeat republished) and
        ``step_errors`` (a step that raised)."""
        return {
            "published": self.published,
            "failures": self.failures,
            "callback_errors": self.callback_errors,
            "step_errors": self.step_errors,
        }

    def publish_now(self) -> None:
        """Publish at once, e.g. after a migration changed what the task owns."""
        self.wake()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop publishing and delete the znode (best effort, at most ~``timeout`` s),
        so the controller sees a clean leave at once instead of after the session
        timeout."""
        self._halt(timeout)
        registered = self.state() is PublisherState.REGISTERED
        if registered and self._client.connected:
            try:
                self._client.delete_async(self._path).get(timeout=timeout)
            except (*KAZOO_ERRORS, NoNodeError) as exc:
                log.info("task %s: znode not deleted on stop (%s)", self._path, exc)
        self._feed(PublisherInput.STOP)
        self._close_client()

    # -- loop

    def _feed(self, given: PublisherInput, detail: str = "") -> None:
        """Feed ``given`` to the registration machine (from any thread); a change of
        state is a ``SessionEvent``."""
        with self._lock:
            previous = self._registration.state
            state = self._registration.feed(given)
        if state is not previous:
            self._emit(
                SessionEvent(state=state, previous=previous, at=self._clock(), detail=detail)
            )

    def _step(self) -> None:
        if self.state() is PublisherState.FENCED:
            return
        if self._take_session_lost() and self._session is not None:
            self._feed(PublisherInput.SESSION_ENDED, "session expired; znode gone")
            self._expired = True
        if not self._client.connected:
            self._feed(PublisherInput.UNREACHABLE, "ZooKeeper unreachable")
            return
        current = session_id(self._client)
        if self._session is not None and current != self._session:
            # The listener may not have seen LOST (e.g. it was removed while reconnecting).
            self._feed(PublisherInput.SESSION_ENDED, "new session; znode gone")
            self._session = None
            self._expired = True
        data = encode_task(self._record())
        try:
            if self._expired and self._fenced():
                return
            if self._session == current and self._set(data):
                self._feed(PublisherInput.REGISTERED)
            elif self._register(data, current):
                self._session = current
                self._feed(PublisherInput.REGISTERED)
        except KAZOO_ERRORS as exc:
            self.failures += 1
            log.debug("task %s: heartbeat not published (%r)", self._path, exc)

    def _record(self) -> TaskRecord:
        try:
            self._last = self._heartbeat_fn()
        except Exception:
            self.callback_errors += 1
            log.exception(
                "task %s: heartbeat callback failed; republishing the last one", self._path
            )
        self._seq += 1
        return TaskRecord(
            identity=self._identity, heartbeat=self._last, seq=self._seq, time=self._clock()
        )

    def _fenced(self) -> bool:
        """After an expiry: whether the controller declared our last znode lost (its
        fence names that znode's creation zxid, or is ``UNSEEN`` and was written after
        that znode was created); if so, go ``FENCED`` for good."""
        if self._czxid is None:
            return False
        path = self._layout.fence(self._identity.operator, self._identity.task_id)
        try:
            data, stat = self._client.get_async(path).get(timeout=self._timeout)
        except NoNodeError:
            data, stat = b"", None
        self._expired = False
        if not fences(data.decode(), None if stat is None else stat.mzxid, self._czxid):
            return False
        self._feed(PublisherInput.FENCED, f"declared lost while away (znode zxid {self._czxid})")
        return True

    def _set(self, data: bytes) -> bool:
        """Refresh our znode; False if it is gone (then register again)."""
        try:
            self._client.set_async(self._path, data).get(timeout=self._timeout)
        except NoNodeError:
            return False
        self.published += 1
        return True

    def _register(self, data: bytes, session: int | None) -> bool:
        """Create our ephemeral znode. A znode left by a previous incarnation (another
        session) is never deleted: two live processes with one task id would fight.
        We wait for its session to expire instead (bounded by the session timeout)."""
        try:
            self._client.create_async(self._path, data, ephemeral=True, makepath=True).get(
                timeout=self._timeout
            )
        except NodeExistsError:
            stat = self._client.exists_async(self._path).get(timeout=self._timeout)
            if stat is None:
                return False  # gone meanwhile: next step creates it
            if stat.ephemeralOwner != session:
                self._feed(
                    PublisherInput.HELD_ELSEWHERE,
                    f"znode held by session {stat.ephemeralOwner:#x}; waiting for it to expire",
                )
                return False
            # Ours: a create that timed out earlier went through after all.
            self._client.set_async(self._path, data).get(timeout=self._timeout)
        stat = self._client.exists_async(self._path).get(timeout=self._timeout)
        if stat is not None:
            self._czxid = stat.czxid
            self._incarnations.append(stat.czxid)
        self.published += 1
        self._watch_fence()
        return True

    def _watch_fence(self) -> None:
        """Watch ``fences/<operator>-<task>`` for the life of the process (once set,
        kazoo keeps the watch across sessions): a fence naming *any* znode this process
        registered stops it. The check before registering again (``_fenced``) misses
        a declaration written after it: a task whose session lapsed registered anew,
        and the controller, its view behind, then declared the old znode lost and
        restored its groups elsewhere while the task went on applying them (chaos
        ``join/cpal-source`` at 8ed8a6b: task 12 published its old groups for 44 s)."""
        if self._fence_watched:
            return
        path = self._layout.fence(self._identity.operator, self._identity.task_id)
        self._client.DataWatch(path, self._on_fence)  # raises on a ZooKeeper error: again
        self._fence_watched = True

    def _on_fence(self, data: bytes | None, stat) -> None:
        """The fence znode changed (kazoo's thread): go ``FENCED`` if it names us."""
        if data is None or stat is None:
            return
        fence = data.decode()
        ours = [z for z in self._incarnations if fences(fence, stat.mzxid, z)]
        if ours:
            self._feed(PublisherInput.FENCED, f"declared lost (znode zxid {ours[0]})")


def fences(fence: str, written: int | None, czxid: int) -> bool:
    """Whether a fence znode holding ``fence``, last written at zxid ``written``, stops
    the process whose znode was created at ``czxid``: it names that znode, or it is
    ``UNSEEN`` (the controller never saw the task's znode) written after it.

    >>> fences("7", 9, 7), fences("7", 9, 8), fences("0", 9, 7), fences("0", 9, 10)
    (True, False, True, False)
    """
    if fence == str(czxid):
        return True
    return fence == str(UNSEEN) and written is not None and czxid < written
