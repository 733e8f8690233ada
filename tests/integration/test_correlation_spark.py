"""The offline correlation job on a real local Spark (pyspark ``local[2]``).

Talks to: Apache Spark, started in-process by pyspark (one session per module).
Small data only; the flights run and the throughput numbers live in
``bench/correlation_bench.py``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elastorm.core.correlation_artifact import decode_artifact
from elastorm.core.keygroups import key_group
from elastorm.errors import UserError
from elastorm.jobs.correlation import (
    JobConfig,
    OperatorInput,
    compute,
    key_group_column,
    run,
    spark_session,
)
from elastorm.jobs.tuple_log import TupleLogWriter

pytestmark = pytest.mark.integration
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2]", app_name="test-correlation")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


def _keys(rng: np.random.Generator) -> list[str]:
    alphabet = list("abcXYZ019-_ é日本語ßø") + ["🚀", "\u0301", "\u00e9", "e\u0301"]
    keys = {"", " ", "N14228", "tailnum", "🚀", "e\u0301", "\u00e9", "日本"}
    while len(keys) < 3000:
        keys.add("".join(rng.choice(alphabet, size=int(rng.integers(1, 12)))))
    return sorted(keys)


def test_spark_key_group_equals_python_key_group(spark):
    keys = _keys(np.random.default_rng(7))
    counts = (1, 2, 7, 48, 1000, 65_536, 2**31 - 1)
    df = spark.createDataFrame([(k,) for k in keys], "key string")
    cols = [key_group_column(df["key"], n).alias(f"g{n}") for n in counts]
    rows = df.select("key", *cols).collect()
    assert len(rows) == len(keys)
    for row in rows:
        for n in counts:
            assert row[f"g{n}"] == key_group(row["key"], n), (row["key"], n)


def _expected(frames: dict[str, pd.DataFrame], groups: dict[str, int], width: float):
    """Windows x key groups loads computed in pandas, independently of the job."""
    w = {name: np.floor(f["ts"].to_numpy() / width).astype(int) for name, f in frames.items()}
    w0 = min(v.min() for v in w.values())
    w1 = max(v.max() for v in w.values())
    blocks = []
    for name, f in frames.items():
        block = np.zeros((w1 - w0 + 1, groups[name]))
        for key, win in zip(f["key"], w[name], strict=True):
            block[win - w0, key_group(key, groups[name])] += 1
        blocks.append(block)
    return np.hstack(blocks), w0


def _frame(rng, n, t_end, keys, gap=None) -> pd.DataFrame:
    ts = rng.uniform(0, t_end, n)
    if gap is not None:
        ts = ts[(ts < gap[0]) | (ts >= gap[1])]
    return pd.DataFrame({"key": rng.choice(keys, ts.size), "ts": ts})


def test_matches_numpy_corrcoef_with_empty_windows(spark, tmp_path):
    rng = np.random.default_rng(11)
    keys = ["N1", "N2", "é", "日本", "", "k5", "k6", "k7", "k8"]
    a = _frame(rng, 3000, 36_000, keys, gap=(7_200, 10_800))  # windows 12..17 empty for a
    b = _frame(rng, 2000, 36_000, keys[2:5])  # 8 key groups, at most 3 used: constant zeros
    a.to_parquet(tmp_path / "a.parquet")
    b.to_csv(tmp_path / "b.csv", index=False)
    groups = {"a": 6, "b": 8}
    config = JobConfig(
        inputs=(
            OperatorInput(name="a", path=str(tmp_path / "a.parquet"), num_key_groups=6),
            OperatorInput(name="b", path=str(tmp_path / "b.csv"), num_key_groups=8),
        ),
        window_seconds=600,
    )
    art = compute(spark, config).artifact
    loads, w0 = _expected({"a": a, "b": b[b["key"] != ""]}, groups, 600.0)
    assert art.num_windows == loads.shape[0] == 60 and art.time_start == w0 * 600.0
    assert art.operators[0].rows_used == len(a) and len(a) < 3000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.corrcoef(loads.T)
    constant = loads.std(axis=0) == 0
    assert constant.sum() >= 5 and np.array_equal(art.constant, constant)
    live = ~(constant[:, None] | constant[None, :])
    assert np.max(np.abs(art.matrix[live] - expected[live])) < 1e-9
    assert np.all(np.isnan(art.matrix[~live]))
    assert np.allclose(art.means, loads.mean(axis=0), rtol=0, atol=1e-9)
    assert np.allclose(art.variances, loads.var(axis=0), rtol=0, atol=1e-9)
    # CSV reads an empty key as null: counted, not silently hashed as "".
    assert dict(art.operators[1].rows_skipped) == {"missing_key": int((b["key"] == "").sum())} != {}

    on_spark = compute(
        spark, JobConfig(inputs=config.inputs, window_seconds=600, correlate_on="spark")
    )
    assert np.array_equal(on_spark.artifact.constant, art.constant)
    assert np.nanmax(np.abs(on_spark.artifact.matrix - art.matrix)) < 1e-9
    assert np.allclose(on_spark.artifact.variances, art.variances, rtol=1e-12, atol=1e-9)


def test_bad_rows_are_counted_or_fail(spark, tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_bytes(
        b"key,ts\n"
        b"good,2013-01-01T10:00:00Z\n"
        b"\xff\xfebad,2013-01-01T10:05:00Z\n"  # not UTF-8
        b",2013-01-01T10:06:00Z\n"  # no key
        b"good,\n"  # no timestamp
        b"good,yesterday\n"  # unparseable timestamp
        b"other,1356998400.5\n"  # epoch seconds as text
    )
    pq.write_table(
        pa.table({"key": pa.array([b"ok", b"\xc3\x28", None], pa.binary()), "ts": [1.0, 2.0, 3.0]}),
        tmp_path / "bin.parquet",
    )
    inputs = (
        OperatorInput(name="c", path=str(csv), num_key_groups=3),
        OperatorInput(name="p", path=str(tmp_path / "bin.parquet"), num_key_groups=2),
    )
    art = compute(spark, JobConfig(inputs=inputs, window_seconds=3600)).artifact
    c, p = art.operators
    assert (c.rows_read, c.rows_used) == (6, 2)
    assert dict(c.rows_skipped) == {
        "undecodable_key": 1,
        "missing_key": 1,
        "missing_timestamp": 1,
        "bad_timestamp": 1,
    }
    assert (p.rows_used, dict(p.rows_skipped)) == (1, {"undecodable_key": 1, "missing_key": 1})
    with pytest.raises(UserError, match="operator c: bad rows in .*1 bad_timestamp"):
        compute(spark, JobConfig(inputs=inputs, window_seconds=3600, bad_rows="fail"))


def test_missing_columns_and_empty_inputs_are_user_errors(spark, tmp_path):
    pd.DataFrame({"tailnum": ["a"], "time_hour": [1.0]}).to_csv(tmp_path / "f.csv", index=False)
    (tmp_path / "empty.csv").write_text("key,ts\n")

    def job(path, **kw):
        op = OperatorInput(name="x", path=str(path), num_key_groups=4, **kw)
        return compute(spark, JobConfig(inputs=(op,), window_seconds=60))

    with pytest.raises(UserError, match="has no column.*key, ts; columns are: tailnum, time_hour"):
        job(tmp_path / "f.csv")
    with pytest.raises(UserError, match="no usable rows .*read 0"):
        job(tmp_path / "empty.csv")
    with pytest.raises(UserError, match="cannot read parquet input"):
        job(tmp_path / "nothing-here")
    with pytest.raises(UserError, match="no usable rows .*read 1, skipped 1"):
        op = OperatorInput(name="x", path=str(tmp_path / "f.csv"), num_key_groups=4)
        compute(
            spark,
            JobConfig(
                inputs=(
                    OperatorInput(
                        name="x",
                        path=op.path,
                        num_key_groups=4,
                        key_column="tailnum",
                        ts_column="time_hour",
                    ),
                ),
                window_seconds=60,
                time_start=100.0,
            ),
        )


def test_tuple_log_end_to_end_through_run(spark, tmp_path, capsys):
    rng = np.random.default_rng(3)
    logged = []
    with TupleLogWriter(tmp_path / "logs", "op4", sample_rate=0.5, seed=9, batch_rows=500) as w:
        for _ in range(3000):
            key, ts = f"plane{rng.integers(0, 40)}", float(rng.uniform(0, 7200))
            if w.write(key, ts):
                logged.append((key, ts))
    args = argparse.Namespace(
        input=["name=op4,path=" + str(tmp_path / "logs" / "op4") + ",groups=5,format=tuplelog"],
        window=600.0,
        output=str(tmp_path / "out.npz"),
        master=None,
        bad_rows="fail",
        correlate_on="driver",
        start=0.0,
        end=7200.0,
        top=2,
    )
    assert run(args, spark=spark) == 0
    art = decode_artifact((tmp_path / "out.npz").read_bytes(), expected_key_groups={"op4": 5})
    frame = pd.DataFrame(logged, columns=["key", "ts"])
    loads, _ = _expected({"op4": frame}, {"op4": 5}, 600.0)
    assert art.num_windows == 12 and art.operators[0].rows_used == len(logged)
    assert np.allclose(art.means, 2.0 * loads.mean(axis=0), rtol=0, atol=1e-9)  # weight 1/0.5
    assert np.max(np.abs(art.matrix - np.corrcoef(loads.T))) < 1e-9
    out = capsys.readouterr().out
    assert f"operator op4: {len(logged)} rows read" in out and "strongest negative" in out


def test_spark_submit_runs_the_job_file(tmp_path):
    pd.DataFrame({"key": ["a", "b", "c", "a"] * 50, "ts": np.arange(200) * 30.0}).to_csv(
        tmp_path / "in.csv", index=False
    )
    out = tmp_path / "o.npz"
    # The project's own spark-submit and interpreter, whatever PATH holds.
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[1]",
            str(SRC / "elastorm" / "jobs" / "correlation.py"),
            "-i",
            f"name=op,path={tmp_path / 'in.csv'},groups=3",
            "--window",
            "600",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    art = decode_artifact(out.read_bytes(), expected_key_groups={"op": 3})
    assert art.num_windows == 10 and art.operators[0].rows_used == 200
    assert "artifact:" in proc.stdout
    assert zlib.crc32(b"a") % 3 == key_group("a", 3)
