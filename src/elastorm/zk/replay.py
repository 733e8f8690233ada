"""Restart points and rewind requests in ZooKeeper (``elastorm.core.replay``).

An emitter behind a replayable spout writes its durable restart point to
``restart/<component>-<task>``; when it restarts it reads it back and asks each
such spout, under ``rewinds/<spout>/<task>``, to replay from just after it. The
spout reads the requests, and a restarted spout reads the restart points to know
where to resume. A live emitter whose link from a spout task lost tuples asks the
same way (``RewindAsker``), with a fresh token. The loops run off the processing
thread (``BackgroundLoop``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from elastorm.core.replay import RestartPoint, RewindAsk
from elastorm.core.routing import RoutingTable
from elastorm.zk.client import BackgroundLoop, write_znode
from elastorm.zk.codec import (
    RewindRequest,
    ZnodeSchemaError,
    decode_restart_point,
    decode_rewind,
    encode_restart_point,
    encode_rewind,
)
from elastorm.zk.layout import ZnodeLayout, zk_settings
from elastorm.zk.requests import ZK_ERRORS, at_start, read_routing

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class EmitterStart:
    """What an emitter learns at start: which start this is, the routing tables in
    force (None before the controller's first write) and its restart point."""

    incarnation: int
    routing: Mapping[str, RoutingTable | None]
    point: RestartPoint | None


def read_restart_point(
    client: KazooClient, layout: ZnodeLayout, component: str, task: int
) -> RestartPoint | None:
    try:
        data = client.get(layout.restart_point(component, task))[0]
    except NoNodeError:
        return None
    try:
        return decode_restart_point(data)
    except ZnodeSchemaError as exc:
        log.error("restart point of %s-%s unreadable (%s): replaying from 0", component, task, exc)
        return None


def emitter_start(
    conf: Mapping[str, Any],
    component: str,
    task: int,
    operators: Iterable[str],
    sources: Iterable[str],
) -> EmitterStart:
    """Register this start of an emitter; on a restart read its routing tables and
    restart point and ask each replayable spout in ``sources`` to rewind for it.
    Waits for ZooKeeper like a keyed task (``at_start``)."""
    operators, sources = tuple(operators), tuple(sources)

    def read(client: KazooClient, layout: ZnodeLayout, incarnation: int) -> EmitterStart:
        if incarnation == 1:
            return EmitterStart(incarnation=1, routing={}, point=None)
        routing = {op: read_routing(client, layout, op) for op in operators}
        point = read_restart_point(client, layout, component, task)
        positions = dict(point.positions) if point else {}
        request = encode_rewind(RewindRequest(token=f"{task}#{incarnation}", positions=positions))
        for source in sources:
            path = f"{layout.rewinds(source)}/{task}"
            write_znode(client, path, request)
        return EmitterStart(incarnation=incarnation, routing=routing, point=point)

    return at_start(conf, component, task, read)[1]


class _TopologyLoop(BackgroundLoop):
    """A background loop on a ZooKeeper client of its own, for the topology whose
    Storm conf is ``conf``."""

    def __init__(self, conf: Mapping[str, Any], *, name: str, interval: float) -> None:
        super().__init__(
            None,
            layout=ZnodeLayout(str(conf["topology.name"])),
            settings=zk_settings(conf),
            name=name,
            interval=interval,
        )


class RestartPointWriter(_TopologyLoop):
    """Writes an emitter's newest durable restart point; ``offer`` never blocks."""

    def __init__(self, conf: Mapping[str, Any], component: str, task: int) -> None:
        super().__init__(conf, name=f"elastorm-restart-{component}-{task}", interval=1.0)
        self._path = self._layout.restart_point(component, task)
        self._offered: RestartPoint | None = None
        self._written: RestartPoint | None = None
        self.writes = 0

    def offer(self, point: RestartPoint) -> None:
        if point != self._offered:
            self._offered = point
            self.wake()

    def _step(self) -> None:
        point = self._offered
        if point is None or point == self._written or not self._client.connected:
            return
        data = encode_restart_point(point)
        try:
            write_znode(self._client, self._path, data)
        except ZK_ERRORS as exc:
            log.debug("restart point not written yet (%r)", exc)
            return
        self._written = point
        self.writes += 1


class RewindAsker(_TopologyLoop):
    """Writes a live emitter's rewind requests (``RewindAsk``, a lossy link) to
    ``rewinds/<spout>/<task>``; ``ask`` never blocks. The newest ask per spout wins
    (the spout serves the token it finds there); one not written yet is retried."""

    def __init__(self, conf: Mapping[str, Any], component: str, task: int) -> None:
        super().__init__(conf, name=f"elastorm-rewind-asks-{component}-{task}", interval=0.2)
        self._task = task
        self._pending: dict[str, RewindAsk] = {}  # spout component -> newest ask
        self.writes = 0

    def ask(self, ask: RewindAsk) -> None:
        with self._lock:
            self._pending[ask.upstream.rsplit(":", 1)[0]] = ask
        self.wake()

    def _step(self) -> None:
        if not self._client.connected:
            return
        with self._lock:
            pending = dict(self._pending)
        for spout, ask in pending.items():
            path = f"{self._layout.rewinds(spout)}/{self._task}"
            data = encode_rewind(RewindRequest(token=ask.token, positions=ask.positions))
            try:
                write_znode(self._client, path, data)
            except ZK_ERRORS as exc:
                log.warning("rewind %s not written yet (%r); retrying", ask.token, exc)
                continue
            with self._lock:
                if self._pending.get(spout) is ask:
                    del self._pending[spout]
            self.writes += 1


class RewindBoard(_TopologyLoop):
    """A replayable spout's view of the rewind requests addressed to it, and the
    restart points of the emitters it feeds (``requests()`` never blocks)."""

    def __init__(self, conf: Mapping[str, Any], source: str) -> None:
        super().__init__(conf, name=f"elastorm-rewinds-{source}", interval=0.1)
        self._path = self._layout.rewinds(source)
        self._requests: dict[str, RewindRequest] = {}

    def requests(self) -> dict[str, RewindRequest]:
        """Latest request per emitter task (as seen at the last poll)."""
        return dict(self._requests)

    def _step(self) -> None:
        if not self._client.connected:
            return
        try:
            names = self._client.get_children(self._path)
        except NoNodeError:
            return
        except ZK_ERRORS:
            return
        seen = {}
        for name in names:
            try:
                seen[name] = decode_rewind(self._client.get(f"{self._path}/{name}")[0])
            except (NoNodeError, ZnodeSchemaError, *ZK_ERRORS):
                continue
        self._requests = seen


def spout_start(
    conf: Mapping[str, Any], component: str, task: int, emitters: Mapping[str, Iterable[int]]
) -> tuple[int, list[RestartPoint | None], set[str]]:
    """Register this start of a replayable spout; on a restart, read the restart
    points of the emitters it feeds (``{component: tasks}``) to know where to resume,
    and the rewind tokens already asked for (that resumption serves them all)."""

    def read(client: KazooClient, layout: ZnodeLayout, incarnation: int):
        if incarnation == 1:
            return [], set()
        points = [
            read_restart_point(client, layout, name, t)
            for name, tasks in emitters.items()
            for t in tasks
        ]
        path = layout.rewinds(component)
        try:
            names = client.get_children(path)
        except NoNodeError:
            names = []
        tokens = set()
        for name in names:
            try:
                tokens.add(decode_rewind(client.get(f"{path}/{name}")[0]).token)
            except (NoNodeError, ZnodeSchemaError):
                continue
        return points, tokens

    incarnation, (points, tokens) = at_start(conf, component, task, read)
    return incarnation, points, tokens


def restart_points(client: KazooClient, layout: ZnodeLayout) -> dict[str, RestartPoint]:
    """Every emitter's durable restart point under the topology's base, by
    ``component:task`` (what a savepoint records; an unreadable one is left out, and
    logged: that emitter then replays from the source's start)."""
    directory = f"{layout.base}/restart"
    try:
        names = client.get_children(directory)
    except NoNodeError:
        return {}
    out = {}
    for name in sorted(names):
        component, _, task = name.rpartition("-")
        if not component or not task.isdigit():
            continue
        point = read_restart_point(client, layout, component, int(task))
        if point is not None:
            out[f"{component}:{task}"] = point
    return out
