"""Pearson correlation of key-group loads (Madsen & Zhou 2015, section 6: ``corr``).

Two immutable representations feed checkpoint allocation:

* :class:`CorrelationMatrix` -- a dense ``K x K`` matrix (the offline Spark
  artifact, or the online window for moderate ``K``);
* :class:`CorrelationFactors` -- ``F`` with ``rho = F @ F.T``: the z-scored load
  window divided by ``sqrt(W)``. Exact for a window, ``O(K W)`` memory, so 50,000
  key groups need no ``K x K`` matrix.

:class:`SlidingCorrelation` keeps the last ``W`` load samples and updates shifted
running moments on every push (``O(K)``, or ``O(K^2)`` with ``pairwise=True``);
it re-anchors (recomputes exactly from the window) every ``W`` pushes so sliding
add/remove never accumulates rounding error. A prior matrix from the offline job
can seed it; the prior counts as ``prior_weight`` samples and fades as real
samples arrive.

A series with zero variance in the window is uncorrelated with everything
(``rho = 0``), except with itself (``rho = 1``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from elastorm.controller.model import ControllerModelError, KeyGroupId

# A series whose spread is below this share of its magnitude counts as constant
# (a few hundred ulps: rounding noise, not signal).
_REL_EPS = 1e-12


def _index(key_groups: Sequence[KeyGroupId]) -> dict[KeyGroupId, int]:
    idx = {kg: i for i, kg in enumerate(key_groups)}
    if len(idx) != len(key_groups):
        raise ControllerModelError("duplicate key group in correlation")
    return idx


def _store(obj: object, kgs: tuple[KeyGroupId, ...], name: str, arr: np.ndarray) -> None:
    """Freeze ``arr`` and set ``key_groups``, ``name`` and the index on a frozen value."""
    arr.setflags(write=False)
    object.__setattr__(obj, "key_groups", kgs)
    object.__setattr__(obj, name, arr)
    object.__setattr__(obj, "_idx", _index(kgs))


def _sources(idx: dict[KeyGroupId, int], key_groups: Sequence[KeyGroupId]) -> np.ndarray:
    """Row of each requested key group (-1: unknown)."""
    return np.array([idx.get(kg, -1) for kg in key_groups], dtype=np.int64)


def _owner_sums(values: np.ndarray, owner_index: np.ndarray, n_nodes: int) -> np.ndarray:
    """``out[n] = sum of values[g] over key groups g owned by node n`` (rows of values)."""
    out = np.zeros((n_nodes,) + values.shape[1:], dtype=np.float64)
    np.add.at(out, owner_index, values)
    return out


@dataclass(frozen=True, slots=True)
class CorrelationMatrix:
    """Dense Pearson correlations between ``key_groups`` (symmetric, unit diagonal).

    Raises ``ControllerModelError`` if the matrix is not square, not the size of
    ``key_groups``, not symmetric, or has entries outside [-1, 1] (+ rounding).

    >>> m = CorrelationMatrix((KeyGroupId("a", 0), KeyGroupId("b", 0)), [[1, -1], [-1, 1]])
    >>> float(m.aligned((KeyGroupId("b", 0), KeyGroupId("a", 0))).matrix[0, 1])
    -1.0
    """

    key_groups: tuple[KeyGroupId, ...]
    matrix: np.ndarray
    _idx: dict[KeyGroupId, int] = field(init=False, repr=False, compare=False, hash=False)

    def __init__(self, key_groups: Sequence[KeyGroupId], matrix: object) -> None:
        kgs = tuple(key_groups)
        m = np.array(matrix, dtype=np.float64, copy=True)
        if m.shape != (len(kgs), len(kgs)):
            raise ControllerModelError(f"matrix shape {m.shape} != ({len(kgs)}, {len(kgs)})")
        if not np.all(np.isfinite(m)) or np.any(np.abs(m) > 1 + 1e-9):
            raise ControllerModelError("correlations must be finite and within [-1, 1]")
        if not np.allclose(m, m.T, atol=1e-9):
            raise ControllerModelError("correlation matrix must be symmetric")
        _store(self, kgs, "matrix", m)

    def aligned(self, key_groups: Sequence[KeyGroupId]) -> CorrelationMatrix:
        """The same correlations in the order of ``key_groups``; unknown ones get 0."""
        kgs = tuple(key_groups)
        src = _sources(self._idx, kgs)
        known = src >= 0
        out = np.zeros((len(kgs), len(kgs)))
        out[np.ix_(known, known)] = self.matrix[np.ix_(src[known], src[known])]
        np.fill_diagonal(out, 1.0)
        return CorrelationMatrix(kgs, out)

    def iter_node_sums(
        self,
        key_groups: Sequence[KeyGroupId],
        owner_index: np.ndarray,
        n_nodes: int,
        chunk: int = 4096,
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Blocks ``(start, C[start:start+chunk])`` of ``C[k, n]``, the sum over the
        key groups ``g`` that node ``n`` owns of ``rho(key_groups[k], g)`` (``K x N``)."""
        per_node = _owner_sums(self.aligned(key_groups).matrix, np.asarray(owner_index), n_nodes)
        c = per_node.T
        for start in range(0, len(key_groups), chunk):
            yield start, np.array(c[start : start + chunk])


@dataclass(frozen=True, slots=True)
class CorrelationFactors:
    """Correlations as factors: ``rho = F @ F.T`` (rows = key groups).

    ``F`` is the load window z-scored per key group and divided by ``sqrt(W)``;
    a zero-variance row is all zeros. Build it with :func:`factors_from_loads`.
    """

    key_groups: tuple[KeyGroupId, ...]
    factors: np.ndarray
    _idx: dict[KeyGroupId, int] = field(init=False, repr=False, compare=False, hash=False)

    def __init__(self, key_groups: Sequence[KeyGroupId], factors: object) -> None:
        kgs = tuple(key_groups)
        f = np.array(factors, dtype=np.float64, copy=True)
        if f.ndim != 2 or f.shape[0] != len(kgs):
            raise ControllerModelError(f"factors shape {f.shape} does not match {len(kgs)} rows")
        _store(self, kgs, "factors", f)

    def _aligned_factors(self, key_groups: Sequence[KeyGroupId]) -> np.ndarray:
        src = _sources(self._idx, key_groups)
        out = np.zeros((len(src), self.factors.shape[1]))
        known = src >= 0
        out[known] = self.factors[src[known]]
        return out

    def iter_node_sums(
        self,
        key_groups: Sequence[KeyGroupId],
        owner_index: np.ndarray,
        n_nodes: int,
        chunk: int = 4096,
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Blocks ``(start, C[start:start+chunk])`` of ``C[k, n]``, the sum over the
        key groups ``g`` that node ``n`` owns of ``rho(key_groups[k], g)`` (``K x N``).

        ``O(K W + K N W)`` via ``F @ (M^T F)^T``; never forms ``K x K``.
        """
        f = self._aligned_factors(key_groups)
        per_node_t = _owner_sums(f, np.asarray(owner_index), n_nodes).T.copy()  # W x N
        for start in range(0, len(key_groups), chunk):
            yield start, f[start : start + chunk] @ per_node_t


Correlation = CorrelationMatrix | CorrelationFactors


def factors_from_loads(key_groups: Sequence[KeyGroupId], loads: object) -> CorrelationFactors:
    """Factors of the Pearson correlation of ``loads`` (``W x K``: one row per window).

    Two-pass (mean first, then deviations), so it is exact up to rounding.

    >>> kgs = (KeyGroupId("a", 0), KeyGroupId("b", 0))
    >>> f = factors_from_loads(kgs, [[1, 3], [2, 2], [3, 1]]).factors
    >>> round(float(f[0] @ f[1]), 6)
    -1.0
    """
    x = np.asarray(loads, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(key_groups):
        raise ControllerModelError(f"loads shape {x.shape} must be (W, {len(key_groups)})")
    dev = x - x.mean(axis=0)
    norm = np.sqrt((dev * dev).sum(axis=0))
    floor = _REL_EPS * (1.0 + np.abs(x).max(axis=0, initial=0.0)) * np.sqrt(x.shape[0])
    scale = np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > floor)
    return CorrelationFactors(key_groups, (dev * scale).T)


@dataclass(frozen=True, slots=True)
class SlidingCorrelation:
    """Pearson correlation of key-group loads over the last ``window`` samples.

    An immutable value: :func:`push_loads` returns a new one. Moments are kept
    around a shift (the window mean at the last re-anchor), which keeps the
    one-pass formula ``cov = S_xy/n - S_x S_y/n^2`` free of catastrophic
    cancellation; every ``window`` pushes the moments are recomputed from the
    buffer with a fresh shift. ``pairwise=False`` skips the ``K x K`` co-moments
    (use :meth:`factors` for large ``K``).
    """

    key_groups: tuple[KeyGroupId, ...]
    window: int
    buffer: np.ndarray  # window x K ring buffer
    count: int  # valid rows (<= window)
    head: int  # next row to write
    shift: np.ndarray  # K
    s1: np.ndarray  # K: sum of (x - shift)
    s2: np.ndarray  # K x K (pairwise) or K (diagonal): sum of (x - shift)(x - shift)
    since_anchor: int
    pairwise: bool
    prior: CorrelationMatrix | None
    prior_weight: float

    def correlation(self) -> CorrelationMatrix:
        """The current matrix, blended with the prior if one was given.

        ``rho = (w0 * prior + n * window) / (w0 + n)`` with ``w0 = prior_weight``
        and ``n`` the samples in the window; with no samples, the prior (or
        identity). Requires ``pairwise=True``.
        """
        if not self.pairwise:
            raise ControllerModelError("correlation() needs pairwise=True; use factors()")
        k = len(self.key_groups)
        n = self.count
        if n >= 2:
            cov = self.s2 / n - np.outer(self.s1, self.s1) / (n * n)
            var = np.clip(np.diag(cov), 0.0, None)
            sd = np.sqrt(var)
            ok = sd > _REL_EPS * (1 + np.abs(self.shift))
            denom = np.outer(np.where(ok, sd, 1.0), np.where(ok, sd, 1.0))
            rho = np.where(np.outer(ok, ok), cov / denom, 0.0)
            rho = np.clip((rho + rho.T) / 2, -1.0, 1.0)
            np.fill_diagonal(rho, 1.0)
        else:
            rho, n = np.eye(k), 0
        if self.prior is not None and self.prior_weight > 0:
            p = self.prior.matrix
            rho = (self.prior_weight * p + n * rho) / (self.prior_weight + n)
        return CorrelationMatrix(self.key_groups, rho)

    def window_loads(self) -> np.ndarray:
        """The buffered samples, oldest first (``count x K``)."""
        if self.count < self.window:
            return self.buffer[: self.count].copy()
        return np.roll(self.buffer, -self.head, axis=0)

    def factors(self) -> CorrelationFactors:
        """Exact factors of the window's correlation (ignores the prior)."""
        return factors_from_loads(self.key_groups, self.window_loads())


def sliding_correlation(
    key_groups: Sequence[KeyGroupId],
    window: int,
    *,
    pairwise: bool = True,
    prior: CorrelationMatrix | None = None,
    prior_weight: float = 0.0,
) -> SlidingCorrelation:
    """An empty sliding window over ``key_groups``, optionally seeded with ``prior``.

    ``prior`` is the offline artifact's matrix (any key-group order; it is
    aligned to ``key_groups``, unknown pairs 0). Raises ``ControllerModelError``
    if ``window < 2`` or ``prior_weight < 0``.

    >>> a, b = KeyGroupId("a", 0), KeyGroupId("b", 0)
    >>> w = sliding_correlation((a, b), 4)
    >>> for x in (1, 2, 3, 4, 5):
    ...     w = push_loads(w, [x, 10 - 2 * x])
    >>> round(float(w.correlation().matrix[0, 1]), 9)
    -1.0
    """
    kgs = tuple(key_groups)
    if window < 2:
        raise ControllerModelError(f"window must be >= 2, got {window}")
    if prior_weight < 0:
        raise ControllerModelError("prior_weight must be >= 0")
    k = len(kgs)
    _index(kgs)
    aligned = prior.aligned(kgs) if prior is not None else None
    return SlidingCorrelation(
        key_groups=kgs,
        window=window,
        buffer=np.zeros((window, k)),
        count=0,
        head=0,
        shift=np.zeros(k),
        s1=np.zeros(k),
        s2=np.zeros((k, k)) if pairwise else np.zeros(k),
        since_anchor=0,
        pairwise=pairwise,
        prior=aligned,
        prior_weight=float(prior_weight) if prior is not None else 0.0,
    )


def _anchor(state: SlidingCorrelation, buffer: np.ndarray, count: int, head: int):
    rows = buffer[:count] if count < state.window else buffer
    shift = rows.mean(axis=0) if count else np.zeros(buffer.shape[1])
    d = rows - shift
    s1 = d.sum(axis=0)
    s2 = d.T @ d if state.pairwise else (d * d).sum(axis=0)
    return shift, s1, s2


_CANCEL = 1e-8  # re-anchor when a key group keeps less than this share of its sum of squares


def _cancelled(before: np.ndarray, after: np.ndarray, s1: np.ndarray, count: int) -> bool:
    """Whether evicting a sample cancelled most digits of some key group's sums.

    ``before``/``after`` are the sums of squared deviations (from the anchor's
    shift) before and after the eviction. The centred sum left,
    ``after - s1**2 / count``, carries an absolute rounding error of about
    ``eps * before``; once it is below ``_CANCEL * before`` (a large sample left a
    window of small ones) the running sums have lost all but a few digits, and an
    exact re-anchor is cheaper than wrong correlations for up to ``window`` pushes.
    """
    centred = after - s1 * s1 / count
    return bool(np.any((before > 0) & (centred < _CANCEL * before)))


def push_loads(state: SlidingCorrelation, loads: Sequence[float]) -> SlidingCorrelation:
    """Add one sample (a load per key group, in ``state.key_groups`` order).

    ``O(K)`` (``O(K^2)`` pairwise), plus an exact ``O(W K)`` / ``O(W K^2)``
    re-anchor every ``window`` pushes, and sooner when evicting a sample would
    cancel most digits of the running sums (:func:`_cancelled`).
    Raises ``ControllerModelError`` on a wrong
    length or a non-finite load.
    """
    x = np.asarray(loads, dtype=np.float64)
    if x.shape != (len(state.key_groups),) or not np.all(np.isfinite(x)):
        raise ControllerModelError(f"expected {len(state.key_groups)} finite loads")
    buffer = state.buffer.copy()
    evicted = buffer[state.head].copy() if state.count == state.window else None
    buffer[state.head] = x
    head = (state.head + 1) % state.window
    count = min(state.count + 1, state.window)
    since = state.since_anchor + 1
    if since >= state.window or state.count == 0:
        shift, s1, s2 = _anchor(state, buffer, count, head)
        since = 0
    else:
        shift = state.shift
        d = x - shift
        s1 = state.s1 + d
        s2 = state.s2 + (np.outer(d, d) if state.pairwise else d * d)
        if evicted is not None:
            e = evicted - shift
            s1 = s1 - e
            before = np.diag(s2) if state.pairwise else s2
            s2 = s2 - (np.outer(e, e) if state.pairwise else e * e)
            if _cancelled(before, s2 if not state.pairwise else np.diag(s2), s1, count):
                shift, s1, s2 = _anchor(state, buffer, count, head)
                since = 0
    return SlidingCorrelation(
        key_groups=state.key_groups,
        window=state.window,
        buffer=buffer,
        count=count,
        head=head,
        shift=shift,
        s1=s1,
        s2=s2,
        since_anchor=since,
        pairwise=state.pairwise,
        prior=state.prior,
        prior_weight=state.prior_weight,
    )
