"""Scale-out and scale-in as plain data (``elastorm.controller.scaling``) and the loop's
rescale round: node sets, the planner's convergence (seeded), bounded disjoint moves."""

from __future__ import annotations

import json
import random

import pytest

from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.controller.adaptation import Move, MoveReason
from elastorm.controller.loop import ControllerLoop, Placement
from elastorm.controller.model import (
    ClusterView,
    ControllerModelError,
    Heartbeat,
    KeyGroupId,
    KeyGroupInfo,
    NodeInfo,
    NodeState,
    TaskIdentity,
    TaskRecord,
)
from elastorm.controller.scaling import (
    Binding,
    NodeSet,
    RescaleView,
    ScalingError,
    concurrent_moves,
    decode_binding,
    decode_node_set,
    drain,
    encode_node_set,
    plan_rescale,
    release,
    scale_to,
)
from elastorm.core.actions import CheckpointStored, MigrationDone, Role
from elastorm.core.control import MigrationController
from elastorm.core.messages import Protocol
from elastorm.core.routing import RoutingTable

# -- node sets ---------------------------------------------------------------------------
B2 = Binding(nodes=("s0", "s1", None, None))


def test_node_set_round_trips_and_no_znode_means_every_node() -> None:
    ns = NodeSet(wanted=("s1", "s0", "s1"), draining=("s1",))
    assert decode_node_set(encode_node_set(ns)) == NodeSet(wanted=("s0", "s1"), draining=("s1",))
    assert decode_node_set(None) == NodeSet() and NodeSet().wanted is None
    with pytest.raises(ScalingError, match="malformed node set"):
        decode_node_set(b"[1")
    assert decode_binding(b'{"binding": ["s0", null]}').nodes == ("s0", None)
    with pytest.raises(ScalingError, match="malformed scheduler placement"):
        decode_binding(b"{}")


def test_scale_out_takes_unbound_live_nodes_first_then_starts_spares() -> None:
    change = scale_to(4, nodes=NodeSet(), binding=B2, live=["s0", "s1", "s5"], spare=["s2"])
    assert change.start == ("s2",)
    assert change.nodes == NodeSet(wanted=("s0", "s1", "s2", "s5"))
    assert change.drain == ()


def test_scale_in_drains_the_nodes_bound_last_and_never_node0() -> None:
    b4 = Binding(nodes=("s0", "s1", "s2", "s3"))
    change = scale_to(2, nodes=NodeSet(), binding=b4, live=b4.bound, spare=[])
    assert change.drain == ("s3", "s2")
    assert change.nodes == NodeSet(wanted=("s0", "s1", "s2", "s3"), draining=("s2", "s3"))
    # Scaling back out takes a draining node back first: its tasks are still there.
    back = scale_to(3, nodes=change.nodes, binding=b4, live=b4.bound, spare=["s9"])
    assert back.start == () and back.nodes.draining == ("s3",)


def test_scale_beyond_the_task_count_is_refused() -> None:
    with pytest.raises(ScalingError, match=r"2\.\.4 nodes"):
        scale_to(5, nodes=NodeSet(), binding=B2, live=["s0", "s1"], spare=[])


@pytest.mark.parametrize("target", [0, 1])
def test_scale_below_two_nodes_is_refused_with_the_reason(target: int) -> None:
    # On one node no group has a checkpoint holder: a drain from 2 nodes to 1 planned
    # its moves, then never released the node (every holder stayed on it).
    with pytest.raises(ScalingError, match="at least 2 nodes.*other than its owner"):
        scale_to(target, nodes=NodeSet(), binding=B2, live=["s0", "s1"], spare=[])


def test_drain_refuses_unknown_nodes_node0_and_the_last_node() -> None:
    with pytest.raises(ScalingError, match="runs no task"):
        drain("s7", nodes=NodeSet(), binding=B2)
    with pytest.raises(ScalingError, match="non-keyed"):
        drain("s0", nodes=NodeSet(), binding=B2)
    b3 = Binding(nodes=("s0", "s1", "s2"))
    ns = drain("s2", nodes=NodeSet(), binding=b3)
    assert ns == NodeSet(wanted=("s0", "s1", "s2"), draining=("s2",))
    assert release("s2", ns, b3) == NodeSet(wanted=("s0", "s1"))
    with pytest.raises(ScalingError, match="leave 1 active node.*at least 2"):
        drain("s1", nodes=NodeSet(), binding=B2)
    with pytest.raises(ScalingError, match="leave 1 active node"):
        drain("s1", nodes=NodeSet(draining=("s2",)), binding=b3)


# -- the rescale planner -------------------------------------------------------------------
def _view(owners: dict[KeyGroupId, str], holders, loads, nodes) -> ClusterView:
    return ClusterView(
        nodes=[NodeInfo(node_id=n) for n in nodes],
        key_groups=[
            KeyGroupInfo(key_group=kg, owner=o, load=loads.get(kg, 0.0)) for kg, o in owners.items()
        ],
        checkpoints={kg: (h,) for kg, h in holders.items() if h is not None},
    )


def _simulate(owners, holders, loads, nodes, active, draining=(), limit=4, rounds=40):
    """Apply plan_rescale round after round: holder changes take one round to report a
    checkpoint, moves finish within the round (the source keeps the checkpoint, as after
    CPAL's toCheckpoint). Returns the rounds it took, the moves and the final state."""
    owners, holders = dict(owners), dict(holders)
    assisted = set(holders)
    moved: list[Move] = []
    joining = frozenset(n for n in active if n not in owners.values())
    for r in range(rounds):
        step = plan_rescale(
            RescaleView(
                view=_view(owners, holders, loads, nodes),
                active=frozenset(active),
                draining=frozenset(draining),
                joining=joining,
                assisted=frozenset(assisted),
            )
        )
        joining -= set(step.filled)
        if not step.holders and not step.moves:
            assert not joining, "settled with a node still joining"
            return r, moved, owners, holders, step
        for kg, node in step.holders:
            holders[kg] = node
            assisted.add(kg)  # reported by the next round
        for move in concurrent_moves(step.moves, {}, limit):
            assert move.protocol is Protocol.CPAL
            assert holders[move.key_group] == move.target
            holders[move.key_group] = owners[move.key_group]
            owners[move.key_group] = move.target
            moved.append(move)
    raise AssertionError("did not converge")


def _start(n_groups: int, on: list[str], seed: int):
    rng = random.Random(seed)
    kgs = [KeyGroupId(op, g) for op in ("op1", "op2") for g in range(n_groups)]
    owners = {kg: on[i % len(on)] for i, kg in enumerate(kgs)}
    holders = {kg: on[(i + 1) % len(on)] for i, kg in enumerate(kgs)}
    loads = {kg: rng.uniform(0.5, 1.5) for kg in kgs}
    return owners, holders, loads


@pytest.mark.parametrize("seed", range(8))
def test_scale_out_gives_the_joining_node_its_share_by_cpal_and_settles(seed: int) -> None:
    nodes = ["node0", "node1", "node2", "node3"]
    owners, holders, loads = _start(20, ["node0", "node1"], seed)
    rounds, moved, owners, _, _ = _simulate(
        owners, holders, loads, nodes, active=["node0", "node1", "node2"]
    )
    total = sum(loads.values())
    got = sum(loads[kg] for kg, o in owners.items() if o == "node2")
    assert got == pytest.approx(total / 3, rel=0.15)
    assert len({m.key_group for m in moved}) == len(moved), "a key group moved twice"
    assert all(m.target == "node2" and m.reason is MoveReason.SCALE_OUT for m in moved)
    assert rounds <= 2 * len(moved) + 2
    # Settled: another round plans nothing (no oscillation).
    assert "node3" not in owners.values()


@pytest.mark.parametrize("seed", range(8))
def test_drain_moves_every_group_and_checkpoint_off_and_releases(seed: int) -> None:
    nodes = ["node0", "node1", "node2", "node3"]
    owners, holders, loads = _start(20, ["node0", "node1", "node2"], seed)
    _, moved, owners, holders, step = _simulate(
        owners, holders, loads, nodes, active=["node0", "node1"], draining=["node2"]
    )
    assert "node2" not in owners.values()
    assert "node2" not in holders.values()
    assert all(holders[kg] != owners[kg] for kg in owners)
    assert all(m.source == "node2" and m.reason is MoveReason.SCALE_IN for m in moved)
    assert step.released == ("node2",)


def test_checkpoints_parked_on_idle_nodes_are_re_placed_on_active_ones() -> None:
    kg = KeyGroupId("op", 0)
    step = plan_rescale(
        RescaleView(
            view=_view({kg: "node0"}, {kg: "node3"}, {}, ["node0", "node1", "node3"]),
            active=frozenset({"node0", "node1"}),
            draining=frozenset({"node3"}),
        )
    )
    assert step.holders == ((kg, "node1"),)


def test_a_rescale_needs_an_active_node() -> None:
    view = _view({}, {}, {}, ["node0"])
    with pytest.raises(ControllerModelError):
        RescaleView(view=view, active=frozenset())
    with pytest.raises(ControllerModelError):
        RescaleView(view=view, active=frozenset({"node0"}), draining=frozenset({"node0"}))


def _move(g: int, source: str, target: str, op: str = "op") -> Move:
    return Move(
        key_group=KeyGroupId(op, g),
        source=source,
        target=target,
        protocol=Protocol.CPAL,
        reason=MoveReason.SCALE_OUT,
    )


def test_concurrent_moves_share_no_task_and_stay_within_the_limit() -> None:
    moves = [_move(0, "a", "c"), _move(1, "b", "c"), _move(2, "b", "d"), _move(3, "a", "c", "x")]
    assert [m.key_group.index for m in concurrent_moves(moves, {}, 4)] == [0, 2, 3]
    assert [m.key_group.index for m in concurrent_moves(moves, {}, 2)] == [0, 2]
    busy = {KeyGroupId("op", 9): ("d", "e")}
    assert [m.key_group.index for m in concurrent_moves(moves, busy, 4)] == [0, 3]
    with pytest.raises(ScalingError):
        concurrent_moves(moves, {}, 0)


# -- the loop's rescale round ----------------------------------------------------------------
OPS = {
    "op1": {"node0": 10, "node1": 11, "node2": 12},
    "op2": {"node0": 20, "node1": 21, "node2": 22},
}
G = 6


def _loop(**options: float) -> ControllerLoop:
    """A loop over ``OPS`` with the controller ``options`` (``elastorm.controller.*``)."""
    controls = {
        op: MigrationController(
            num_key_groups=G,
            tasks=tasks.values(),
            emitters=[1],
            routing=RoutingTable.round_robin(G, [tasks["node0"], tasks["node1"]]),
        )
        for op, tasks in OPS.items()
    }
    return ControllerLoop(
        controls=controls,
        placement=Placement(OPS),
        config=TopologyConfig(controller=ControllerConfig(**options)),
        started_at=0.0,
    )


def _records() -> list[TaskRecord]:
    return [
        TaskRecord(
            identity=TaskIdentity(task_id=t, operator=op, node_id=n, host="h", pid=1),
            heartbeat=Heartbeat(),
        )
        for op, by_node in OPS.items()
        for n, t in by_node.items()
    ]


def _report_newest(loop: ControllerLoop) -> None:
    for control in loop.controls.values():
        for g in range(G):
            control.on_checkpoint_stored(
                control.holders[g], CheckpointStored(key_group=g, checkpoint=(0, 1))
            )


def test_loop_rescale_places_checkpoints_then_moves_by_cpal_within_the_limit() -> None:
    loop = _loop()
    state = NodeState(active=frozenset({"node0", "node1", "node2"}))
    first = loop.rescale(_records(), state, 1.0, limit=1)
    # Initial holders sit next to their owners, some on node2: nothing to move yet except
    # what node2 already holds; every planned holder change was ordered as SetHolder.
    assert len(first.started) <= 1
    _report_newest(loop)
    second = loop.rescale(_records(), state, 2.0, limit=1)
    started = [*first.started, *second.started]
    assert started and all(m.protocol is Protocol.CPAL for m in started)
    in_flight = [g for c in loop.controls.values() for g in c.moving]
    assert len(in_flight) == 1, "the limit bounds migrations in flight"
    # Finish it: both ends report done.
    m = started[-1]
    control = loop.controls[m.key_group.operator]
    moving = control.moving[m.key_group.index]
    for role in (Role.SOURCE, Role.TARGET):
        loop.on_migration_done(
            m.key_group.operator,
            MigrationDone(
                key_group=m.key_group.index,
                role=role,
                epoch=moving.epoch,
                protocol=moving.protocol,
            ),
            3.0,
        )
    assert control.owner(m.key_group.index) == OPS[m.key_group.operator]["node2"]


def test_loop_rescale_releases_a_drained_node_only_when_it_was_draining() -> None:
    loop = _loop()
    state = NodeState(active=frozenset({"node0", "node1"}))
    rnd = loop.rescale(_records(), state, 1.0, limit=4)
    # node2 is idle (never bound) and holds checkpoints: they move, but it is not released.
    assert rnd.step.holders and rnd.step.released == ()


# -- the adapters' pure parts ------------------------------------------------------------------
def test_node_watch_counts_a_node_active_only_after_it_settled() -> None:
    from elastorm.zk.layout import ZnodeLayout
    from elastorm.zk.scaling import NodeWatch

    watch = NodeWatch(client=None, layout=ZnodeLayout("t"))  # type: ignore[arg-type]
    assert watch.state(0.0, 5.0) is None  # not elastically scheduled (yet)
    watch._clock = lambda: 0.0
    watch._on_placement(b'{"binding": ["s0", "s1", null]}', None)
    watch._clock = lambda: 10.0
    watch._on_placement(b'{"binding": ["s0", "s1", "s2"]}', None)
    watch._on_nodes(b'{"wanted": ["s0", "s1", "s2"], "draining": ["s1"]}', None)
    state = watch.state(12.0, 5.0)
    assert state == NodeState(active=frozenset({"node0"}), draining=frozenset({"node1"}))
    assert watch.state(16.0, 5.0).active == frozenset({"node0", "node2"})
    watch._on_nodes(b"[", None)  # malformed: the last node set is kept
    assert watch.nodes.draining == ("s1",)


def test_a_joining_node_is_active_only_once_its_tasks_restarted_in_its_worker() -> None:
    from elastorm.zk.layout import ZnodeLayout
    from elastorm.zk.scaling import NodeWatch

    watch = NodeWatch(client=None, layout=ZnodeLayout("t"))  # type: ignore[arg-type]
    tasks = {"node0": [3, 7], "node1": [4, 8], "node2": [5, 9]}
    watch._clock = lambda: 0.0
    watch._on_placement(b'{"binding": ["s0", "s1", null]}', None)
    # The first binding's nodes started with the topology: no report needed.
    assert watch.state(1.0, 0.0, tasks.get).active == frozenset({"node0", "node1"})
    watch.task_started(5, 9.0)  # node2's task, still in the idle worker: before the binding
    watch._clock = lambda: 10.0
    watch._on_placement(b'{"binding": ["s0", "s1", "s2"]}', None)
    assert "node2" not in watch.state(30.0, 5.0, tasks.get).active  # nobody restarted yet
    watch.task_started(5, 31.0)
    assert "node2" not in watch.state(32.0, 5.0, tasks.get).active  # one operator's only
    watch.task_started(9, 33.0)
    assert "node2" in watch.state(33.5, 5.0, tasks.get).active
    assert "node2" in watch.state(33.5, 5.0).active  # without tasks: settle time only


def test_provisioner_spec_is_checked(tmp_path) -> None:
    import dataclasses
    from pathlib import Path

    from elastorm.errors import UserError
    from elastorm.runtime.config import load_config
    from elastorm.runtime.provision import CommandProvisioner, LocalSupervisors, provisioner

    cfg = dataclasses.replace(
        load_config(Path(__file__).resolve().parents[2]), home=tmp_path / "home"
    )
    local = provisioner("local", cfg)
    assert isinstance(local, LocalSupervisors)
    assert local.live() == () and local.spare(2) == ("supervisor-0", "supervisor-1")
    script = tmp_path / "nodes.sh"
    script.write_text('#!/bin/sh\ncase "$1" in list) echo b; echo a;; stop) exit 3;; esac\n')
    script.chmod(0o755)
    command = provisioner(f"command:{script}", cfg)
    assert isinstance(command, CommandProvisioner) and command.live() == ("a", "b")
    with pytest.raises(UserError, match="exited 3"):
        command.stop("a")
    with pytest.raises(UserError, match="expected 'local'"):
        provisioner("aws", cfg)


def test_a_heavy_group_held_by_the_joining_node_does_not_stop_it_taking_its_share() -> None:
    # Seen on the cluster: the hot group (30% of the load) had its checkpoint on the new
    # node; the planner stopped when that group did not fit, leaving the node 3 of 20.
    kgs = [KeyGroupId("op", g) for g in range(20)]
    owners = {kg: ("node0", "node1")[kg.index % 2] for kg in kgs}
    holders = {kg: ("node1", "node0")[kg.index % 2] for kg in kgs}
    holders[kgs[7]] = "node2"
    loads = {kg: 0.4 if kg.index == 7 else 0.6 / 19 for kg in kgs}
    _, moved, owners, _, _ = _simulate(
        owners, holders, loads, ["node0", "node1", "node2"], active=["node0", "node1", "node2"]
    )
    got = sum(loads[kg] for kg, o in owners.items() if o == "node2")
    # node1 (the hot group and 9 cold ones) is the only node above the share: node2 takes
    # its 9 cold groups; the hot one would overshoot, and node0 is below the share.
    assert got == pytest.approx(9 * 0.6 / 19)
    assert kgs[7] not in {m.key_group for m in moved}
    assert [kg for kg, o in owners.items() if o == "node1"] == [kgs[7]]


def test_loop_rescale_goes_ahead_without_a_checkpoint_after_defer_secs() -> None:
    loop = _loop(defer_secs=5.0)
    state = NodeState(active=frozenset({"node0", "node1", "node2"}))
    loop.rescale(_records(), state, 1.0, limit=4)  # holders placed on node2, none reports
    assert not loop.rescale(_records(), state, 3.0, limit=4).started
    late = loop.rescale(_records(), state, 7.0, limit=4)
    assert late.started and all(m.protocol is Protocol.DIRECT for m in late.started)


def test_adaptation_sees_only_the_bound_nodes_and_waits_for_a_rescale() -> None:
    from elastorm.controller.loop import bound_view

    loop = _loop()
    view = loop.view(_records(), 1.0)
    assert bound_view(view, None) is view
    two = bound_view(view, NodeState(active=frozenset({"node0", "node1"})))
    assert two.node_ids() == ("node0", "node1")
    assert all(set(h) <= {"node0", "node1"} for _, h in two.checkpoints.entries)
    assert not loop.rescaling
    loop.rescale(_records(), NodeState(active=frozenset({"node0", "node1", "node2"})), 1.0, limit=1)
    assert loop.rescaling  # node2 joins: adaptation waits


def _hint_view(cpu: dict[str, float], queue: float, owners: dict[int, str]) -> ClusterView:
    return ClusterView(
        nodes=[NodeInfo(node_id=n, cpu=c, queue_length=queue) for n, c in cpu.items()],
        key_groups=[
            KeyGroupInfo(key_group=KeyGroupId("op", g), owner=o, load=0.1)
            for g, o in owners.items()
        ],
    )


def test_scale_hint_wants_a_node_only_when_overload_cannot_be_shed_and_fewer_when_emptied() -> None:
    from elastorm.controller.adaptation import Thresholds
    from elastorm.controller.scaling import scale_hint

    th = Thresholds()
    active = frozenset({"node0", "node1"})
    hot = _hint_view({"node0": 0.95, "node1": 0.9}, 500, {0: "node0", 1: "node1"})
    assert scale_hint(hot, (), th, active) == 3
    shed = (_move(0, "node0", "node1"), _move(1, "node1", "node0"))
    assert scale_hint(hot, shed, th, active) is None  # the adaptation relieves them itself
    cool = _hint_view({"node0": 0.2, "node1": 0.1, "node2": 0.0}, 0, {0: "node0", 1: "node1"})
    three = frozenset({"node0", "node1", "node2"})
    assert scale_hint(cool, (), th, three) == 2  # node2 was emptied by the scale-in
    assert scale_hint(cool, (), th, three, joining=frozenset({"node2"})) is None
    assert scale_hint(cool, (), th, active) is None


def test_autoscaler_acts_on_a_hint_that_holds_and_not_more_often_than_the_cooldown() -> None:
    from elastorm.errors import UserError
    from elastorm.runtime.scale import Autoscaler, Progress

    def p(want, binding=("s0", "s1", None), **busy) -> Progress:
        return Progress(binding=binding, owned={}, draining=(), moving=0, want=want, **busy)

    scaler = Autoscaler(low=2, high=3, hold=10, cooldown=60)
    assert scaler.decide(p(3), 0) is None  # not held yet
    assert scaler.decide(p(None), 5) is None  # the wish went away: the hold restarts
    assert scaler.decide(p(3), 6) is None
    assert scaler.decide(p(3, pending=2), 20) is None  # a rescale is under way
    assert scaler.decide(p(3), 20) == 3
    three = ("s0", "s1", "s2")
    assert scaler.decide(p(5, three), 40) is None  # cooldown, and clamped to --max anyway
    assert scaler.decide(p(1, three), 90) is None  # held from 90
    assert scaler.decide(p(1, three), 101) == 2  # clamped to --min
    with pytest.raises(UserError):
        Autoscaler(low=3, high=2)


class _FakeZk:
    """The few kazoo calls ``runtime.scale`` makes, over a dict of znodes."""

    def __init__(self, data: dict[str, bytes]) -> None:
        self.data = data

    def exists(self, path: str):
        return path in self.data or None

    def get(self, path: str):
        from kazoo.exceptions import NoNodeError

        if path not in self.data:
            raise NoNodeError(path)
        return self.data[path], None


def test_plan_scale_checks_the_node_count_before_asking_the_provisioner() -> None:
    from elastorm.errors import UserError
    from elastorm.runtime.scale import plan_scale
    from elastorm.zk.layout import ZnodeLayout

    layout = ZnodeLayout("t")
    zk = _FakeZk(
        {
            layout.leader: b"c",
            layout.scheduler_placement: json.dumps(
                {"binding": ["supervisor-0", "supervisor-1", None, None]}
            ).encode(),
        }
    )

    class Provisioner:
        asked: list[int] = []

        def live(self):
            return ("supervisor-0", "supervisor-1")

        def spare(self, count: int):
            self.asked.append(count)
            return tuple(f"supervisor-{2 + i}" for i in range(count))

    prov = Provisioner()
    with pytest.raises(UserError, match=r"2\.\.4 nodes"):
        plan_scale(zk, layout, 9, prov)  # type: ignore[arg-type]
    assert prov.asked == []
    change = plan_scale(zk, layout, 3, prov)  # type: ignore[arg-type]
    assert change.start == ("supervisor-2",) and prov.asked == [1]
    with pytest.raises(UserError, match="has not placed"):
        plan_scale(_FakeZk({layout.leader: b"c"}), layout, 3, prov)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="controller of t is not running"):
        plan_scale(_FakeZk({}), layout, 3, prov)  # type: ignore[arg-type]


def test_a_restarted_supervisor_counts_only_once_nimbus_lists_it_afresh(tmp_path, monkeypatch):
    """Session 30's CI: Nimbus still listed a killed supervisor, so the count of
    supervisors was met before the restarted one registered; the next topology was
    scheduled onto the old set and moved 5 s later (an orphan worker held a port).
    ``start`` returns only once a supervisor that started since the call is listed, and
    ``stop`` waits until Nimbus no longer lists the stopped one."""
    import dataclasses
    from pathlib import Path

    from elastorm.runtime import provision
    from elastorm.runtime.config import load_config

    cfg = dataclasses.replace(
        load_config(Path(__file__).resolve().parents[2]), home=tmp_path / "home"
    )
    running = {"supervisor-0"}
    polls: list[int] = []
    stale = {"id": "old", "uptime_secs": 3600}
    fresh = {"id": "old", "uptime_secs": 0}
    supervisor0 = {"id": "zero", "uptime_secs": 3600}

    def listed(host, port):
        polls.append(len(polls))
        if "supervisor-1" not in running:  # stopped: listed for two more polls
            return [supervisor0, stale] if len(polls) < 3 else [supervisor0]
        return [supervisor0, stale] if len(polls) < 3 else [supervisor0, fresh]

    monkeypatch.setattr(provision, "_supervisors", listed)
    monkeypatch.setattr(provision, "running_pid", lambda c, n: 1 if n in running else None)
    monkeypatch.setattr(provision.LocalSupervisors, "live", lambda self: tuple(sorted(running)))
    monkeypatch.setattr(provision, "start", lambda c, d: running.add(d.name))
    monkeypatch.setattr(provision, "stop", lambda c, n: running.discard(n))
    monkeypatch.setattr(provision, "wait_until", _polling_wait_until)
    local = provision.LocalSupervisors(cfg, slots=2)
    local.start(["supervisor-1"], timeout=10)
    assert len(polls) == 3  # not at the first poll, where the stale entry made the count
    polls.clear()
    local.stop("supervisor-1")
    assert len(polls) == 3


def _polling_wait_until(check, what, timeout, pid=None, logfile=None):
    """``services.wait_until`` without its 0.3 s sleeps."""
    from elastorm.errors import UserError

    for _ in range(100):
        if check():
            return
    raise UserError(f"{what}: not ready")
