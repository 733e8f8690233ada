"""Plain, immutable data the controller's algorithms read and return.

Madsen & Zhou 2015, section 3 (the system model): a cluster of nodes; every node may
own any key group (``Gamma_n``) and hold any checkpoint (``Pi_n``). The controller's algorithms
(allocation, adaptation, recovery) are pure functions over these values, in the
style of Kafka Streams' ``TaskAssignor``: spec in, result out, nothing else.

Units: a key group's ``load`` and a node's ``capacity`` / ``background_load``
share one unit (tuples/s or CPU-seconds per second, the caller decides); a node's
utilisation is ``(background_load + sum of owned loads) / capacity``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from elastorm.core.messages import Protocol

NodeId = str


class ControllerModelError(ValueError):
    """A cluster view, key group or allocation is inconsistent (you built it wrong)."""


@dataclass(frozen=True, order=True, slots=True)
class KeyGroupId:
    """Key group ``index`` of operator ``operator`` (Madsen & Zhou 2015: ``g^i_j``).

    Ordered by (operator, index): this order is every algorithm's final tie-breaker.

    >>> str(KeyGroupId("delays", 3))
    'delays/3'
    """

    operator: str
    index: int

    def __post_init__(self) -> None:
        if not isinstance(self.operator, str) or not self.operator:
            raise ControllerModelError(f"operator must be a non-empty str, got {self.operator!r}")
        if not isinstance(self.index, int) or self.index < 0:
            raise ControllerModelError(f"key group index must be an int >= 0, got {self.index!r}")

    def __str__(self) -> str:
        return f"{self.operator}/{self.index}"


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeInfo:
    """One node (a Storm supervisor host) as the controller last saw it.

    ``zone`` is the node's fault zone (Kumbhare et al. 2015, section VII: fault tolerance);
    ``None`` means the node is a zone of its own. ``queue_length`` is the summed
    input-queue length of its tasks; ``cpu`` the measured CPU share in [0, 1]
    (``None``: derive it from loads, see :meth:`ClusterView.utilization`). ``down``:
    its task is declared lost, or restarted and not yet recovered; it keeps what it
    owns but no planner gives it anything (:meth:`ClusterView.targets`).
    """

    node_id: NodeId
    capacity: float = 1.0
    background_load: float = 0.0
    zone: str | None = None
    queue_length: float = 0.0
    cpu: float | None = None
    down: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, str) or not self.node_id:
            raise ControllerModelError(f"node_id must be a non-empty str, got {self.node_id!r}")
        if not (self.capacity > 0 and math.isfinite(self.capacity)):
            raise ControllerModelError(f"node {self.node_id}: capacity must be > 0")
        if self.background_load < 0 or self.queue_length < 0:
            raise ControllerModelError(f"node {self.node_id}: loads must be >= 0")

    @property
    def fault_zone(self) -> str:
        """The zone used by the fault-zone constraint (own zone when unset)."""
        return self.zone if self.zone is not None else f"node:{self.node_id}"


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyGroupInfo:
    """A key group, its owner node, its current load and its checkpoint size.

    ``replay_size`` is the number of tuples in upstream output buffers since the
    key group's last checkpoint (what CPA must replay, Madsen & Zhou 2015, section 5).
    """

    key_group: KeyGroupId
    owner: NodeId
    load: float = 0.0
    checkpoint_size: float = 0.0
    replay_size: float = 0.0

    def __post_init__(self) -> None:
        if self.load < 0 or self.checkpoint_size < 0 or self.replay_size < 0:
            raise ControllerModelError(f"{self.key_group}: load and sizes must be >= 0")


def _frozen_holders(
    items: Mapping[KeyGroupId, Iterable[NodeId]] | Iterable[tuple[KeyGroupId, Iterable[NodeId]]],
) -> tuple[tuple[KeyGroupId, tuple[NodeId, ...]], ...]:
    pairs = items.items() if isinstance(items, Mapping) else items
    out = tuple(sorted((kg, tuple(nodes)) for kg, nodes in pairs))
    for kg, nodes in out:
        if len(set(nodes)) != len(nodes):
            raise ControllerModelError(f"{kg}: two checkpoints on one node {nodes} (constraint 1)")
    return out


@dataclass(frozen=True, slots=True)
class Allocation:
    """Checkpoint allocation: key group -> holder nodes (replica 0, 1, ...).

    Immutable; iteration is in key-group order.

    >>> a = Allocation({KeyGroupId("op", 0): ("n2",)})
    >>> a.holders(KeyGroupId("op", 0))
    ('n2',)
    """

    entries: tuple[tuple[KeyGroupId, tuple[NodeId, ...]], ...]
    _index: Mapping[KeyGroupId, tuple[NodeId, ...]] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __init__(
        self,
        entries: Mapping[KeyGroupId, Iterable[NodeId]]
        | Iterable[tuple[KeyGroupId, Iterable[NodeId]]] = (),
    ) -> None:
        frozen = _frozen_holders(entries)
        object.__setattr__(self, "entries", frozen)
        object.__setattr__(self, "_index", MappingProxyType(dict(frozen)))

    def holders(self, kg: KeyGroupId) -> tuple[NodeId, ...]:
        """Holders of ``kg``'s checkpoints (empty tuple if it has none)."""
        return self._index.get(kg, ())

    def as_dict(self) -> Mapping[KeyGroupId, tuple[NodeId, ...]]:
        """A read-only mapping view."""
        return self._index

    def __len__(self) -> int:
        return sum(len(nodes) for _, nodes in self.entries)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the controller knows: nodes, key groups, where checkpoints live.

    Raises ``ControllerModelError`` on duplicate ids, an owner or holder that is
    not a node (or runs no task of its operator), or a checkpoint for an unknown key
    group. ``now`` is the time (s) the statistics were taken; algorithms use it
    instead of reading a clock. ``hosts`` names, for an operator with fewer tasks
    than there are nodes, the nodes that run one (an operator not named runs a task
    on every node): its key groups, checkpoints and replicas live only there.
    """

    nodes: tuple[NodeInfo, ...]
    key_groups: tuple[KeyGroupInfo, ...]
    checkpoints: Allocation
    now: float
    hosts: Mapping[str, frozenset[NodeId]]
    _nodes: Mapping[NodeId, NodeInfo] = field(init=False, repr=False, compare=False, hash=False)
    _kgs: Mapping[KeyGroupId, KeyGroupInfo] = field(
        init=False, repr=False, compare=False, hash=False
    )
    _owned: Mapping[NodeId, tuple[KeyGroupId, ...]] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __init__(
        self,
        *,
        nodes: Iterable[NodeInfo],
        key_groups: Iterable[KeyGroupInfo],
        checkpoints: Allocation | Mapping[KeyGroupId, Iterable[NodeId]] = (),
        now: float = 0.0,
        hosts: Mapping[str, Iterable[NodeId]] | None = None,
    ) -> None:
        node_t = tuple(sorted(nodes, key=lambda n: n.node_id))
        kg_t = tuple(sorted(key_groups, key=lambda k: k.key_group))
        alloc = checkpoints if isinstance(checkpoints, Allocation) else Allocation(checkpoints)
        by_node = {n.node_id: n for n in node_t}
        if len(by_node) != len(node_t):
            raise ControllerModelError("duplicate node ids")
        by_kg = {k.key_group: k for k in kg_t}
        if len(by_kg) != len(kg_t):
            raise ControllerModelError("duplicate key group ids")
        # a view over fewer nodes (bound_view, recovery) keeps each operator's among them
        on = {op: frozenset(nodes) & by_node.keys() for op, nodes in (hosts or {}).items()}
        owned: dict[NodeId, list[KeyGroupId]] = {n: [] for n in by_node}
        for k in kg_t:
            if k.owner not in by_node:
                raise ControllerModelError(f"{k.key_group}: owner {k.owner!r} is not a node")
            if k.key_group.operator in on and k.owner not in on[k.key_group.operator]:
                raise ControllerModelError(
                    f"{k.key_group}: owner {k.owner!r} runs no task of its operator"
                )
            owned[k.owner].append(k.key_group)
        for kg, holders in alloc.entries:
            if kg not in by_kg:
                raise ControllerModelError(f"checkpoint for unknown key group {kg}")
            for h in holders:
                if h not in by_node:
                    raise ControllerModelError(f"{kg}: holder {h!r} is not a node")
                if kg.operator in on and h not in on[kg.operator]:
                    raise ControllerModelError(f"{kg}: holder {h!r} runs no task of its operator")
        object.__setattr__(self, "nodes", node_t)
        object.__setattr__(self, "key_groups", kg_t)
        object.__setattr__(self, "checkpoints", alloc)
        object.__setattr__(self, "now", float(now))
        object.__setattr__(self, "hosts", MappingProxyType(on))
        object.__setattr__(self, "_nodes", MappingProxyType(by_node))
        object.__setattr__(self, "_kgs", MappingProxyType(by_kg))
        object.__setattr__(
            self, "_owned", MappingProxyType({n: tuple(v) for n, v in owned.items()})
        )

    def node(self, node_id: NodeId) -> NodeInfo:
        """The node called ``node_id`` (``KeyError`` if unknown)."""
        return self._nodes[node_id]

    def key_group(self, kg: KeyGroupId) -> KeyGroupInfo:
        """The key group ``kg`` (``KeyError`` if unknown)."""
        return self._kgs[kg]

    def node_ids(self) -> tuple[NodeId, ...]:
        """Node ids, sorted."""
        return tuple(n.node_id for n in self.nodes)

    def targets(self, operator: str | None = None) -> tuple[NodeId, ...]:
        """The nodes a planner may give work (a key group, a checkpoint, a replica) or
        take it from, sorted: every node not ``down`` (and, given an ``operator``, that
        :meth:`runs` it). The one rule every planner reads, so a node whose task is lost
        or not yet recovered from a restart, which looks idle, is never filled (chaos
        scenario freeze-10)."""
        return tuple(
            n.node_id
            for n in self.nodes
            if not n.down and (operator is None or self.runs(operator, n.node_id))
        )

    def runs(self, operator: str, node_id: NodeId) -> bool:
        """Whether ``node_id`` runs a task of ``operator``, so that its key groups, their
        checkpoints and replicas can live there (``hosts``; down or not)."""
        on = self.hosts.get(operator)
        return on is None or node_id in on

    def owned_by(self, node_id: NodeId) -> tuple[KeyGroupId, ...]:
        """Key groups owned by ``node_id`` (``Gamma_n``), sorted."""
        return self._owned[node_id]

    def node_load(self, node_id: NodeId) -> float:
        """Background load plus the loads of the node's key groups."""
        node = self._nodes[node_id]
        return node.background_load + sum(self._kgs[k].load for k in self._owned[node_id])

    def utilization(self, node_id: NodeId) -> float:
        """Measured CPU if reported, else ``node_load / capacity``."""
        node = self._nodes[node_id]
        if node.cpu is not None:
            return node.cpu
        return self.node_load(node_id) / node.capacity

    def replace(
        self,
        *,
        nodes: Iterable[NodeInfo] | None = None,
        key_groups: Iterable[KeyGroupInfo] | None = None,
        checkpoints: Allocation | Mapping[KeyGroupId, Iterable[NodeId]] | None = None,
        now: float | None = None,
    ) -> ClusterView:
        """A copy with some fields replaced (``hosts`` kept)."""
        return ClusterView(
            nodes=self.nodes if nodes is None else nodes,
            key_groups=self.key_groups if key_groups is None else key_groups,
            checkpoints=self.checkpoints if checkpoints is None else checkpoints,
            now=self.now if now is None else now,
            hosts=self.hosts,
        )


# --------------------------------------------------------------------------- task reports
# What each keyed task reports every heartbeat (Madsen & Zhou 2015, section 4: the
# statistics the controller decides on). The ZooKeeper codec only encodes these.


class FieldChecks:
    """The checks of a record's fields, each raising ``error`` naming the field: one set
    for the model (``ControllerModelError``) and the ZooKeeper codec that decodes it
    (``ZnodeSchemaError``), so both accept exactly the same values."""

    def __init__(self, error: type[ValueError]) -> None:
        self.error = error

    def pairs(self, value: object, what: str, conv: Callable[[Any], Any]) -> tuple:
        """``(key, conv(value))`` pairs of a mapping or pair list, sorted; keys unique."""
        items = value.items() if isinstance(value, Mapping) else value
        out = tuple(sorted((k, conv(v)) for k, v in items))
        if len({k for k, _ in out}) != len(out):
            raise self.error(f"{what}: duplicate keys")
        return out

    def nonneg(self, x: object, what: str) -> float:
        """A finite number >= 0 (not a bool), as a float."""
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x < 0:
            raise self.error(f"{what} must be a finite number >= 0, got {x!r}")
        return float(x)

    def opt_nonneg(self, x: object, what: str) -> float | None:
        """None, or what :meth:`nonneg` accepts."""
        return None if x is None else self.nonneg(x, what)

    def integer(self, x: object, what: str, low: int = 0) -> int:
        """An int >= ``low`` (not a bool)."""
        if isinstance(x, bool) or not isinstance(x, int) or x < low:
            raise self.error(f"{what} must be an int >= {low}, got {x!r}")
        return x

    def string(self, x: object, what: str) -> str:
        """A non-empty string."""
        if not isinstance(x, str) or not x:
            raise self.error(f"{what} must be a non-empty string, got {x!r}")
        return x

    def opt_string(self, x: object, what: str) -> str | None:
        """None, or what :meth:`string` accepts."""
        return None if x is None else self.string(x, what)


_CHECKS = FieldChecks(ControllerModelError)
_pairs, _nonneg, _opt_nonneg = _CHECKS.pairs, _CHECKS.nonneg, _CHECKS.opt_nonneg
_int, _str, _opt_str = _CHECKS.integer, _CHECKS.string, _CHECKS.opt_string


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskIdentity:
    """Who a task is: Storm task id, operator (component), node (supervisor), process.

    ``zone`` is the node's fault zone (``None``: the node is its own zone).
    """

    task_id: int
    operator: str
    node_id: NodeId
    host: str
    pid: int
    zone: str | None = None

    def __post_init__(self) -> None:
        _int(self.task_id, "task_id")
        _str(self.operator, "operator")
        _str(self.node_id, "node_id")
        _str(self.host, "host")
        _int(self.pid, "pid", 1)
        _opt_str(self.zone, "zone")


@dataclass(frozen=True, kw_only=True, slots=True)
class DurableHealth:
    """What a keyed task reports of its durable writer (Kwon et al. 2008's checkpoints
    in a DFS) with each heartbeat: ``writes`` (checkpoints the store took), ``bytes``
    written, ``errors`` (failed attempts, each retried), ``coalesced`` (pending
    checkpoints merged because the queue was full), ``queue`` (checkpoints waiting
    now) since the task started; ``lag``: ``(key group, checkpoints, seconds)`` by
    which the durable copy trails the newest checkpoint, only for owned groups that
    trail (so a heartbeat stays small), sorted by key group."""

    writes: int = 0
    bytes: int = 0
    errors: int = 0
    coalesced: int = 0
    queue: int = 0
    lag: tuple[tuple[int, int, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("writes", "bytes", "errors", "coalesced", "queue"):
            _int(getattr(self, name), f"durable.{name}")
        rows = []
        for row in self.lag:
            if not isinstance(row, tuple | list) or len(row) != 3:
                raise ControllerModelError(f"durable.lag row {row!r} must be (group, n, s)")
            g, n, s = row
            rows.append(
                (
                    _int(g, "durable.lag group"),
                    _int(n, "durable.lag checkpoints"),
                    _nonneg(s, "durable.lag seconds"),
                )
            )
        rows.sort()
        if len({g for g, _, _ in rows}) != len(rows):
            raise ControllerModelError("durable.lag: duplicate key groups")
        object.__setattr__(self, "lag", tuple(rows))

    @classmethod
    def of(cls, health: Mapping[str, int], lag: Mapping[int, tuple[int, float]]) -> DurableHealth:
        """From a writer's ``health()`` counts and its lag per owned key group
        (``group -> (checkpoints, seconds)``); groups that do not trail are left out,
        seconds rounded to ms."""
        return cls(
            **{k: int(health.get(k, 0)) for k in ("writes", "bytes", "errors", "coalesced")},
            queue=int(health.get("queue", 0)),
            lag=tuple((g, n, round(s, 3)) for g, (n, s) in sorted(lag.items()) if n > 0),
        )

    def behind(self) -> dict[int, tuple[int, float]]:
        """``group -> (checkpoints, seconds)`` of the groups that trail."""
        return {g: (n, s) for g, n, s in self.lag}


@dataclass(frozen=True, kw_only=True, slots=True)
class Heartbeat:
    """What a task reports every heartbeat interval (its callback builds one).

    * ``key_groups``: indices of its operator's key groups it owns (``Gamma``);
    * ``checkpoints``: indices of its operator's key groups whose checkpoint it holds;
    * ``input_rates``: tuples/s per owned key group (index -> rate);
    * ``queue_length``: summed input-queue length; ``cpu``: share of its node's
      capacity its process uses; ``node_cpu``: the host's CPU share as measured by
      the task (includes foreign load); ``memory``: resident bytes;
    * ``latency``: mean seconds from the upstream's emit to applied (None when no
      tuple carried an emit stamp); ``service_time``: seconds of work per applied
      tuple (None when none was applied);
    * ``state_sizes``: bytes of state per owned key group (becomes checkpoint size);
    * ``buffered``: tuples in this task's output buffers per *downstream* key group
      (what a restore or CPA would replay);
    * ``epoch``: the newest routing epoch under which the task came to own one of
      ``key_groups`` (a move's target, a restore; never a direct source's borrowed one);
    * ``durable``: its durable writer's numbers (:class:`DurableHealth`); None with the
      durable tier off (and in heartbeats of tasks from before the field).

    Mappings are stored as sorted tuples of pairs (the value is hashable).
    """

    key_groups: tuple[int, ...] = ()
    checkpoints: tuple[int, ...] = ()
    input_rates: tuple[tuple[int, float], ...] = ()
    queue_length: float = 0.0
    cpu: float | None = None
    node_cpu: float | None = None
    memory: float | None = None
    latency: float | None = None
    service_time: float | None = None
    state_sizes: tuple[tuple[int, float], ...] = ()
    buffered: tuple[tuple[KeyGroupId, float], ...] = ()
    epoch: int = 0
    durable: DurableHealth | None = None

    def __post_init__(self) -> None:
        setv = object.__setattr__
        for name in ("key_groups", "checkpoints"):
            vals = tuple(sorted(_int(i, name) for i in getattr(self, name)))
            if len(set(vals)) != len(vals):
                raise ControllerModelError(f"{name}: duplicate key groups")
            setv(self, name, vals)
        for name in ("input_rates", "state_sizes"):
            pairs = _pairs(getattr(self, name), name, lambda v, n=name: _nonneg(v, n))
            for k, _ in pairs:
                _int(k, f"{name} key")
            setv(self, name, pairs)
        buffered = _pairs(self.buffered, "buffered", lambda v: _nonneg(v, "buffered"))
        for k, _ in buffered:
            if not isinstance(k, KeyGroupId):
                raise ControllerModelError(f"buffered keys must be KeyGroupId, got {k!r}")
        setv(self, "buffered", buffered)
        setv(self, "queue_length", _nonneg(self.queue_length, "queue_length"))
        for name in ("cpu", "node_cpu", "memory", "latency", "service_time"):
            setv(self, name, _opt_nonneg(getattr(self, name), name))
        _int(self.epoch, "epoch")
        if self.durable is not None and not isinstance(self.durable, DurableHealth):
            raise ControllerModelError(f"durable must be a DurableHealth, got {self.durable!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskRecord:
    """The data of ``tasks/<task-id>``: identity, latest heartbeat, its sequence number
    and the wall-clock time (s) the task published it."""

    identity: TaskIdentity
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    seq: int = 0
    time: float = 0.0

    def __post_init__(self) -> None:
        _int(self.seq, "seq")
        _nonneg(self.time, "time")

    @property
    def task_id(self) -> int:
        return self.identity.task_id

    @property
    def node_id(self) -> NodeId:
        return self.identity.node_id


def node_name(index: int) -> NodeId:
    """The logical node hosting the ``index``-th task of each keyed operator."""
    return f"node{index}"


#: The fewest active nodes a topology runs on: each key group's checkpoint holder is a
#: node other than its owner's (Madsen & Zhou 2015, section 4), so on one node there is
#: no holder and upstream buffers are never trimmed. Scale-in, drains and adaptation stop
#: here (a drain from 2 nodes to 1 once planned its moves and then never finished).
MIN_ACTIVE_NODES = 2


@dataclass(frozen=True, kw_only=True)
class NodeState:
    """Which logical nodes the scheduler runs on live nodes (``active``) and which of
    those are being emptied (``draining``); the rest are idle."""

    active: frozenset[NodeId]
    draining: frozenset[NodeId] = frozenset()


@dataclass(frozen=True, kw_only=True, slots=True)
class MigrationEnded:
    """A migration (or restore) both of whose ends reported done, as the controller
    publishes it: ``pause`` is the one its target measured (None if it reported none),
    ``completion`` the time from the order to both ends done, ``by`` who ordered it
    (``controller``: the loop's own moves and restores; ``request``: any other, i.e.
    ``elastorm migrate`` and the dashboard's form)."""

    operator: str
    key_group: int
    epoch: int
    protocol: Protocol
    source: int | None
    target: int
    at: float
    completion: float
    pause: float | None
    by: str
    request: str | None = None  # the operator request it carried out, if any

    def to_json(self) -> dict[str, Any]:
        """The published form (``controller/status/<operator>``'s ``ended`` list)."""
        return {
            "key_group": self.key_group,
            "epoch": self.epoch,
            "protocol": self.protocol.value,
            "source": self.source,
            "target": self.target,
            "at": round(self.at, 3),
            "completion": round(self.completion, 4),
            "pause": None if self.pause is None else round(self.pause, 4),
            "by": self.by,
        }
