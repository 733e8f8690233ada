"""Migration requests from people and scripts (``elastorm migrate``), as plain data,
and their lifecycle as one transition table.

A request is a znode ``/elastorm/<topology>/requests/req-<seq>`` (sequential);
the controller bolt picks it up, hands it to the controller loop
(``ControllerLoop.request``: the same protocol choice and order as the loop's own
moves) and writes the request's state back into the same znode. A state changes
only through :data:`TRANSITIONS` (:meth:`MigrationRequest.advance`); a pair missing
from it raises :class:`RequestTransitionError`. ``docs/controller.md`` renders the
table (a unit test checks it against this one). Pure: no ZooKeeper here, only the
values, the table and their JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from elastorm.core.auth import payload_of
from elastorm.core.messages import Protocol
from elastorm.core.protocol_choice import MOVES

HOLDER = "holder"
"""``target`` value meaning "the key group's checkpoint holder" (where CPA/CPAL can go)."""


class RequestError(ValueError):
    """A request that is malformed or names something that does not exist."""


class RequestTransitionError(RequestError):
    """An event the request's state does not allow (a pair missing from ``TRANSITIONS``)."""


class RequestState(Enum):
    PENDING = "pending"  # written by the client (or put back: re-driven; or waiting for
    # its holder's first checkpoint, up to defer_secs: ``RequestOutcome.waiting``)
    STARTED = "started"  # the controller sent the commands
    STUCK = "stuck"  # not done within the time limit; ``detail`` names what it waits for
    DONE = "done"  # both ends reported MigrationDone (also after STUCK, if they answer)
    REFUSED = "refused"  # the controller could not carry it out (see ``detail``)
    ABANDONED = "abandoned"  # its controller died after ordering it; nobody saw it end


class RequestEvent(Enum):
    """What happens to a request (who raises it, in ``docs/controller.md``)."""

    START = "start"  # the loop ordered it (``ControllerLoop.request``)
    REFUSE = "refuse"  # the loop refused it, or its key group was restored instead
    OVERDUE = "overdue"  # not done within ``migration_timeout_secs``
    FINISH = "finish"  # both ends reported MigrationDone (its leader dead: heartbeats show it)
    REDRIVE = "redrive"  # its leader died before the order reached the routing: again
    ABANDON = "abandon"  # its leader died after ordering it: closed, its end not seen


S, E = RequestState, RequestEvent
TRANSITIONS: dict[tuple[RequestState, RequestEvent], RequestState] = {
    (S.PENDING, E.START): S.STARTED,
    (S.PENDING, E.REFUSE): S.REFUSED,
    (S.STARTED, E.OVERDUE): S.STUCK,
    (S.STARTED, E.FINISH): S.DONE,
    (S.STUCK, E.FINISH): S.DONE,
    (S.STARTED, E.REFUSE): S.REFUSED,
    (S.STUCK, E.REFUSE): S.REFUSED,
    (S.STARTED, E.REDRIVE): S.PENDING,
    (S.STUCK, E.REDRIVE): S.PENDING,
    (S.STARTED, E.ABANDON): S.ABANDONED,
    (S.STUCK, E.ABANDON): S.ABANDONED,
}
"""``TRANSITIONS[(state, event)]`` = the next state; every other pair is illegal."""

IN_FLIGHT = frozenset({S.STARTED, S.STUCK})
"""States in which a request waits on its leading controller (the one that ordered it)."""

FINAL = frozenset(set(S) - {s for s, _ in TRANSITIONS})
"""States no event leaves: done, refused, abandoned."""


def next_state(state: RequestState, event: RequestEvent) -> RequestState:
    """The state after ``event`` in ``state``; ``RequestTransitionError`` if illegal."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise RequestTransitionError(
            f"request event {event.value!r} is illegal in state {state.value!r}"
        ) from None


def after_leader_lost(
    request: MigrationRequest,
    routing_epoch: int,
    *,
    claims: Mapping[int, bool] | None = None,
    expired: bool = True,
) -> RequestEvent | None:
    """What a controller that takes over does with ``request``, left ``started`` or
    ``stuck`` by the leader that died; None: ask again later.

    The leader persisted each decision (the routing table, at the order's epoch)
    before it sent the commands acting on it. So if the routing the successor loaded
    (``routing_epoch``) is older than the request's ``epoch``, no command went out:
    the request is re-driven (back to pending, ordered again from scratch). Otherwise
    the commands may have gone out, and the migration's ``MigrationDone`` reports went
    (or will go) to the dead leader, so the successor looks at the tasks' heartbeats
    instead: ``claims`` maps each task of the operator heard since the order to
    whether it owns the group outright. Its target owning it, its source heard and no
    longer owning it, and nobody else, is the migration's end: finished. Not seen by
    the time the successor stops waiting (``expired``): closed as abandoned. Never
    ordered twice. O(tasks).

    >>> r = MigrationRequest(operator="op", key_group=0, target=1, protocol=Protocol.CPA)
    >>> started = r.advance(RequestEvent.START, 1.0, epoch=5, source=0)
    >>> after_leader_lost(started, 4).value
    'redrive'
    >>> after_leader_lost(started, 5, claims={0: False, 1: True}).value
    'finish'
    >>> after_leader_lost(started, 5, claims={0: True, 1: True}, expired=False) is None
    True
    >>> after_leader_lost(started, 5).value
    'abandon'
    """
    if request.state not in IN_FLIGHT:
        raise RequestTransitionError(f"a {request.state.value} request has no leader to lose")
    if request.epoch is None or routing_epoch < request.epoch:
        return RequestEvent.REDRIVE
    seen = claims or {}
    if (
        seen.get(request.target) is True
        and seen.get(request.source) is False
        and not any(owns for task, owns in seen.items() if task != request.target)
    ):
        return RequestEvent.FINISH
    return RequestEvent.ABANDON if expired else None


@dataclass(frozen=True, kw_only=True)
class MigrationRequest:
    """Move ``key_group`` of ``operator`` to task ``target`` (or its holder) by ``protocol``."""

    operator: str
    key_group: int
    target: int | str
    protocol: Protocol
    state: RequestState = RequestState.PENDING
    protocol_used: Protocol | None = None
    epoch: int | None = None
    source: int | None = None
    detail: str = ""
    times: dict[str, float] = field(default_factory=dict)  # state name -> controller clock
    pause: float | None = None  # done: s the group's new tuples waited at the target

    def __post_init__(self) -> None:
        if not isinstance(self.key_group, int) or self.key_group < 0:
            raise RequestError(f"key group must be an int >= 0, got {self.key_group!r}")
        if not (self.target == HOLDER or (isinstance(self.target, int) and self.target >= 0)):
            raise RequestError(f"target must be a task id or {HOLDER!r}, got {self.target!r}")
        if self.protocol not in MOVES:
            raise RequestError(f"{self.protocol.value} is not a migration protocol one can request")

    def advance(self, event: RequestEvent, now: float, **changes: Any) -> MigrationRequest:
        """This request after ``event`` at time ``now`` (:data:`TRANSITIONS`), with
        ``changes`` to its other fields; ``RequestTransitionError`` if illegal. A
        re-driven request forgets what its lost order set (epoch, source, protocol used)."""
        state = next_state(self.state, event)
        if "state" in changes or "times" in changes:
            raise RequestError("a request's state and times change only through its table")
        values = {**asdict(self), **changes, "state": state}
        times = dict(self.times)
        if event is RequestEvent.REDRIVE:
            values.update(epoch=None, source=None, protocol_used=None)
            times = {k: t for k, t in times.items() if k not in ("started", "stuck")}
        values["times"] = {**times, state.value: now}
        return MigrationRequest(**values)


@dataclass(frozen=True, kw_only=True)
class UnreadableRequest:
    """A request znode that did not decode, as the controller refused it: ``detail``
    says why, ``raw`` keeps what was written (so nothing is lost). Always refused."""

    detail: str
    raw: str
    times: dict[str, float] = field(default_factory=dict)

    @property
    def state(self) -> RequestState:
        return RequestState.REFUSED


def refuse_unreadable(raw: bytes, detail: str, now: float) -> UnreadableRequest:
    """The refusal of an unreadable request: it counts as pending, so the table's
    ``(pending, refuse)`` is the transition taken."""
    state = next_state(RequestState.PENDING, RequestEvent.REFUSE)
    return UnreadableRequest(
        detail=detail, raw=raw.decode(errors="replace"), times={state.value: now}
    )


def encode_unreadable(record: UnreadableRequest) -> bytes:
    """JSON bytes for an unreadable request's refusal (read back by :func:`decode_record`)."""
    data = {"state": record.state.value, "detail": record.detail, "unreadable": record.raw}
    return json.dumps({**data, "times": record.times}, sort_keys=True).encode()


def decode_record(raw: bytes) -> MigrationRequest | UnreadableRequest:
    """A request znode as written by the client or the controller: a request, or the
    refusal of an unreadable one; ``RequestError`` if it is neither."""
    try:
        data = json.loads(payload_of(raw).decode())
        if isinstance(data, dict) and "unreadable" in data:
            return UnreadableRequest(
                detail=str(data["detail"]), raw=str(data["unreadable"]), times=data["times"]
            )
    except (ValueError, KeyError, TypeError) as exc:
        raise RequestError(f"malformed migration request: {exc}") from None
    return decode_request(raw)


def encode_request(request: MigrationRequest) -> bytes:
    """JSON bytes for a request znode."""
    data = asdict(request)
    for name in ("protocol", "protocol_used", "state"):
        value = data[name]
        data[name] = None if value is None else value.value
    return json.dumps(data, sort_keys=True).encode()


def decode_request(raw: bytes) -> MigrationRequest:
    """Inverse of :func:`encode_request`; ``RequestError`` names what is wrong (an
    unreadable request's refusal is not a request either: see :func:`decode_record`)."""
    try:
        data = json.loads(payload_of(raw).decode())
        if "unreadable" in data:
            raise RequestError(f"unreadable request, refused: {data.get('detail')}")
        data["protocol"] = Protocol(data["protocol"])
        data["state"] = RequestState(data.get("state", "pending"))
        used = data.get("protocol_used")
        data["protocol_used"] = None if used is None else Protocol(used)
        return MigrationRequest(**data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RequestError(f"malformed migration request: {exc}") from None
