"""The node set and the scheduler's binding in ZooKeeper: a thin kazoo adapter over
``elastorm.controller.scaling``.

``scheduler/nodes`` (wanted and draining nodes) is written by ``elastorm scale`` /
``elastorm drain`` and by the controller when a drained node is empty (compare and
set on the znode's version, so neither loses the other's change);
``scheduler/placement`` is written by the elastic scheduler in Nimbus
(``ElasticScheduler.java``) and only read here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from elastorm.controller.model import NodeId, NodeState, node_name
from elastorm.controller.scaling import (
    Binding,
    NodeSet,
    RescaleProgress,
    ScalingError,
    decode_binding,
    decode_node_set,
    decode_rescale,
    encode_node_set,
    release,
)
from elastorm.zk.client import write_znode
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import ZK_ERRORS

log = logging.getLogger(__name__)


def read_node_set(client: KazooClient, layout: ZnodeLayout) -> NodeSet:
    """The topology's node set (none written: every live node wanted, none draining)."""
    try:
        return decode_node_set(client.get(layout.scheduler_nodes)[0])
    except NoNodeError:
        return NodeSet()


def read_rescale(client: KazooClient, layout: ZnodeLayout) -> RescaleProgress:
    """The controller's rescale progress; nothing under way before its first round."""
    try:
        return decode_rescale(client.get(layout.rescale)[0])
    except NoNodeError:
        return RescaleProgress()


def read_binding(client: KazooClient, layout: ZnodeLayout) -> Binding:
    """What the elastic scheduler applied; empty if it never placed this topology."""
    try:
        return decode_binding(client.get(layout.scheduler_placement)[0])
    except NoNodeError:
        return Binding()


def update_node_set(
    client: KazooClient, layout: ZnodeLayout, change: Callable[[NodeSet], NodeSet]
) -> NodeSet:
    """Apply ``change`` to the node set with compare-and-set (retried on a race)."""
    path = layout.scheduler_nodes
    for _ in range(20):
        try:
            raw, stat = client.get(path)
        except NoNodeError:
            new = change(NodeSet())
            try:
                client.create(path, encode_node_set(new), makepath=True)
                return new
            except NodeExistsError:
                continue
        new = change(decode_node_set(raw))
        try:
            client.set(path, encode_node_set(new), version=stat.version)
            return new
        except BadVersionError:
            continue
    raise ScalingError(f"{path}: too many concurrent changes, try again")


class NodeWatch:
    """The controller's live view of the node set and the binding (kazoo data watches,
    so a tick never blocks on ZooKeeper), with the time each logical node was bound and
    the time each keyed task last (re)started (its ``TaskStarted`` report)."""

    def __init__(self, client: KazooClient, layout: ZnodeLayout) -> None:
        self.client = client
        self.layout = layout
        self.nodes = NodeSet()
        self.binding = Binding()
        self.bound_at: dict[str, float] = {}  # logical node -> when its name was first seen
        self.first: frozenset[str] | None = None  # bound in the first binding seen
        self.started_at: dict[int, float] = {}  # keyed task -> its latest TaskStarted
        self._clock: Callable[[], float] | None = None
        self._published: bytes | None = None

    def start(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.client.DataWatch(self.layout.scheduler_nodes, self._on_nodes)
        self.client.DataWatch(self.layout.scheduler_placement, self._on_placement)

    def _on_nodes(self, data, _stat) -> None:
        try:
            self.nodes = decode_node_set(data)
        except ScalingError as exc:
            log.error("scheduler/nodes unreadable, kept the last one: %s", exc)

    def _on_placement(self, data, _stat) -> None:
        try:
            binding = decode_binding(data)
        except ScalingError as exc:
            log.error("scheduler/placement unreadable, kept the last one: %s", exc)
            return
        now = self._clock() if self._clock else 0.0
        for i, name in enumerate(binding.nodes):
            node = node_name(i)
            before = self.binding.nodes[i] if i < len(self.binding.nodes) else None
            if name != before or node not in self.bound_at:
                self.bound_at[node] = now
        if binding.nodes != self.binding.nodes:
            log.info("scheduler binding: %s", binding.nodes)
        if self.first is None and binding.bound:
            self.first = frozenset(
                node_name(i) for i, n in enumerate(binding.nodes) if n is not None
            )
        self.binding = binding

    def task_started(self, task: int, now: float) -> None:
        """Keyed task ``task`` reported that it started (or restarted) at ``now``."""
        self.started_at[task] = now

    def _restarted_since_bound(self, node: str, tasks: Iterable[int]) -> bool:
        """Whether every one of ``tasks`` (the logical node's) has started since ``node``
        was bound: a joining node's tasks move out of the idle worker into the node's
        own, so they restart; until they have, a key group moved onto one would be lost
        with the old process. Nodes of the first binding seen started with the topology."""
        if self.first is not None and node in self.first:
            return True
        bound = self.bound_at.get(node, float("inf"))
        return all(self.started_at.get(t, float("-inf")) >= bound for t in tasks)

    def state(
        self,
        now: float,
        settle: float,
        tasks_of: Callable[[str], Iterable[int]] | None = None,
    ) -> NodeState | None:
        """The active and draining logical nodes; None before the scheduler placed the
        topology (not elastically scheduled). A node bound less than ``settle`` s ago is
        neither, and so is one whose keyed tasks (``tasks_of(node)``, if given) have not
        all reported a start since it was bound: they are restarting in its worker."""
        if not self.binding.bound:
            return None
        active, draining = set(), set()
        for i, name in enumerate(self.binding.nodes):
            node = node_name(i)
            if name is None:
                continue
            if name in self.nodes.draining:
                draining.add(node)
            elif now - self.bound_at.get(node, now) >= settle and (
                tasks_of is None or self._restarted_since_bound(node, tasks_of(node))
            ):
                active.add(node)
        if not active:
            return None
        return NodeState(active=frozenset(active), draining=frozenset(draining))

    def publish(
        self,
        joining: Iterable[NodeId],
        pending: int,
        want: int | None,
        draining: Iterable[NodeId] = (),
    ) -> None:
        """Write the rescale's progress to ``controller/rescale`` when it changes:
        the joining and draining nodes (by name) and the key groups still to move
        (``elastorm scale`` waits for these to be empty; the dashboard shows the
        draining nodes), and the node count the adaptation manager wants (``elastorm
        autoscale`` acts on it). Errors are logged, never raised."""
        data = RescaleProgress(
            joining=tuple(sorted(self.binding.name_of(n) or n for n in joining)),
            draining=tuple(sorted(self.binding.name_of(n) or n for n in draining)),
            pending=pending,
            want=want,
        ).encode()
        if data == self._published:
            return
        try:
            write_znode(self.client, self.layout.rescale, data)
            self._published = data
        except ZK_ERRORS as exc:
            log.warning("controller/rescale not written (%s); retrying next tick", exc)

    def release(self, node: str) -> None:
        """The drained logical ``node`` is empty: take its name out of the node set."""
        name = self.binding.name_of(node)
        if name is None or name not in self.nodes.draining:
            return
        binding = self.binding
        new = update_node_set(self.client, self.layout, lambda ns: release(name, ns, binding))
        log.info("controller: %s (%s) drained and released; node set now %s", name, node, new)
