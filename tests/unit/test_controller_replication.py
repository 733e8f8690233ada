"""Partially active replication in the controller (Su & Zhou 2016): the running task
graph from heartbeats, the plan under a budget, replicas placed outside the owner's
fault zone, and the loop carrying them out and publishing the plan and its Output
Fidelity."""

from __future__ import annotations

import doctest

import pytest

from elastorm.config import REPLICATION_PLANNERS, ControllerConfig, TopologyConfig
from elastorm.controller import replication
from elastorm.controller.loop import ControllerLoop, Placement
from elastorm.controller.model import (
    ClusterView,
    Heartbeat,
    KeyGroupId,
    KeyGroupInfo,
    NodeInfo,
    TaskIdentity,
    TaskRecord,
)
from elastorm.controller.replication import (
    PLANNERS,
    TENTATIVE_REFRESH_SECS,
    downstream_operators,
    keyed_tasks,
    operator_inputs,
    operators_to_tell,
    place_replicas,
    plan_replicas,
    predicted_fidelity,
    replan,
    running_graph,
)
from elastorm.core.actions import CheckpointStored, MigrationDone, Role
from elastorm.core.control import MigrationController
from elastorm.core.messages import DropReplica, Migrate, Protocol, SetHolder
from elastorm.core.routing import RoutingTable
from elastorm.replication.model import InputKind

G = 4
NODES = ("node0", "node1", "node2")
LEFT = {"node0": 10, "node1": 11, "node2": 12}
RIGHT = {"node0": 20, "node1": 21, "node2": 22}
JOIN = {"node0": 30, "node1": 31, "node2": 32}
OPERATORS = {"left": ("spout_a",), "right": ("spout_b",), "join": ("left", "right")}


def rec(task: int, op: str, node: str, rates: dict[int, float]) -> TaskRecord:
    return TaskRecord(
        identity=TaskIdentity(task_id=task, operator=op, node_id=node, host="h", pid=1),
        heartbeat=Heartbeat(key_groups=tuple(rates), input_rates=tuple(rates.items())),
    )


def records() -> list[TaskRecord]:
    """left and right each on node0 (groups 0, 2) and node1 (1, 3), the join too; the
    join's node0 task carries three times the rate of its node1 task."""
    out = []
    for op, tasks in (("left", LEFT), ("right", RIGHT)):
        out += [rec(tasks["node0"], op, "node0", {0: 5.0, 2: 5.0})]
        out += [rec(tasks["node1"], op, "node1", {1: 5.0, 3: 5.0})]
        out += [rec(tasks["node2"], op, "node2", {})]
    out += [
        rec(30, "join", "node0", {0: 15.0, 2: 15.0}),
        rec(31, "join", "node1", {1: 5.0, 3: 5.0}),
    ]
    return out + [rec(32, "join", "node2", {})]


def test_running_graph_has_the_rates_the_kinds_and_no_idle_tasks() -> None:
    graph = running_graph(records(), OPERATORS, joins=("join",))
    assert graph is not None
    kinds = {op.name: op.kind for op in graph.operators}
    assert kinds["join"] is InputKind.CORRELATED and kinds["left"] is InputKind.INDEPENDENT
    assert set(graph.tasks) == {"spout_a", "spout_b", "left:10", "left:11", "right:20"} | {
        "right:21",
        "join:30",
        "join:31",
    }
    streams = graph.input_streams("join:30")
    assert streams == {
        "left": {"left:10": 7.5, "left:11": 7.5},
        "right": {"right:20": 7.5, "right:21": 7.5},
    }
    assert graph.sink_tasks == ("join:30", "join:31") and graph.sink_rate("join:30") == 30.0
    assert running_graph([rec(10, "left", "node0", {})], OPERATORS) is None


def test_the_plan_protects_the_busiest_chain_and_predicts_its_fidelity() -> None:
    graph = running_graph(records(), OPERATORS, joins=("join",))
    keyed = {t for t in graph.tasks if not t.startswith("spout")}
    # node0's tasks fail together: the join's node0 task is three quarters of the output.
    node0 = {"left:10", "right:20", "join:30"}
    # join:30 (weight 30) loses all; join:31 (weight 10) keeps half of each side's
    # input, so a quarter of its product: OF = 10 * 0.25 / 40.
    assert predicted_fidelity(graph, node0, ()) == 0.0625
    plan = plan_replicas(graph, 3, node0, planner="dp")
    assert plan == frozenset(node0)
    assert predicted_fidelity(graph, node0, plan) == 1.0
    assert plan_replicas(graph, 0, keyed) == frozenset()
    with pytest.raises(ValueError, match="unknown replication planner"):
        plan_replicas(graph, 1, keyed, planner="nope")


def view(holders: dict[int, str]) -> ClusterView:
    kgs = [
        KeyGroupInfo(key_group=KeyGroupId("join", g), owner=NODES[g % 2], load=1.0)
        for g in range(G)
    ]
    return ClusterView(
        nodes=[NodeInfo(node_id=n) for n in NODES],
        key_groups=kgs,
        checkpoints={KeyGroupId("join", g): (h,) for g, h in holders.items()},
    )


def test_replicas_go_to_the_holder_outside_the_zone_else_the_emptiest_node() -> None:
    v = view({0: "node1", 1: "node1", 2: "node2", 3: "node0"})  # group 1's holder: own node
    placed = place_replicas(v, [("join", "node0"), ("join", "node1")], {})
    assert placed.wanted == {
        KeyGroupId("join", 0): "node1",
        KeyGroupId("join", 1): "node2",  # not its owner's zone: node2 had fewest replicas
        KeyGroupId("join", 2): "node2",
        KeyGroupId("join", 3): "node0",
    }
    kept = place_replicas(
        v, [("join", "node0")], {KeyGroupId("join", 0): "node2", KeyGroupId("join", 1): "node0"}
    )
    assert kept.start == ((KeyGroupId("join", 2), "node2"),)
    assert kept.drop == (KeyGroupId("join", 1),)  # node1 is no longer planned
    zoned = ClusterView(
        nodes=[NodeInfo(node_id="node0", zone="rack"), NodeInfo(node_id="node1", zone="rack")],
        key_groups=[KeyGroupInfo(key_group=KeyGroupId("join", 0), owner="node0")],
        checkpoints={},
    )
    assert place_replicas(zoned, [("join", "node0")], {}).wanted == {}  # no other zone


def test_downstream_operators_and_planner_names() -> None:
    assert downstream_operators(OPERATORS, ["left"]) == {"join"}
    assert downstream_operators(OPERATORS, ["join"]) == frozenset()
    assert set(PLANNERS) == set(REPLICATION_PLANNERS)
    assert doctest.testmod(replication).failed == 0


def loop(budget: int, **options: float) -> ControllerLoop:
    def control(tasks: dict[str, int], emitter: int) -> MigrationController:
        return MigrationController(
            num_key_groups=G,
            tasks=tasks.values(),
            emitters=[emitter],
            routing=RoutingTable.round_robin(G, [tasks["node0"], tasks["node1"]]),
        )

    controls = {"left": control(LEFT, 1), "right": control(RIGHT, 2), "join": control(JOIN, 3)}
    config = TopologyConfig(
        operators=OPERATORS,
        join_operators=("join",),
        controller=ControllerConfig(
            warmup_secs=0,
            settle_secs=0,
            replication_budget=budget,
            replication_planner="dp",
            **options,
        ),
    )
    placement = Placement({"left": LEFT, "right": RIGHT, "join": JOIN})
    return ControllerLoop(controls=controls, placement=placement, config=config, started_at=0)


def commands(rnd, kind):
    return [s for s in rnd.sends if isinstance(s.message, kind)]


def report_checkpoints(lp: ControllerLoop) -> None:
    for control in lp.controls.values():
        for g in range(G):
            stored = CheckpointStored(key_group=g, checkpoint=(0, 1))
            control.on_checkpoint_stored(control.holders[g], stored)


def test_a_controller_taking_over_tells_every_operator_then_changes_then_all_again() -> None:
    """A dead leader may have told an operator's tasks their outputs are tentative; the
    controller after it knows nothing of that, so its first word goes to every keyed
    operator (else they stay tentative for good and no output of theirs is rectified:
    chaos ``join/cpal-source``, session 31); then only changes, and all again every
    ``TENTATIVE_REFRESH_SECS`` (a task restarted since, or a message was lost)."""
    ops = ["daily_windows", "join_flights"]
    none: frozenset[str] = frozenset()
    assert operators_to_tell(none, None, -1e9, 100.0, ops) == (ops, True)
    assert operators_to_tell(none, none, 100.0, 101.0, ops) == ([], False)
    windows = frozenset({"daily_windows"})
    assert operators_to_tell(windows, none, 100.0, 102.0, ops) == (["daily_windows"], False)
    assert operators_to_tell(none, windows, 100.0, 103.0, ops) == (["daily_windows"], False)
    later = 100.0 + TENTATIVE_REFRESH_SECS
    assert operators_to_tell(windows, windows, 100.0, later, ops) == (ops, True)


def test_the_loop_starts_replicas_on_holders_and_publishes_plan_and_fidelity() -> None:
    lp = loop(budget=5)
    assert lp.options.active
    lp.round(records(), 0.0)  # input begins: warm from here
    first = lp.round(records(), 1.0)
    # The worst case (every keyed task fails): the join's node0 task (three quarters of
    # the output) with every task feeding it is the best complete tree of 5 tasks.
    assert lp.replication_plan == {"left:10", "left:11", "right:20", "right:21", "join:30"}
    assert not commands(first, Migrate)  # the holders have not reported a checkpoint yet
    assert not commands(first, SetHolder)  # every holder is outside its owner's node
    report_checkpoints(lp)
    second = lp.round(records(), 2.0)
    started = {(s.message.key_group, s.to_task) for s in commands(second, Migrate)}
    assert all(s.message.protocol is Protocol.REPLICATE for s in commands(second, Migrate))
    assert started == {(g, 1) for g in range(G)} | {(g, 2) for g in range(G)} | {(0, 3), (2, 3)}
    assert {s.message.target for s in commands(second, Migrate) if s.to_task == 1} == {11, 12}
    join = lp.controls["join"]
    assert join.replicas == {0: 31, 2: 31}  # on the holders (the next task after 30)
    status = lp.replication_status()
    assert status.plan == ("join:30", "left:10", "left:11", "right:20", "right:21")
    assert status.fidelity_planned == pytest.approx(0.75) and status.fidelity_now == 1.0
    assert status.to_json()["replicas"]["join/0"] == "node1"
    for op, control in lp.controls.items():
        for g, moving in list(control.moving.items()):
            done = MigrationDone(
                key_group=g, epoch=moving.epoch, protocol=Protocol.REPLICATE, role=Role.TARGET
            )
            lp.on_migration_done(op, done, 2.5)
    assert not join.moving
    # node0 fails: every group it owned is promoted on its replica, at once.
    for op, task in (("left", 10), ("right", 20), ("join", 30)):
        recovery = lp.recover(op, [task], 3.0, rejoined=False)
        assert recovery.crash.promoted == (0, 2)
    assert lp.tentative_operators() == frozenset()  # nothing restores from checkpoints
    assert lp.replication_status().fidelity_now == 1.0
    report_checkpoints(lp)  # the new holders checkpoint
    after = [
        rec(task, op, "node1", dict.fromkeys(range(G), 5.0))
        for op, task in (("left", 11), ("right", 21), ("join", 31))
    ]
    lp.round(after, 3.5)  # node1 runs everything now (no replan yet: replan_secs)
    # node1 fails next: join:31 now owns every join group, none replicated.
    recovery = lp.recover("join", [31], 4.0, rejoined=False)
    assert recovery.crash.restored == (0, 1, 2, 3) and recovery.crash.promoted == ()
    assert lp.replication_status().fidelity_now == 0.0
    left = lp.recover("left", [11], 4.0, rejoined=False)
    assert left.crash.promoted == (1, 3)  # on node2; 0 and 2 restore from checkpoints
    right = lp.recover("right", [21], 4.0, rejoined=False)
    assert lp.tentative_operators() == {"join"}  # left/0 and left/2 restore
    for op, done_recovery in (("join", recovery), ("left", left), ("right", right)):
        for g in done_recovery.crash.restored:
            moving = lp.controls[op].moving[g]
            done = MigrationDone(
                key_group=g, epoch=moving.epoch, protocol=Protocol.RESTORE, role=Role.TARGET
            )
            lp.on_migration_done(op, done, 5.0)
    assert lp.replication_status().fidelity_now == 1.0
    assert right.crash.restored


def test_outputs_downstream_of_a_restore_are_tentative_until_it_ends() -> None:
    lp = loop(budget=0)
    lp.round(records(), 0.0)
    report_checkpoints(lp)
    recovery = lp.recover("left", [10], 1.0, rejoined=False)
    assert lp.tentative_operators() == {"join"}
    for g in recovery.crash.restored:
        moving = lp.controls["left"].moving[g]
        done = MigrationDone(
            key_group=g, epoch=moving.epoch, protocol=Protocol.RESTORE, role=Role.TARGET
        )
        lp.on_migration_done("left", done, 2.0)
    assert lp.tentative_operators() == frozenset()


def test_unplanned_replicas_are_dropped_and_a_replicas_node_becomes_holder_first() -> None:
    lp = loop(budget=5)
    join = lp.controls["join"]
    join.holders[0] = 30  # pretend: a holder in the owner's node
    rnd = lp.round(records(), 0.0)
    assert [(s.to_task, s.message.holder) for s in commands(rnd, SetHolder)] == [(30, 31)]
    assert not commands(lp.round(records(), 1.0), SetHolder)  # set once
    join.replicas[1] = 30  # an old replica of join:31's group, no longer planned
    rnd = lp.round(records(), 2.0)
    drops = commands(rnd, DropReplica)
    assert {s.to_task for s in drops} == {3, 30} and 1 not in join.replicas
    assert rnd.replicas_dropped == (KeyGroupId("join", 1),)


def test_the_budget_and_planner_are_options() -> None:
    config = TopologyConfig.from_conf(
        {
            "elastorm.controller.replication_budget": 2,
            "elastorm.controller.replication_planner": "greedy",
            "elastorm.join_operators": ["join"],
            "elastorm.operators": OPERATORS,
        }
    )
    s = config.controller
    assert (s.replication_budget, s.replication_planner) == (2, "greedy") and s.active
    assert config.join_operators == ("join",)
    assert operator_inputs(config.operators, config.routed_from)["join"] == ("left", "right")


def join_rates(r30: float, r31: float) -> list[TaskRecord]:
    """:func:`records` with the join's two busy tasks at ``r30`` and ``r31`` per group."""
    out = [r for r in records() if r.identity.operator != "join"]
    return out + [
        rec(30, "join", "node0", {0: r30, 2: r30}),
        rec(31, "join", "node1", {1: r31, 3: r31}),
        rec(32, "join", "node2", {}),
    ]


@pytest.mark.parametrize("min_gain", [0.05, 0.0])
def test_a_rate_flicker_does_not_move_the_replicas_a_real_shift_does(min_gain: float) -> None:
    """Budget 3 buys one complete tree: a left task, a right task and a join task. With
    the join's tasks near-equal, the planner's pick follows the busier one from round
    to round; the hysteresis keeps the plan until the other tree gains more than
    ``replan_min_gain`` of Output Fidelity (with 0, every flicker moves the replicas)."""
    lp = loop(budget=3, replan_secs=1.0, replan_min_gain=min_gain)
    lp.round(join_rates(10.2, 10.0), 0.0)
    lp.round(join_rates(10.2, 10.0), 1.0)
    first = lp.replication_plan
    assert "join:30" in first and len(first) == 3
    lp.round(join_rates(10.0, 10.2), 2.5)  # a flicker: the other tree gains 0.0025
    assert ("join:30" in lp.replication_plan) is (min_gain > 0.0025)
    lp.round(join_rates(5.0, 15.0), 4.0)  # a real shift: it gains 0.125
    assert "join:31" in lp.replication_plan and len(lp.replication_plan) == 3


def test_a_plan_whose_task_left_the_graph_is_replaced_whatever_the_gain() -> None:
    graph = running_graph(join_rates(10.0, 10.0), OPERATORS, joins=("join",))
    assert graph is not None
    failed = keyed_tasks(graph, OPERATORS)
    new = plan_replicas(graph, 3, failed, planner="dp")
    stale = {"left:10", "right:20", "join:32"}  # join:32 gets no input: not in the graph
    assert replan(graph, failed, stale, new, budget=3, min_gain=1.0) == new
    assert replan(graph, failed, new, stale & new, budget=3, min_gain=1.0) == new
    with pytest.raises(ValueError, match="min_gain"):
        replan(graph, failed, new, new, budget=3, min_gain=-0.1)
    over = new | {"left:11"}
    assert replan(graph, failed, over, new, budget=3, min_gain=1.0) == new


def test_a_task_whose_keyed_upstreams_all_restore_still_has_a_stream() -> None:
    # left and right report no input (their groups are being restored), join still
    # applies what reached it: their operators feed it as source vertices this round.
    idle = [r for r in records() if r.identity.operator == "join"]
    idle += [rec(10, "left", "node0", {}), rec(20, "right", "node0", {})]
    graph = running_graph(idle, OPERATORS, joins=("join",))
    assert graph.input_streams("join:30") == {
        "left (restoring)": {"left (restoring)": 15.0},
        "right (restoring)": {"right (restoring)": 15.0},
    }
    # never a keyed task, so never in a plan
    assert keyed_tasks(graph, ("left", "right", "join")) == {"join:30", "join:31"}
