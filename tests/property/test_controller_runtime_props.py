"""Hypothesis properties: sliding correlation vs numpy, recovery plan invariants."""

import numpy as np
from controller_oracle import dense
from hypothesis import given, settings
from hypothesis import strategies as st
from property_scale import examples

from elastorm.controller.allocation import AllocationSpec, even_allocation
from elastorm.controller.correlation import push_loads, sliding_correlation
from elastorm.controller.model import KeyGroupId
from elastorm.controller.recovery import plan_recovery
from elastorm.controller.synthetic import synthetic_cluster

KGS = tuple(KeyGroupId("op", i) for i in range(3))


@settings(max_examples=examples(60), deadline=None)
@given(
    st.integers(2, 12),
    st.lists(st.tuples(*[st.floats(-1e6, 1e6, allow_nan=False)] * 3), min_size=3, max_size=40),
)
def test_sliding_matches_two_pass_numpy(window, rows):
    state = sliding_correlation(KGS, window)
    for row in rows:
        state = push_loads(state, row)
    data = np.array(rows[-window:])
    got = state.correlation().matrix
    expected = dense(state.factors()).matrix  # exact two-pass over the window
    assert np.all(np.abs(got) <= 1.0)
    sd = data.std(axis=0)
    ok = sd > 1e-6 * (1 + np.abs(data).max(axis=0))  # clearly non-constant series
    mask = np.outer(ok, ok)
    np.testing.assert_allclose(got[mask], expected[mask], atol=1e-6)


def test_a_large_sample_leaving_the_window_does_not_spoil_the_sums() -> None:
    """Regression (the property above found it with 269687): a sample of 1.3e8 leaves
    a window of small loads; the running sums kept since the last re-anchor
    cancelled to noise (correlation off by 1.4e-5) until ``push_loads`` learned to
    re-anchor on such a cancellation."""
    rows = [
        (-3.184413, 482.523159, 1.076834),
        (781.182879, 1387.605848, -0.136423),
        (133493876.477448, -169514901.058209, -267087.907372),
        (0.310766, 306.741431, -0.224741),
        (6.584428, -0.607987, -1.336756),
        (-11.958816, -0.003101, 542.149924),
        (11.942142, 4.692229, -5.38161),
        (-0.781244, -18.944944, -1.944839),
        (1.576387, -1.576325, 0.710527),
        (0.557211, 7.839468, 1135.938374),
        (13.328923, 0.027986, -1.985828),
        (1081.103698, 322.841468, 0.289453),
    ]
    state = sliding_correlation(KGS, 8)
    for row in rows:
        state = push_loads(state, row)
    expected = dense(state.factors()).matrix
    np.testing.assert_allclose(state.correlation().matrix, expected, atol=1e-9)


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(0, 10_000), st.integers(3, 8), st.integers(1, 2), st.data())
def test_recovery_restores_every_lost_key_group_on_a_live_holder(seed, nodes, replicas, data):
    c = synthetic_cluster(seed, nodes=nodes, key_groups=4 * nodes)
    spec = AllocationSpec(view=c.view, replicas=replicas)
    view = c.view.replace(checkpoints=even_allocation(spec, seed=seed))
    failed = data.draw(st.sets(st.sampled_from(view.node_ids()), min_size=1, max_size=nodes - 1))
    durable = data.draw(st.sets(st.sampled_from([k.key_group for k in view.key_groups])))
    plan = plan_recovery(view, failed, replicas=replicas, durable=durable)
    lost = {kg for n in failed for kg in view.owned_by(n)}
    restored = {m.key_group for m in plan.restores}
    from_store = {m.key_group for m in plan.durable_restores}
    # Every orphaned group is restored exactly one way; the store only without a holder.
    assert restored | from_store | set(plan.lost) == lost
    assert len(restored) + len(from_store) + len(plan.lost) == len(lost)
    assert from_store == {
        kg
        for kg in lost - restored
        if kg in durable and not set(view.checkpoints.holders(kg)) - set(failed)
    }
    assert set(plan.lost) == lost - restored - durable
    for m in plan.restores:
        assert m.target not in failed and m.target in view.checkpoints.holders(m.key_group)
    for m in plan.durable_restores:
        assert m.target not in failed and plan.view.key_group(m.key_group).owner == m.target
    for k in plan.view.key_groups:
        assert k.owner not in failed
        holders = plan.view.checkpoints.holders(k.key_group)
        assert not set(holders) & set(failed) and k.owner not in holders
        assert len(holders) == replicas or k.key_group in plan.unprotected
