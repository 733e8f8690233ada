"""The sampled tuple-log writer: files, sampling, determinism."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from elastorm.jobs.tuple_log import TupleLogWriter


def _read(directory):
    files = sorted(p for p in directory.iterdir())
    return files, [pq.read_table(f).to_pylist() for f in files]


def test_full_rate_logs_everything_in_batches(tmp_path):
    with TupleLogWriter(tmp_path, "op1", batch_rows=3, task=7) as w:
        for i in range(8):
            assert w.write(f"k{i}", 100.0 + i)
    files, tables = _read(tmp_path / "op1")
    assert [f.name for f in files] == [f"part-7-{i:06d}.parquet" for i in range(3)]
    rows = [r for t in tables for r in t]
    assert [(r["key"], r["ts"], r["weight"]) for r in rows] == [
        (f"k{i}", 100.0 + i, 1.0) for i in range(8)
    ]
    assert w.seen == 8


def test_sampling_is_seeded_and_near_the_rate(tmp_path):
    def logged(seed, directory):
        with TupleLogWriter(directory, "op", sample_rate=0.1, seed=seed, task=0) as w:
            return [w.write(str(i), float(i)) for i in range(5000)]

    a, b, c = logged(1, tmp_path / "a"), logged(1, tmp_path / "b"), logged(2, tmp_path / "c")
    assert a == b and a != c
    assert 400 <= sum(a) <= 600  # Binomial(5000, 0.1): mean 500, sd ~21
    _, tables = _read(tmp_path / "a" / "op")
    rows = [r for t in tables for r in t]
    assert len(rows) == sum(a) and all(r["weight"] == pytest.approx(10.0) for r in rows)


def test_unicode_keys_survive_and_nothing_written_when_empty(tmp_path):
    with TupleLogWriter(tmp_path, "op", task=0) as w:
        assert w.flush() is None
        w.write("été/日本", 1.5)
        w.write("", 2.0)
    _, tables = _read(tmp_path / "op")
    assert [r["key"] for r in tables[0]] == ["été/日本", ""]


def test_bad_arguments_and_use_after_close(tmp_path):
    with pytest.raises(ValueError, match="sample_rate"):
        TupleLogWriter(tmp_path, "op", sample_rate=0.0)
    with pytest.raises(ValueError, match="operator"):
        TupleLogWriter(tmp_path, "../op")
    w = TupleLogWriter(tmp_path, "op")
    with pytest.raises(TypeError, match="key must be str"):
        w.write(b"bytes", 1.0)
    w.close()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write("k", 1.0)
