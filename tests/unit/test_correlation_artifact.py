"""The correlation artifact: Pearson helper vs numpy, encoding, validation on load."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from elastorm.core.correlation_artifact import (
    CorrelationArtifact,
    CorrelationArtifactError,
    OperatorStats,
    decode_artifact,
    encode_artifact,
    pearson_from_loads,
)


def _loads(seed: int = 1, windows: int = 40, k: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.poisson(20, size=(windows, 1))
    return (rng.poisson(5, size=(windows, k)) + base * rng.integers(0, 3, size=k)).astype(float)


def _artifact(loads: np.ndarray, groups=(4, 3), window: float = 60.0) -> CorrelationArtifact:
    means, variances, matrix = pearson_from_loads(loads)
    ops = tuple(OperatorStats(name=f"op{i}", num_key_groups=g) for i, g in enumerate(groups))
    return CorrelationArtifact(
        operators=ops,
        window_seconds=window,
        time_start=0.0,
        time_end=window * loads.shape[0],
        num_windows=loads.shape[0],
        means=means,
        variances=variances,
        matrix=matrix,
    )


def test_pearson_matches_numpy_corrcoef():
    loads = _loads()
    means, variances, matrix = pearson_from_loads(loads)
    assert np.max(np.abs(matrix - np.corrcoef(loads.T))) < 1e-12
    assert np.allclose(means, loads.mean(axis=0), rtol=0, atol=1e-12)
    assert np.allclose(variances, loads.var(axis=0), rtol=0, atol=1e-9)


def test_constant_key_groups_are_nan_and_flagged_everything_else_matches():
    loads = _loads()
    loads[:, 2] = 0.0  # a key group that never received a tuple
    loads[:, 5] = 3.0  # constant but non-zero
    a = _artifact(loads)
    assert list(np.flatnonzero(a.constant)) == [2, 5]
    assert np.all(np.isnan(a.matrix[[2, 5], :])) and np.all(np.isnan(a.matrix[:, [2, 5]]))
    live = [0, 1, 3, 4, 6]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.corrcoef(loads.T)
    assert np.max(np.abs(a.matrix[np.ix_(live, live)] - expected[np.ix_(live, live)])) < 1e-12
    filled = a.filled()
    assert filled[2, 2] == 1.0 and filled[2, 0] == 0.0 and not np.isnan(filled).any()


def test_round_trip_keeps_everything():
    a = _artifact(_loads())
    b = decode_artifact(encode_artifact(a), expected_key_groups={"op0": 4, "op1": 3})
    assert (
        b.key_groups
        == a.key_groups
        == [("op0", g) for g in range(4)] + [("op1", g) for g in range(3)]
    )
    assert np.array_equal(b.matrix, a.matrix) and np.array_equal(b.variances, a.variances)
    assert (b.window_seconds, b.num_windows, b.time_end) == (60.0, 40, 2400.0)
    assert b.index("op1", 2) == 6
    assert b.block("op0", "op1").shape == (4, 3)


def test_operator_correlation_equals_correlation_of_totals():
    loads = _loads(seed=3)
    a = _artifact(loads)
    direct = np.corrcoef(loads[:, :4].sum(axis=1), loads[:, 4:].sum(axis=1))[0, 1]
    assert abs(a.operator_correlation()[0, 1] - direct) < 1e-9


def test_operator_with_constant_total_has_nan_operator_correlation():
    loads = _loads(seed=4, k=6)
    loads[:, 3] = 10.0 - loads[:, 4] - loads[:, 5] + 100  # op1's total is constant (110)
    a = _artifact(loads, groups=(3, 3))
    op = a.operator_correlation()
    assert np.isnan(op[0, 1]) and np.isnan(op[1, 1]) and op[0, 0] == pytest.approx(1.0)


def test_strongest_pairs_sorted_and_skip_nan():
    loads = _loads(seed=5)
    loads[:, 0] = 0.0
    a = _artifact(loads)
    pos = a.strongest_pairs(3)
    neg = a.strongest_pairs(3, negative=True)
    iu = np.triu_indices(7, k=1)
    vals = a.matrix[iu]
    vals = vals[~np.isnan(vals)]
    assert [p[0] for p in pos] == sorted(vals, reverse=True)[:3]
    assert [p[0] for p in neg] == sorted(vals)[:3]
    assert all(i != 0 and j != 0 and i < j for _, i, j in pos + neg)


def test_wrong_key_group_count_is_a_clear_error():
    data = encode_artifact(_artifact(_loads()))
    with pytest.raises(
        CorrelationArtifactError, match="op1: artifact has 3 key groups, topology has 5"
    ):
        decode_artifact(data, expected_key_groups={"op0": 4, "op1": 5})
    with pytest.raises(CorrelationArtifactError, match="op2: missing from artifact"):
        decode_artifact(data, expected_key_groups={"op0": 4, "op1": 3, "op2": 1})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(matrix=d["matrix"][:-1]), "matrix must be 7 x 7"),
        (lambda d: d.update(means=d["means"][:-1]), r"means must have shape \(7,\)"),
        (lambda d: d["matrix"].__setitem__((0, 1), 0.5), "not symmetric"),
        (lambda d: d["matrix"].__setitem__((1, 1), np.nan), "NaN outside"),
        (lambda d: d["matrix"].__setitem__((2, 2), 0.9), "diagonal"),
        (lambda d: d["variances"].__setitem__(0, -1.0), "finite and >= 0"),
        (lambda d: d.update(num_windows=41), "time range"),
        (lambda d: d.update(window_seconds=0.0), "window_seconds"),
    ],
)
def test_invalid_artifacts_are_rejected(change, message):
    a = _artifact(_loads())
    fields = dict(
        operators=a.operators,
        window_seconds=a.window_seconds,
        time_start=a.time_start,
        time_end=a.time_end,
        num_windows=a.num_windows,
        means=a.means.copy(),
        variances=a.variances.copy(),
        matrix=a.matrix.copy(),
    )
    change(fields)
    with pytest.raises(CorrelationArtifactError, match=message):
        CorrelationArtifact(**fields)


def test_garbage_and_foreign_npz_are_rejected():
    with pytest.raises(CorrelationArtifactError, match="not a correlation artifact"):
        decode_artifact(b"definitely not npz")
    import io

    buf = io.BytesIO()
    np.savez(buf, matrix=np.eye(2))
    with pytest.raises(CorrelationArtifactError, match="lacks arrays"):
        decode_artifact(buf.getvalue())


def test_operator_row_counts_must_add_up():
    with pytest.raises(CorrelationArtifactError, match="rows_used"):
        OperatorStats(name="a", num_key_groups=1, rows_read=10, rows_used=8, rows_skipped={"x": 1})
    with pytest.raises(CorrelationArtifactError, match="num_key_groups"):
        OperatorStats(name="a", num_key_groups=0)
