"""Every task of a keyed operator lost at once (issue 32: the controller died).

Chaos ``join/lose-1-ctl`` under load: a new leader declared every keyed task lost at
once and ``plan_recovery`` raised "every node failed", so the controller bolt died with
the recovery half done. An operator of one task hits the same path at each restart of
its worker. Now nothing is planned onto a dead node: the groups with a durable copy
wait, and when a task of the operator restarts it reads its own groups back from the
store (a durable restore onto its new incarnation); the simulator checks that the state
comes back exact.
"""

from __future__ import annotations

from sim import Cluster
from test_restart_targets import TASKS, _loop, _report_newest

from elastorm.controller.model import ClusterView, KeyGroupId, KeyGroupInfo, NodeInfo
from elastorm.controller.recovery import plan_recovery
from elastorm.core.keygroups import key_group
from elastorm.core.messages import Migrate, Protocol
from elastorm.core.routing import RoutingTable

KG = KeyGroupId("op", 0)
BARE = KeyGroupId("op", 1)


def _one_node() -> ClusterView:
    return ClusterView(
        nodes=[NodeInfo(node_id="a")],
        key_groups=[KeyGroupInfo(key_group=kg, owner="a", load=1.0) for kg in (KG, BARE)],
    )


def test_no_node_left_plans_nothing_and_keeps_the_durable_groups_waiting() -> None:
    plan = plan_recovery(_one_node(), ["a"], durable={KG})
    assert not plan.restores and not plan.durable_restores
    assert plan.waiting == (KG,)  # restored once a task of op restarts
    assert plan.lost == (BARE,)  # no copy anywhere: lost, as before


def test_a_restarted_only_node_reads_its_own_groups_back_from_the_store() -> None:
    plan = plan_recovery(_one_node(), ["a"], rejoined=["a"], durable={KG})
    assert [(m.key_group, m.source, m.target, m.protocol) for m in plan.durable_restores] == [
        (KG, "a", "a", Protocol.DURABLE)
    ]
    assert plan.lost == (BARE,) and not plan.waiting


def test_the_loop_survives_every_task_declared_lost_then_restores_each_on_its_restart() -> None:
    loop = _loop()
    control = loop.controls["op"]
    groups = {t: control.routing.key_groups_of(t) for t in TASKS.values()}
    everything = [g for owned in groups.values() for g in owned]
    first = loop.recover("op", sorted(TASKS.values()), 1.0, rejoined=False, durable=everything)
    assert not first.crash.restored and not first.crash.sends
    assert sorted(loop.recoveries[-1]["waiting"]) == sorted(everything)
    assert not loop.recoveries[-1]["lost"]
    for task in sorted(TASKS.values()):
        back = loop.recover(
            "op", [task], 2.0, rejoined=True, durable=groups[task], stale_through=control.epoch
        )
        orders = [s.message for s in back.crash.sends if isinstance(s.message, Migrate)]
        # Each restarted task gets its own groups back from the store, or the groups of
        # one restarted before it when it is the first back.
        assert orders and {m.protocol for m in orders} == {Protocol.DURABLE}
        assert all(control.owner(m.key_group) == m.target for m in orders)
    assert all(control.owner(g) in TASKS.values() for g in everything)
    assert not control.moving or all(
        m.protocol is Protocol.DURABLE for m in control.moving.values()
    )


def test_a_restore_in_flight_to_a_task_that_dies_too_is_not_ordered_again() -> None:
    """CI, session 24 (the every-task-loss test): task 9 was declared lost and its groups
    restored onto task 10, which died 0.1 s later. Nothing could take them, yet the
    controller kept ordering those restores to dead task 10 every 10 s, one reached its
    restarted incarnation, and the job stalled. A restore whose target died is over; the
    group waits for a restart like the dead task's own."""
    loop = _loop()
    control = loop.controls["op"]
    _report_newest(loop)
    everything = list(range(control.num_key_groups))
    first = loop.recover("op", [12], 1.0, rejoined=False, durable=everything)
    assert first.crash.restored and control.moving  # onto tasks 10 and 11, in flight
    loop.recover("op", [10, 11], 1.1, rejoined=False, durable=everything)
    assert not control.moving
    assert not control.redrive(60.0, waited=10.0)
    assert sorted(loop.recoveries[-1]["waiting"]) == everything
    back = loop.recover(
        "op", [10], 70.0, rejoined=True, durable=everything, stale_through=control.epoch
    )
    orders = [s.message for s in back.crash.sends if isinstance(s.message, Migrate)]
    assert orders and all(m.target == 10 and m.protocol is Protocol.DURABLE for m in orders)


def test_every_task_killed_at_once_comes_back_exact_from_the_store() -> None:
    """The simulator end to end: both tasks die after a durable write; each restarted
    incarnation loads its group from the store and the emitters replay the rest."""
    g = 2
    keys = [next(f"k{i}" for i in range(100) if key_group(f"k{i}", g) == kg) for kg in (0, 1)]
    c = Cluster(
        num_key_groups=g,
        tasks=[0, 1],
        emitters=[10],
        routing=RoutingTable.from_mapping({0: 0, 1: 1}, g),
        durable=True,
    )
    for value, key in enumerate(keys * 3, start=1):
        c.emit(10, key, value)
    c.run_until_quiet()
    for kg in (0, 1):
        c.checkpoint(c.owner(kg), kg)
        c.run_until_quiet()
        assert c.persist(c.owner(kg), kg)
    c.emit(10, keys[0], 100)  # after the durable copies: comes back by replay
    c.run_until_quiet()
    c.crash(0, 1)
    assert c.stats["durable_restores"] == 2
    c.run_until_quiet()
    assert not c.moving
    assert c.coordinators[c.owner(0)].state(0).get(keys[0]) == 1 + 3 + 5 + 100
    assert c.coordinators[c.owner(1)].state(1).get(keys[1]) == 2 + 4 + 6
