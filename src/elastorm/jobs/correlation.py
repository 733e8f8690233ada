"""Offline PySpark job: key-group load per time window and Pearson correlations.

Reads stream history per operator (a CSV or Parquet dataset with a key and a
timestamp column, or a tuple log written by ``elastorm.jobs.tuple_log``), assigns every
row the topology's key group (``crc32(utf8(key)) mod G``, Spark SQL ``crc32``),
counts the load of each key group in each time window on Spark, and writes a
``elastorm.core.correlation_artifact`` with means, variances and the Pearson matrix
over all key groups of all operators. See ``docs/correlation.md``.

Where the work happens (measured in ``bench/correlation_bench.py``, written
down in ``docs/benchmarks.md``): the scan, key-group assignment and the
group-by to (operator, key group, window) cells run on Spark, which scales with
the number of rows; only the aggregated cells (at most windows x key groups,
never raw rows) reach the driver, where numpy correlates the dense matrix with
one BLAS product. ``correlate_on="spark"`` does the correlation with
``pyspark.mllib`` ``Statistics.corr`` instead (cells never leave Spark).

Run with ``elastorm correlate --help`` or
``spark-submit src/elastorm/jobs/correlation.py --help``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file by spark-submit: make src/ importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elastorm.core.correlation_artifact import (  # noqa: E402
    CorrelationArtifact,
    OperatorStats,
    encode_artifact,
    pearson_from_loads,
)
from elastorm.errors import UserError  # noqa: E402

log = logging.getLogger("elastorm.correlate")

#: Upper bound on windows x key groups held densely on the driver (float64).
MAX_DENSE_CELLS = 200_000_000

_FORMATS = ("auto", "csv", "parquet", "tuplelog")
_SPEC_KEYS = {"name", "path", "groups", "key", "ts", "format", "weight"}


@dataclass(frozen=True, kw_only=True)
class OperatorInput:
    """Where one operator's history lives and how to read it.

    ``format="tuplelog"`` reads a ``TupleLogWriter`` directory: Parquet with
    columns ``key``, ``ts`` and ``weight`` (1 / sample rate). ``weight_column``
    (optional) makes a row count as that many tuples instead of one.
    """

    name: str
    path: str
    num_key_groups: int
    key_column: str = "key"
    ts_column: str = "ts"
    format: str = "auto"
    weight_column: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise UserError("operator input needs a name (name=...)")
        if self.num_key_groups < 1:
            raise UserError(f"operator {self.name}: groups must be >= 1, got {self.num_key_groups}")
        if self.format not in _FORMATS:
            raise UserError(
                f"operator {self.name}: format must be one of {', '.join(_FORMATS)},"
                f" got {self.format!r}"
            )

    @property
    def resolved_format(self) -> str:
        """``csv`` or ``parquet`` (``tuplelog`` is Parquet)."""
        if self.format in ("csv", "parquet"):
            return self.format
        if self.format == "tuplelog":
            return "parquet"
        lowered = self.path.lower()
        if lowered.endswith(".zip"):
            raise UserError(
                f"operator {self.name}: Spark cannot read .zip archives ({self.path}); unzip it"
            )
        csv_suffixes = (".csv", ".csv.gz", ".csv.bz2", ".tsv", ".txt")
        return "csv" if lowered.endswith(csv_suffixes) else "parquet"


def parse_input_spec(spec: str) -> OperatorInput:
    """Parse ``name=op1,path=data.csv,groups=48,key=tailnum,ts=time_hour[,format=..][,weight=..]``.

    With ``format=tuplelog``, ``key``/``ts``/``weight`` default to the tuple-log
    columns. Raises ``UserError`` on unknown or missing fields.
    """
    fields: dict[str, str] = {}
    for part in spec.split(","):
        if "=" not in part:
            raise UserError(f"input spec part {part!r} is not key=value (in {spec!r})")
        k, v = part.split("=", 1)
        k = k.strip()
        if k not in _SPEC_KEYS:
            raise UserError(
                f"unknown input spec field {k!r}; known: {', '.join(sorted(_SPEC_KEYS))}"
            )
        fields[k] = v.strip()
    for required in ("name", "path", "groups"):
        if required not in fields:
            raise UserError(f"input spec {spec!r} lacks {required}=")
    try:
        groups = int(fields["groups"])
    except ValueError:
        raise UserError(f"groups must be an integer, got {fields['groups']!r}") from None
    fmt = fields.get("format", "auto")
    tuplelog = fmt == "tuplelog"
    return OperatorInput(
        name=fields["name"],
        path=fields["path"],
        num_key_groups=groups,
        key_column=fields.get("key", "key"),
        ts_column=fields.get("ts", "ts"),
        format=fmt,
        weight_column=fields.get("weight", "weight" if tuplelog else None),
    )


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """Everything one run needs. Times are epoch seconds; windows are epoch-aligned."""

    inputs: tuple[OperatorInput, ...]
    window_seconds: float
    bad_rows: str = "skip"  # "skip" (count and report) or "fail"
    correlate_on: str = "driver"  # "driver" (numpy) or "spark" (mllib)
    time_start: float | None = None
    time_end: float | None = None
    top: int = 5

    def __post_init__(self) -> None:
        if not self.inputs:
            raise UserError("give at least one --input")
        names = [op.name for op in self.inputs]
        if len(set(names)) != len(names):
            raise UserError(f"operator names must be unique, got {names}")
        if not (math.isfinite(self.window_seconds) and self.window_seconds > 0):
            raise UserError(f"--window must be > 0 seconds, got {self.window_seconds}")
        if self.bad_rows not in ("skip", "fail"):
            raise UserError(f"--bad-rows must be skip or fail, got {self.bad_rows!r}")
        if self.correlate_on not in ("driver", "spark"):
            raise UserError(f"--correlate-on must be driver or spark, got {self.correlate_on!r}")
        if (
            self.time_start is not None
            and self.time_end is not None
            and self.time_end <= self.time_start
        ):
            raise UserError("--end must be after --start")


@dataclass(kw_only=True)
class JobResult:
    """The artifact plus what the summary reports."""

    artifact: CorrelationArtifact
    cells: int  # non-empty (operator, key group, window) cells
    seconds: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- Spark side


def key_group_column(key, num_key_groups: int):
    """Spark Column: the topology's key group, ``crc32(utf8(key)) mod G``.

    Spark's ``crc32`` takes the key's bytes (a string casts to its UTF-8) and
    returns the unsigned checksum as a non-negative bigint, so ``pmod`` equals
    Python's ``zlib.crc32(key.encode()) % G`` (``elastorm.core.keygroups.key_group``).
    """
    from pyspark.sql import functions as F

    return F.pmod(F.crc32(key.cast("binary")), F.lit(num_key_groups)).cast("int")


def _read(spark, op: OperatorInput):
    fmt = op.resolved_format
    try:
        if fmt == "csv":
            # All columns as strings: one pass, no inference; timestamps parsed below.
            return spark.read.option("header", True).option("mode", "PERMISSIVE").csv(op.path)
        return spark.read.parquet(op.path)
    except Exception as exc:  # AnalysisException and friends: path missing, no files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"operator {op.name}: cannot read {fmt} input {op.path}: {first}") from exc


def _timestamp_seconds(column, dtype):
    """Spark Column of epoch seconds (double) from a timestamp, date, number or string."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(dtype, T.TimestampType | T.TimestampNTZType | T.DateType):
        return F.unix_micros(column.cast("timestamp")) / F.lit(1e6)
    if isinstance(dtype, T.NumericType):
        return column.cast("double")
    if isinstance(dtype, T.StringType):
        as_number = column.try_cast("double")
        as_time = F.unix_micros(F.try_to_timestamp(column)) / F.lit(1e6)
        return F.coalesce(as_number, as_time)
    return None


def _tag_rows(spark, op: OperatorInput, op_index: int, config: JobConfig):
    """DataFrame(op, kg, w, reason, weight): one row per input row, bad rows tagged."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    df = _read(spark, op)
    wanted = [op.key_column, op.ts_column] + ([op.weight_column] if op.weight_column else [])
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise UserError(
            f"operator {op.name}: {op.path} has no column(s) {', '.join(missing)};"
            f" columns are: {', '.join(df.columns) or '(none)'}"
        )
    types = {f.name: f.dataType for f in df.schema.fields}
    key_type = types[op.key_column]
    raw_key = F.col(op.key_column)
    if isinstance(key_type, T.StringType | T.BinaryType):
        key = raw_key.cast("string")
    elif isinstance(key_type, T.IntegralType):
        key = raw_key.cast("string")  # the topology's key is str(int)
    else:
        raise UserError(
            f"operator {op.name}: key column {op.key_column} has type {key_type.simpleString()};"
            " use string, binary or integer keys"
        )
    undecodable = ~F.is_valid_utf8(key)
    if op.resolved_format == "csv":
        # Spark's CSV reader silently replaces invalid UTF-8 with U+FFFD.
        undecodable = undecodable | key.contains("\ufffd")
    ts = _timestamp_seconds(F.col(op.ts_column), types[op.ts_column])
    if ts is None:
        raise UserError(
            f"operator {op.name}: timestamp column {op.ts_column} has type"
            f" {types[op.ts_column].simpleString()}; use a timestamp, epoch seconds or a string"
        )
    weight = F.col(op.weight_column).cast("double") if op.weight_column else F.lit(1.0)
    window = F.floor(ts / F.lit(float(config.window_seconds))).cast("long")
    in_range = F.lit(True)
    if config.time_start is not None:
        in_range = in_range & (ts >= F.lit(float(config.time_start)))
    if config.time_end is not None:
        in_range = in_range & (ts < F.lit(float(config.time_end)))
    # Why a row is not counted (recorded per operator in the artifact), first match wins.
    reason = (
        F.when(raw_key.isNull(), "missing_key")
        .when(undecodable, "undecodable_key")
        .when(F.col(op.ts_column).isNull(), "missing_timestamp")
        .when(ts.isNull() | F.isnan(ts) | (F.abs(ts) == float("inf")), "bad_timestamp")
        .when(~in_range, "outside_time_range")
        .when(weight.isNull() | F.isnan(weight) | (weight < 0), "bad_weight")
    )
    good = reason.isNull()
    return df.select(
        F.lit(op_index).alias("op"),
        F.when(good, key_group_column(key, op.num_key_groups)).alias("kg"),
        F.when(good, window).alias("w"),
        reason.alias("reason"),
        F.when(good, weight).otherwise(F.lit(0.0)).alias("weight"),
    )


def aggregate_cells(spark, config: JobConfig):
    """One Spark DataFrame of cells ``(op, kg, w, reason, rows, load)`` over all inputs.

    Good rows are grouped by (operator, key group, window); bad rows by reason
    (with ``kg``/``w`` null). Its size is bounded by windows x key groups, not rows.
    """
    from pyspark.sql import functions as F

    tagged = None
    for i, op in enumerate(config.inputs):
        part = _tag_rows(spark, op, i, config)
        tagged = part if tagged is None else tagged.unionByName(part)
    return tagged.groupBy("op", "kg", "w", "reason").agg(
        F.count(F.lit(1)).alias("rows"), F.sum("weight").alias("load")
    )


def _correlate_on_spark(spark, cells, num_windows: int, w0: int, offsets: np.ndarray):
    """Means, variances (ddof 0), Pearson matrix via ``pyspark.mllib`` on the cells."""
    from pyspark.mllib.linalg import Vectors
    from pyspark.mllib.stat import Statistics

    k = int(offsets[-1])
    offs = [int(o) for o in offsets]

    def to_entry(row):
        return int(row["w"]) - w0, (offs[int(row["op"])] + int(row["kg"]), float(row["load"]))

    empty = spark.sparkContext.parallelize(range(num_windows)).map(lambda w: (w, None))
    by_window = (
        cells.where("reason IS NULL")
        .rdd.map(to_entry)
        .union(empty)
        .groupByKey()
        .map(lambda kv: Vectors.sparse(k, sorted(e for e in kv[1] if e is not None)))
        .cache()
    )
    try:
        summary = Statistics.colStats(by_window)
        corr = np.asarray(Statistics.corr(by_window, method="pearson"), dtype=np.float64)
    finally:
        by_window.unpersist()
    means = np.asarray(summary.mean(), dtype=np.float64)
    variances = np.asarray(summary.variance(), dtype=np.float64) * (num_windows - 1) / num_windows
    constant = np.asarray(summary.max()) == np.asarray(summary.min())
    variances[constant] = 0.0
    corr = np.clip(corr, -1.0, 1.0)
    corr[constant, :] = np.nan
    corr[:, constant] = np.nan
    live = np.flatnonzero(~constant)
    corr[live, live] = 1.0
    return means, variances, (corr + corr.T) / 2.0


class _Progress:
    """Log Spark's active stages every ``interval`` seconds while a step runs."""

    def __init__(self, spark, interval: float = 5.0) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="correlate-progress", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    log.info(
                        "  stage %d: %d/%d tasks done, %d running",
                        stage_id,
                        info.numCompletedTasks,
                        info.numTasks,
                        info.numActiveTasks,
                    )

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def compute(spark, config: JobConfig, *, clock: Callable[[], float] | None = None) -> JobResult:
    """Run the job on ``spark`` and return the validated artifact (nothing written).

    Raises ``UserError`` for unreadable inputs, missing columns, an operator
    without usable rows, bad rows under ``bad_rows="fail"``, or a window too
    small for the time range.
    """
    import time

    clock = clock or time.perf_counter
    seconds: dict[str, float] = {}
    t = clock()
    for op in config.inputs:
        log.info("input %s: %s (%s), %d key groups", op.name, op.path, op.format, op.num_key_groups)
    log.info("aggregating rows to (operator, key group, window) cells on Spark ...")
    cells_df = aggregate_cells(spark, config)
    if config.correlate_on == "spark":
        cells_df = cells_df.cache()
    with _Progress(spark):
        cells = cells_df.toPandas()
    seconds["aggregate"] = clock() - t
    bad = cells[cells["reason"].notna()]
    good = cells[cells["reason"].isna()]
    log.info("collected %d non-empty cells in %.1f s", len(good), seconds["aggregate"])

    stats = []
    for i, op in enumerate(config.inputs):
        mine_bad = bad[bad["op"] == i]
        skipped = {
            str(r): int(n) for r, n in zip(mine_bad["reason"], mine_bad["rows"], strict=True)
        }
        used = int(good.loc[good["op"] == i, "rows"].sum())
        stats.append(
            OperatorStats(
                name=op.name,
                num_key_groups=op.num_key_groups,
                source=op.path,
                rows_read=used + sum(skipped.values()),
                rows_used=used,
                rows_skipped=skipped,
            )
        )
        if skipped:
            detail = ", ".join(f"{n} {r}" for r, n in sorted(skipped.items()))
            if config.bad_rows == "fail":
                raise UserError(f"operator {op.name}: bad rows in {op.path}: {detail}")
            log.warning("operator %s: skipped %s", op.name, detail)
        if used == 0:
            raise UserError(
                f"operator {op.name}: no usable rows in {op.path}"
                f" (read {stats[-1].rows_read}, skipped {sum(skipped.values())})"
            )

    width = float(config.window_seconds)
    if config.time_start is not None:
        w0 = math.floor(config.time_start / width)
    else:
        w0 = int(good["w"].min())
    if config.time_end is not None:
        w_last = math.ceil(config.time_end / width) - 1
    else:
        w_last = int(good["w"].max())
    num_windows = w_last - w0 + 1
    offsets = np.cumsum([0] + [op.num_key_groups for op in config.inputs])
    k = int(offsets[-1])
    if num_windows * k > MAX_DENSE_CELLS:
        raise UserError(
            f"{num_windows} windows x {k} key groups is too large to correlate;"
            " use a wider --window or a shorter --start/--end range"
        )
    log.info("correlating %d key groups over %d windows of %g s", k, num_windows, width)
    t = clock()
    if config.correlate_on == "spark":
        means, variances, matrix = _correlate_on_spark(spark, cells_df, num_windows, w0, offsets)
        cells_df.unpersist()
    else:
        loads = np.zeros((num_windows, k), dtype=np.float64)
        cols = offsets[good["op"].to_numpy(dtype=np.int64)] + good["kg"].to_numpy(dtype=np.int64)
        np.add.at(loads, (good["w"].to_numpy(dtype=np.int64) - w0, cols), good["load"].to_numpy())
        means, variances, matrix = pearson_from_loads(loads)
    seconds["correlate"] = clock() - t
    artifact = CorrelationArtifact(
        operators=tuple(stats),
        window_seconds=width,
        time_start=w0 * width,
        time_end=(w_last + 1) * width,
        num_windows=num_windows,
        means=means,
        variances=variances,
        matrix=matrix,
    )
    return JobResult(artifact=artifact, cells=len(good), seconds=seconds)


def summary_text(result: JobResult, top: int = 5) -> str:
    """Human summary: rows, windows, key groups, strongest pairs, operator correlations."""
    a = result.artifact
    names = a.key_groups
    lines = [
        f"windows: {a.num_windows} x {a.window_seconds:g} s,"
        f" [{_iso(a.time_start)}, {_iso(a.time_end)})",
        f"key groups: {a.num_key_groups} ({int(a.constant.sum())} constant: correlation NaN)",
        f"non-empty cells: {result.cells} of {a.num_windows * a.num_key_groups}",
    ]
    for op in a.operators:
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(op.rows_skipped.items())) or "none"
        lines.append(
            f"operator {op.name}: {op.rows_read} rows read, {op.rows_used} used, skipped: {skipped}"
        )
    for title, negative in (("strongest positive", False), ("strongest negative", True)):
        lines.append(f"{title} pairs:")
        for value, i, j in a.strongest_pairs(top, negative=negative):
            lines.append(
                f"  {value:+.4f}  {names[i][0]}/{names[i][1]} ~ {names[j][0]}/{names[j][1]}"
            )
    op_corr = a.operator_correlation()
    lines.append("operator total-load correlation:")
    width = max(len(op.name) for op in a.operators)
    for i, op in enumerate(a.operators):
        row = " ".join(f"{v:+.3f}" if not np.isnan(v) else "   nan" for v in op_corr[i])
        lines.append(f"  {op.name:>{width}} {row}")
    return "\n".join(lines)


def _iso(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- entry points


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options (shared by ``elastorm correlate`` and ``spark-submit``)."""
    parser.add_argument(
        "--input",
        "-i",
        action="append",
        required=True,
        metavar="SPEC",
        help="one operator's history: name=OP,path=PATH,groups=G[,key=COL][,ts=COL]"
        "[,format=auto|csv|parquet|tuplelog][,weight=COL]; repeat per operator",
    )
    parser.add_argument(
        "--window", type=float, required=True, metavar="SECONDS", help="window width in seconds"
    )
    parser.add_argument("--output", "-o", required=True, help="artifact path to write (.npz)")
    parser.add_argument(
        "--master", help="Spark master URL (default: spark-submit's, else local[*])"
    )
    parser.add_argument(
        "--bad-rows",
        choices=("skip", "fail"),
        default="skip",
        help="rows without a usable key/timestamp: skip and count them (default) or fail",
    )
    parser.add_argument(
        "--correlate-on",
        choices=("driver", "spark"),
        default="driver",
        help="correlate the aggregated matrix with numpy on the driver (default) or on Spark",
    )
    parser.add_argument("--start", type=float, help="only rows with ts >= START (epoch seconds)")
    parser.add_argument("--end", type=float, help="only rows with ts < END (epoch seconds)")
    parser.add_argument("--top", type=int, default=5, help="pairs listed in the summary")


def config_from_args(args: argparse.Namespace) -> JobConfig:
    """Build a ``JobConfig`` from parsed arguments (raises ``UserError``)."""
    return JobConfig(
        inputs=tuple(parse_input_spec(s) for s in args.input),
        window_seconds=args.window,
        bad_rows=args.bad_rows,
        correlate_on=args.correlate_on,
        time_start=args.start,
        time_end=args.end,
        top=args.top,
    )


#: Set unless the user's Spark configuration already sets them.
_SPARK_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
}


def spark_session(master: str | None = None, app_name: str = "elastorm-correlate"):
    """A SparkSession: ``master`` if given, else spark-submit's, else ``local[*]``."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    # Python workers run this interpreter (the one with numpy and pyarrow), not whatever
    # ``python3`` is first on PATH; PYSPARK_PYTHON or spark.pyspark.python still win.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Loads spark-submit's conf; pyspark's own default master is local[*].
    SparkContext._ensure_initialized()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = SparkConf()
    for key, value in _SPARK_DEFAULTS.items():
        if not conf.contains(key):
            builder = builder.config(key, value)
    # Our own progress log replaces Spark's console bar (which garbles log files).
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(args: argparse.Namespace, spark=None) -> int:
    """Run the job from parsed arguments; write the artifact; print the summary."""
    config = config_from_args(args)
    output = Path(args.output)
    if output.parent and not output.parent.exists():
        raise UserError(f"output directory {output.parent} does not exist")
    own = spark is None
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if own:
        spark = spark_session(args.master)
    try:
        result = compute(spark, config)
    finally:
        if own:
            spark.stop()
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_bytes(encode_artifact(result.artifact))
    os.replace(tmp, output)
    print(summary_text(result, config.top))
    print(f"artifact: {output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit src/elastorm/jobs/correlation.py ...`` entry point."""
    parser = argparse.ArgumentParser(
        prog="correlation.py", description="Key-group load correlation statistics (offline)."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return run(args)
    except UserError as exc:
        print(f"correlation.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
