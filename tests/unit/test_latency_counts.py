"""The throughput benchmark's latency counts (demos.latency_counts)."""

from __future__ import annotations

import json

import pytest

from demos import latency_counts
from demos.latency_counts import SECONDS_KEPT, LatencyCounts, bucket_edge


def test_bucket_edges_are_bounded_and_ordered():
    assert [bucket_edge(ms) for ms in (0.0, 0.03, 3.21, 9.99, 10.0, 42.5, 300.1, 9e9)] == [
        "0.1", "0.1", "3.3", "10.0", "10", "43", "310", "2000",
    ]  # fmt: skip
    edges = {bucket_edge(ms / 7) for ms in range(20_000)}
    assert len(edges) < 400


def test_counts_histogram_and_the_worst_of_each_second(tmp_path, monkeypatch):
    clock = iter([100.2, 100.5, 100.9, 101.1, 101.3])
    monkeypatch.setattr(latency_counts.time, "time", lambda: next(clock))
    counts = LatencyCounts(str(tmp_path / "throughput-3.json"))
    for stamp in (100.19, 100.305, 100.85, 101.0, 101.29):  # 10, 195, 50, 100, 10 ms
        counts.add(stamp)
    assert counts.tuples == 5
    assert counts.worst == {100: pytest.approx(195.0), 101: pytest.approx(100.0)}
    assert sum(counts.histogram.values()) == 5 and counts.histogram["200"] == 1
    monkeypatch.setattr(latency_counts.time, "time", lambda: 102.0)
    counts.write()
    written = json.loads((tmp_path / "throughput-3.json").read_text())
    assert written["tuples"] == 5 and written["at"] == 102.0
    assert written["worst"] == {"100": 195.0, "101": 100.0}


def test_only_the_last_seconds_are_kept(tmp_path, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(latency_counts.time, "time", lambda: now[0])
    counts = LatencyCounts(str(tmp_path / "t.json"))
    for second in range(SECONDS_KEPT + 30):
        now[0] = second + 0.5
        counts.add(second + 0.4)
    assert len(counts.worst) == SECONDS_KEPT
    assert min(counts.worst) == 30 and max(counts.worst) == SECONDS_KEPT + 29
