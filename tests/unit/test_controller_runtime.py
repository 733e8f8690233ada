"""The controller bolt's I/O adapter with fake ZooKeeper parts: it decides nothing until
the store has loaded earlier decisions, then resumes from them."""

from __future__ import annotations

import json
from types import MappingProxyType

from kazoo.exceptions import NoNodeError

from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.controller.loop import ControllerLoop, Placement
from elastorm.controller.model import Allocation, KeyGroupId
from elastorm.core.actions import CheckpointStored, Send
from elastorm.core.control import MigrationController
from elastorm.core.messages import Protocol, SetHolder
from elastorm.core.routing import RoutingTable
from elastorm.storm.controller_runtime import (
    FIGURES_EVERY_SECS,
    ControllerRuntime,
    holders_allocation,
    resume,
)
from elastorm.zk.codec import SetAside, Submission
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.store import Decisions, StoreError, StoreStatus

TASKS = {"op": {"node0": 5, "node1": 6, "node2": 7}}


def controls() -> dict[str, MigrationController]:
    return {"op": MigrationController(num_key_groups=3, tasks=[5, 6, 7], emitters=[1])}


def decisions(epoch: int = 4) -> Decisions:
    table = RoutingTable(epoch=epoch, owners=(7, 7, 6))
    alloc = Allocation({KeyGroupId("op", g): ("node0",) for g in range(3)})
    return Decisions(routing=MappingProxyType({"op": table}), checkpoints=alloc)


def test_resume_takes_newer_routing_and_holders_only() -> None:
    cs = controls()
    assert resume(cs, decisions(), Placement(TASKS)) == ["op"]
    c = cs["op"]
    assert c.routing.owners == (7, 7, 6) and c.epoch == 4
    assert c.holders == {0: 5, 1: 5, 2: 5}
    assert holders_allocation(cs, Placement(TASKS)).holders(KeyGroupId("op", 1)) == ("node0",)
    # A table no newer than ours is ignored, but the allocation is taken: allocating
    # checkpoints does not bump the routing epoch (a controller killed after its
    # allocation and before any migration).
    early = controls()
    assert resume(early, decisions(epoch=0), Placement(TASKS)) == ["op"]
    assert early["op"].routing.owners == (5, 6, 7)
    assert early["op"].holders == {0: 6, 1: 5, 2: 5}  # never the owner (5 owns group 0)
    # A fresh topology's store has neither.
    fresh = controls()
    empty = Decisions(routing=MappingProxyType({}), checkpoints=None)
    assert resume(fresh, empty, Placement(TASKS)) == []


def test_resume_takes_the_replicas_as_their_groups_holders() -> None:
    """A restarted controller that forgot its replicas would migrate replicated groups
    and restore them from checkpoints instead of promoting the replicas (the emitters
    keep feeding them)."""
    cs = controls()
    replicas = Allocation({KeyGroupId("op", 0): ("node1",), KeyGroupId("op", 2): ("node2",)})
    saved = Decisions(routing=decisions().routing, checkpoints=None, replicas=replicas)
    assert resume(cs, saved, Placement(TASKS)) == ["op"]
    c = cs["op"]
    # group 2's owner (6, epoch 4) is not node2's task 7: kept; group 0's replica on 6
    assert c.replicas == {0: 6, 2: 7} and c.holders[0] == 6 and c.holders[2] == 7
    assert not c.can_migrate(0) and c.surviving_copies(0, [7]) == (6,)
    # a replica that would be its group's owner is ignored
    own = Decisions(
        routing=decisions().routing,
        checkpoints=None,
        replicas=Allocation({KeyGroupId("op", 1): ("node2",)}),  # group 1's owner is 7
    )
    other = controls()
    resume(other, own, Placement(TASKS))
    assert other["op"].replicas == {}


def test_a_resumed_controller_issues_past_every_epoch_its_predecessor_issued() -> None:
    """Starting a replica bumps the epoch without changing an owner. The emitters then
    ignore any command of that group at or below it; a restarted controller that took
    only the routing table's epoch (4) restored a lost group at 5 and the restore never
    started (a stall seen on Storm after a controller restart)."""
    saved = Decisions(
        routing=decisions().routing, checkpoints=None, issued=MappingProxyType({"op": 9})
    )
    cs = controls()
    resume(cs, saved, Placement(TASKS))
    c = cs["op"]
    assert c.routing.epoch == 4 and c.epoch == 9
    crash = c.recover([7], restores={0: 5, 1: 5}, holders={}, now=1.0)
    epochs = {s.message.key_group: s.message.epoch for s in crash.sends}
    assert epochs == {0: 10, 1: 11}
    # A znode written before ``issued`` existed: the table's epoch, as before.
    older = controls()
    resume(older, decisions(), Placement(TASKS))
    assert older["op"].epoch == 4


def test_the_runtime_persists_the_highest_epoch_issued_before_it_sends() -> None:
    cs = controls()
    loop = ControllerLoop(
        controls=cs, placement=Placement(TASKS), config=TopologyConfig(), started_at=0.0
    )
    store = FakeStore()
    store.state = StoreStatus.ONLINE
    rt = runtime(loop, store)
    assert rt.ready(1.0) and cs["op"].epoch == 4
    c = cs["op"]
    c.on_checkpoint_stored(5, CheckpointStored(key_group=0, checkpoint=(0, 1)))  # its holder
    sends = c.replicate(0, 5, now=1.0)
    assert rt.order(sends) == sends and store.issued == 5 and c.routing.epoch == 4


def test_a_resumed_controller_knows_where_each_groups_newest_checkpoint_survives() -> None:
    """Seen on Storm: the controller's worker died with task 8; its successor had no
    checkpoint reports, found no copy of task 8's groups and declared their state lost,
    though the holder had it. The routing znode now carries the newest copies; a copy
    counts only if its task's heartbeat still lists the group."""
    before = controls()["op"]
    before.on_checkpoint_stored(5, CheckpointStored(key_group=0, checkpoint=(0, 2)))
    before.on_checkpoint_stored(6, CheckpointStored(key_group=0, checkpoint=(0, 1)))  # older
    before.on_checkpoint_stored(7, CheckpointStored(key_group=1, checkpoint=(0, 3)))
    copies = before.newest_copies()
    assert copies == {0: {5: (0, 2)}, 1: {7: (0, 3)}}
    saved = Decisions(
        routing=decisions().routing,  # owners (7, 7, 6)
        checkpoints=None,
        copies=MappingProxyType({"op": copies}),
    )
    cs = controls()
    assert resume(cs, saved, Placement(TASKS), holding=lambda t, g: True) == ["op"]
    c = cs["op"]
    # group 0's owner 7 dies: its state survives on 5
    assert c.surviving_copies(0, [7]) == (5,)
    # group 1's copy was on 7, its owner in the resumed routing: not a copy
    assert c.surviving_copies(1, [7]) == ()
    # Task 5 restarted empty meanwhile (its heartbeat lists nothing): no copy, and the
    # older one on 6 does not pass for the newest.
    gone = controls()
    resume(gone, saved, Placement(TASKS), holding=lambda t, g: t != 5)
    assert gone["op"].surviving_copies(0, [7]) == ()
    # The runtime persists them with the routing table.
    store = FakeStore()
    store.state = StoreStatus.ONLINE
    loop = ControllerLoop(
        controls={"op": before}, placement=Placement(TASKS), config=TopologyConfig(), started_at=0
    )
    runtime(loop, store).tick(1.0)
    assert store.copies == copies


class FakeStore:
    def __init__(self) -> None:
        self.state = StoreStatus.STANDBY
        self.written: list = []
        self.durable = True  # whether writes reach "ZooKeeper" (flush succeeds)
        self.flushed = 0
        self.given: Decisions | None = None  # what the predecessor persisted (default: decisions())

    def pending(self) -> int:
        return 0 if self.durable else len(self.written)

    def flush(self, timeout: float) -> bool:
        self.flushed += 1
        return self.durable

    def status(self) -> StoreStatus:
        return self.state

    def decisions(self) -> Decisions:
        return self.given if self.given is not None else decisions()

    def set_routing(self, op, table, issued=None, copies=None) -> None:
        if self.state is not StoreStatus.ONLINE:
            raise StoreError("not loaded")
        self.written.append((op, table.epoch))
        self.issued, self.copies = issued, copies

    def set_checkpoints(self, allocation) -> None:
        self.written.append("checkpoints")

    def set_replicas(self, replicas) -> None:
        self.written.append(("replicas", replicas))


class FakeWatcher:
    def live(self) -> dict:
        from elastorm.controller.model import Heartbeat, TaskIdentity, TaskRecord

        return {
            t: TaskRecord(
                identity=TaskIdentity(task_id=t, operator="op", node_id=n, host="h", pid=1),
                heartbeat=Heartbeat(),
            )
            for n, t in TASKS["op"].items()
        }


class FakeClient:
    """What the runtime writes to ZooKeeper itself (the figures): path -> data, and
    every write, in order."""

    def __init__(self) -> None:
        self.connected = True
        self.data: dict[str, bytes] = {}
        self.writes: list[str] = []

    def set(self, path: str, data: bytes) -> None:
        if path not in self.data:
            raise NoNodeError(path)
        self.create(path, data)

    def create(self, path: str, data: bytes, makepath: bool = False) -> None:
        self.data[path] = data
        self.writes.append(path)


FIRST = Submission(storm_id="t-1-1", since=0.0)  # a first submission: nothing set aside


def even_loop() -> ControllerLoop:
    """A loop that rounds at once: the even allocation, no warm-up."""
    return ControllerLoop(
        controls=controls(),
        placement=Placement(TASKS),
        config=TopologyConfig(controller=ControllerConfig(strategy="even", warmup_secs=0)),
        started_at=0.0,
    )


def runtime(
    loop: ControllerLoop,
    store: FakeStore,
    submission: Submission = FIRST,
) -> ControllerRuntime:
    return ControllerRuntime(
        loop=loop,
        client=FakeClient(),
        layout=ZnodeLayout("t"),
        watcher=FakeWatcher(),
        store=store,
        round_secs=1.0,
        metrics_path=None,
        submission=submission,
    )


def test_no_round_before_the_store_has_loaded_then_resume_and_persist() -> None:
    cs = controls()
    loop = ControllerLoop(
        controls=cs,
        placement=Placement(TASKS),
        config=TopologyConfig(controller=ControllerConfig(strategy="even", warmup_secs=0)),
        started_at=0.0,
    )
    store = FakeStore()
    rt = runtime(loop, store)
    assert rt.tick(10.0) == [] and rt.rounds == 0 and not rt.loaded  # another leader
    store.state = StoreStatus.ONLINE
    rt.tick(11.0)
    assert rt.loaded and rt.rounds == 1
    assert cs["op"].routing.owners == (7, 7, 6)  # resumed before deciding
    # Its predecessor had allocated, so was warm: no second warm-up, and the allocation
    # re-optimized later is the resumed one, not one made afresh.
    assert loop.allocation == holders_allocation(cs, Placement(TASKS))
    settle = loop.options.settle_secs  # but first it hears the holders' reports
    assert not loop.warm(11.0 + settle - 0.5) and loop.warm(11.0 + settle)
    assert ("op", 4) in store.written and "checkpoints" in store.written
    assert ("replicas", Allocation({})) in store.written  # none yet, but recorded
    assert rt.tick(11.5) == [] and rt.rounds == 1  # not yet a round due
    # Deposed later (a standby took over while its session was lost): it decides
    # nothing more, though its decisions stay loaded.
    store.state = StoreStatus.CONFLICT
    assert not rt.ready(20.0) and rt.tick(20.0) == [] and rt.rounds == 1


def test_a_predecessor_whose_decisions_equal_the_start_up_ones_still_counts() -> None:
    """A leader killed before any move persisted the start-up routing and holders: its
    successor takes nothing over, but it did follow a leader, so the tasks with no
    znode are suspected (``MigrationControllerBolt.suspect_absent``); only an empty store
    is a first start. Chaos join/zk-stop, session 31: the task killed with the leader
    was never suspected and nothing was restored."""
    for persisted, predecessor in (
        (Decisions(routing=MappingProxyType({}), checkpoints=None), False),
        (
            Decisions(
                routing=MappingProxyType({"op": controls()["op"].routing}),
                checkpoints=holders_allocation(controls(), Placement(TASKS)),
            ),
            True,
        ),
    ):
        cs = controls()
        loop = ControllerLoop(
            controls=cs, placement=Placement(TASKS), config=TopologyConfig(), started_at=0.0
        )
        store = FakeStore()
        store.state, store.given = StoreStatus.ONLINE, persisted
        rt = runtime(loop, store)
        assert rt.ready(1.0)
        assert resume(controls(), persisted, Placement(TASKS)) == []  # nothing to take over
        assert rt.resumed is predecessor


def test_commands_go_out_only_once_their_decisions_are_in_zookeeper() -> None:
    """Write-ahead: a controller killed after sending must not have decided anything
    its successor cannot read back; while ZooKeeper lags the commands are held."""
    loop = even_loop()
    store = FakeStore()
    store.state, store.durable = StoreStatus.ONLINE, False
    rt = runtime(loop, store)
    held = [Send(to_task=5, message=SetHolder(key_group=0, holder=7))]
    rt.outbox.extend(held)  # what a round decided
    assert rt.tick(10.0) == [] and rt.rounds == 1 and rt.outbox == held
    assert store.flushed == 1  # it waited for ZooKeeper, briefly
    assert rt.tick(10.2) == [] and rt.outbox == held  # still lagging: still held
    store.durable = True
    assert rt.tick(10.4) == held and not rt.outbox  # no round due; the held ones go
    # A deposed controller sends nothing it decided.
    rt.outbox.extend(held)
    store.state = StoreStatus.CONFLICT
    assert rt.tick(10.6) == [] and not rt.outbox


def test_a_request_only_controller_resumes_and_persists_before_it_sends() -> None:
    """No strategy, no adaptation: still the earlier routing is taken over before any
    request is carried out (else its epoch would restart at 0 and every emitter would
    ignore its commands as stale), and a request's commands wait for ZooKeeper."""
    cs = controls()
    loop = ControllerLoop(
        controls=cs, placement=Placement(TASKS), config=TopologyConfig(), started_at=0.0
    )
    assert not loop.options.active
    store = FakeStore()
    rt = runtime(loop, store)
    assert not rt.ready(1.0)  # another leader, or ZooKeeper away: nothing decided
    store.state = StoreStatus.ONLINE
    assert rt.ready(2.0) and cs["op"].routing.epoch == 4  # resumed
    sends = cs["op"].migrate(0, 6, Protocol.DIRECT, now=2.0)
    store.durable = False
    assert rt.order(sends) == [] and ("op", 5) in store.written  # persisted, held
    store.durable = True
    assert rt.tick(3.0) == sends and rt.rounds == 0  # released; no round ever


def test_a_new_submission_that_set_state_aside_says_so_once_at_load(caplog) -> None:
    """The controller's one line when a resubmission under an old name started clean:
    which storm id, how many key groups, where the old state went; none otherwise."""
    loop = even_loop()
    store = FakeStore()
    store.state = StoreStatus.ONLINE
    aside = SetAside(
        storm_id="t-1-1", key_groups=3, znodes=9, path="/elastorm/t/archive/t-1-1", at=5.0
    )
    rt = runtime(loop, store, Submission(storm_id="t-2-9", since=5.0, set_aside=aside))
    with caplog.at_level("INFO", logger="elastorm.storm.controller_runtime"):
        rt.tick(10.0)
        rt.tick(12.0)
    lines = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert lines == [
        "controller: submission t-2-9 of t starts clean: the state of the earlier submission "
        "t-1-1 (3 key groups, 9 znodes) was set aside under /elastorm/t/archive/t-1-1; "
        "`elastorm forget --topology t` deletes it"
    ]
    caplog.clear()
    with caplog.at_level("INFO", logger="elastorm.storm.controller_runtime"):
        runtime(loop, store, Submission(storm_id="t-2-9", since=5.0)).tick(20.0)
    assert not [r for r in caplog.records if "set aside" in r.getMessage()]


def test_the_leader_publishes_its_figures_for_the_dashboard_every_few_seconds() -> None:
    loop = even_loop()
    store = FakeStore()
    rt = runtime(loop, store)
    client, path = rt.client, ZnodeLayout("t").figures
    rt.tick(10.0)  # standing by: it publishes nothing
    assert client.writes == []
    store.state = StoreStatus.ONLINE
    rt.tick(11.0)
    figures = json.loads(client.data[path])
    assert figures["strategy"] == "even" and figures["rounds"] == 1
    assert figures["allocation"]["theta"] == loop.options.theta
    rt.tick(11.0 + FIGURES_EVERY_SECS / 2)  # not due yet
    assert client.writes == [path]
    rt.tick(11.0 + FIGURES_EVERY_SECS)  # due, and changed (more rounds)
    assert client.writes == [path, path]
    assert json.loads(client.data[path])["rounds"] == 3
