"""Hypothesis properties of checkpoint allocation on random tiny instances."""

import math

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from property_scale import examples

from elastorm.controller.allocation import (
    AllocationSpec,
    allocation_score,
    baseline_allocation,
    constraint_violations,
    correlated_allocation,
    even_allocation,
    optimal_allocation,
    reoptimize,
)
from elastorm.controller.correlation import factors_from_loads
from elastorm.controller.model import Allocation, ClusterView, KeyGroupId, KeyGroupInfo, NodeInfo


@st.composite
def instances(draw, max_nodes=6, max_kgs=7):
    n_nodes = draw(st.integers(2, max_nodes))
    n_zones = draw(st.integers(0, n_nodes))  # 0: every node its own zone
    nodes = [
        NodeInfo(node_id=f"n{i}", zone=(f"z{i % n_zones}" if n_zones else None))
        for i in range(n_nodes)
    ]
    n_kgs = draw(st.integers(1, max_kgs))
    owners = draw(st.lists(st.integers(0, n_nodes - 1), min_size=n_kgs, max_size=n_kgs))
    loads = draw(st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=n_kgs, max_size=n_kgs))
    # op1 may have fewer tasks than there are nodes: it runs on the first ``few`` nodes
    few = draw(st.integers(2, n_nodes))
    kgs = [
        KeyGroupInfo(
            key_group=KeyGroupId(f"op{k % 2}", k),
            owner=f"n{o % (few if k % 2 else n_nodes)}",
            load=w,
        )
        for k, (o, w) in enumerate(zip(owners, loads, strict=True))
    ]
    hosts = {"op1": [f"n{i}" for i in range(few)]}
    view = ClusterView(nodes=nodes, key_groups=kgs, hosts=hosts)
    seed = draw(st.integers(0, 2**32 - 1))
    history = np.random.default_rng(seed).normal(size=(8, n_kgs))
    corr = factors_from_loads([k.key_group for k in view.key_groups], history)
    replicas = draw(st.integers(1, 2))
    eps = draw(st.sampled_from([math.inf, 0.0, 0.25, 1.0]))
    return AllocationSpec(view=view, correlation=corr, replicas=replicas, epsilon=eps)


def feasible(spec):
    view = spec.view
    zones = {n.fault_zone for n in view.nodes}
    return (
        all(
            sum(
                1
                for n in view.nodes
                if n.fault_zone != view.node(k.owner).fault_zone
                and view.runs(k.key_group.operator, n.node_id)
            )
            >= spec.replicas
            for k in view.key_groups
        )
        and len(zones) > 1
    )


def constraint1(spec, alloc):
    return [v for v in constraint_violations(spec, alloc) if "(c2)" not in v]


@settings(max_examples=examples(200), deadline=None)
@given(instances())
def test_algorithm3_never_breaks_constraint1(spec):
    assume(feasible(spec))
    for policy in (correlated_allocation, even_allocation, baseline_allocation):
        assert constraint1(spec, policy(spec)) == []


@settings(max_examples=examples(150), deadline=None)
@given(instances(max_nodes=5, max_kgs=5))
def test_algorithm3_versus_exhaustive(spec):
    assume(feasible(spec))
    alg = correlated_allocation(spec)
    opt = optimal_allocation(spec)
    assume(opt is not None)  # else constraint 2 cannot be met at all
    assert constraint_violations(spec, opt) == ()
    s_alg, s_opt = allocation_score(spec, alg), allocation_score(spec, opt)
    if constraint_violations(spec, alg) == ():
        assert s_opt <= s_alg + 1e-9  # the exhaustive search really is optimal
    if math.isinf(spec.epsilon) and spec.replicas == 1:
        # Without constraint 2 and with one replica, checkpoints do not interact:
        # Algorithm 3 must be exactly optimal.
        assert math.isclose(s_alg, s_opt, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=examples(200), deadline=None)
@given(instances(), st.data())
def test_reoptimize_moves_lead_exactly_to_its_allocation_each_checkpoint_once(spec, data):
    """The controller applies ``reoptimize``'s moves and nothing else: applied to the
    current holders, in order, they must give the returned allocation, and move no
    checkpoint twice (a repair then an improvement is one move). The current holders
    may sit on forbidden nodes (the owner's, or one that runs no task of the group's
    operator), so repairs happen."""
    assume(feasible(spec))
    nodes = spec.view.node_ids()
    current = Allocation(
        {
            k.key_group: tuple(
                data.draw(
                    st.lists(
                        st.sampled_from(nodes), min_size=1, max_size=spec.replicas, unique=True
                    )
                )
            )
            for k in spec.view.key_groups
        }
    )
    theta = data.draw(st.sampled_from([0.0, 0.5, math.inf]))
    final, moves = reoptimize(spec, current, theta=theta)
    holders = {kg: list(ns) for kg, ns in current.entries}
    moved = set()
    for m in moves:
        assert (m.key_group, m.source) not in moved, m  # the checkpoint moves once
        hs = holders[m.key_group]
        if m.source in hs:
            hs[hs.index(m.source)] = m.target
        else:
            hs.append(m.target)
        moved.add((m.key_group, m.target))
    assert {kg: sorted(hs) for kg, hs in holders.items()} == {
        kg: sorted(ns) for kg, ns in final.entries
    }
