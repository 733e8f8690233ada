"""Read one key's current state from a running topology (``elastorm state``,
``elastorm.query_state``): Flink's queryable state, Faust's table views.

A thin loop over ``elastorm.core.queries`` (who answers, what to do next) and
``elastorm.zk.queries`` (the query znode): read the operator's routing table, ask the
key's group's owner, and wait for its answer, asking the owner of the routing table
as it is then whenever the task asked says the group is not its (a migration or a
restore in progress) or the table names another owner. Nothing is written but the
query's own ephemeral znode; the state is only read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient

from elastorm.core.keys import field_list_key
from elastorm.core.queries import (
    Next,
    QueryError,
    StateAnswer,
    StateQuery,
    Verdict,
    ask,
    next_step,
)
from elastorm.errors import UserError
from elastorm.runtime.migrate import connected
from elastorm.zk.layout import ZnodeLayout, ZnodeLayoutError
from elastorm.zk.queries import post_query, read_answer, withdraw_query
from elastorm.zk.requests import read_operators, read_routing

DEFAULT_TIMEOUT = 10.0
POLL_SECS = 0.05  # between looks at the answer (the task answers on its next tick)
REROUTE_PAUSE_SECS = 0.2  # before asking again after a 'not mine' (a migration ends)


def query_state(
    topology: str,
    operator: str,
    key: str | Sequence[Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    zookeeper: str | None = None,
    secret_file: str | None = None,
) -> dict[str, Any]:
    """``key``'s current record in keyed ``operator`` of the running ``topology``.

    ``key`` is the key as the operator sees it (a ``str``), or, for an operator keyed
    by a field list, the list of those fields' values (made into the key as the router
    does, ``elastorm.core.keys.field_list_key``). ``secret_file``: the topology's
    secret, to post the query to a secured topology. ``zookeeper`` is ``host:port``
    (default: this project's). Returns ``{"topology", "operator", "key", "key_group",
    "task", "epoch", "found", "state"}``: ``state`` is the key's record ``{state name:
    value}``, or None when the operator has none for the key (``found`` false).

    Raises ``UserError`` (one line) for a topology or operator elastorm does not know,
    and when no owner answered within ``timeout`` s (saying what it last heard).
    """
    if not isinstance(key, str):
        key = field_list_key(key)
    if zookeeper is None:
        from elastorm.runtime.config import load_config

        zookeeper = load_config().zookeeper
    with connected(zookeeper, secret_file=secret_file) as client:
        return ask_owner(client, topology, operator, key, timeout)


def ask_owner(
    client: KazooClient, topology: str, operator: str, key: str, timeout: float
) -> dict[str, Any]:
    """:func:`query_state` on a connected client (the CLI's and the tests' entry)."""
    try:
        layout = ZnodeLayout(topology)
    except ZnodeLayoutError as exc:
        raise UserError(str(exc)) from None
    deadline = time.monotonic() + timeout
    query, path, last = None, None, None
    try:
        while True:
            routing = _routing(client, layout, operator)
            if query is None:
                query = ask(operator, key, routing)
                path = post_query(client, layout, query)
            answer = read_answer(client, path)
            step = next_step(
                query,
                answer,
                owner_now=routing.owner(query.key_group),
                now=time.monotonic(),
                deadline=deadline,
            )
            if step is Next.DONE:
                return _result(topology, query, answer)
            if step is Next.TIMEOUT:
                raise UserError(_timed_out(client, layout, query, last or answer, timeout))
            if step is Next.REROUTE:
                last = answer or last
                withdraw_query(client, path)
                query = None
                time.sleep(REROUTE_PAUSE_SECS if answer is not None else 0)
            else:
                time.sleep(POLL_SECS)
    except QueryError as exc:
        raise UserError(f"state query of {topology}/{operator}: {exc}") from None
    finally:
        if path is not None:
            withdraw_query(client, path)


def _routing(client: KazooClient, layout: ZnodeLayout, operator: str):
    """``operator``'s routing table, or ``UserError`` naming what is missing."""
    topology = layout.topology
    if client.exists(layout.base) is None:
        raise UserError(
            f"no topology {topology!r} in ZooKeeper (elastorm keeps {layout.base} for "
            "every elastic topology it ran): check the name given to sparse submit -N"
        )
    operators = read_operators(client, layout)
    if operator not in operators:
        known = ", ".join(operators) if operators else "none yet (is it running?)"
        raise UserError(
            f"{topology} has no keyed operator {operator!r}; its keyed operators: {known}"
        )
    try:
        table = read_routing(client, layout, operator)
    except ZnodeLayoutError as exc:
        raise UserError(str(exc)) from None
    if table is None:
        raise UserError(f"the routing table of {topology}/{operator} is unreadable")
    return table


def _result(topology: str, query: StateQuery, answer: StateAnswer) -> dict[str, Any]:
    return {
        "topology": topology,
        "operator": query.operator,
        "key": query.key,
        "key_group": answer.key_group,
        "task": answer.task,
        "epoch": query.epoch,
        "found": answer.verdict is Verdict.FOUND,
        "state": answer.record,
    }


def _timed_out(
    client: KazooClient,
    layout: ZnodeLayout,
    query: StateQuery,
    last: StateAnswer | None,
    timeout: float,
) -> str:
    """The timeout's one line: what was heard last, and what to do."""
    where = f"key {query.key!r} of {layout.topology}/{query.operator} (key group {query.key_group})"
    if last is not None:
        return (
            f"no owner answered for {where} in {timeout:g} s: task {last.task} last said "
            f"the group is {last.phase.value} there, not active (a migration or a restore "
            "in progress?); try again, or give a longer --timeout"
        )
    if client.exists(layout.task(query.task)) is None:
        return (
            f"no answer for {where} in {timeout:g} s: its owner, task {query.task}, is not "
            "running (the topology was killed, or the task is restarting), or runs with "
            "elastorm.heartbeats off, and so takes no queries"
        )
    return (
        f"no answer for {where} from task {query.task} in {timeout:g} s: the task is "
        "alive but did not answer (overloaded, or an elastorm older than state queries?)"
    )
