"""Migration requests in ZooKeeper: the client side (``elastorm migrate``) and the
controller bolt's side. A thin kazoo adapter over ``elastorm.controller.requests``.

Paths come from :class:`~elastorm.zk.layout.ZnodeLayout` (``requests/``,
``controller/status/<op>``, ``incarnations/``); the routing table a reader sees is
the controller's durable one (``controller/routing/<op>``, written by the
``ControllerStore``), never a second copy.

With the topology's secret a request is sealed by whoever writes it pending (the CLI,
the dashboard, the controller redriving it) and the controller refuses a pending one
whose signature fails (``elastorm.core.auth``), as it refuses a malformed one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from elastorm.controller.requests import (
    IN_FLIGHT,
    MigrationRequest,
    RequestError,
    RequestEvent,
    RequestState,
    UnreadableRequest,
    decode_record,
    decode_request,
    encode_request,
    encode_unreadable,
    refuse_unreadable,
)
from elastorm.core.auth import AuthError, ReplayGuard, seal, unseal
from elastorm.core.routing import RoutingTable
from elastorm.zk.acls import secure_tree
from elastorm.zk.client import KAZOO_ERRORS, client_keyring, make_client, new_nonce, write_znode
from elastorm.zk.codec import Submission, ZnodeSchemaError, decode_routing
from elastorm.zk.commands import clear_mailbox
from elastorm.zk.layout import ZnodeLayout, submission_id, zk_settings
from elastorm.zk.submission import claim_submission, read_submission

if TYPE_CHECKING:
    from elastorm.controller.model import MigrationEnded

log = logging.getLogger(__name__)

#: kazoo's errors and a socket's (``OSError``): what the callers of this module catch.
ZK_ERRORS = (*KAZOO_ERRORS, OSError)
_T = TypeVar("_T")


class RequestBoard:
    """The controller bolt's view of its topology's requests (never blocks on ZooKeeper).

    Every state it writes is the request's table's (``RequestEvent`` applied with
    ``MigrationRequest.advance`` to the record as ZooKeeper holds it); an event the
    record's state does not allow is logged and dropped, never written."""

    def __init__(self, client: KazooClient, layout: ZnodeLayout, operator: str) -> None:
        self.client = client
        self.operator = operator
        self.path = layout.requests
        self.status = layout.status(operator)
        self.seen: set[str] = set()
        # Requests the loop asked to wait (a holder without the newest checkpoint yet):
        # read once (authenticated then), asked again each round while still pending.
        self.held: dict[str, MigrationRequest] = {}
        self._published: bytes | None = None
        # Events ZooKeeper did not take, in order, retried on every tick: a request
        # must not stay ``started`` because one write hit a lost connection.
        self.unwritten: list[tuple[str, RequestEvent, float, dict[str, Any]]] = []
        self._guard = ReplayGuard()

    def _requests(self, *, fresh: bool = True) -> list[tuple[str, MigrationRequest]] | None:
        """Our operator's readable requests, oldest first (unreadable ones refused on the
        way); with ``fresh``, only those not seen yet, marked seen. None if ZooKeeper is
        away."""
        if not self.client.connected:
            return None
        found = []
        try:
            names = sorted(self.client.get_children(self.path))
        except NoNodeError:
            return []
        except ZK_ERRORS as exc:
            log.warning("requests: ZooKeeper unavailable (%s); retrying next tick", exc)
            return None
        for name in names:
            if fresh and name in self.seen:
                continue
            try:
                raw = self.client.get(f"{self.path}/{name}")[0]
                record = decode_record(raw)
                if fresh and record.state is RequestState.PENDING:
                    self._authenticate(raw)
            except (RequestError, AuthError) as exc:
                log.error("request %s is refused: %s", name, exc)
                self._write_unreadable(name, refuse_unreadable(raw, str(exc), time.time()))
                self.seen.add(name)
                continue
            except ZK_ERRORS as exc:
                log.warning("request %s unreadable now (%s)", name, exc)
                return found if fresh else None
            if fresh:
                self.seen.add(name)
            if isinstance(record, MigrationRequest) and record.operator == self.operator:
                found.append((name, record))
        return found

    def _authenticate(self, raw: bytes) -> None:
        """With the secret, raise ``AuthError`` unless ``raw`` is freshly sealed with it."""
        ring = client_keyring(self.client)
        if ring is not None:
            unseal(ring, "request", raw, now=time.time(), guard=self._guard)

    def pending(self) -> list[tuple[str, MigrationRequest]]:
        """``PENDING`` requests for our operator, oldest first: the new ones and those
        :meth:`hold` kept that are still pending (withdrawn ones dropped); [] if
        ZooKeeper is away."""
        new = self._requests()
        if new is None:
            return []
        held, self.held = self.held, {}
        still = [(n, r) for n, r in held.items() if self._still_pending(n)]
        fresh = [(n, r) for n, r in new if r.state is RequestState.PENDING]
        return sorted(still + fresh, key=lambda item: item[0])

    def hold(self, name: str, request: MigrationRequest) -> None:
        """Ask ``name`` again on the next :meth:`pending` (the loop said wait); it was
        marked seen on its first read, so only this brings it back."""
        self.held[name] = request

    def _still_pending(self, name: str) -> bool:
        """Whether request ``name`` is still pending in ZooKeeper (its submitter
        withdraws it when it waited too long); a held one ZooKeeper cannot answer for
        now is kept."""
        try:
            return decode_record(self.client.get(f"{self.path}/{name}")[0]).state is (
                RequestState.PENDING
            )
        except (NoNodeError, RequestError):
            return False
        except ZK_ERRORS:
            return True

    def in_flight(self) -> list[tuple[str, MigrationRequest]] | None:
        """Our operator's requests left ``started`` or ``stuck`` (by a controller that
        died: asked when this one takes over); None if ZooKeeper is away (ask again)."""
        found = self._requests(fresh=False)
        return None if found is None else [(n, r) for n, r in found if r.state in IN_FLIGHT]

    def apply(self, name: str, event: RequestEvent, **changes: Any) -> None:
        """Apply ``event`` (with ``changes`` to the request's fields) to request ``name``:
        written now, or owed and retried on every tick."""
        self.unwritten.append((name, event, time.time(), changes))
        if event is RequestEvent.REDRIVE:
            self.seen.discard(name)  # pending again: for pending() to pick up
        self.retry_unwritten()

    def retry_unwritten(self) -> None:
        """Write the events still owed to ZooKeeper, oldest first; stop at the first
        failure (the rest wait for the next tick, keeping their order)."""
        while self.unwritten:
            name, event, at, changes = self.unwritten[0]
            try:
                request = decode_request(self.client.get(f"{self.path}/{name}")[0])
                request = request.advance(event, at, **changes)
                self.client.set(f"{self.path}/{name}", sealed(self.client, encode_request(request)))
            except NoNodeError:
                log.warning("request %s was deleted; dropping its event %s", name, event.value)
            except RequestError as exc:  # unreadable now, or the event is illegal there
                log.error("request %s: event %s dropped (%s)", name, event.value, exc)
            except ZK_ERRORS as exc:
                log.warning(
                    "request %s: event %s not recorded yet (%s); %d writes owed, retrying "
                    "next tick",
                    name,
                    event.value,
                    exc,
                    len(self.unwritten),
                )
                return
            else:
                log.info("request %s: %s %s", name, request.state.value, changes or "")
            self.unwritten.pop(0)

    def _write_unreadable(self, name: str, record: UnreadableRequest) -> None:
        try:
            self.client.set(f"{self.path}/{name}", encode_unreadable(record))
        except ZK_ERRORS as exc:
            log.error("request %s: could not record refusal (%s)", name, exc)

    def publish_status(
        self, control, lost: Collection[int] = (), ended: Iterable[MigrationEnded] = ()
    ) -> None:
        """Write holders, moving groups, which groups a CPA/CPAL could move right now
        (``assisted``: the holder reported the newest checkpoint), the tasks declared
        lost (``lost``), each key group's active replica (``replicas``, Su & Zhou 2016)
        and the migrations that ended last, with their pauses (``ended``, the
        controller loop's ``MigrationEnded``: requested ones and its own alike)
        to ``controller/status/<operator>`` whenever any of it changes.
        The routing table itself is the store's (``controller/routing/<operator>``)."""
        if not self.client.connected:
            return
        groups = range(control.num_key_groups)
        data = {
            "lost": sorted(set(lost) & set(control.tasks)),
            "holders": [control.holders[g] for g in groups],
            "assisted": [control.has_newest(control.holders[g], g) for g in groups],
            "tasks": control.tasks,
            "emitters": control.emitters,
            "moving": sorted(control.moving),
            "replicas": {str(g): t for g, t in sorted(control.replicas.items())},
            "migrations": [
                {
                    "key_group": g,
                    "protocol": m.protocol.value,
                    "source": m.source,
                    "target": m.target,
                    "epoch": m.epoch,
                    "since": round(m.since, 3),
                    "waiting_for": m.waiting_for(),
                    "stuck": m.stuck,
                }
                for g, m in sorted(control.moving.items())
            ],
            "ended": [e.to_json() for e in ended],
        }
        encoded = json.dumps(data).encode()
        if encoded == self._published:
            return
        try:
            write_znode(self.client, self.status, encoded)
            self._published = encoded
        except ZK_ERRORS as exc:
            log.warning("status: ZooKeeper unavailable (%s); retrying next tick", exc)


def publish_refusal(client: KazooClient, layout: ZnodeLayout, reason: str) -> None:
    """Say in ZooKeeper why the controller cannot run ``layout``'s topology: an ephemeral
    ``controller/refused``, gone with the controller's session (a later run of the same
    name that can run never sees it). Raises what kazoo raises (``ZK_ERRORS``)."""
    try:
        client.create(layout.refused, reason.encode(), ephemeral=True, makepath=True)
    except NodeExistsError:  # another controller task (a standby) said it first
        pass


def read_refusal(client: KazooClient, layout: ZnodeLayout) -> str | None:
    """Why the controller of ``layout``'s topology refuses to run it, or None."""
    try:
        return client.get(layout.refused)[0].decode() or None
    except NoNodeError:
        return None


def controller_alive(client: KazooClient, layout: ZnodeLayout) -> bool:
    """Whether a controller leads ``layout``'s topology (its ephemeral leader znode)."""
    return client.exists(layout.leader) is not None


def withdraw_request(client: KazooClient, layout: ZnodeLayout, name: str) -> bool:
    """Delete request ``name`` if the controller has not picked it up; True if deleted."""
    path = layout.request(name)
    try:
        data, stat = client.get(path)
        if decode_record(data).state is not RequestState.PENDING:
            return False
        client.delete(path, version=stat.version)
        return True
    except (NoNodeError, BadVersionError, RequestError):
        return False


def sealed(client: KazooClient, data: bytes) -> bytes:
    """A request record as ``client`` writes it: sealed with its secret, if it has one."""
    ring = client_keyring(client)
    if ring is None:
        return data
    return seal(ring, "request", data, now=time.time(), nonce=new_nonce())


def submit_request(client: KazooClient, layout: ZnodeLayout, request: MigrationRequest) -> str:
    """Create a request znode; return its name (``req-<seq>``)."""
    path = layout.requests
    client.ensure_path(path)
    created = client.create(f"{path}/req-", sealed(client, encode_request(request)), sequence=True)
    return created.rsplit("/", 1)[1]


def read_request(client: KazooClient, layout: ZnodeLayout, name: str) -> MigrationRequest:
    return decode_request(client.get(layout.request(name))[0])


def read_routing(client: KazooClient, layout: ZnodeLayout, operator: str) -> RoutingTable | None:
    """``operator``'s durable routing table, or None before the controller's first write."""
    try:
        data = client.get(layout.routing(operator))[0]
    except NoNodeError:
        return None
    try:
        return decode_routing(data)[1]
    except ZnodeSchemaError as exc:
        log.error("routing of %s unreadable: %s", operator, exc)
        return None


def read_operators(client: KazooClient, layout: ZnodeLayout) -> list[str]:
    """The keyed operators the controller keeps a routing table for, sorted."""
    try:
        return sorted(client.get_children(layout.routing_dir))
    except NoNodeError:
        return []


def read_status(client: KazooClient, layout: ZnodeLayout, operator: str) -> dict | None:
    """The controller's view of ``operator``: its status (holders, migrations) with the
    routing table's ``epoch`` and ``owners``; None until both are written."""
    table = read_routing(client, layout, operator)
    try:
        data = client.get(layout.status(operator))[0]
    except NoNodeError:
        return None
    if table is None or not data:
        return None
    return {**json.loads(data.decode()), "epoch": table.epoch, "owners": list(table.owners)}


def register_incarnation(
    client: KazooClient, layout: ZnodeLayout, component: str, task: int
) -> int:
    """Count one more start of ``component``'s task ``task``; return the count (1 = first)."""
    path = layout.incarnation(component, task)
    try:
        client.create(path, b"1", makepath=True)
        return 1
    except NodeExistsError:
        data, stat = client.get(path)
        count = int(data.decode() or "1") + 1
        client.set(path, str(count).encode(), version=stat.version)
        return count


def ever_started(client: KazooClient, layout: ZnodeLayout, component: str, task: int) -> bool:
    """Whether ``component``'s task ``task`` has counted a start in this submission
    (:func:`register_incarnation`): one that never did is still being launched, not lost."""
    return client.exists(layout.incarnation(component, task)) is not None


def write_fence(
    client: KazooClient, layout: ZnodeLayout, component: str, task: int, incarnation: int
) -> None:
    """Record that ``task``'s znode of ``incarnation`` (its creation zxid) was declared
    lost: that process, if alive, must stop (``elastorm.zk.heartbeat``: ``FENCED``)."""
    write_znode(client, layout.fence(component, task), str(incarnation).encode())


def write_liveness(client: KazooClient, layout: ZnodeLayout, address: str) -> None:
    """Publish where this controller takes liveness connections (``elastorm.storm.liveness``);
    a later controller overwrites it."""
    write_znode(client, layout.liveness, address.encode())


START_DEADLINE = 20.0
"""Seconds a keyed task keeps trying ZooKeeper at start before it gives up (and dies,
so Storm restarts it); below Storm's 30 s subprocess heartbeat timeout."""


class StartUnknownError(RuntimeError):
    """ZooKeeper did not answer at a keyed task's start: a first start cannot be told
    from a restart, so the task must not start at all."""


def controller_start(conf: Mapping[str, Any], component: str, task: int) -> Submission:
    """At a controller task's start, before its watcher, store, request boards or
    liveness server touch ZooKeeper: the topology's znodes claimed for this submission
    (:func:`at_start`), with the secret's ACLs on all of them (``zk.acls.secure_tree``),
    and its record, which says what it set aside."""

    def record(client: KazooClient, layout: ZnodeLayout, _incarnation: int) -> Submission:
        ring = client_keyring(client)
        if ring is not None:
            changed = secure_tree(client, layout, ring)
            log.info("auth: %d znodes of %s given their ACL", changed, layout.topology)
        found = read_submission(client, layout)
        if found is None:  # deleted since the claim (``elastorm forget --force``)
            raise NoNodeError(layout.submission)
        return found

    return at_start(conf, component, task, record)[1]


def task_start(
    conf: Mapping[str, Any], component: str, task: int, operator: str
) -> tuple[int, int]:
    """At a keyed task's start: (incarnation, controller epoch) from the topology's ZooKeeper.

    See :func:`at_start` for how it waits. A restarted task that took itself for a
    first start would claim its original key groups with empty state (lost totals,
    two owners) and the controller would never restore them.
    """

    def epoch(client: KazooClient, layout: ZnodeLayout, incarnation: int) -> int:
        table = read_routing(client, layout, operator) if incarnation > 1 else None
        return table.epoch if table else -1

    return at_start(conf, component, task, epoch)


def at_start(
    conf: Mapping[str, Any],
    component: str,
    task: int,
    read: Callable[[KazooClient, ZnodeLayout, int], _T],
) -> tuple[int, _T]:
    """Claim the topology's znodes for this submission (``claim_submission``: a new
    submission under an old name sets the old state aside), count one more start of
    ``component``'s ``task``, clear its command mailbox (``zk.commands``: what waits
    there was for its earlier life) and ``read`` what it needs (given the incarnation) from
    the topology's ZooKeeper.

    Retries until ZooKeeper answers, for at most ``START_DEADLINE`` s, then raises
    ``StartUnknownError``: it never guesses a first start.
    """
    layout = ZnodeLayout(str(conf["topology.name"]))
    settings = zk_settings(conf)
    storm_id = submission_id(conf)
    deadline = START_DEADLINE
    give_up = time.monotonic() + deadline
    attempt = 0
    while True:
        attempt += 1
        client = make_client(settings)
        try:
            client.start(timeout=max(1.0, min(5.0, give_up - time.monotonic())))
            claim_submission(client, layout, storm_id)
            incarnation = register_incarnation(client, layout, component, task)
            stale = clear_mailbox(client, layout, task, incarnation)
            if stale:
                log.warning("task %s: %d commands to its earlier life dropped", task, stale)
            return incarnation, read(client, layout, incarnation)
        except ZK_ERRORS as exc:
            if time.monotonic() >= give_up:
                raise StartUnknownError(
                    f"task {task} of {component}: ZooKeeper unreachable at start for "
                    f"{deadline:.0f} s ({attempt} attempts, last: {exc!r}); cannot tell a "
                    "first start from a restart, so not starting (Storm restarts the task)"
                ) from None
            log.warning("task %s: ZooKeeper unreachable at start (%r); retrying", task, exc)
            time.sleep(0.5)
        finally:
            client.stop()
            client.close()
