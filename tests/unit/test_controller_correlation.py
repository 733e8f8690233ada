"""Sliding-window Pearson correlation and its two representations."""

import numpy as np
import pytest
from controller_oracle import dense, node_sums, pair

from elastorm.controller.correlation import (
    CorrelationMatrix,
    factors_from_loads,
    push_loads,
    sliding_correlation,
)
from elastorm.controller.model import ControllerModelError, KeyGroupId

KGS = tuple(KeyGroupId("op", i) for i in range(5))


def feed(state, rows):
    for row in rows:
        state = push_loads(state, row)
    return state


def test_sliding_window_matches_numpy_after_many_reanchors():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(257, 5)) + np.linspace(0, 3, 257)[:, None] * [1, -1, 0, 2, 0]
    state = feed(sliding_correlation(KGS, 16), data)
    expected = np.corrcoef(data[-16:].T)
    np.testing.assert_allclose(state.correlation().matrix, expected, atol=1e-9)
    np.testing.assert_allclose(dense(state.factors()).matrix, expected, atol=1e-9)


def test_large_offset_does_not_cancel():
    # Loads around 1e9 with unit noise: the naive one-pass formula loses everything.
    rng = np.random.default_rng(1)
    data = 1e9 + rng.normal(size=(100, 5))
    state = feed(sliding_correlation(KGS, 20), data)
    np.testing.assert_allclose(state.correlation().matrix, np.corrcoef(data[-20:].T), atol=1e-6)


def test_constant_series_is_uncorrelated():
    data = np.column_stack(
        [np.arange(10.0), np.full(10, 7.0), -np.arange(10.0), *[np.ones(10)] * 2]
    )
    m = feed(sliding_correlation(KGS, 8), data).correlation()
    assert pair(m, KGS[0], KGS[1]) == 0.0
    assert pair(m, KGS[1], KGS[1]) == 1.0
    assert pair(m, KGS[0], KGS[2]) == pytest.approx(-1.0)


def test_prior_fades_as_samples_arrive():
    prior = CorrelationMatrix(KGS[:2], [[1.0, -1.0], [-1.0, 1.0]])
    state = sliding_correlation(KGS, 10, prior=prior, prior_weight=10)
    assert pair(state.correlation(), KGS[0], KGS[1]) == pytest.approx(-1.0)
    assert pair(state.correlation(), KGS[0], KGS[3]) == 0.0  # unknown to the prior
    x = np.arange(10.0)
    state = feed(state, np.column_stack([x, x, x, x, x]))
    assert pair(state.correlation(), KGS[0], KGS[1]) == pytest.approx(0.0)  # (-10 + 10) / 20


def test_node_sums_agree_between_matrix_and_factors():
    rng = np.random.default_rng(2)
    f = factors_from_loads(KGS, rng.normal(size=(12, 5)))
    owner = np.array([0, 1, 1, 2, 0])
    np.testing.assert_allclose(
        node_sums(f, KGS, owner, 3), node_sums(dense(f), KGS, owner, 3), atol=1e-12
    )
    # Alignment: a reordered request returns reordered rows.
    rev = KGS[::-1]
    np.testing.assert_allclose(node_sums(f, rev, owner[::-1], 3)[0], node_sums(f, KGS, owner, 3)[4])


def test_bad_inputs_raise():
    with pytest.raises(ControllerModelError):
        sliding_correlation(KGS, 1)
    with pytest.raises(ControllerModelError):
        push_loads(sliding_correlation(KGS, 4), [1.0, 2.0])
    with pytest.raises(ControllerModelError):
        push_loads(sliding_correlation(KGS, 4), [1.0, 2.0, np.nan, 0.0, 0.0])
    with pytest.raises(ControllerModelError):
        CorrelationMatrix(KGS[:2], [[1.0, 0.5], [0.4, 1.0]])
    with pytest.raises(ControllerModelError):
        sliding_correlation(KGS, 4, pairwise=False).correlation()
