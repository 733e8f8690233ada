"""Recovery plan (restore on holders, then re-place) and the Madsen & Zhou 2015
section 7.3 metrics."""

import pytest
from controller_oracle import restore_work

from elastorm.controller.adaptation import Move, MoveReason, Thresholds
from elastorm.controller.allocation import AllocationSpec, constraint_violations, even_allocation
from elastorm.controller.metrics import (
    MigrationRecord,
    accumulated_latency,
    checkpoint_assisted_share,
    snapshot,
)
from elastorm.controller.model import (
    ClusterView,
    ControllerModelError,
    KeyGroupId,
    KeyGroupInfo,
    NodeInfo,
)
from elastorm.controller.recovery import plan_recovery
from elastorm.controller.synthetic import synthetic_cluster
from elastorm.core.messages import Protocol


def test_lost_node_restored_in_parallel_across_holders():
    c = synthetic_cluster(0, nodes=8, key_groups=64)
    spec = AllocationSpec(view=c.view, correlation=c.correlation, replicas=2)
    view = c.view.replace(checkpoints=even_allocation(spec, seed=1))
    lost = view.owned_by("n00003")
    plan = plan_recovery(view, ["n00003"], correlation=c.correlation, replicas=2)
    assert sorted(m.key_group for m in plan.restores) == sorted(lost)
    assert plan.lost == ()
    for m in plan.restores:
        assert m.protocol is Protocol.RESTORE and m.reason is MoveReason.RECOVERY
        assert m.target in view.checkpoints.holders(m.key_group)
    # Spread: several holders share the work, none takes more than its fair share + 1 job.
    work = restore_work(plan)
    assert len(work) >= 4
    biggest = max(k.checkpoint_size + k.replay_size for k in view.key_groups)
    assert max(work.values()) <= sum(work.values()) / len(work) + biggest
    # Phase 2 restored every checkpoint, valid on the surviving nodes.
    new_spec = AllocationSpec(view=plan.view, correlation=c.correlation, replicas=2)
    assert [
        v for v in constraint_violations(new_spec, plan.view.checkpoints) if "(c2)" not in v
    ] == []
    assert "n00003" not in plan.view.node_ids()
    assert all(m.source is None for m in plan.checkpoint_moves)


def test_key_group_without_live_checkpoint_or_durable_copy_is_lost():
    kg = KeyGroupId("op", 0)
    view = ClusterView(
        nodes=[NodeInfo(node_id=n) for n in ("a", "b", "c")],
        key_groups=[KeyGroupInfo(key_group=kg, owner="a", load=1.0)],
        checkpoints={kg: ("b",)},
    )
    plan = plan_recovery(view, ["a", "b"])
    assert plan.lost == (kg,) and plan.restores == () and plan.durable_restores == ()
    assert plan.unprotected == (kg,)  # one node left: nowhere to put a checkpoint
    assert plan.view.key_group(kg).owner == "c"
    # Every node failed: nothing to restore onto, the group (no durable copy) is lost.
    every = plan_recovery(view, ["a", "b", "c"])
    assert every.lost == (kg,) and not every.restores and not every.waiting
    with pytest.raises(ControllerModelError):
        plan_recovery(view, ["zz"])


def three_zone_view():
    """Owner ``a1`` (zone A) owns groups 0-2; groups 0 and 1 are held on ``b1`` (zone
    B), group 2 nowhere; ``c1`` (zone C) owns group 3 and is busier than ``a2``."""
    nodes = [
        NodeInfo(node_id="a1", zone="A"),
        NodeInfo(node_id="a2", zone="A"),
        NodeInfo(node_id="b1", zone="B"),
        NodeInfo(node_id="c1", zone="C"),
    ]
    kgs = [KeyGroupInfo(key_group=KeyGroupId("op", g), owner="a1", load=1.0) for g in range(3)]
    kgs.append(KeyGroupInfo(key_group=KeyGroupId("op", 3), owner="c1", load=5.0))
    checkpoints = {KeyGroupId("op", 0): ("b1",), KeyGroupId("op", 1): ("b1",)}
    return ClusterView(nodes=nodes, key_groups=kgs, checkpoints=checkpoints)


G = [KeyGroupId("op", g) for g in range(4)]


@pytest.mark.parametrize(
    ("failed", "durable", "restores", "durable_restores", "lost"),
    [
        # Holders alive: in-memory restores, the store is not used.
        (["a1"], {G[0], G[1], G[2]}, {G[0]: "b1", G[1]: "b1"}, {G[2]: "b1"}, ()),
        # Owner and holder gone: from the store, outside zone A (b1 is gone: c1).
        (["a1", "b1"], {G[0], G[1]}, {}, {G[0]: "c1", G[1]: "c1"}, (G[2],)),
        # No durable copy: lost, by name.
        (["a1", "b1"], set(), {}, {}, (G[0], G[1], G[2])),
        # Only zone A left: the zone cannot be avoided, the least-loaded node takes it.
        (["a1", "b1", "c1"], {G[0], G[3]}, {}, {G[0]: "a2", G[3]: "a2"}, (G[1], G[2])),
        # A durable copy of a group whose owner lives changes nothing.
        (["b1"], {G[0], G[1], G[2], G[3]}, {}, {}, ()),
    ],
)
def test_durable_restore_table(failed, durable, restores, durable_restores, lost):
    plan = plan_recovery(three_zone_view(), failed, durable=durable)
    assert {m.key_group: m.target for m in plan.restores} == restores
    assert {m.key_group: m.target for m in plan.durable_restores} == durable_restores
    assert plan.lost == lost
    for m in plan.durable_restores:
        assert m.protocol is Protocol.DURABLE and m.reason is MoveReason.RECOVERY
        assert m.source == three_zone_view().key_group(m.key_group).owner
        assert plan.view.key_group(m.key_group).owner == m.target
        assert m.target not in plan.view.checkpoints.holders(m.key_group)


def test_durable_restores_spread_by_load():
    """Several groups restored from the store go to the least-loaded node each time
    (the planned load counts), not all onto one node."""
    nodes = [NodeInfo(node_id=n) for n in ("a", "b", "c", "d")]
    kgs = [KeyGroupInfo(key_group=KeyGroupId("op", g), owner="a", load=1.0) for g in range(4)]
    view = ClusterView(nodes=nodes, key_groups=kgs)
    plan = plan_recovery(view, ["a"], durable={k.key_group for k in kgs})
    assert [m.target for m in plan.durable_restores] == ["b", "c", "d", "b"]


def move(protocol, reason=MoveReason.LOAD_BALANCE):
    return Move(
        key_group=KeyGroupId("o", 0), source="a", target="b", protocol=protocol, reason=reason
    )


def test_assisted_share_ignores_restores():
    moves = [move(Protocol.CPA), move(Protocol.DIRECT), move(Protocol.RESTORE, MoveReason.RECOVERY)]
    assert checkpoint_assisted_share(moves) == 0.5
    assert checkpoint_assisted_share([]) is None


def test_latency_accumulates_and_snapshot_counts_assisted_migrations():
    kg = KeyGroupInfo(key_group=KeyGroupId("o", 0), owner="a", checkpoint_size=500, replay_size=40)
    pauses = {Protocol.DIRECT: 501.0, Protocol.CPA: 41.0, Protocol.CPAL: 1.0}
    recs = [MigrationRecord(move=move(p), pause=v) for p, v in pauses.items()]
    assert accumulated_latency(recs) == pytest.approx(sum(pauses.values()))
    view = ClusterView(nodes=[NodeInfo(node_id="a")], key_groups=[kg])
    snap = snapshot(recs, view, Thresholds())
    assert (snap.migrations, snap.checkpoint_assisted, snap.usable_share) == (3, 2, None)
    with pytest.raises(ControllerModelError):
        MigrationRecord(move=move(Protocol.CPA), pause=-1)
