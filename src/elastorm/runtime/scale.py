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

from elastorm.controller.scaling import (
    NodeSet,
    ScaleChange,
    ScalingError,
    active_names,
    drain,
    logical_node,
    scale_to,
)
from elastorm.runtime.errors import UserError
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
            key = name or f"{logical_node(index)} (idle)"
            owned.setdefault(key, {}).setdefault(op, 0)
            owned[key][op] += 1
    rescale = read_rescale(client, layout)
    return Progress(
        binding=binding.nodes,
        owned=owned,
        draining=nodes.draining,
        moving=moving,
        joining=tuple(rescale.get("joining", ())),
        pending=int(rescale.get("pending", 0)),
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
    live = provisioner.live()
    need = max(0, nodes - len(active_names(current, binding)))
    try:
        return scale_to(
            nodes, nodes=current, binding=binding, live=live, spare=provisioner.spare(need)
        )
    except ScalingError as exc:
        raise UserError(str(exc)) from None


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


def request_drain(client: KazooClient, layout: ZnodeLayout, name: str) -> NodeSet:
    """Mark ``name`` draining (``UserError`` naming why it cannot be)."""
    binding = _checked(client, layout)
    try:
        return update_node_set(client, layout, lambda ns: drain(name, nodes=ns, binding=binding))
    except ScalingError as exc:
        raise UserError(str(exc)) from None


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
