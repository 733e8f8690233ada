"""Kumbhare et al. 2015's peer ring as a checkpoint allocation, and the loop applying it.

The properties (monotonicity under join and leave, never on the owner) are in
``tests/property/test_ring_allocation_props.py``; here: the token is pinned (the same
in every process), and ``strategy="ring"`` goes through the loop's one allocation path
and recovery's re-placement.
"""

from __future__ import annotations

from test_controller_loop import rec

from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.controller.allocation import (
    AllocationSpec,
    baseline_allocation,
    peer_ring,
    ring_allocation,
    ring_token,
)
from elastorm.controller.loop import ControllerLoop, Placement
from elastorm.controller.model import ClusterView, KeyGroupId, KeyGroupInfo, NodeInfo
from elastorm.core.actions import CheckpointStored
from elastorm.core.control import MigrationController
from elastorm.core.routing import RoutingTable

NODES = tuple(f"node{i}" for i in range(6))
TASKS = {n: 10 + i for i, n in enumerate(NODES)}
G = 12


def test_the_token_is_blake2b_and_the_same_in_every_process() -> None:
    # Pinned: a salted hash (Python's hash()) or another function would change it.
    assert ring_token("node0") == 0x7A6286D75288320A
    assert peer_ring(["b", "a", "a"]) == tuple(sorted({"a", "b"}, key=ring_token))


def test_the_ring_is_the_baseline_walk_in_token_order() -> None:
    """Same successor walk as Madsen & Zhou's baseline, only the ring order differs:
    with ids renamed so id order equals token order, the two agree."""
    ring = peer_ring(NODES)
    rename = {n: f"r{i}" for i, n in enumerate(ring)}
    kgs = [KeyGroupInfo(key_group=KeyGroupId("op", g), owner=NODES[g % 6]) for g in range(G)]

    def spec(names: dict[str, str]) -> AllocationSpec:
        view = ClusterView(
            nodes=[NodeInfo(node_id=names[n], zone=f"z{int(n[-1]) % 3}") for n in NODES],
            key_groups=[KeyGroupInfo(key_group=k.key_group, owner=names[k.owner]) for k in kgs],
        )
        return AllocationSpec(view=view, replicas=2)

    by_ring = ring_allocation(spec({n: n for n in NODES}))
    by_base = baseline_allocation(spec(rename))
    for k in kgs:
        assert tuple(rename[n] for n in by_ring.holders(k.key_group)) == by_base.holders(
            k.key_group
        )


def successor(owner: str, down: frozenset[str] = frozenset()) -> str:
    ring = peer_ring(NODES)
    i = ring.index(owner)
    return next(n for n in (*ring[i + 1 :], *ring[:i]) if n not in down)


def ring_loop() -> ControllerLoop:
    control = MigrationController(
        num_key_groups=G,
        tasks=TASKS.values(),
        emitters=[1],
        routing=RoutingTable.round_robin(G, TASKS.values()),
    )
    return ControllerLoop(
        controls={"op": control},
        placement=Placement({"op": TASKS}),
        config=TopologyConfig(
            controller=ControllerConfig(
                strategy="ring", warmup_secs=2, settle_secs=0, window=4, reallocate_secs=5
            )
        ),
        started_at=0.0,
    )


def heartbeats(loop: ControllerLoop, dead: frozenset[int] = frozenset()) -> list:
    control = loop.controls["op"]
    return [
        rec(
            task,
            "op",
            node,
            owned=[g for g in range(G) if control.owner(g) == task],
            rates={g: 10.0 for g in range(G) if control.owner(g) == task},
            cpu=0.1,
        )
        for node, task in TASKS.items()
        if task not in dead
    ]


def holders_by_node(loop: ControllerLoop) -> dict[int, tuple[str, str]]:
    """Key group -> (owner node, holder node)."""
    control, place = loop.controls["op"], loop.placement
    return {
        g: (place.node_of(control.owner(g)), place.node_of(control.holders[g])) for g in range(G)
    }


def test_the_loop_places_every_checkpoint_on_its_owners_ring_successor() -> None:
    loop = ring_loop()
    allocated = [loop.round(heartbeats(loop), float(t)).allocated for t in range(4)]
    assert allocated.index(True) == 2  # the first round past the warm-up
    for owner, holder in holders_by_node(loop).values():
        assert holder == successor(owner) != owner


def test_recovery_restores_on_the_successor_and_re_places_along_the_ring() -> None:
    """A lost node's groups come back on its ring successor (the holder), and their new
    checkpoints go to the next live node after that one: where the ring says, not
    where Algorithm 3 (the other strategies' re-placement) would put them."""
    loop = ring_loop()
    for t in range(4):
        loop.round(heartbeats(loop), float(t))
    control = loop.controls["op"]
    for g in range(G):  # every holder has the group's newest checkpoint
        stored = CheckpointStored(key_group=g, checkpoint=(0, 1))
        control.on_checkpoint_stored(control.holders[g], stored)
    lost = "node2"
    before = holders_by_node(loop)
    mine = [g for g, (owner, _) in before.items() if owner == lost]
    assert mine
    recovery = loop.recover("op", [TASKS[lost]], 4.0, rejoined=False)
    assert {m.target for m in recovery.plan.restores} == {successor(lost)}
    after = holders_by_node(loop)
    gone = frozenset({lost})
    for g in range(G):
        owner, holder = after[g]
        assert holder == successor(owner, gone), (g, owner, holder)
        if g not in mine and before[g][1] != lost:
            assert after[g] == before[g]  # untouched by the loss


def test_the_ring_is_re_applied_every_reallocate_secs() -> None:
    """A checkpoint moved off the ring (as a migration leaves it on the old owner)
    goes back to the owner's successor at the next re-application, not before."""
    loop = ring_loop()
    for t in range(4):
        loop.round(heartbeats(loop), float(t))
    control = loop.controls["op"]
    owner = loop.placement.node_of(control.owner(0))
    off = next(n for n in NODES if n not in (owner, successor(owner)))
    assert control.set_holder(0, TASKS[off])
    for t in range(4, 7):  # allocated at t=2, reallocate_secs=5: next at t=7
        assert not loop.round(heartbeats(loop), float(t)).allocated
    assert holders_by_node(loop)[0] == (owner, off)
    assert loop.round(heartbeats(loop), 7.0).allocated
    assert holders_by_node(loop)[0] == (owner, successor(owner))
