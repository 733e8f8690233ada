"""The flights checkpoint-allocation simulation (bench/flights_allocation_sim.py), tiny.

Real flights rows (the first month), 16 key groups per operator, 300 simulated
seconds: the structure must hold whatever the headline numbers are.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from elastorm.core.keygroups import key_group

_PATH = Path(__file__).resolve().parents[2] / "bench" / "flights_allocation_sim.py"


def _load():
    if str(_PATH.parent) not in sys.path:  # its sibling placement_probe, as when run
        sys.path.insert(0, str(_PATH.parent))
    spec = importlib.util.spec_from_file_location("flights_allocation_sim", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sim = _load()
G = 16


@pytest.fixture(scope="module")
def rows():
    return sim.read_rows(limit=30_000)


@pytest.fixture(scope="module")
def loads(rows):
    return sim.window_loads(rows, G, smooth=24, samples=80, seed=3)


def tiny(strategy: str):
    return sim.SimConfig(
        strategy=strategy,
        rounds=300,
        warmup=100,
        window=20,
        start_util=0.5,
        ramp_to=2.5,
        op4_util=0.1,
    )


@pytest.fixture(scope="module")
def runs(loads):
    out = {}
    for strategy in ("baseline", "even", "correlated", "ring"):
        cluster = sim.FlightsCluster(loads, tiny(strategy))
        out[strategy] = (cluster, cluster.run())
    return out


def test_window_loads_count_every_row_once_with_the_jobs_key_groups(rows) -> None:
    raw = sim.window_loads(rows, G, smooth=1, samples=7, seed=3)
    c = raw.counts
    assert c["op1"].sum() == len(rows)
    assert c["op2"].sum() == c["op3"].sum() == rows.forwarded.sum() < len(rows)
    assert np.all(c["op4"].sum(axis=1) == 7)  # a fixed number of samples per window
    first = rows.keys[0]
    w0 = int((rows.ts[0] - raw.start) // raw.window_seconds)
    assert c["op1"][w0, key_group(first, G)] >= 1
    smooth = sim.window_loads(rows, G, smooth=24, samples=7, seed=3).counts["op1"]
    assert smooth[30] == pytest.approx(c["op1"][7:31].mean(axis=0))
    assert smooth[0] == pytest.approx(c["op1"][0])


def test_trailing_mean_and_bad_arguments() -> None:
    x = np.arange(8, dtype=float).reshape(4, 2)
    assert sim.trailing_mean(x, 2).tolist() == [[0, 1], [1, 2], [3, 4], [5, 6]]
    with pytest.raises(ValueError):
        sim.window_loads(sim.FlightsRows(("a",), np.array([True]), np.array([0])), 4, smooth=0)
    with pytest.raises(ValueError, match="windows of data"):
        sim.FlightsCluster(sim.window_loads(sim.read_rows(limit=100), G), tiny("even"))


def test_layout_puts_op4_on_every_fifth_node_and_starts_there(loads) -> None:
    cluster = sim.FlightsCluster(loads, tiny("even"))
    assert cluster.sample == ["n04", "n09", "n14", "n19"] and len(cluster.work) == 16
    place, controls = cluster.loop.placement, cluster.loop.controls
    for op, control in controls.items():
        homes = {place.node_of(control.owner(g)) for g in range(G)}
        assert homes == set(cluster.sample if op == "op4" else cluster.work)
    blocked = sim.FlightsCluster(loads, dataclasses.replace(tiny("even"), layout="blocked"))
    assert blocked.sample == ["n16", "n17", "n18", "n19"]


def test_node_model_saturates_at_capacity_and_queues_the_rest(loads) -> None:
    cluster = sim.FlightsCluster(loads, tiny("even"))
    records = cluster.records(299)  # end of the ramp: some node is over capacity
    by_node: dict[str, float] = {}
    for r in records:
        by_node[r.identity.node_id] = by_node.get(r.identity.node_id, 0.0) + r.heartbeat.cpu
    assert max(by_node.values()) == pytest.approx(1.0)
    assert all(0.0 <= v <= 1.0 + 1e-9 for v in by_node.values())
    assert any(b > 0 for b in cluster.backlog.values())
    assert all(b >= 0 for b in cluster.backlog.values())


def test_every_strategy_migrates_and_its_shares_are_shares(runs) -> None:
    for strategy, (cluster, result) in runs.items():
        loop = cluster.loop
        assert result.strategy == strategy and result.migrations > 0, strategy
        assert result.allocated_at == pytest.approx(100.0, abs=2.0)
        assert 0.0 <= result.assisted_share <= 1.0
        assert result.assisted == round(result.assisted_share * result.migrations)
        assert result.overloaded_rounds == len(loop.usable_samples) > 0
        assert all(0.0 <= s <= 1.0 for _, s in loop.usable_samples)
        assert result.usable_mean == pytest.approx(np.mean([s for _, s in loop.usable_samples]))
        # Migrations end one round after their order: only the last round's can be open.
        assert len(loop.records) + len(cluster.pending) == result.migrations
        for control in loop.controls.values():
            assert all(control.holders[g] != control.owner(g) for g in range(G))


def test_correlated_puts_ops_1_3_checkpoints_with_the_uncorrelated_op4(runs) -> None:
    """Ops 1-3 all follow the ramp; op4's load does not. Algorithm 3 should hold the
    ramping groups' checkpoints on op4's nodes far more than even (1/5 of the nodes)."""
    corr = runs["correlated"][1].work_cps_on_sample_nodes_mean
    even = runs["even"][1].work_cps_on_sample_nodes_mean
    assert even is not None and corr is not None
    assert even < 0.4 < corr


def test_pooled_cells_sum_runs(runs) -> None:
    results = [r for _, r in runs.values()]
    pooled = {p.strategy: p for p in sim.pool(results + results)}
    even = pooled["even"]
    assert even.migrations == 2 * runs["even"][1].migrations
    assert even.assisted_share == pytest.approx(runs["even"][1].assisted_share)
    assert even.usable_mean == pytest.approx(runs["even"][1].usable_mean)
    assert "correlated" in sim.table(list(pooled.values()))
    assert "ring" in sim.probe_table(list(pooled.values()))


def test_failures_and_churn_are_probed_on_each_runs_final_holders(runs) -> None:
    for strategy, (_, result) in runs.items():
        fails = {f["scenario"]: f for f in result.failures}
        # One node lost: every group it owned has a live holder (none was on it).
        assert fails["1 node"]["usable"] == 1.0, strategy
        assert all(0.0 <= f["usable"] <= 1.0 for f in fails.values())
        assert result.churn["cps"] == 4 * G
        assert result.churn["down"] >= result.churn["held_by_down"]
    # The ring moves only what the node going down held; even re-draws far more.
    ring, even = runs["ring"][1].churn, runs["even"][1].churn
    assert ring["down"] == ring["held_by_down"] < even["down"]
    assert ring["join"] < even["join"]
