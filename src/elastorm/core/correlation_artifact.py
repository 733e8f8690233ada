"""The key-group correlation artifact: schema, encoding and validation.

The offline Spark job (``elastorm.jobs.correlation``) writes one artifact; the controller
decodes it at start to seed correlation-optimized checkpoint allocation (Madsen & Zhou 2015,
section 6, Alg. 3). This module is pure: it turns an artifact into bytes and back
and checks every invariant on the way in, so a controller never starts from a
silently wrong matrix. File handling is the caller's (``Path.read_bytes()``).

Schema (version 1), an ``.npz`` archive (``numpy.savez``, no pickles) holding:

``meta``
    JSON string: ``format`` (``"elastorm-correlation"``), ``version``,
    ``window_seconds``, ``time_start`` and ``time_end`` (epoch seconds, windows
    cover ``[time_start, time_end)``), ``num_windows``, ``variance_ddof`` (0),
    ``operators`` (list of ``{name, num_key_groups, source, rows_read, rows_used,
    rows_skipped: {reason: count}}``).
``operator_index``, ``key_group``
    int32[K]: column ``c`` is key group ``key_group[c]`` of operator
    ``operators[operator_index[c]]``; operators in ``meta`` order, key groups
    ``0 .. G-1`` within each, so ``K = sum(G_i)``.
``means``, ``variances``
    float64[K]: tuples per window, population variance (ddof 0).
``matrix``
    float64[K, K]: Pearson correlation over the same windows. Symmetric, in
    ``[-1, 1]``, diagonal 1. A key group whose load is constant over all windows
    (variance 0, e.g. one that never received a tuple) has an undefined
    correlation: its whole row and column are NaN, and it is listed by
    ``CorrelationArtifact.constant``. Everything else is finite.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

FORMAT = "elastorm-correlation"
VERSION = 1
#: Tolerance of the symmetry / range / diagonal checks.
_TOL = 1e-9


class CorrelationArtifactError(ValueError):
    """The artifact is malformed or does not match the topology it is loaded for."""


@dataclass(frozen=True, kw_only=True)
class OperatorStats:
    """One operator's key-group count and what its input held."""

    name: str
    num_key_groups: int
    source: str = ""
    rows_read: int = 0
    rows_used: int = 0
    rows_skipped: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise CorrelationArtifactError("operator name must be non-empty")
        if self.num_key_groups < 1:
            raise CorrelationArtifactError(
                f"operator {self.name!r}: num_key_groups must be >= 1, got {self.num_key_groups}"
            )
        skipped = sum(self.rows_skipped.values())
        if min(self.rows_read, self.rows_used, *self.rows_skipped.values(), 0) < 0:
            raise CorrelationArtifactError(f"operator {self.name!r}: negative row count")
        if self.rows_used + skipped != self.rows_read:
            raise CorrelationArtifactError(
                f"operator {self.name!r}: rows_used ({self.rows_used}) + skipped ({skipped})"
                f" != rows_read ({self.rows_read})"
            )


@dataclass(frozen=True, kw_only=True, eq=False)
class CorrelationArtifact:
    """Per-key-group load statistics and their Pearson correlation matrix.

    Validated on construction (see the module docstring for the invariants);
    raises ``CorrelationArtifactError`` naming the first violated one.
    """

    operators: tuple[OperatorStats, ...]
    window_seconds: float
    time_start: float
    time_end: float
    num_windows: int
    means: np.ndarray
    variances: np.ndarray
    matrix: np.ndarray
    version: int = VERSION

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def num_key_groups(self) -> int:
        """``K``, the total number of key groups over all operators."""
        return int(self.means.shape[0])

    @property
    def key_groups(self) -> list[tuple[str, int]]:
        """``(operator name, key group)`` of every column, in matrix order."""
        return [(op.name, g) for op in self.operators for g in range(op.num_key_groups)]

    @property
    def constant(self) -> np.ndarray:
        """bool[K]: key groups with constant load, whose correlations are NaN."""
        return self.variances == 0.0

    def _bounds(self) -> np.ndarray:
        """Column offsets: operator ``i`` owns columns ``bounds[i] .. bounds[i+1]-1``."""
        return np.cumsum([0] + [op.num_key_groups for op in self.operators])

    def _position(self, operator: str) -> int:
        for i, op in enumerate(self.operators):
            if op.name == operator:
                return i
        raise KeyError(f"no operator {operator!r} in artifact")

    def index(self, operator: str, key_group: int) -> int:
        """Column of ``(operator, key_group)``; ``0 <= key_group < G``, else ``KeyError``."""
        i = self._position(operator)
        g = self.operators[i].num_key_groups
        if not 0 <= key_group < g:
            raise KeyError(f"{operator!r} has key groups 0..{g - 1}, not {key_group}")
        return int(self._bounds()[i]) + key_group

    def block(self, operator_a: str, operator_b: str) -> np.ndarray:
        """The ``G_a x G_b`` sub-matrix of correlations between two operators."""
        bounds = self._bounds()
        a, b = self._position(operator_a), self._position(operator_b)
        return self.matrix[bounds[a] : bounds[a + 1], bounds[b] : bounds[b + 1]]

    def filled(self, fill: float = 0.0) -> np.ndarray:
        """A copy of ``matrix`` with NaN (constant key groups) set to ``fill``, diagonal 1.

        The controller's convention: a constant series is uncorrelated with
        everything but itself.
        """
        out = np.where(np.isnan(self.matrix), fill, self.matrix)
        np.fill_diagonal(out, 1.0)
        return out

    def covariance(self) -> np.ndarray:
        """K x K covariance (ddof 0); 0 wherever a key group is constant."""
        std = np.sqrt(self.variances)
        cov = self.matrix * np.outer(std, std)
        cov[self.constant, :] = 0.0
        cov[:, self.constant] = 0.0
        return cov

    def operator_correlation(self) -> np.ndarray:
        """Correlation between the operators' total loads (sum over key groups).

        Derived exactly from the covariance: ``cov(A, B) = sum cov(a_i, b_j)``.
        NaN where an operator's total load is constant.
        """
        cov = self.covariance()
        bounds = self._bounds()
        n = len(self.operators)
        spans = [slice(bounds[i], bounds[i + 1]) for i in range(n)]
        total = np.array([[cov[a, b].sum() for b in spans] for a in spans])
        # A constant total sums to ~0, not exactly 0: compare against the block's size.
        magnitude = np.array([np.abs(cov[a, a]).sum() for a in spans])
        flat = np.diag(total) <= 1e-9 * magnitude
        sd = np.sqrt(np.where(flat, 1.0, np.diag(total)))
        corr = total / np.outer(sd, sd)
        corr[flat, :] = np.nan
        corr[:, flat] = np.nan
        return np.clip(corr, -1.0, 1.0)

    def strongest_pairs(
        self, n: int = 5, *, negative: bool = False
    ) -> list[tuple[float, int, int]]:
        """Top ``n`` distinct pairs ``(corr, i, j)``, ``i < j``, by value.

        Most positive first, or most negative first with ``negative=True``.
        NaN pairs are never returned; ties are broken by ``(i, j)``.
        """
        iu, ju = np.triu_indices(self.num_key_groups, k=1)
        vals = self.matrix[iu, ju]
        ok = ~np.isnan(vals)
        iu, ju, vals = iu[ok], ju[ok], vals[ok]
        order = np.lexsort((ju, iu, vals if negative else -vals))[:n]
        return [(float(vals[k]), int(iu[k]), int(ju[k])) for k in order]


def pearson_from_loads(loads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means, variances (ddof 0) and Pearson matrix of the columns of ``loads``.

    ``loads`` is ``W x K`` (windows x key groups), ``W >= 1``. Constant columns
    get NaN rows and columns; everything else matches ``numpy.corrcoef``.
    Cost: ``O(W K^2)`` time (one matrix product), ``O(W K + K^2)`` memory.
    """
    x = np.asarray(loads, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise CorrelationArtifactError(f"loads must be W x K with W >= 1, got shape {x.shape}")
    means = x.mean(axis=0)
    centered = x - means
    cov = centered.T @ centered / x.shape[0]
    variances = np.clip(np.diag(cov).copy(), 0.0, None)
    # A column is constant iff all its values equal the first (exact, no tolerance).
    constant = np.all(x == x[:1], axis=0)
    variances[constant] = 0.0
    std = np.sqrt(variances)
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = cov / np.outer(std, std)
    corr = np.clip(corr, -1.0, 1.0)
    corr[constant, :] = np.nan
    corr[:, constant] = np.nan
    live = np.flatnonzero(~constant)
    corr[live, live] = 1.0
    corr = (corr + corr.T) / 2.0
    return means, variances, corr


def encode_artifact(artifact: CorrelationArtifact) -> bytes:
    """Serialize to the version-1 ``.npz`` bytes described in the module docstring."""
    meta = {
        "format": FORMAT,
        "version": artifact.version,
        "window_seconds": artifact.window_seconds,
        "time_start": artifact.time_start,
        "time_end": artifact.time_end,
        "num_windows": artifact.num_windows,
        "variance_ddof": 0,
        "operators": [
            {
                "name": op.name,
                "num_key_groups": op.num_key_groups,
                "source": op.source,
                "rows_read": op.rows_read,
                "rows_used": op.rows_used,
                "rows_skipped": dict(sorted(op.rows_skipped.items())),
            }
            for op in artifact.operators
        ],
    }
    op_index = np.concatenate(
        [np.full(op.num_key_groups, i, dtype=np.int32) for i, op in enumerate(artifact.operators)]
    )
    key_group = np.concatenate(
        [np.arange(op.num_key_groups, dtype=np.int32) for op in artifact.operators]
    )
    buf = io.BytesIO()
    np.savez(
        buf,
        meta=np.array(json.dumps(meta, sort_keys=True)),
        operator_index=op_index,
        key_group=key_group,
        means=artifact.means,
        variances=artifact.variances,
        matrix=artifact.matrix,
    )
    return buf.getvalue()


def decode_artifact(
    data: bytes, *, expected_key_groups: Mapping[str, int] | None = None
) -> CorrelationArtifact:
    """Parse and validate artifact bytes.

    ``expected_key_groups`` (operator name -> G) is what the running topology
    declares; if given, the artifact must have exactly those operators with those
    counts. Raises ``CorrelationArtifactError`` with the reason otherwise.
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same user problem
        raise CorrelationArtifactError(f"not a correlation artifact (.npz): {exc}") from exc
    missing = {"meta", "operator_index", "key_group", "means", "variances", "matrix"} - set(arrays)
    if missing:
        raise CorrelationArtifactError(f"artifact lacks arrays: {', '.join(sorted(missing))}")
    try:
        meta = json.loads(str(arrays["meta"]))
    except json.JSONDecodeError as exc:
        raise CorrelationArtifactError(f"artifact meta is not JSON: {exc}") from exc
    if meta.get("format") != FORMAT:
        raise CorrelationArtifactError(f"artifact format is {meta.get('format')!r}, not {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise CorrelationArtifactError(
            f"artifact version {meta.get('version')!r} is not supported"
            f" (this build reads {VERSION})"
        )
    try:
        operators = tuple(
            OperatorStats(
                name=str(op["name"]),
                num_key_groups=int(op["num_key_groups"]),
                source=str(op.get("source", "")),
                rows_read=int(op.get("rows_read", 0)),
                rows_used=int(op.get("rows_used", 0)),
                rows_skipped={str(k): int(v) for k, v in op.get("rows_skipped", {}).items()},
            )
            for op in meta["operators"]
        )
        artifact = CorrelationArtifact(
            operators=operators,
            window_seconds=float(meta["window_seconds"]),
            time_start=float(meta["time_start"]),
            time_end=float(meta["time_end"]),
            num_windows=int(meta["num_windows"]),
            means=arrays["means"],
            variances=arrays["variances"],
            matrix=arrays["matrix"],
        )
    except (KeyError, TypeError) as exc:
        raise CorrelationArtifactError(f"artifact meta lacks or mistypes {exc}") from exc
    expected_order = np.array(
        [(i, g) for i, op in enumerate(operators) for g in range(op.num_key_groups)]
    )
    got_order = np.stack([arrays["operator_index"], arrays["key_group"]], axis=-1)
    if got_order.shape != expected_order.shape or not np.array_equal(got_order, expected_order):
        raise CorrelationArtifactError(
            "operator_index/key_group columns are not operator-major, key groups 0..G-1"
        )
    if expected_key_groups is not None:
        check_key_groups(artifact, expected_key_groups)
    return artifact


def check_key_groups(artifact: CorrelationArtifact, expected: Mapping[str, int]) -> None:
    """Raise ``CorrelationArtifactError`` unless operators and their G match ``expected``."""
    got = {op.name: op.num_key_groups for op in artifact.operators}
    if got == dict(expected):
        return
    problems = []
    for name in sorted(set(got) | set(expected)):
        if name not in got:
            problems.append(f"{name}: missing from artifact")
        elif name not in expected:
            problems.append(f"{name}: not in the topology")
        elif got[name] != expected[name]:
            problems.append(
                f"{name}: artifact has {got[name]} key groups, topology has {expected[name]}"
            )
    raise CorrelationArtifactError("artifact does not match the topology: " + "; ".join(problems))


def _validate(a: CorrelationArtifact) -> None:
    if a.version != VERSION:
        raise CorrelationArtifactError(f"version must be {VERSION}, got {a.version}")
    if not a.operators:
        raise CorrelationArtifactError("artifact has no operators")
    names = [op.name for op in a.operators]
    if len(set(names)) != len(names):
        raise CorrelationArtifactError(f"duplicate operator names: {names}")
    if not (math.isfinite(a.window_seconds) and a.window_seconds > 0):
        raise CorrelationArtifactError(f"window_seconds must be > 0, got {a.window_seconds}")
    if a.num_windows < 1:
        raise CorrelationArtifactError(f"num_windows must be >= 1, got {a.num_windows}")
    span = a.num_windows * a.window_seconds
    if not math.isclose(a.time_end - a.time_start, span, rel_tol=1e-9, abs_tol=1e-6):
        raise CorrelationArtifactError(
            f"time range [{a.time_start}, {a.time_end}) is not"
            f" num_windows x window_seconds ({span})"
        )
    k = sum(op.num_key_groups for op in a.operators)
    for name in ("means", "variances"):
        arr = getattr(a, name)
        if not isinstance(arr, np.ndarray) or arr.shape != (k,):
            shape = getattr(arr, "shape", None)
            raise CorrelationArtifactError(f"{name} must have shape ({k},), got {shape}")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise CorrelationArtifactError(f"{name} must be finite and >= 0")
    m = a.matrix
    if not isinstance(m, np.ndarray) or m.shape != (k, k):
        raise CorrelationArtifactError(
            f"matrix must be {k} x {k} (sum of key groups), got {getattr(m, 'shape', None)}"
        )
    constant = a.variances == 0.0
    nan = np.isnan(m)
    expected_nan = constant[:, None] | constant[None, :]
    if not np.array_equal(nan, expected_nan):
        raise CorrelationArtifactError(
            "matrix has NaN outside the rows/columns of constant key groups (or lacks them there)"
        )
    live = m[~expected_nan]
    if np.any(np.abs(live) > 1.0 + _TOL) or not np.all(np.isfinite(live)):
        raise CorrelationArtifactError("matrix has correlations outside [-1, 1]")
    filled = np.where(nan, 0.0, m)
    if not np.allclose(filled, filled.T, rtol=0.0, atol=_TOL):
        raise CorrelationArtifactError("matrix is not symmetric")
    diag = np.diag(m)[~constant]
    if not np.allclose(diag, 1.0, rtol=0.0, atol=_TOL):
        raise CorrelationArtifactError("matrix diagonal is not 1 for non-constant key groups")
