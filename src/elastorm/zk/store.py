"""The controller's durable decisions in ZooKeeper: routing tables, checkpoint
allocation and active replicas, with leader election and fencing.

* **Leader**: ``controller/leader`` is an ephemeral znode; a controller with the
  same ``controller_id`` (its own earlier incarnation) takes it over, any other
  controller waits in ``STANDBY``.
* **Fencing**: each new leader bumps the version of the durable
  ``controller/term`` znode; every write is one transaction that first checks that
  version, and sets each znode against the version this store last saw
  (compare-and-set). A deposed controller's writes fail and it goes ``CONFLICT``.
* **Outages**: writes are write-behind. While ZooKeeper is unreachable they are held
  in memory (latest value per znode) and flushed, in one transaction, when it is
  back. A command that acts on a decision is sent only once ``flush`` says the
  decision is in ZooKeeper (write-ahead for what is acted on; see
  ``elastorm.storm.controller_runtime``).

The store's status is a sans-IO machine (``elastorm.core.sessions``): this adapter
does the ZooKeeper calls and feeds it what it saw.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

from elastorm.controller.model import Allocation
from elastorm.core.routing import RoutingTable
from elastorm.core.sessions import LeadershipMachine, StoreInput, StoreStatus
from elastorm.zk.client import KAZOO_ERRORS, BackgroundLoop, session_id
from elastorm.zk.codec import (
    LeaderInfo,
    ZnodeSchemaError,
    decode_checkpoints,
    decode_copies,
    decode_issued,
    decode_leader,
    decode_replicas,
    decode_routing,
    encode_checkpoints,
    encode_leader,
    encode_replicas,
    encode_routing,
    encode_term,
)
from elastorm.zk.layout import ZkSettings, ZnodeLayout, check_name

log = logging.getLogger(__name__)

_UNANSWERED_KEPT = 16  # values remembered per znode from commits with no reply


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreEvent:
    status: StoreStatus
    previous: StoreStatus
    at: float
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Decisions:
    """The controller's decisions: routing table per operator, checkpoint allocation
    and active replicas (key group -> its replica's node; each ``None`` if never
    written), and per operator the highest epoch issued on a command (``issued``:
    at least its routing epoch) and where each group's newest checkpoint is
    (``copies``: key group -> task -> checkpoint id)."""

    routing: Mapping[str, RoutingTable]
    checkpoints: Allocation | None
    replicas: Allocation | None = None
    issued: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    copies: Mapping[str, Mapping[int, Mapping[int, tuple[int, int]]]] = field(
        default_factory=lambda: MappingProxyType({})
    )


class StoreError(RuntimeError):
    """The store cannot do what was asked (you called it wrong, or it is not ready)."""


class StoreUnavailableError(StoreError):
    """Decisions could not be loaded in time (ZooKeeper down, or another leader)."""


class StoreConflictError(StoreError):
    """This controller was deposed or its znodes were written by someone else."""


class ControllerStore(BackgroundLoop):
    """Durable decisions of one controller; see the module docstring.

    Call ``start()`` then ``load(timeout)`` (blocks until the decisions are read, so
    a restarted controller resumes where it was). ``set_routing`` and
    ``set_checkpoints`` never block: the value is the store's at once and reaches
    ZooKeeper when it can; ``flush(timeout)`` waits for it.
    """

    def __init__(
        self,
        *,
        layout: ZnodeLayout,
        controller_id: str,
        client: KazooClient | None = None,
        settings: ZkSettings | None = None,
        on_event: Callable[[StoreEvent], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            client,
            layout=layout,
            settings=settings,
            name=f"elastorm-store-{layout.topology}",
            interval=0.5,
            on_event=on_event,
            clock=clock,
        )
        self._id = check_name(controller_id, "controller id")
        self._cond = threading.Condition(self._lock)
        self._leadership = LeadershipMachine()
        self._detail = ""
        self._leader_session: int | None = None
        self._leader: LeaderInfo | None = None  # another controller that leads
        self._term_version: int | None = None
        self._term_data = encode_term(self._id, incarnation=uuid.uuid4().hex)
        self._loaded = False
        self._routing: dict[str, RoutingTable] = {}
        self._issued: dict[str, int] = {}
        self._copies: dict[str, dict[int, dict[int, tuple[int, int]]]] = {}
        self._checkpoints: Allocation | None = None
        self._replicas: Allocation | None = None
        self._versions: dict[str, int] = {}  # path -> version in ZooKeeper (absent: no znode)
        self._pending: dict[str, tuple[bytes | None, int]] = {}  # path -> (data or delete, seq)
        # path -> data of commits whose reply never came (they may have landed)
        self._unanswered: dict[str, list[bytes | None]] = {}
        self._seq = 0

    # -- state

    def status(self) -> StoreStatus:
        """The leadership status (never blocks)."""
        return self._leadership.state

    def leader(self) -> LeaderInfo | None:
        """The other controller that leads, as last seen while in ``STANDBY`` (None if
        none was seen, or its znode could not be read)."""
        return self._leader

    def pending(self) -> int:
        """Number of znode writes held in memory, not yet in ZooKeeper."""
        with self._lock:
            return len(self._pending)

    def decisions(self) -> Decisions:
        """The current decisions (including those not yet flushed)."""
        with self._lock:
            return Decisions(
                routing=MappingProxyType(dict(self._routing)),
                checkpoints=self._checkpoints,
                replicas=self._replicas,
                issued=MappingProxyType(dict(self._issued)),
                copies=MappingProxyType(dict(self._copies)),
            )

    def load(self, timeout: float = 10.0) -> Decisions:
        """Wait until this controller leads and has read its decisions; return them.

        Raises ``StoreUnavailableError`` after ``timeout`` s, or as soon as another
        controller is seen to lead (naming it: this one stands by and keeps trying), and
        ``StoreConflictError`` if deposed.
        """
        self.wake()
        done = (StoreStatus.ONLINE, StoreStatus.STANDBY, StoreStatus.CONFLICT, StoreStatus.CLOSED)
        with self._cond:
            self._cond.wait_for(lambda: self.status() in done, timeout)
            status = self.status()
        if status is StoreStatus.CONFLICT:
            raise StoreConflictError(self._detail)
        if status is not StoreStatus.ONLINE:
            raise StoreUnavailableError(
                f"decisions not loaded after {timeout:.1f} s "
                f"(status {status.value}: {self._detail})"
            )
        return self.decisions()

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is held in memory; True if that happened in time."""
        self.wake()
        with self._cond:
            return (
                self._cond.wait_for(
                    lambda: not self._pending or self.status() is StoreStatus.CONFLICT, timeout
                )
                and not self._pending
            )

    def stop(self, timeout: float = 2.0) -> None:
        """Stop, give up the lead (so a standby can take it at once), close own client."""
        self._halt(timeout)
        if self._leader_session is not None and self._client.connected:
            try:
                self._client.delete_async(self._layout.leader).get(timeout=timeout)
            except (*KAZOO_ERRORS, NoNodeError):
                pass
        self._feed(StoreInput.CLOSE)
        self._close_client()

    # -- decisions (write-behind)

    def set_routing(
        self,
        operator: str,
        table: RoutingTable,
        issued: int | None = None,
        copies: Mapping[int, Mapping[int, tuple[int, int]]] | None = None,
    ) -> None:
        """Record ``operator``'s routing table, ``issued``, the highest epoch put on a
        command so far (default: the table's), and ``copies``, where each group's
        newest checkpoint is (key group -> task -> id); the table's epoch must grow
        when the table changes."""
        issued = table.epoch if issued is None else max(issued, table.epoch)
        held = {g: dict(by_task) for g, by_task in (copies or {}).items() if by_task}
        with self._lock:
            self._writable()
            old = self._routing.get(operator)
            if (
                old == table
                and issued <= self._issued.get(operator, table.epoch)
                and held == self._copies.get(operator, {})
            ):
                return
            if old is not None and old != table and table.epoch <= old.epoch:
                raise StoreError(
                    f"routing of {operator}: epoch {table.epoch} does not grow past {old.epoch}"
                )
            issued = max(issued, self._issued.get(operator, issued))
            data = encode_routing(operator, table, controller=self._id, issued=issued, copies=held)
            self._routing[operator] = table
            self._issued[operator] = issued
            self._copies[operator] = held
            self._put(self._layout.routing(operator), data)

    def set_checkpoints(self, allocation: Allocation) -> None:
        """Record the checkpoint allocation."""
        with self._lock:
            self._writable()
            if allocation == self._checkpoints:
                return
            data = encode_checkpoints(allocation, controller=self._id)
            self._checkpoints = allocation
            self._put(self._layout.checkpoints, data)

    def set_replicas(self, replicas: Allocation) -> None:
        """Record the active replicas (key group -> its replica's node)."""
        with self._lock:
            self._writable()
            if replicas == self._replicas:
                return
            self._replicas = replicas
            self._put(self._layout.replicas, encode_replicas(replicas, controller=self._id))

    def _writable(self) -> None:
        if not self._loaded:
            raise StoreError("call load() before writing decisions")
        status = self.status()
        if status in (StoreStatus.CONFLICT, StoreStatus.CLOSED):
            raise StoreConflictError(f"store is {status.value}: {self._detail}")

    def _put(self, path: str, data: bytes | None) -> None:
        self._seq += 1
        self._pending[path] = (data, self._seq)
        self.wake()

    # -- status

    def _feed(self, given: StoreInput, detail: str = "") -> None:
        """Feed ``given`` to the leadership machine (from any thread); a change of
        status wakes the waiters and is a ``StoreEvent``."""
        with self._cond:
            previous = self._leadership.state
            status = self._leadership.feed(given)
            if status is previous:
                return
            self._detail = detail
            self._cond.notify_all()
        log.info("controller store: %s -> %s %s", previous.value, status.value, detail)
        self._emit(StoreEvent(status=status, previous=previous, at=self._clock(), detail=detail))

    # -- the loop

    def _step(self) -> None:
        if self.status() in (StoreStatus.CONFLICT, StoreStatus.CLOSED):
            return
        if self._take_session_lost():
            self._leader_session = None
        if not self._client.connected:
            self._feed(StoreInput.UNREACHABLE, "ZooKeeper unreachable; holding decisions")
            return
        try:
            sid = session_id(self._client)
            if self._leader_session != sid:
                self._feed(StoreInput.LEAD_LOST, "session lost; re-taking the lead")
                if not self._acquire(sid):
                    return
            if not self._loaded:
                self._load_all()
            self._feed(StoreInput.LEADING)
            if self._pending:
                self._commit()
        except KAZOO_ERRORS as exc:
            log.debug("controller store: ZooKeeper call failed (%r)", exc)

    def _call(self, async_result):
        return async_result.get(timeout=self._timeout)

    def _ensure(self, path: str) -> None:
        try:
            self._call(self._client.create_async(path, makepath=True))
        except NodeExistsError:
            pass

    def _acquire(self, sid: int | None) -> bool:
        """Take the leader znode in session ``sid`` and bump the term; False if another
        controller leads (STANDBY) or we were deposed (CONFLICT)."""
        lay = self._layout
        self._ensure(lay.routing_dir)
        info = LeaderInfo(
            controller=self._id, host=socket.gethostname(), pid=os.getpid(), worker=os.getppid()
        )
        try:
            self._call(self._client.create_async(lay.leader, encode_leader(info), ephemeral=True))
        except NodeExistsError:
            try:
                # The watch wakes a standby the moment the leader's znode goes.
                data, stat = self._call(self._client.get_async(lay.leader, watch=self._wake_on))
            except NoNodeError:
                return False  # released meanwhile: next step
            if stat.ephemeralOwner != sid:
                try:
                    leader = decode_leader(data)
                except ZnodeSchemaError:
                    leader = None
                holder = "?" if leader is None else leader.controller
                if holder != self._id and self._term_version is not None:
                    # We led, lost our session, and a standby leads now: deposed.
                    self._feed(StoreInput.CONFLICT, f"deposed: controller {holder} leads")
                    return False
                if holder != self._id:
                    self._leader = leader
                    self._feed(StoreInput.ANOTHER_LEADS, f"controller {holder} leads")
                    return False
                # Our own earlier incarnation: its session is dead or about to be.
                try:
                    self._call(self._client.delete_async(lay.leader, version=stat.version))
                except (NoNodeError, BadVersionError):
                    pass
                self.wake()  # create it on the next step, at once
                return False
        return self._bump_term(sid)

    def _wake_on(self, _event: object) -> None:
        self.wake()

    def _bump_term(self, sid: int | None) -> bool:
        path = self._layout.term
        try:
            data, stat = self._call(self._client.get_async(path))
            version = stat.version
        except NoNodeError:
            try:
                self._call(self._client.create_async(path, self._term_data))
            except NodeExistsError:
                return False  # raced with someone: retry next step
            data, version = self._term_data, 0
        if (
            self._term_version is not None
            and version != self._term_version
            and data != self._term_data  # not our own bump whose reply was lost
        ):
            self._feed(
                StoreInput.CONFLICT,
                f"deposed: term moved from {self._term_version} to {version} while away",
            )
            return False
        try:
            stat = self._call(self._client.set_async(path, self._term_data, version=version))
        except BadVersionError:
            return False  # someone else bumped it: the next step sees the conflict
        self._term_version = stat.version
        self._leader_session = sid
        return True

    def _load_all(self) -> None:
        lay = self._layout
        routing, issued, copies, versions = {}, {}, {}, {}
        try:
            for name in sorted(self._call(self._client.get_children_async(lay.routing_dir))):
                data, stat = self._call(self._client.get_async(lay.routing(name)))
                op, table = decode_routing(data)
                if op != name:
                    raise ZnodeSchemaError(f"routing/{name} holds operator {op}")
                routing[op], versions[lay.routing(name)] = table, stat.version
                issued[op], copies[op] = decode_issued(data), decode_copies(data)
            checkpoints = self._read_optional(lay.checkpoints, decode_checkpoints, versions)
            replicas = self._read_optional(lay.replicas, decode_replicas, versions)
        except ZnodeSchemaError as exc:
            # Never overwrite decisions we cannot read.
            self._feed(StoreInput.CONFLICT, f"malformed decision znode: {exc}")
            return
        with self._lock:
            self._routing, self._checkpoints = routing, checkpoints
            self._issued, self._copies = issued, copies
            self._replicas = replicas
            self._versions = versions
            self._loaded = True

    def _read_optional(
        self, path: str, decode: Callable[[bytes], Allocation], versions: dict[str, int]
    ) -> Allocation | None:
        """``decode`` of ``path``'s data, its version recorded; None if there is no znode."""
        try:
            data, stat = self._call(self._client.get_async(path))
        except NoNodeError:
            return None
        versions[path] = stat.version
        return decode(data)

    def _commit(self) -> None:
        with self._lock:
            batch = dict(self._pending)
        tx = self._client.transaction()
        tx.check(self._layout.term, self._term_version)
        ops: list[tuple[str, bytes | None]] = []
        for path, (data, _) in sorted(batch.items()):
            version = self._versions.get(path)
            if data is None and version is None:
                continue  # deleting what ZooKeeper never had
            if data is None:
                tx.delete(path, version=version)
            elif version is None:
                tx.create(path, data)
            else:
                tx.set_data(path, data, version=version)
            ops.append((path, data))
            sent = self._unanswered.setdefault(path, [])
            sent.append(data)
            del sent[:-_UNANSWERED_KEPT]
        results = self._call(tx.commit_async())
        failed = [
            r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)
        ]
        if not failed:
            for (path, data), result in zip(ops, results[1:], strict=True):
                self._unanswered.pop(path, None)
                if data is None:
                    self._versions.pop(path, None)
                else:
                    self._versions[path] = 0 if isinstance(result, str) else result.version
            with self._cond:
                for path, (_, seq) in batch.items():
                    if self._pending.get(path, (None, -1))[1] == seq:
                        del self._pending[path]
                self._cond.notify_all()
            return
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            self._feed(StoreInput.CONFLICT, f"deposed: term check failed ({results[0]!r})")
            return
        self._reconcile(batch)

    def _reconcile(self, batch: Mapping[str, tuple[bytes | None, int]]) -> None:
        """After a failed transaction: adopt versions of writes that did land (an earlier
        commit whose reply was lost, even one whose value a later decision superseded);
        anything else written there is a conflict."""
        for path, (data, _) in sorted(batch.items()):
            try:
                current, stat = self._call(self._client.get_async(path))
            except NoNodeError:
                current, stat = None, None
            if stat is None:
                if data is None or path not in self._versions:
                    self._versions.pop(path, None)
                    continue
            elif (
                current == data
                or current in self._unanswered.get(path, ())
                or stat.version == self._versions.get(path)
            ):
                self._versions[path] = stat.version
                continue
            self._feed(StoreInput.CONFLICT, f"{path} was changed by someone else")
            return
