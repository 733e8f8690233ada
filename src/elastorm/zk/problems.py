"""A topology's problems in ZooKeeper: tasks record their failed starts, readers gather
the facts (``elastorm.controller.problems`` decides what to report).

A bolt whose start fails (``elastorm.storm``: the controller or a keyed task raising in
``initialize``) counts it in ``failures/<component>-<task>`` with the reason before it
dies, so ``elastorm status``, ``elastorm cluster status`` and the dashboard say why a
topology does not run, not only a worker log. Durable, tagged with the submission:
a later submission under the same name does not report an earlier one's failures.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from elastorm.controller.model import TaskRecord
from elastorm.controller.problems import StartFailure, TopologyFacts
from elastorm.zk.client import make_client
from elastorm.zk.codec import (
    ZnodeSchemaError,
    decode_start_failure,
    decode_submission,
    decode_task,
    encode_start_failure,
)
from elastorm.zk.layout import (
    ZnodeLayout,
    ZnodeLayoutError,
    submission_id,
    task_id_from_name,
    zk_settings,
)
from elastorm.zk.requests import ZK_ERRORS, read_operators, read_refusal, read_status

log = logging.getLogger(__name__)

RECORD_TIMEOUT = 3.0  # s a dying task waits for ZooKeeper to take its reason
WRITE_ATTEMPTS = 5  # read-modify-write retries when another writer raced


def count_start_failure(
    client: KazooClient, layout: ZnodeLayout, storm_id: str, failure: StartFailure
) -> StartFailure:
    """Add one failed start (``failure``, count 1) to the task's record of submission
    ``storm_id``; return the record now stored. Raises what kazoo raises."""
    path = layout.start_failure(failure.component, failure.task)
    for _ in range(WRITE_ATTEMPTS):
        try:
            data, stat = client.get(path)
        except NoNodeError:
            try:
                client.create(path, encode_start_failure(failure, storm_id=storm_id), makepath=True)
                return failure
            except NodeExistsError:
                continue
        try:
            recorded_id, recorded = decode_start_failure(data)
        except ZnodeSchemaError:
            recorded_id, recorded = None, None
        count = recorded.count + 1 if recorded is not None and recorded_id == storm_id else 1
        now = replace(failure, count=count)
        try:
            client.set(path, encode_start_failure(now, storm_id=storm_id), version=stat.version)
            return now
        except (BadVersionError, NoNodeError):
            continue
    raise BadVersionError(f"{path}: raced {WRITE_ATTEMPTS} times")


def record_start_failure(
    conf: Mapping[str, Any], component: str, task: int, reason: str, at: float
) -> None:
    """A dying task's last word: count its failed start in the topology's ZooKeeper,
    waiting at most ``RECORD_TIMEOUT`` s; logged, never raised (it is dying anyway)."""
    try:
        layout = ZnodeLayout(str(conf["topology.name"]))
        storm_id = submission_id(conf)
        client = make_client(zk_settings(conf))
    except (KeyError, ValueError, ZnodeLayoutError) as exc:
        log.error("task %s of %s: start failure not recorded (%s)", task, component, exc)
        return
    failure = StartFailure(component=component, task=task, count=1, reason=reason, at=at)
    try:
        client.start(timeout=RECORD_TIMEOUT)
        stored = count_start_failure(client, layout, storm_id, failure)
        log.error(
            "task %s of %s failed to start (%d times in this submission): %s",
            task,
            component,
            stored.count,
            reason,
        )
    except (*ZK_ERRORS, ValueError) as exc:
        log.error(
            "task %s of %s: start failure not recorded (%r): %s", task, component, exc, reason
        )
    finally:
        client.stop()
        client.close()


def read_start_failures(client: KazooClient, layout: ZnodeLayout) -> tuple[StartFailure, ...]:
    """The failed starts recorded in the current submission (``submission``), by task."""
    try:
        names = sorted(client.get_children(layout.failures))
    except NoNodeError:
        return ()
    try:
        current = decode_submission(client.get(layout.submission)[0]).storm_id
    except (NoNodeError, ZnodeSchemaError):
        current = None
    out = []
    for name in names:
        try:
            storm_id, failure = decode_start_failure(client.get(f"{layout.failures}/{name}")[0])
        except (NoNodeError, ZnodeSchemaError) as exc:
            log.warning("failure record %s unreadable (%s)", name, exc)
            continue
        if current is None or storm_id == current:
            out.append(failure)
    return tuple(out)


def zk_facts(client: KazooClient, facts: TopologyFacts) -> TopologyFacts:
    """``facts`` with what ZooKeeper says of its topology: whether elastorm state exists,
    the controller's refusal, the recorded failed starts, the operators with a status
    and whether a controller leads."""
    layout = ZnodeLayout(facts.topology)
    if client.exists(layout.base) is None:
        return replace(facts, elastic_state=False)
    operators = read_operators(client, layout)
    return replace(
        facts,
        elastic_state=True,
        refusal=read_refusal(client, layout),
        start_failures=read_start_failures(client, layout),
        statuses=tuple(op for op in operators if read_status(client, layout, op) is not None),
        controller_alive=client.exists(layout.leader) is not None,
    )


def read_tasks(client: KazooClient, layout: ZnodeLayout) -> dict[int, TaskRecord]:
    """The live tasks' records (``tasks/<id>``), by task id; unreadable ones skipped."""
    try:
        names = client.get_children(layout.tasks)
    except NoNodeError:
        return {}
    out = {}
    for name in names:
        try:
            out[task_id_from_name(name)] = decode_task(client.get(f"{layout.tasks}/{name}")[0])
        except (NoNodeError, ZnodeSchemaError, ZnodeLayoutError):
            continue
    return dict(sorted(out.items()))
