"""Checkpoint allocation: baseline, even, Algorithm 3, score, theta, exhaustive."""

import math

import numpy as np
import pytest
from controller_oracle import checkpoint_loads, dense, pair

from elastorm.controller.allocation import (
    AllocationSpec,
    InfeasibleAllocationError,
    allocation_score,
    baseline_allocation,
    constraint_violations,
    correlated_allocation,
    even_allocation,
    moves_between,
    optimal_allocation,
    reoptimize,
)
from elastorm.controller.correlation import CorrelationMatrix
from elastorm.controller.model import Allocation, ClusterView, KeyGroupId, KeyGroupInfo, NodeInfo
from elastorm.controller.synthetic import synthetic_cluster


def kg(op, i):
    return KeyGroupId(op, i)


def negative_scenario():
    """Madsen & Zhou 2015, section 7.2 layout: op1 on n1, op2 on n2, rho(op1, op2) = -1."""
    nodes = [NodeInfo(node_id=n) for n in ("n0", "n1", "n2")]
    groups = [KeyGroupInfo(key_group=kg("op1", i), owner="n1", load=1.0) for i in range(10)]
    groups += [KeyGroupInfo(key_group=kg("op2", i), owner="n2", load=1.0) for i in range(10)]
    ids = [g.key_group for g in groups]
    sign = np.array([1.0] * 10 + [-1.0] * 10)
    rho = CorrelationMatrix(ids, np.outer(sign, sign))
    return ClusterView(nodes=nodes, key_groups=groups), rho


def test_algorithm3_places_negatively_correlated_checkpoints_across():
    view, rho = negative_scenario()
    alloc = correlated_allocation(AllocationSpec(view=view, correlation=rho))
    for i in range(10):
        assert alloc.holders(kg("op1", i)) == ("n2",)
        assert alloc.holders(kg("op2", i)) == ("n1",)


def test_even_spreads_op2_half_on_each_non_owner():
    view, rho = negative_scenario()
    alloc = even_allocation(AllocationSpec(view=view, correlation=rho), seed=3)
    counts = {n: len([kg for kg, ns in alloc.entries if n in ns]) for n in view.node_ids()}
    assert max(counts.values()) <= math.ceil(20 / 3)
    assert constraint_violations(AllocationSpec(view=view), alloc) == ()


def test_baseline_is_next_node_in_ring_and_skips_own_zone():
    nodes = [NodeInfo(node_id="a", zone="z1"), NodeInfo(node_id="b", zone="z1")]
    nodes += [NodeInfo(node_id="c", zone="z2")]
    groups = [KeyGroupInfo(key_group=kg("op", 0), owner="a")]
    groups += [KeyGroupInfo(key_group=kg("op", 1), owner="c")]
    spec = AllocationSpec(view=ClusterView(nodes=nodes, key_groups=groups))
    alloc = baseline_allocation(spec)
    assert alloc.holders(kg("op", 0)) == ("c",)  # b is in a's zone
    assert alloc.holders(kg("op", 1)) == ("a",)  # ring wraps


def test_ties_go_to_least_checkpoint_load():
    # No correlation: every eligible node ties, so Algorithm 3 spreads by cp load.
    c = synthetic_cluster(5, nodes=6, key_groups=60)
    alloc = correlated_allocation(AllocationSpec(view=c.view))
    loads = checkpoint_loads(AllocationSpec(view=c.view), alloc)
    biggest = max(k.load for k in c.view.key_groups)
    assert max(loads.values()) - min(loads.values()) <= biggest + 1e-9


def test_zone_rule_and_replicas_hold_for_all_policies():
    c = synthetic_cluster(2, nodes=9, key_groups=40, zones=3)
    spec = AllocationSpec(view=c.view, correlation=c.correlation, replicas=2, epsilon=0.5)
    for alloc in (
        baseline_allocation(spec),
        even_allocation(spec),
        correlated_allocation(spec),
    ):
        bad = [v for v in constraint_violations(spec, alloc) if "(c2)" not in v]
        assert bad == []
        for k in c.view.key_groups:
            zones = {c.view.node(h).fault_zone for h in alloc.holders(k.key_group)}
            assert c.view.node(k.owner).fault_zone not in zones


def test_constraint2_respected_when_it_has_room():
    c = synthetic_cluster(4, nodes=8, key_groups=64, anti_pairs=1)
    spec = AllocationSpec(view=c.view, correlation=c.correlation, epsilon=0.3)
    alloc = correlated_allocation(spec)
    assert constraint_violations(spec, alloc) == ()
    free = correlated_allocation(AllocationSpec(view=c.view, correlation=c.correlation))
    # The cap costs score: unconstrained is at least as good.
    assert allocation_score(spec, free) <= allocation_score(spec, alloc) + 1e-9


def test_infeasible_when_every_node_shares_the_owner_zone():
    nodes = [NodeInfo(node_id=n, zone="z") for n in ("a", "b")]
    view = ClusterView(nodes=nodes, key_groups=[KeyGroupInfo(key_group=kg("o", 0), owner="a")])
    for policy in (baseline_allocation, even_allocation, correlated_allocation):
        with pytest.raises(InfeasibleAllocationError):
            policy(AllocationSpec(view=view))


def test_score_matches_definition():
    c = synthetic_cluster(7, nodes=5, key_groups=12, operators=3)
    rho = dense(c.correlation)
    spec = AllocationSpec(view=c.view, correlation=rho)
    alloc = even_allocation(spec, seed=1)
    expected = 0.0
    for k in c.view.key_groups:
        for h in alloc.holders(k.key_group):
            expected += k.load * sum(pair(rho, k.key_group, g) for g in c.view.owned_by(h))
    assert allocation_score(spec, alloc) == pytest.approx(expected)
    # Factors and the dense matrix give the same score.
    spec_f = AllocationSpec(view=c.view, correlation=c.correlation)
    assert allocation_score(spec_f, alloc) == pytest.approx(expected)


def test_forbidden_checkpoint_scores_infinite():
    view, rho = negative_scenario()
    bad = Allocation({g.key_group: (g.owner,) for g in view.key_groups})
    assert allocation_score(AllocationSpec(view=view, correlation=rho), bad) == math.inf


def test_algorithm3_equals_exhaustive_optimum_without_constraint2():
    for seed in range(5):
        c = synthetic_cluster(seed, nodes=4, key_groups=6, operators=2, anti_pairs=1)
        spec = AllocationSpec(view=c.view, correlation=c.correlation)
        opt = optimal_allocation(spec)
        assert opt is not None
        alg = correlated_allocation(spec)
        assert allocation_score(spec, alg) == pytest.approx(allocation_score(spec, opt))


def test_reoptimize_respects_theta_and_repairs_forbidden():
    c = synthetic_cluster(11, nodes=6, key_groups=30, operators=2, anti_pairs=1)
    spec = AllocationSpec(view=c.view, correlation=c.correlation)
    current = even_allocation(spec, seed=4)
    gap = allocation_score(spec, current) - allocation_score(spec, correlated_allocation(spec))
    assert gap > 0
    same, moves = reoptimize(spec, current, theta=gap + 1.0)
    assert same == current and moves == ()
    half, moves = reoptimize(spec, current, theta=gap / 2, lazy=True)
    ref = allocation_score(spec, correlated_allocation(spec))
    assert allocation_score(spec, half) - ref <= gap / 2 + 1e-9
    assert 0 < len(moves) and all(m.lazy for m in moves)
    full, _ = reoptimize(spec, current, theta=0.0)
    assert allocation_score(spec, full) == pytest.approx(ref)
    # A checkpoint in its owner's zone is moved whatever theta says.
    k0 = c.view.key_groups[0]
    broken = Allocation({**current.as_dict(), k0.key_group: (k0.owner,)})
    fixed, moves = reoptimize(spec, broken, theta=1e9)
    assert fixed.holders(k0.key_group) != (k0.owner,)
    assert [m.key_group for m in moves] == [k0.key_group]
    assert constraint_violations(spec, fixed) == ()


def test_reoptimize_moves_each_checkpoint_once_straight_to_its_place():
    """The controller applies ``reoptimize``'s moves as they are: applied in order to
    the current holders they give the returned allocation, and a checkpoint that is
    repaired (off its owner's node) and then improved moves once, not twice (each
    move costs the owner a full checkpoint to the new holder). With constraint 2
    (``epsilon``) the repair's node and the reference's differ now and then: in 4 of
    these 40 clusters."""
    for seed in range(40):
        rng = np.random.default_rng(seed)
        c = synthetic_cluster(seed, nodes=3 + seed % 2, key_groups=12)
        spec = AllocationSpec(view=c.view, correlation=c.correlation, epsilon=0.5)
        nodes = c.view.node_ids()
        current = Allocation(
            {k.key_group: (nodes[rng.integers(len(nodes))],) for k in c.view.key_groups}
        )
        final, moves = reoptimize(spec, current, theta=0.0)
        assert len({m.key_group for m in moves}) == len(moves), seed  # once each
        holders = dict(current.entries)
        for m in moves:
            assert holders[m.key_group] == (m.source,), (seed, m)  # from where it is
            holders[m.key_group] = (m.target,)
        assert holders == dict(final.entries), seed


def test_reoptimize_rejects_negative_theta():
    view, rho = negative_scenario()
    spec = AllocationSpec(view=view, correlation=rho)
    with pytest.raises(ValueError):
        reoptimize(spec, correlated_allocation(spec), theta=-1)


def test_keep_leaves_existing_checkpoints_in_place():
    c = synthetic_cluster(3, nodes=5, key_groups=20)
    spec = AllocationSpec(view=c.view, correlation=c.correlation)
    full = even_allocation(spec, seed=9)
    partial = Allocation(dict(list(full.as_dict().items())[:10]))
    alloc = correlated_allocation(spec, keep=partial)
    for kgid, nodes in partial.entries:
        assert alloc.holders(kgid) == nodes
    assert len(alloc) == 20


def test_moves_between_lists_only_changes():
    a = Allocation({kg("o", 0): ("x",), kg("o", 1): ("y",)})
    b = Allocation({kg("o", 0): ("x",), kg("o", 1): ("z",), kg("o", 2): ("x",)})
    moves = moves_between(a, b)
    assert [(m.key_group.index, m.source, m.target) for m in moves] == [
        (1, "y", "z"),
        (2, None, "x"),
    ]
