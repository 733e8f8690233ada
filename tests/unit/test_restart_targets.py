"""A task declared lost, or restarted and not yet recovered, is given no work (freeze-10).

In chaos scenario freeze-10 (docs/failures.md) the standby controller led, declared
op2 task 10 lost and restored its key groups elsewhere; Storm restarted task 10, and
before its ``TaskStarted`` report was handled the controller's rounds put two groups
of task 9 on task 10's node, which then looked idle (it owned nothing). The restart's
recovery took them for the dead incarnation's: one restored from an older
checkpoint, the other declared lost. These tests replay that sequence on the pure
loop: no round (rescale, adaptation, recovery placement) chooses such a node as a
target, and a restart's recovery takes back only what its dead incarnation had.
"""

from __future__ import annotations

from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.controller.loop import ControllerLoop, Placement
from elastorm.controller.model import Heartbeat, NodeState, TaskIdentity, TaskRecord
from elastorm.core.actions import CheckpointStored, MigrationDone, Role, Send
from elastorm.core.control import MigrationController
from elastorm.core.messages import Protocol, SetHolder
from elastorm.core.routing import RoutingTable

G = 6
TASKS = {"node0": 10, "node1": 11, "node2": 12}
ALL = frozenset(TASKS)
THRESHOLDS = {
    "cpu_high": 0.8,
    "cpu_low": 0.5,
    "queue_high": 50,
    "queue_low": 20,
    "cooldown_secs": 0,
    "scale_in": False,
}


def _loop(**options) -> ControllerLoop:
    """One keyed operator ``op`` on node0-2, round robin, deciding at once."""
    control = MigrationController(
        num_key_groups=G,
        tasks=TASKS.values(),
        emitters=[1],
        routing=RoutingTable.round_robin(G, sorted(TASKS.values())),
    )
    config = ControllerConfig(
        **{"warmup_secs": 0, "settle_secs": 0, "defer_secs": 1.0, **THRESHOLDS, **options}
    )
    return ControllerLoop(
        controls={"op": control},
        placement=Placement({"op": TASKS}),
        config=TopologyConfig(controller=config),
        started_at=0.0,
    )


def _report_newest(loop: ControllerLoop, *, but: int | None = None) -> None:
    control = loop.controls["op"]
    for g in range(G):
        holder = control.holders[g]
        if holder != but:
            control.on_checkpoint_stored(holder, CheckpointStored(key_group=g, checkpoint=(0, 1)))


def _records(loop: ControllerLoop, *, hot: bool = False) -> list[TaskRecord]:
    """Tasks 10 and 11 with their groups' rates (when ``hot``, node0 overloaded and node1
    too busy to take load, so relief needs an idle node), and the
    restarted task 12's new incarnation (pid 2): registered, empty, its ``TaskStarted``
    not handled yet."""
    control = loop.controls["op"]
    out = []
    for node, task in TASKS.items():
        owned = () if task == 12 else control.routing.key_groups_of(task)
        hot_here = hot and node == "node0"
        out.append(
            TaskRecord(
                identity=TaskIdentity(
                    task_id=task, operator="op", node_id=node, host="h", pid=2 if task == 12 else 1
                ),
                heartbeat=Heartbeat(
                    key_groups=owned,
                    input_rates=tuple((g, 100.0) for g in owned),
                    cpu=0.95 if hot_here else (0.0 if task == 12 else 0.6 if hot else 0.3),
                    queue_length=500 if hot_here else 0,
                ),
            )
        )
    return out


def _routed_records(loop: ControllerLoop) -> list[TaskRecord]:
    """Every task with the groups the routing gives it, 100 tuples/s and 10% CPU each."""
    control = loop.controls["op"]
    return [
        TaskRecord(
            identity=TaskIdentity(task_id=task, operator="op", node_id=node, host="h", pid=1),
            heartbeat=Heartbeat(
                key_groups=(owned := control.routing.key_groups_of(task)),
                input_rates=tuple((g, 100.0) for g in owned),
                cpu=0.1 * len(owned),
            ),
        )
        for node, task in TASKS.items()
    ]


def _given_to_12(sends: tuple[Send, ...] | list[Send]) -> list[Send]:
    """Commands that give task 12 work: a checkpoint to hold, or a group to own."""
    return [
        s
        for s in sends
        if (isinstance(s.message, SetHolder) and s.message.holder == 12)
        or getattr(s.message, "target", None) == 12
    ]


def _declare_12_lost(loop: ControllerLoop) -> None:
    _report_newest(loop)
    recovery = loop.recover("op", [12], 1.0, rejoined=False)
    assert set(recovery.crash.restored) == {2, 5}
    assert not loop.controls["op"].routing.key_groups_of(12)


def test_a_new_leaders_rescale_gives_a_lost_node_nothing_until_its_restart_is_recovered():
    """freeze-10's suspected path: at a new leader's first rescale round task 12's node
    owns nothing (its groups were restored elsewhere), so it counted as joining and was
    filled, by direct moves once ``defer_secs`` passed."""
    loop = _loop()
    _declare_12_lost(loop)
    control = loop.controls["op"]
    state = NodeState(active=ALL)
    for t in range(2, 8):
        rnd = loop.rescale(_records(loop), state, float(t), limit=4)
        assert not _given_to_12(rnd.sends), f"round at t={t} gave task 12 work"
        assert all(m.target != "node2" for m in rnd.started)
        assert 12 not in control.holders.values()
        _report_newest(loop, but=12)
    # The restart is recovered (its TaskStarted handled): node2 may take work again.
    loop.recover("op", [12], 8.0, rejoined=True, stale_through=control.epoch)
    given = []
    for t in range(9, 14):
        given += _given_to_12(loop.rescale(_records(loop), state, float(t), limit=4).sends)
        _report_newest(loop)
    assert given, "once recovered, the restarted node gets its share again"


def test_adaptation_moves_nothing_to_a_lost_node_that_looks_idle():
    """A lost node with no record (or its new incarnation's empty one) has CPU 0: the
    adaptation's scale-out would pick it to relieve an overloaded node."""
    loop = _loop(adapt=True)
    _declare_12_lost(loop)
    rnd = loop.round(_records(loop, hot=True), 2.0)
    assert all(m.target != "node2" for m in rnd.moves)
    assert all(m.target != "node2" for m, _ in rnd.refused)
    assert not _given_to_12(rnd.sends)
    loop.recover("op", [12], 3.0, rejoined=True, stale_through=loop.controls["op"].epoch)
    later = loop.round(_records(loop, hot=True), 4.0)
    assert any(m.target == "node2" for m in later.moves), "recovered: a target again"


def test_a_second_failure_restores_and_places_nothing_on_a_lost_node():
    """Task 11 dies while task 12 is lost and not restarted: its groups and the
    checkpoints it held go to live nodes only (node0), never to node2."""
    loop = _loop()
    _declare_12_lost(loop)
    _report_newest(loop, but=12)
    recovery = loop.recover("op", [11], 2.0, rejoined=False)
    assert "node2" not in {m.target for m in recovery.plan.restores}
    assert "node2" not in {m.target for m in recovery.plan.checkpoint_moves}
    assert not _given_to_12(recovery.crash.sends)
    assert 12 not in loop.controls["op"].holders.values()


def test_a_restarts_recovery_keeps_the_groups_given_to_the_new_incarnation():
    """A leader that never declared task 12 (its predecessor did) may give the new
    incarnation work before its TaskStarted is handled; that incarnation took the
    migration (its epoch is past ``stale_through``), so the restart's recovery must
    not restore the group elsewhere nor declare it lost."""
    loop = _loop()
    _report_newest(loop)
    control = loop.controls["op"]
    started_at = control.epoch  # the epoch the new incarnation read at its start
    sends = control.migrate(0, 12, Protocol.DIRECT, now=1.0)
    assert sends
    moving = control.moving[0]
    for role in (Role.SOURCE, Role.TARGET):
        loop.on_migration_done(
            "op",
            MigrationDone(key_group=0, role=role, epoch=moving.epoch, protocol=Protocol.DIRECT),
            2.0,
        )
    assert control.owner(0) == 12
    recovery = loop.recover("op", [12], 3.0, rejoined=True, stale_through=started_at)
    assert set(recovery.crash.restored) == {2, 5}, "only the dead incarnation's groups"
    assert not recovery.plan.lost
    assert control.owner(0) == 12


def test_a_restarted_node_takes_its_share_back_after_its_recovery():
    """The groups of a lost task are restored on their holders and, before, stayed there
    for good: the restarted node was never joining again (only a node that became active
    was), so it idled while the holders carried its load (issue 32: restored groups pile
    up on the holders; scaling after a failure never settles)."""
    loop = _loop()
    control = loop.controls["op"]
    state = NodeState(active=ALL)
    for t in range(1, 4):  # rounds before the failure: settled, nobody joining
        loop.rescale(_records(loop), state, float(t), limit=4)
        _report_newest(loop)
    assert not loop.joining and control.routing.key_groups_of(12)
    _declare_12_lost(loop)
    for g, restore in list(control.moving.items()):  # restored on their holders
        done = MigrationDone(key_group=g, role=Role.TARGET, epoch=restore.epoch,
                             protocol=restore.protocol)  # fmt: skip
        loop.on_migration_done("op", done, 4.0)
    assert not control.moving and not control.routing.key_groups_of(12)
    loop.recover("op", [12], 5.0, rejoined=True, stale_through=control.epoch)
    loop.rescale(_records(loop), state, 5.5, limit=4)
    assert loop.joining == {"node2"}
    for t in range(6, 20):
        rnd = loop.rescale(_routed_records(loop), state, float(t), limit=4)
        for m in rnd.started:
            moving = control.moving[m.key_group.index]
            assert m.protocol is Protocol.CPAL
            for role in (Role.SOURCE, Role.TARGET):
                loop.on_migration_done(
                    "op",
                    MigrationDone(
                        key_group=m.key_group.index,
                        role=role,
                        epoch=moving.epoch,
                        protocol=moving.protocol,
                    ),
                    float(t),
                )
        _report_newest(loop)
    assert len(control.routing.key_groups_of(12)) == G // len(TASKS)
    assert not loop.joining


def test_a_restarted_task_holds_again_though_another_operators_task_on_its_node_is_down():
    """chained zk-stop, session 29: ``counts`` task 4 and ``letters`` task 7 (node1)
    were lost at once; 4's restart was recovered while 7 was still down, and node1
    counted as down for every operator: ``counts``' re-placement put nothing on task 4,
    so task 3's groups had no holder (no trim; held outputs stalled). A rejoined task's
    node is back for its own operator."""

    def control(tasks: list[int]) -> MigrationController:
        return MigrationController(
            num_key_groups=G, tasks=tasks, emitters=[1], routing=RoutingTable.round_robin(G, tasks)
        )

    loop = ControllerLoop(
        controls={"counts": control([3, 4]), "letters": control([6, 7])},
        placement=Placement(
            {"counts": {"node0": 3, "node1": 4}, "letters": {"node0": 6, "node1": 7}}
        ),
        config=TopologyConfig(controller=ControllerConfig(warmup_secs=0, settle_secs=0)),
        started_at=0.0,
    )
    counts = loop.controls["counts"]
    for op in ("counts", "letters"):
        for g in range(G):
            c = loop.controls[op]
            c.on_checkpoint_stored(c.holders[g], CheckpointStored(key_group=g, checkpoint=(0, 1)))
    loop.recover("counts", [4], 1.0, rejoined=False)
    loop.recover("letters", [7], 1.0, rejoined=False)
    assert {counts.owner(g) for g in range(G)} == {3}
    recovery = loop.recover("counts", [4], 2.0, rejoined=True, stale_through=counts.epoch)
    told = {s.message.key_group for s in recovery.crash.sends if isinstance(s.message, SetHolder)}
    assert told == set(range(G)) and {counts.holders[g] for g in range(G)} == {4}
