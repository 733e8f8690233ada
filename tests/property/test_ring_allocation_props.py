"""Hypothesis properties of Kumbhare et al. 2015's consistent-hashing peer ring.

``ring_allocation`` puts replica m of a key group's checkpoint on the m-th eligible
node clockwise after its owner. Checked here: a holder is never the owner (nor in
its zone, nor down); the result depends on the cluster only, never on the order it
was listed in; and consistent hashing's monotonicity: a node joining or leaving
moves exactly the checkpoints the ring says, nothing else.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from property_scale import examples

from elastorm.controller.allocation import AllocationSpec, peer_ring, ring_allocation
from elastorm.controller.model import Allocation, ClusterView, KeyGroupId, KeyGroupInfo, NodeInfo

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=6)


@st.composite
def clusters(draw, max_nodes: int = 9, max_kgs: int = 12) -> AllocationSpec:
    """A random view: node ids, zones (or none), down nodes, owners, 1-2 replicas."""
    ids = draw(st.lists(NAMES, min_size=2, max_size=max_nodes, unique=True))
    n_zones = draw(st.integers(0, len(ids)))  # 0: every node its own zone
    nodes = [
        NodeInfo(
            node_id=n,
            zone=(f"z{draw(st.integers(0, n_zones - 1))}" if n_zones else None),
            down=i > 0 and draw(st.integers(0, 4)) == 0,  # about one in five
        )
        for i, n in enumerate(ids)
    ]
    owners = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=max_kgs))
    kgs = [
        KeyGroupInfo(key_group=KeyGroupId(f"op{k % 2}", k), owner=o, load=1.0)
        for k, o in enumerate(owners)
    ]
    return AllocationSpec(
        view=ClusterView(nodes=nodes, key_groups=kgs), replicas=draw(st.integers(1, 2))
    )


def eligible(view: ClusterView, owner: str, node: str) -> bool:
    """Constraint 1 + zone rule + not down, written out from the definitions."""
    a, b = view.node(owner), view.node(node)
    return not b.down and a.fault_zone != b.fault_zone


def feasible(spec: AllocationSpec) -> bool:
    view = spec.view
    return all(
        sum(eligible(view, k.owner, n) for n in view.node_ids()) >= spec.replicas
        for k in view.key_groups
    )


def walk(view: ClusterView, owner: str) -> list[str]:
    """The eligible nodes in clockwise order from ``owner`` (the reference walk)."""
    ring = peer_ring(view.node_ids())
    i = ring.index(owner)
    return [
        n
        for n in (ring[(i + s) % len(ring)] for s in range(1, len(ring)))
        if eligible(view, owner, n)
    ]


def with_nodes(spec: AllocationSpec, nodes: list[NodeInfo]) -> AllocationSpec:
    view = ClusterView(nodes=nodes, key_groups=spec.view.key_groups)
    return AllocationSpec(view=view, replicas=spec.replicas)


@settings(max_examples=examples(150), deadline=None)
@given(clusters())
def test_holders_are_the_owners_eligible_successors_never_the_owner(spec):
    assume(feasible(spec))
    alloc = ring_allocation(spec)
    for k in spec.view.key_groups:
        holders = alloc.holders(k.key_group)
        assert k.owner not in holders
        assert len(set(holders)) == len(holders) == spec.replicas
        assert all(eligible(spec.view, k.owner, n) for n in holders)
        assert list(holders) == walk(spec.view, k.owner)[: spec.replicas]


@settings(max_examples=examples(100), deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_listing_order(spec, rnd):
    assume(feasible(spec))
    first = ring_allocation(spec)
    nodes, kgs = list(spec.view.nodes), list(spec.view.key_groups)
    rnd.shuffle(nodes)
    rnd.shuffle(kgs)
    shuffled = AllocationSpec(view=ClusterView(nodes=nodes, key_groups=kgs), replicas=spec.replicas)
    assert ring_allocation(shuffled).as_dict() == first.as_dict()
    assert ring_allocation(spec).as_dict() == first.as_dict()
    # Its own output is a fixpoint: kept as is, nothing moves.
    assert ring_allocation(spec, keep=first).as_dict() == first.as_dict()


@settings(max_examples=examples(150), deadline=None)
@given(clusters(), NAMES, st.data())
def test_a_joining_node_moves_only_what_the_ring_says(spec, joiner, data):
    """A node joins (owning nothing yet): a key group's holders change iff the joiner
    is eligible and lies on the walk from its owner before its last old holder; then
    the joiner takes exactly that last holder's place. Leaving again restores the old
    placement exactly."""
    assume(joiner not in spec.view.node_ids() and feasible(spec))
    zones = sorted({n.zone for n in spec.view.nodes if n.zone is not None})
    zone = data.draw(st.sampled_from(zones)) if zones else None
    before = ring_allocation(spec)
    joined = with_nodes(spec, [*spec.view.nodes, NodeInfo(node_id=joiner, zone=zone)])
    after = ring_allocation(joined)
    moved = 0
    for k in spec.view.key_groups:
        old, new = before.holders(k.key_group), after.holders(k.key_group)
        path = walk(joined.view, k.owner)
        meets = joiner in path and path.index(joiner) < path.index(old[-1])
        if meets:
            assert set(new) == (set(old) - {old[-1]}) | {joiner}
            moved += 1
        else:
            assert new == old
    if not zones and not any(n.down for n in spec.view.nodes) and spec.replicas == 1:
        # The plain ring: exactly the groups of the joiner's counter-clockwise neighbour.
        ring = peer_ring(joined.view.node_ids())
        pred = ring[ring.index(joiner) - 1]
        assert moved == len(spec.view.owned_by(pred))
    assert ring_allocation(spec).as_dict() == before.as_dict()


@settings(max_examples=examples(150), deadline=None)
@given(clusters(), st.data())
def test_a_node_going_down_hands_on_only_its_own_checkpoints(spec, data):
    """A node goes down: key groups it held no checkpoint of keep their holders; each
    one it held swaps it for the next eligible node after its last old holder."""
    assume(feasible(spec))
    before = ring_allocation(spec)
    gone = data.draw(st.sampled_from([n.node_id for n in spec.view.nodes if not n.down]))
    nodes = [
        NodeInfo(node_id=n.node_id, zone=n.zone, down=n.down or n.node_id == gone)
        for n in spec.view.nodes
    ]
    after_spec = with_nodes(spec, nodes)
    assume(feasible(after_spec))
    after = ring_allocation(after_spec)
    for k in spec.view.key_groups:
        old, new = before.holders(k.key_group), after.holders(k.key_group)
        if gone not in old:
            assert new == old
        else:
            path = walk(spec.view, k.owner)  # before: ``gone`` still on it
            nxt = next(n for n in path[path.index(old[-1]) + 1 :] if n != gone)
            assert set(new) == (set(old) - {gone}) | {nxt}


@settings(max_examples=examples(100), deadline=None)
@given(clusters())
def test_a_node_leaving_the_ring_is_the_same_as_going_down(spec):
    """Removing a node that owns nothing from the view places every checkpoint as
    marking it down does (the paper's leave = the next node on the ring takes over)."""
    idle = [n for n in spec.view.node_ids() if not spec.view.owned_by(n)]
    assume(idle)
    gone = idle[0]
    down = [
        NodeInfo(node_id=n.node_id, zone=n.zone, down=n.down or n.node_id == gone)
        for n in spec.view.nodes
    ]
    left = [n for n in spec.view.nodes if n.node_id != gone]
    assume(feasible(with_nodes(spec, down)))
    assert (
        ring_allocation(with_nodes(spec, left)).as_dict()
        == ring_allocation(with_nodes(spec, down)).as_dict()
    )


def test_keep_holds_checkpoints_in_place_and_fills_the_rest_from_the_ring():
    """``keep`` (recovery's surviving checkpoints) stays; missing replicas follow the walk."""
    nodes = [NodeInfo(node_id=f"n{i}") for i in range(5)]
    kg = KeyGroupId("op", 0)
    view = ClusterView(nodes=nodes, key_groups=[KeyGroupInfo(key_group=kg, owner="n0")])
    spec = AllocationSpec(view=view, replicas=2)
    path = walk(view, "n0")
    stay = next(n for n in path[2:])  # not one the ring would pick
    alloc = ring_allocation(spec, keep=Allocation({kg: (stay,)}))
    assert alloc.holders(kg) == (stay, path[0])
