"""The controller's decision loop (pure): heartbeats in, holders and migrations out.

The scenario is Madsen & Zhou 2015, section 7.2 (the experiment in which load shifts between
nodes: checkpoint allocation and load balancing), in miniature: op1 on node1, op2 on node2,
node0 and node2 under 70% external load, op2's load rising while op1's falls.
"""

from __future__ import annotations

import pytest
from controller_oracle import pair

from elastorm.config import ConfigError, ControllerConfig, TopologyConfig
from elastorm.controller.loop import (
    ControllerLoop,
    Placement,
    build_view,
    per_tuple_cpu,
)
from elastorm.controller.model import (
    ControllerModelError,
    Heartbeat,
    KeyGroupId,
    TaskIdentity,
    TaskRecord,
)
from elastorm.core.actions import CheckpointStored, MigrationDone, Role
from elastorm.core.control import MigrationController
from elastorm.core.messages import Protocol, SetHolder
from elastorm.core.routing import RoutingTable
from elastorm.storm.load import LoadMeter, resident_bytes

G = 4  # key groups per operator
OP1 = {"node0": 10, "node1": 11, "node2": 12}
OP2 = {"node0": 20, "node1": 21, "node2": 22}
BACKGROUND = {"node0": 0.7, "node2": 0.7}
# The adaptation thresholds of these tests (``elastorm.controller.*`` options).
THRESHOLDS = {
    "cpu_high": 0.8,
    "cpu_low": 0.5,
    "queue_high": 50,
    "queue_low": 20,
    "cooldown_secs": 30,
    "scale_in": False,
}


def controls() -> dict[str, MigrationController]:
    def one(tasks: dict[str, int], node: str) -> MigrationController:
        return MigrationController(
            num_key_groups=G,
            tasks=tasks.values(),
            emitters=[1],
            routing=RoutingTable.round_robin(G, [tasks[node]]),
        )

    return {"op1": one(OP1, "node1"), "op2": one(OP2, "node2")}


def rec(task: int, op: str, node: str, *, owned=(), rates=None, cpu=0.0, queue=0.0):
    return TaskRecord(
        identity=TaskIdentity(task_id=task, operator=op, node_id=node, host="h", pid=1),
        heartbeat=Heartbeat(
            key_groups=tuple(owned),
            input_rates=tuple((rates or {}).items()),
            cpu=cpu,
            queue_length=queue,
        ),
    )


def records(share2: float, *, hot: bool) -> list[TaskRecord]:
    """op1 carries ``1 - share2`` of 400 tuples/s, op2 ``share2``; node2 hot or not."""
    r1, r2 = 400 * (1 - share2) / G, 400 * share2 / G
    return [
        rec(11, "op1", "node1", owned=range(G), rates=dict.fromkeys(range(G), r1), cpu=0.2),
        rec(
            22,
            "op2",
            "node2",
            owned=range(G),
            rates=dict.fromkeys(range(G), r2),
            cpu=0.25 if hot else 0.05,
            queue=200 if hot else 0,
        ),
        *(rec(t, "op1", n) for n, t in OP1.items() if t != 11),
        *(rec(t, "op2", n) for n, t in OP2.items() if t != 22),
    ]


def make_loop(
    *, prior=None, prior_weight: float = 0.0, external_load=None, **options
) -> ControllerLoop:
    """A loop over op1 and op2 on node0-2 (see ``controls``), started at time 0, with
    the controller ``options`` (``elastorm.controller.*``); adaptation on unless
    ``adapt=False``."""
    return ControllerLoop(
        controls=controls(),
        placement=Placement({"op1": OP1, "op2": OP2}),
        config=TopologyConfig(
            external_load=external_load or {},
            controller=ControllerConfig(**{"adapt": True, **options}),
        ),
        started_at=0.0,
        prior=prior,
        prior_weight=prior_weight,
    )


def report_checkpoints(loop: ControllerLoop) -> None:
    """Every holder reports the newest checkpoint of the group it holds."""
    for control in loop.controls.values():
        for g in range(G):
            control.on_checkpoint_stored(
                control.holders[g],
                CheckpointStored(key_group=g, checkpoint=(0, 1)),
            )


def run(strategy: str) -> tuple[ControllerLoop, list]:
    loop = make_loop(
        strategy=strategy,
        warmup_secs=10,
        window=20,
        settle_secs=0,
        **THRESHOLDS,
        external_load=BACKGROUND,
    )
    rounds = []
    for t in range(30):  # the ramp: op2's share grows, node2 overloads at t=25
        rnd = loop.round(records(t / 30, hot=t >= 25), float(t))
        rounds.append(rnd)
        if rnd.allocated:
            report_checkpoints(loop)
    return loop, rounds


def test_placement_by_index_and_lookups() -> None:
    p = Placement.by_index({"a": [5, 3], "b": [8, 7]})
    assert p.nodes == ("node0", "node1")
    assert p.task_on("a", "node1") == 5 and p.node_of(7) == "node0" and p.operator_of(8) == "b"
    with pytest.raises(ControllerModelError):
        Placement({"a": {"n0": 1, "n1": 2}, "b": {"n0": 3}})
    with pytest.raises(ControllerModelError):
        Placement({"a": {"n0": 1}, "b": {"n0": 1}})


def test_view_uses_the_controllers_routing_and_cpu_shares_of_rates() -> None:
    cs = controls()
    recs = records(0.5, hot=True)
    view = build_view(
        recs,
        controls=cs,
        placement=Placement({"op1": OP1, "op2": OP2}),
        now=3.0,
        background=BACKGROUND,
    )
    assert view.node("node2").cpu == pytest.approx(0.25 + 0.7)
    assert view.node("node2").queue_length == 200
    assert view.node("node0").cpu == pytest.approx(0.7)
    kg = view.key_group(KeyGroupId("op2", 1))
    assert kg.owner == "node2"
    # 0.25 CPU over 200 tuples/s; this group gets 50 tuples/s of it.
    assert kg.load == pytest.approx(50 * 0.25 / 200)
    assert per_tuple_cpu(recs[0]) == pytest.approx(0.2 / 200)
    # Holders: the next task after the owner (op2 on node2 -> node0).
    assert view.checkpoints.holders(KeyGroupId("op2", 0)) == ("node0",)


def test_correlated_allocation_puts_op2_checkpoints_where_op1_shrinks() -> None:
    loop, rounds = run("correlated")
    assert [r.allocated for r in rounds].index(True) == 10  # after the warm-up
    assert loop.allocation is not None
    for g in range(G):
        assert loop.allocation.holders(KeyGroupId("op2", g)) == ("node1",)
        assert loop.allocation.holders(KeyGroupId("op1", g)) == ("node2",)
    moves = [m for r in rounds for m in r.moves]
    assert moves and all(m.key_group.operator == "op2" and m.target == "node1" for m in moves)
    assert all(m.protocol.checkpoint_assisted for m in moves)
    assert loop.ordered_share() == 1.0
    # op1's start-up holders (node2) were right already; op2's owner got one SetHolder
    # per group.
    sends = [s for r in rounds if r.allocated for s in r.sends]
    assert [(s.to_task, s.message.holder) for s in sends if isinstance(s.message, SetHolder)] == [
        (22, 21)
    ] * G


def test_without_allocation_the_same_overload_migrates_directly() -> None:
    loop, rounds = run("none")
    moves = [m for r in rounds for m in r.moves]
    assert moves and not any(m.protocol.checkpoint_assisted for m in moves)
    assert loop.ordered_share() == 0.0
    assert loop.usable_samples and all(s == 0.0 for _, s in loop.usable_samples)


def test_even_allocation_makes_only_some_migrations_assisted() -> None:
    loop, rounds = run("even")
    moves = [m for r in rounds for m in r.moves]
    assert loop.allocation is not None
    held_on_node1 = sum(
        loop.allocation.holders(KeyGroupId("op2", g)) == ("node1",) for g in range(G)
    )
    assert 0 < held_on_node1 < G
    assisted = sum(m.protocol.checkpoint_assisted for m in moves)
    assert assisted == held_on_node1
    assert loop.ordered_share() < 1.0


@pytest.mark.parametrize("target_first", [False, True])
def test_finished_migrations_become_metrics_records(target_first: bool) -> None:
    """The record's pause is the one the target measured (carried in its
    ``MigrationDone``), whichever end reports last; the completion time (order to both
    ends done) is kept apart, not taken for the pause."""
    loop, rounds = run("correlated")
    move = next(m for r in rounds for m in r.moves)
    control = loop.controls["op2"]
    g, epoch = move.key_group.index, control.moving[move.key_group.index].epoch
    source = MigrationDone(key_group=g, epoch=epoch, role=Role.SOURCE, protocol=Protocol.CPA)
    target = MigrationDone(
        key_group=g, epoch=epoch, role=Role.TARGET, protocol=Protocol.CPA, pause=0.125
    )
    first, last = (target, source) if target_first else (source, target)
    assert not loop.on_migration_done("op2", first, 40.0)
    ended = loop.on_migration_done("op2", last, 41.5)
    assert loop.records[-1].pause == 0.125
    assert ended and ended.pause == 0.125
    assert loop.records[-1].completion == pytest.approx(41.5 - 25.0)
    snap = loop.metrics()
    assert snap is not None and snap.migrations == 1 and snap.assisted_share == 1.0
    assert snap.accumulated_latency == 0.125 and snap.unmeasured == 0
    published = loop.ended["op2"][-1].to_json()
    assert published["pause"] == 0.125 and published["by"] == "controller"
    assert published["completion"] == pytest.approx(16.5)


def loop_of(conf) -> ControllerLoop:
    """A loop over ``controls`` with the topology conf ``conf``."""
    return ControllerLoop(
        controls=controls(),
        placement=Placement({"op1": OP1, "op2": OP2}),
        config=TopologyConfig.from_conf(conf),
        started_at=0.0,
    )


def test_options_from_conf_default_to_requests_only_and_validate() -> None:
    s = loop_of({})
    assert not s.options.active and s.options.strategy == "none"
    s = loop_of(
        {
            "elastorm.controller.adapt": True,
            "elastorm.controller.strategy": "even",
            "elastorm.controller.queue_high": "80",
            "elastorm.external_load": {"node2": 0.7},
        }
    )
    assert s.options.active and s.thresholds.queue_high == 80
    assert s.view([], 0.0).node("node2").cpu == 0.7  # external load as background CPU
    for bad in (
        {"elastorm.controller.strategy": "random"},
        {"elastorm.controller.cpu_low": 0.9},
        {"elastorm.controller.adapt": "yes"},
        {"elastorm.controller.window": "x"},
        {"elastorm.external_load": {"node0": 1.5}},
    ):
        with pytest.raises(ConfigError, match="elastorm"):
            loop_of(bad)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0
        self.cpu = 0.0
        self.slept = 0.0

    def sleep(self, s: float) -> None:
        self.slept += s
        self.t += s


def test_load_meter_rates_queue_cpu_and_external_throttle() -> None:
    c = FakeClock()
    meter = LoadMeter(
        external=0.75, wall=lambda: c.t, mono=lambda: c.t, cpu=lambda: c.cpu, sleep=c.sleep
    )
    for _ in range(10):
        meter.applied(3, c.t - 0.5)  # each waited 0.5 s
        meter.worked(0.002)  # 2 ms of work owes 6 ms of idling at 75% external load
    meter.applied(4, c.t)
    c.cpu += 0.5
    c.t += 2.0
    sample = meter.sample()
    assert c.slept == pytest.approx(10 * 0.006, rel=0.01)
    dt = 2.0 + c.slept
    assert sample.rates == {3: pytest.approx(10 / dt), 4: pytest.approx(1 / dt)}
    assert sample.queue == pytest.approx((11 / dt) * (5.0 / 11))  # Little's law
    assert sample.latency == pytest.approx(5.0 / 11)  # the mean wait in it
    assert sample.service == pytest.approx(10 * 0.002 / 11)  # work per tuple, not the idling
    assert sample.cpu == pytest.approx(0.5 / dt)
    idle = meter.sample()
    assert (idle.rates, idle.latency, idle.service) == ({}, None, None)
    # Event-time stamps (a year ago) say nothing about the queue or the latency.
    meter.applied(3, c.t - 3e7)
    c.t += 1.0
    late = meter.sample()
    assert (late.queue, late.latency) == (0.0, None)
    with pytest.raises(ValueError):
        LoadMeter(external=1.0)


def test_resident_bytes_of_this_process() -> None:
    rss = resident_bytes()
    assert rss is not None and 1e6 < rss < 1e11


def test_external_load_conf() -> None:
    def external_load(conf, node):
        return TopologyConfig.from_conf(conf).external_load.get(node, 0.0)

    assert external_load({}, "node0") == 0.0
    assert external_load({"elastorm.external_load": {"node2": 0.7}}, "node2") == 0.7
    with pytest.raises(ConfigError, match="elastorm.external_load"):
        external_load({"elastorm.external_load": {"node2": 2}}, "node2")
    with pytest.raises(ConfigError, match="elastorm.external_load"):
        external_load({"elastorm.external_load": [1]}, "node2")


def test_start_up_zeros_do_not_make_every_pair_look_correlated() -> None:
    """Before the first tuple every rate is 0; a window holding that jump would make
    op1 and op2 look positively correlated and send op2's checkpoints nowhere useful."""
    loop = make_loop(
        strategy="correlated",
        warmup_secs=10,
        window=40,
        settle_secs=0,
        **THRESHOLDS,
        adapt=False,
    )
    idle = [rec(t, op, n) for op, tasks in (("op1", OP1), ("op2", OP2)) for n, t in tasks.items()]
    for t in range(8):
        assert not loop.round(idle, float(t)).allocated
    assert loop.running_since is None
    for t in range(8, 30):
        loop.round(records((t - 8) / 60, hot=False), float(t))
    assert loop.running_since == 8.0 and loop.allocated_at == 18.0
    assert loop.allocation is not None
    assert {loop.allocation.holders(KeyGroupId("op2", g)) for g in range(G)} == {("node1",)}


def test_the_spark_artifact_seeds_the_loops_correlation(tmp_path) -> None:
    """An artifact saying op1 and op2 move against each other places op1's checkpoints
    on node2 even when the online window has seen only flat loads (without the prior,
    ties split them between node0 and node2)."""
    import numpy as np

    from elastorm.core.correlation_artifact import (
        CorrelationArtifact,
        OperatorStats,
        encode_artifact,
        pearson_from_loads,
    )
    from elastorm.storm.controller_runtime import _load_prior

    t = np.arange(50, dtype=float)
    loads = np.column_stack([100 - t] * G + [t] * G) + np.random.default_rng(3).normal(
        0, 0.5, (50, 2 * G)
    )
    means, variances, matrix = pearson_from_loads(loads)
    artifact = CorrelationArtifact(
        operators=(
            OperatorStats(name="op1", num_key_groups=G),
            OperatorStats(name="op2", num_key_groups=G),
        ),
        window_seconds=60.0,
        time_start=0.0,
        time_end=3000.0,
        num_windows=50,
        means=means,
        variances=variances,
        matrix=matrix,
    )
    path = tmp_path / "corr.npz"
    path.write_bytes(encode_artifact(artifact))
    cs = controls()
    prior = _load_prior(str(path), cs)
    assert pair(prior, KeyGroupId("op1", 0), KeyGroupId("op2", 1)) < -0.99
    loop = ControllerLoop(
        controls=cs,
        placement=Placement({"op1": OP1, "op2": OP2}),
        config=TopologyConfig(
            controller=ControllerConfig(strategy="correlated", warmup_secs=3, window=20)
        ),
        started_at=0.0,
        prior=prior,
        prior_weight=20,
    )
    for t in range(6):  # flat, equal loads: the window alone says nothing
        loop.round(records(0.5, hot=False), float(t))
    assert loop.allocation is not None
    assert {loop.allocation.holders(KeyGroupId("op1", g)) for g in range(G)} == {("node2",)}
    assert {loop.allocation.holders(KeyGroupId("op2", g)) for g in range(G)} == {("node1",)}
    with pytest.raises(Exception, match="op2|operator|key group"):
        _load_prior(str(path), {"op1": cs["op1"]})  # the artifact must match the topology


def test_no_migration_during_the_warm_up_even_if_a_node_looks_overloaded() -> None:
    loop = make_loop(
        strategy="none", warmup_secs=10, window=20, **THRESHOLDS, external_load=BACKGROUND
    )
    early = [loop.round(records(0.5, hot=True), float(t)) for t in range(10)]
    assert not any(r.moves for r in early)  # a start-up backlog is not an overload
    assert loop.round(records(0.5, hot=True), 10.0).moves


def test_correlation_samples_are_means_over_sample_secs() -> None:
    loop = make_loop(strategy="none", window=10, sample_secs=3, settle_secs=0, adapt=False)
    for t in range(7):  # t=0 starts the clock; t=1..3 and t=4..6 make two samples
        loop.round(records(0.25 if t % 2 else 0.75, hot=False), float(t))
    assert loop.correlation.count == 2
    first = loop.correlation.window_loads()[0]
    # op2's rate per group over t=1,2,3: shares .25, .75, .25 of 400 / G.
    assert first[G] == pytest.approx(400 * (0.25 + 0.75 + 0.25) / 3 / G)


def test_an_assisted_move_waits_for_the_new_holders_first_checkpoint() -> None:
    """Right after an allocation the new holder has no checkpoint yet: ordering the
    move then would fall back to direct, so it waits (at most defer_secs)."""
    loop = make_loop(
        strategy="correlated",
        warmup_secs=10,
        window=20,
        settle_secs=0,
        defer_secs=3,
        **THRESHOLDS,
        external_load=BACKGROUND,
    )
    for t in range(10):
        loop.round(records(t / 30, hot=False), float(t))
    first = loop.round(records(0.4, hot=True), 10.0)  # allocation and overload at once
    assert first.allocated and not first.moves
    assert {why for _, why in first.refused} == {"waiting for the target's first checkpoint"}
    report_checkpoints(loop)
    second = loop.round(records(0.4, hot=True), 11.0)
    assert second.moves and all(m.protocol.checkpoint_assisted for m in second.moves)
    # Without a checkpoint, the wait ends after defer_secs and the move goes direct.
    other = make_loop(
        strategy="correlated",
        warmup_secs=10,
        settle_secs=0,
        defer_secs=3,
        **THRESHOLDS,
        external_load=BACKGROUND,
    )
    for t in range(10):
        other.round(records(t / 30, hot=False), float(t))
    rounds = [other.round(records(0.4, hot=True), float(t)) for t in range(10, 15)]
    moved = [m for r in rounds for m in r.moves]
    assert [bool(r.moves) for r in rounds] == [False, False, False, True, False]
    assert moved and not any(m.protocol.checkpoint_assisted for m in moved)


def test_the_metrics_file_carries_the_correlations_and_the_score_against_theta() -> None:
    """What the dashboard draws as the heatmap and the allocation score against theta."""
    import json
    import math

    from elastorm.storm.controller_runtime import allocation_summary

    loop, rounds = run("correlated")
    out = allocation_summary(loop, rounds[-1].view)
    json.dumps(out, allow_nan=False)  # the page parses it: no NaN or Infinity
    corr = out["correlation"]
    assert len(corr["key_groups"]) == 2 * G == len(corr["matrix"])
    assert all(row[i] == 1.0 for i, row in enumerate(corr["matrix"]))
    assert out["theta"] == loop.options.theta
    assert math.isclose(out["score_drift"], out["allocation_score"] - out["reference_score"])
    fresh = allocation_summary(make_loop(strategy="correlated"), rounds[-1].view)
    assert "allocation_score" not in fresh  # nothing allocated yet: no score


def test_the_dashboards_figures_keep_the_shares_the_allocation_and_each_groups_last_order() -> None:
    """What the leader publishes to ``controller/figures`` for the dashboard."""
    from elastorm.storm.controller_runtime import allocation_summary, dashboard_figures

    loop, rounds = run("correlated")
    orders = [
        {"t": 1.0, "key_group": "op1/0", "protocol": "direct"},
        {"t": 2.0, "key_group": "op1/1", "protocol": "cpa"},
        {"t": 3.0, "key_group": "op1/0", "protocol": "cpal"},
    ]
    record = {
        "strategy": "correlated",
        "rounds": len(rounds),
        "assisted_share": 0.5,
        "ordered_assisted_share": 0.6,
        "usable_share_now": 0.9,
        "allocation": allocation_summary(loop, None),  # no round yet: no score
        "orders": orders,
        "history": [{"t": 0.0}] * 600,  # the file's bulk stays out of ZooKeeper
    }
    figures = dashboard_figures(record)
    assert figures["orders"] == orders[1:]
    assert "history" not in figures and figures["strategy"] == "correlated"
    assert "correlation" in figures["allocation"]
    assert "allocation_score" not in figures["allocation"]
