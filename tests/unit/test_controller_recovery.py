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
    assert plan.unrecoverable == ()
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


def test_key_group_without_live_checkpoint_is_unrecoverable():
    kg = KeyGroupId("op", 0)
    view = ClusterView(
        nodes=[NodeInfo(node_id=n) for n in ("a", "b", "c")],
        key_groups=[KeyGroupInfo(key_group=kg, owner="a", load=1.0)],
        checkpoints={kg: ("b",)},
    )
    plan = plan_recovery(view, ["a", "b"])
    assert plan.unrecoverable == (kg,) and plan.restores == ()
    assert plan.unprotected == (kg,)  # one node left: nowhere to put a checkpoint
    assert plan.view.key_group(kg).owner == "c"
    with pytest.raises(ControllerModelError):
        plan_recovery(view, ["a", "b", "c"])
    with pytest.raises(ControllerModelError):
        plan_recovery(view, ["zz"])


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
