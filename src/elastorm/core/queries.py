"""Queryable state: who answers a key's state query, what it answers, what the asker
does next (pure; Flink's queryable state, Faust's table views).

A query asks one keyed operator for one key's current record (``{state name:
value}``, ``elastorm.core.keyed_state``). The asker reads the operator's routing
table, computes the key's group (``key_group``) and addresses the query to the
group's owner there (:func:`ask`). The task answers from the group's live state only
when it owns the group ``ACTIVE`` (:func:`answer`): ``found`` with the record, or
``absent``; anything else (the group is migrating, being restored, or has moved
away) is ``not_mine``, with the phase seen, and the asker asks the owner of the
routing table as it is then (:func:`next_step`), until its deadline. Answering
reads the record and never writes the state.

The adapters carry queries and answers as JSON (:func:`encode_query`,
:func:`encode_answer`): ``elastorm.zk.queries`` in ZooKeeper, ``elastorm.runtime.state``
on the asker's side.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from elastorm.core.errors import ElastormError
from elastorm.core.keygroups import key_group
from elastorm.core.migration.table import Phase
from elastorm.core.routing import RoutingTable
from elastorm.core.state import is_reserved

QUERY_VERSION = 1


class QueryError(ElastormError):
    """A query or an answer that cannot be decoded or built (the message says which)."""


class Verdict(enum.Enum):
    FOUND = "found"  # the owner's record of the key
    ABSENT = "absent"  # the owner has no record of the key (never seen, or cleared)
    NOT_MINE = "not_mine"  # the task does not own the key's group ACTIVE now


def _check_int(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise QueryError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class StateQuery:
    """Ask task ``task`` for ``key``'s record in ``operator`` (key group ``key_group``,
    owned by ``task`` in the routing table of ``epoch``, as the asker read it)."""

    operator: str
    key: str
    key_group: int
    task: int
    epoch: int

    def __post_init__(self) -> None:
        if not isinstance(self.operator, str) or not self.operator:
            raise QueryError(f"operator must be a non-empty str, got {self.operator!r}")
        if not isinstance(self.key, str):
            raise QueryError(f"key must be a str, got {self.key!r}")
        _check_int("key_group", self.key_group, 0)
        _check_int("task", self.task, 0)
        _check_int("epoch", self.epoch, 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class StateAnswer:
    """Task ``task``'s answer: the ``verdict``, the key's group and its ``phase`` there,
    and the key's ``record`` (``found`` only): a ``KeyedBolt``'s is ``{state name:
    value}``, a hand-written ``KeyedOperator``'s whatever its step keeps (a JSON value)."""

    verdict: Verdict
    task: int
    key_group: int
    phase: Phase
    record: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, Verdict) or not isinstance(self.phase, Phase):
            raise QueryError(f"bad verdict or phase: {self.verdict!r}, {self.phase!r}")
        _check_int("task", self.task, 0)
        _check_int("key_group", self.key_group, 0)
        if (self.record is not None) != (self.verdict is Verdict.FOUND):
            raise QueryError(f"a record comes with 'found' only (verdict {self.verdict.value})")


def ask(operator: str, key: str, routing: RoutingTable) -> StateQuery:
    """The query for ``key`` of ``operator``, addressed to its group's owner in ``routing``.

    >>> ask("counts", "apple", RoutingTable.round_robin(4, [3, 4])).task
    4
    """
    g = key_group(key, routing.num_key_groups) if isinstance(key, str) else -1
    if g < 0:
        raise QueryError(f"key must be a str, got {key!r}")
    return StateQuery(
        operator=operator, key=key, key_group=g, task=routing.owner(g), epoch=routing.epoch
    )


def answer(
    query: StateQuery,
    *,
    operator: str,
    task: int,
    num_key_groups: int,
    phase: Phase,
    record: Any,
) -> StateAnswer:
    """Task ``task`` of ``operator``'s answer to ``query``, given its key group's ``phase``
    there and the key's ``record`` in its live state (``None``: none). The group is the
    task's own computation from the key, never the asker's. Only an ``ACTIVE`` owner
    answers from its state: a migration's ends, a restore in progress, a replica, an
    idle task and a query meant for another task or operator get ``not_mine``. A key
    that names one of elastorm's own entries (``core.state.is_reserved``: a group's
    clock) is ``absent``: it is no user's key. O(1).
    """
    g = key_group(query.key, num_key_groups)
    if phase is not Phase.ACTIVE or query.task != task or query.operator != operator:
        return StateAnswer(verdict=Verdict.NOT_MINE, task=task, key_group=g, phase=phase)
    if record is None or is_reserved(query.key):
        return StateAnswer(verdict=Verdict.ABSENT, task=task, key_group=g, phase=phase)
    return StateAnswer(verdict=Verdict.FOUND, task=task, key_group=g, phase=phase, record=record)


class Next(enum.Enum):
    DONE = "done"  # the answer is the result
    WAIT = "wait"  # no answer yet; the query stands
    REROUTE = "reroute"  # ask again, of the owner in the routing table as it is now
    TIMEOUT = "timeout"  # the deadline passed: give up and say why


def next_step(
    query: StateQuery,
    answer: StateAnswer | None,
    *,
    owner_now: int,
    now: float,
    deadline: float,
) -> Next:
    """What the asker does after looking at its query: ``answer`` is what it got (None:
    nothing yet), ``owner_now`` the owner of the query's group in the routing table
    read just now. A ``found`` or ``absent`` answer is final; past the deadline it gives
    up; a ``not_mine``, or silence while the routing table names another owner (the
    group moved, the task asked was lost), asks again. O(1).
    """
    if answer is not None and answer.verdict is not Verdict.NOT_MINE:
        return Next.DONE
    if now >= deadline:
        return Next.TIMEOUT
    if answer is not None or owner_now != query.task:
        return Next.REROUTE
    return Next.WAIT


def encode_query(query: StateQuery) -> bytes:
    """``query`` as the JSON a query znode holds."""
    body = {
        "version": QUERY_VERSION,
        "operator": query.operator,
        "key": query.key,
        "key_group": query.key_group,
        "task": query.task,
        "epoch": query.epoch,
    }
    return json.dumps(body, ensure_ascii=False).encode()


def decode_query(data: bytes) -> StateQuery:
    """The query in a query znode's JSON (an answered one too); ``QueryError`` if not one."""
    body = _load(data)
    try:
        return StateQuery(**{k: body[k] for k in ("operator", "key", "key_group", "task", "epoch")})
    except KeyError as exc:
        raise QueryError(f"query has no {exc.args[0]!r}") from None


def encode_answer(query: StateQuery, answer: StateAnswer) -> bytes:
    """``query`` with ``answer`` in it, as the answering task writes it over the query.
    A value JSON cannot hold is written as its ``repr`` (a record read is never refused)."""
    body = json.loads(encode_query(query))
    body["answer"] = {
        "verdict": answer.verdict.value,
        "task": answer.task,
        "key_group": answer.key_group,
        "phase": answer.phase.value,
        "record": answer.record,
    }
    return json.dumps(body, ensure_ascii=False, default=repr).encode()


def decode_answer(data: bytes) -> StateAnswer | None:
    """The answer in a query znode's JSON, or None while it is unanswered; ``QueryError``
    if it is malformed."""
    body = _load(data).get("answer")
    if body is None:
        return None
    try:
        return StateAnswer(
            verdict=Verdict(body["verdict"]),
            task=body["task"],
            key_group=body["key_group"],
            phase=Phase(body["phase"]),
            record=body.get("record"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise QueryError(f"malformed answer {body!r}: {exc}") from None


def _load(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise QueryError(f"not JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("version") != QUERY_VERSION:
        raise QueryError(f"not a version-{QUERY_VERSION} state query: {body!r:.200}")
    return body
