"""Scale a running elastic topology: ``elastorm scale --nodes N`` and ``elastorm drain
NODE`` (docs/scaling.md).

Scale-out: the provisioner starts nodes, the node set wants them, the elastic
scheduler binds them (their idle tasks move onto them), and the controller moves key
groups onto them with CPAL. Scale-in: the node set marks nodes draining, the
controller moves every key group and checkpoint off them and releases them, the
scheduler moves their (now idle) tasks away, and the provisioner stops them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kazoo.client import KazooClient

from elastorm.controller.model import node_name
from elastorm.controller.scaling import (
    NodeSet,
    ScaleChange,
    ScalingError,
    active_names,
    check_target,
    drain,
    scale_to,
)
from elastorm.errors import UserError, as_user_error
from elastorm.runtime.provision import NodeProvisioner
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import controller_alive, read_status
from elastorm.zk.scaling import read_binding, read_node_set, read_rescale, update_node_set


@dataclass(frozen=True, kw_only=True)
class Progress:
    """Where a rescale stands: nodes bound (by logical node), how many key groups each
    active node owns per operator, and the nodes still draining."""

    binding: tuple[str | None, ...]
    owned: dict[str, dict[str, int]]  # node name -> operator -> key groups owned
    draining: tuple[str, ...]
    moving: int
    joining: tuple[str, ...] = ()  # nodes the controller still gives key groups to
    pending: int = 0  # key groups the controller still has to move
    want: int | None = None  # nodes the adaptation manager wants (scaling.scale_hint)

    @property
    def active(self) -> int:
        """Bound nodes that are not draining."""
        return sum(1 for n in self.binding if n is not None and n not in self.draining)


def _checked(client: KazooClient, layout: ZnodeLayout):
    if not controller_alive(client, layout):
        raise UserError(
            f"the controller of {layout.topology} is not running "
            "(topology killed, or not an elastic topology)"
        )
    binding = read_binding(client, layout)
    if not binding.bound:
        raise UserError(
            f"the elastic scheduler has not placed {layout.topology}: does Nimbus run "
            "elastorm.jvm.ElasticScheduler (storm.scheduler)? `elastorm cluster up` sets it"
        )
    return binding


def progress(client: KazooClient, layout: ZnodeLayout) -> Progress:
    """Read the binding, the node set and the controller's routing (one snapshot)."""
    binding = read_binding(client, layout)
    nodes = read_node_set(client, layout)
    owned: dict[str, dict[str, int]] = {}
    moving = 0
    status_dir = f"{layout.controller}/status"
    operators = sorted(client.get_children(status_dir)) if client.exists(status_dir) else []
    for op in operators:
        status = read_status(client, layout, op)
        if status is None:
            continue
        tasks = sorted(status["tasks"])
        moving += len(status["moving"])
        for owner in status["owners"]:
            index = tasks.index(owner)
            name = binding.nodes[index] if index < len(binding.nodes) else None
            key = name or f"{node_name(index)} (idle)"
            owned.setdefault(key, {}).setdefault(op, 0)
            owned[key][op] += 1
    rescale = read_rescale(client, layout)
    return Progress(
        binding=binding.nodes,
        owned=owned,
        draining=nodes.draining,
        moving=moving,
        joining=rescale.joining,
        pending=rescale.pending,
        want=rescale.want,
    )


def settled(p: Progress, active: set[str]) -> bool:
    """Every active node owns key groups, no other node does, none drains or joins,
    nothing moves and the controller has nothing left to move."""
    owners = set(p.owned)
    quiet = not p.draining and not p.joining and p.moving == 0 and p.pending == 0
    return quiet and owners == active


def plan_scale(
    client: KazooClient, layout: ZnodeLayout, nodes: int, provisioner: NodeProvisioner
) -> ScaleChange:
    """The change ``--nodes`` asks for (nothing started or written yet)."""
    binding = _checked(client, layout)
    current = read_node_set(client, layout)
    with as_user_error(ScalingError):
        check_target(nodes, binding)  # before asking the provisioner for spare nodes
        live = provisioner.live()
        need = max(0, nodes - len(active_names(current, binding)))
        return scale_to(
            nodes, nodes=current, binding=binding, live=live, spare=provisioner.spare(need)
        )


def apply_scale(
    client: KazooClient,
    layout: ZnodeLayout,
    change: ScaleChange,
    provisioner: NodeProvisioner,
    timeout: float,
) -> None:
    """Start the new nodes, then write the node set (the scheduler and the controller
    take it from there)."""
    provisioner.start(change.start, timeout)
    update_node_set(client, layout, lambda _old: change.nodes)


@dataclass(frozen=True, kw_only=True)
class Carried:
    """A scale change carried out: when the node set was written, when the topology
    settled (wall clock, s) and how it stood then."""

    applied_at: float
    settled_at: float
    settled: Progress


def carry_out(
    client: KazooClient,
    layout: ZnodeLayout,
    change: ScaleChange,
    provisioner: NodeProvisioner,
    timeout: float,
) -> Carried:
    """Apply ``change``, wait until the wanted nodes own the key groups and nothing drains
    or moves, then stop the drained nodes (``elastorm scale``, ``autoscale``, the
    synthetic driver's scale steps)."""
    apply_scale(client, layout, change, provisioner, timeout)
    applied = time.time()
    active = set(change.nodes.wanted or ()) - set(change.nodes.draining)
    settled = wait_settled(client, layout, active, timeout)
    at = time.time()
    for name in change.drain:
        provisioner.stop(name)
    return Carried(applied_at=applied, settled_at=at, settled=settled)


def request_drain(client: KazooClient, layout: ZnodeLayout, name: str) -> NodeSet:
    """Mark ``name`` draining (``UserError`` naming why it cannot be)."""
    binding = _checked(client, layout)
    with as_user_error(ScalingError):
        return update_node_set(client, layout, lambda ns: drain(name, nodes=ns, binding=binding))


def finish_drain(
    client: KazooClient,
    layout: ZnodeLayout,
    name: str,
    after: NodeSet,
    provisioner: NodeProvisioner,
    timeout: float,
    *,
    keep: bool,
) -> Progress:
    """After :func:`request_drain` wrote ``after``: wait until the controller has emptied
    and released ``name``, then stop it unless ``keep`` (``elastorm drain``, the
    dashboard's drain action)."""
    active = set(after.wanted or ()) - set(after.draining)
    p = wait_settled(client, layout, active, timeout)
    if not keep:
        provisioner.stop(name)
    return p


def wait_settled(
    client: KazooClient, layout: ZnodeLayout, active: set[str], timeout: float
) -> Progress:
    """Wait until exactly ``active`` own key groups and nothing drains or moves."""
    deadline = time.monotonic() + timeout
    while True:
        p = progress(client, layout)
        if settled(p, active):
            return p
        if time.monotonic() > deadline:
            raise UserError(
                f"not settled after {timeout:.0f} s: key groups per node {p.owned}, "
                f"draining {list(p.draining)}, joining {list(p.joining)}, {p.moving} "
                f"migrations in flight, {p.pending} key groups still to move"
            )
        time.sleep(0.5)


@dataclass
class Autoscaler:
    """Acts on the controller's node-count hint with hysteresis: a hint must stay the
    same for ``hold`` s, and ``cooldown`` s must have passed since the last change,
    before the topology is scaled to it (clamped to ``low``..``high``); nothing while a
    rescale is under way. Pure: :meth:`decide` takes the progress and the time."""

    low: int
    high: int
    hold: float = 30.0
    cooldown: float = 60.0
    _hint: int | None = None
    _since: float = 0.0
    _last_change: float = float("-inf")

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise UserError(f"need 1 <= --min ({self.low}) <= --max ({self.high})")

    def decide(self, p: Progress, now: float) -> int | None:
        """The node count to scale to now, or None."""
        busy = p.draining or p.joining or p.moving or p.pending
        if p.want != self._hint:
            self._hint, self._since = p.want, now
        if busy or p.want is None or now - self._since < self.hold:
            return None
        if now - self._last_change < self.cooldown:
            return None
        target = min(self.high, max(self.low, p.want))
        if target == p.active:
            return None
        self._last_change = now
        return target
