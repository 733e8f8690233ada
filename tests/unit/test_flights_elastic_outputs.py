"""Issue 3: op2's totals at the sink after a migration, with the real adapters.

Two ``KeyedSumDelays`` (source and target of a direct migration), two op1 emitters
(the core's ``Emitter``) and the real ``ResultsSink``, wired by hand so that the
interleaving seen once on the 2-worker cluster is played exactly: the target applies
a *new* flight of a plane from one op1 task before the toState of the other op1 task
brings an *older* flight of the same plane, which the target then replays quietly.
"""

from __future__ import annotations

import io
import json
from itertools import permutations

import pytest
from test_flights_harness import TICK, drain, make, tup

import elastorm.zk.requests
from bolts.flights import ResultsSink
from bolts.flights_elastic import KeyedSumDelays
from elastorm.core.actions import Send
from elastorm.core.keygroups import key_group
from elastorm.core.messages import Data, Message, Migrate, Protocol
from elastorm.core.migration.emitter import Emitter
from elastorm.core.routing import RoutingTable
from elastorm.storm.elastic import CONTROLLER_COMPONENT as CONTROLLER
from elastorm.storm.elastic import CONTROLLER_SENDER, RELAY, STREAM, from_wire, to_wire

GROUPS = 20
OP1, OP2 = "extract_delays", "sum_delays"  # the components of topologies/flights_elastic.py
OP2_TASKS = (1, 2, 3)
OP1_TASKS = (5, 6)
CONTROLLER_TASK = 4
PLANE = "N525US"  # the plane of the cluster run: rows 10121, 16176, 131098
G = key_group(PLANE, GROUPS)


def context(task: int) -> dict:
    names = {t: OP2 for t in OP2_TASKS} | {t: OP1 for t in OP1_TASKS}
    names[CONTROLLER_TASK] = CONTROLLER
    return {
        "taskid": task,
        "componentid": OP2,
        "task->component": {str(t): c for t, c in names.items()},
    }


class Wiring:
    """op1 emitters, op2 tasks and the sink; messages wait in per-channel queues."""

    def __init__(self, tmp_path, monkeypatch, carried: bool = False) -> None:
        self.carried = carried  # op1's data as carried rows (op1's default stream)
        monkeypatch.setattr(elastorm.zk.requests, "task_start", lambda *a: (1, -1))
        conf = {
            "elastorm.output_dir": str(tmp_path),
            "elastorm.key_groups": GROUPS,
            "elastorm.operators": {OP2: [OP1]},
            "elastorm.checkpoint_interval_secs": 0,  # no tick-driven checkpoints here
            "elastorm.flights.flush_every": 10**6,  # flush on ticks only
            # The interleaving below has each ack trim at once: no durable tier, whose
            # trims wait for the store (tests/unit/test_durable_restore.py).
            "elastorm.durable.uri": "none",
        }
        self.op2 = {}
        for t in OP2_TASKS:
            bolt = KeyedSumDelays(
                input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None
            )
            bolt.emitted = []
            bolt.emit = lambda values, stream=None, _b=bolt, **_: _b.emitted.append(
                (stream or "default", list(values))
            )
            bolt.context = context(t)  # pystorm sets it from Storm's handshake
            bolt.initialize(conf, bolt.context)
            self.op2[t] = bolt
        routing = RoutingTable.round_robin(GROUPS, list(OP2_TASKS))
        self.op1 = {t: Emitter(task=t, routing=routing, source=f"{OP1}:{t}") for t in OP1_TASKS}
        self.sink = make(ResultsSink, conf, task=9, component="results_sink")
        self.queues: dict[tuple[int, int], list[Message]] = {}
        self.updates: list[tuple[int, list]] = []  # (op2 task, update tuple)

    def owner(self) -> int:
        return self.op1[OP1_TASKS[0]].routing.owner(G)

    def put(self, sender: int, to: int, message: Message) -> None:
        self.queues.setdefault((sender, to), []).append(message)

    def emit(self, op1: int, row: int, delay: int) -> None:
        for action in self.op1[op1].emit(PLANE, [row, 2013, delay], float(row)):
            self.put(op1, action.to_task, action.message)

    def command(self, to: int, message: Message) -> None:
        self.put(CONTROLLER_SENDER, to, message)

    def deliver(self, sender: int, to: int, count: int = 1) -> None:
        for _ in range(count):
            message = self.queues[(sender, to)].pop(0)
            if to in self.op1:
                for action in self.op1[to].receive(sender, message):
                    assert isinstance(action, Send), action
                    self.put(to, action.to_task, action.message)
                continue
            bolt = self.op2[to]
            if self.carried and sender in self.op1 and isinstance(message, Data):
                row = [message.item.seq, PLANE, [2013, 0, None], 0.0]
                bolt.process(tup([*row, to_wire(message), to], task=sender))
            elif sender == CONTROLLER_SENDER:  # from its mailbox (elastorm.zk.commands)
                bolt.receive_command(message)
            else:
                bolt.process(tup([to_wire(message), sender], stream=STREAM, task=sender))
            self.collect(to)

    def collect(self, task: int) -> None:
        for stream, values in drain(self.op2[task]):
            if stream == RELAY:  # what the relay bolt would forward, sender kept
                to_task, wire, sender = values
                self.put(sender, int(to_task), from_wire(wire))
            elif stream == "default":
                self.updates.append((task, values))
            else:
                assert stream == "elastorm_reports", (stream, values)

    def tick(self) -> None:
        for task, bolt in self.op2.items():
            bolt.process_tick(TICK)
            self.collect(task)


def direct_migration_with_late_to_state(tmp_path, monkeypatch, carried=False) -> Wiring:
    """The interleaving of the cluster run, up to both ends' MigrationDone."""
    w = Wiring(tmp_path, monkeypatch, carried)
    source = w.owner()
    target = next(t for t in OP2_TASKS if t != source)
    fast, slow = OP1_TASKS
    w.emit(fast, 10121, -28)  # applied by the source, then in its full checkpoint
    w.deliver(fast, source)
    w.command(
        source,
        Migrate(key_group=G, epoch=1, protocol=Protocol.DIRECT, source=source, target=target),
    )
    w.deliver(CONTROLLER_SENDER, source)  # full checkpoint to the target
    w.emit(slow, 16176, -14)  # after the checkpoint: only in the slow op1's buffer
    w.deliver(slow, source)
    w.deliver(source, target)  # the target holds the checkpoint, acks
    w.deliver(target, source)  # ack: Trim and Migrate(CPA) to both op1 tasks
    w.deliver(source, fast, 2)  # the fast op1: toState (empty) to the target, redirect
    w.deliver(fast, target)  # the target converts its copy, REPLAYING
    w.deliver(fast, source)  # toCheckpoint from the fast op1
    w.emit(fast, 131098, 43)  # new data, straight to the target (outputs on)
    w.deliver(fast, target)
    w.deliver(source, slow, 2)  # the slow op1 gets Trim and Migrate(CPA) only now
    w.deliver(slow, target)  # toState [16176]: replayed at the target, quietly
    w.deliver(slow, source)  # toCheckpoint: the source is done
    assert not any(w.queues.values()), w.queues
    w.tick()
    return w


@pytest.mark.parametrize("carried", [False, True], ids=["direct", "carried"])
def test_target_state_has_every_flight(tmp_path, monkeypatch, carried) -> None:
    # carried: op1's data reach op2 inside op1's rows (TaskFieldGrouping), the
    # protocol's control on the elastorm stream; the outcome must not differ.
    w = direct_migration_with_late_to_state(tmp_path, monkeypatch, carried)
    target = w.op1[OP1_TASKS[0]].routing.owner(G)
    state = w.op2[target].coordinator.state(G)
    assert state is not None and state.get(PLANE) == {"2013": [1, 3]}


@pytest.mark.parametrize("order", list(permutations(range(3))))
def test_sink_gets_every_flight_whatever_order_updates_arrive_in(
    tmp_path, monkeypatch, order
) -> None:
    w = direct_migration_with_late_to_state(tmp_path, monkeypatch)
    # Per sending task the sink sees updates in order (one Storm channel each);
    # between tasks any interleaving. Play every order of the senders' streams.
    by_task: dict[int, list] = {}
    for task, values in w.updates:
        by_task.setdefault(task, []).append(values)
    tasks = sorted(by_task)
    assert len(tasks) <= 3
    for i in order:
        if i < len(tasks):
            for values in by_task[tasks[i]]:
                w.sink.process(tup(values, component=OP2, task=tasks[i]))
    w.sink.write()
    with open(w.sink.path, encoding="utf-8") as fh:
        totals = json.load(fh)["totals"]["op2"]
    assert totals[PLANE] == {"2013": [1, 3]}


def test_updates_flushed_with_no_tuple_between_all_reach_the_sink(tmp_path, monkeypatch) -> None:
    """A takeover's values come off the task's thread (a durable copy loaded), so two
    flushes may have no input tuple between them: the second must not look stale to
    the sink (the HDFS restore test lost 7 restored groups' totals that way)."""
    w = Wiring(tmp_path, monkeypatch)
    owner = w.owner()
    w.emit(OP1_TASKS[0], 10121, -28)
    w.deliver(OP1_TASKS[0], owner)
    w.tick()  # the first update: one flight
    bolt = w.op2[owner]
    bolt.latest.pending[PLANE] = {"2013": [-42, 2]}  # what a takeover queues, no tuple
    w.tick()
    sent = [values for task, values in w.updates if task == owner]
    assert len(sent) == 2 and sent[0][1] < sent[1][1]
    for values in sent:
        w.sink.process(tup(values, component=OP2, task=owner))
    w.sink.write()
    with open(w.sink.path, encoding="utf-8") as fh:
        out = json.load(fh)
    assert out["totals"]["op2"][PLANE] == {"2013": [-42, 2]}
    assert "stale_update" not in w.sink.counters.errors


class Publisher:
    """Stands in for the task's ``HeartbeatPublisher`` (no ZooKeeper here)."""

    def __init__(self, health: dict[str, int]) -> None:
        self.counts = health
        self.wakes = 0

    def state(self):
        from elastorm.zk.heartbeat import PublisherState

        return PublisherState.REGISTERED

    def publish_now(self) -> None:
        self.wakes += 1

    def health(self) -> dict[str, int]:
        return dict(self.counts)


def test_counters_file_shows_the_heartbeat_publishers_health(tmp_path, monkeypatch) -> None:
    w = Wiring(tmp_path, monkeypatch)
    quiet, publishing = w.op2[OP2_TASKS[0]], w.op2[OP2_TASKS[1]]
    health = {"published": 7, "failures": 2, "callback_errors": 1, "step_errors": 0}
    quiet.heartbeats = None  # heartbeats off, or no ZooKeeper configured
    publishing.heartbeats = Publisher(health)
    w.tick()
    assert publishing.heartbeats.wakes == 1  # each tick publishes the new heartbeat

    def extra(bolt):
        with open(bolt.counters.path, encoding="utf-8") as f:
            return json.load(f)["extra"]

    assert extra(publishing)["heartbeats"] == health
    assert extra(quiet)["heartbeats"] is None


def test_outputs_made_during_a_restore_reach_the_sink_tentative_then_final(
    tmp_path, monkeypatch
) -> None:
    """After the migration above, the new owner dies and the group is restored on the
    old owner (its holder). A flight applied there while only the fast op1's toState
    has arrived makes an update the sink holds as tentative; the slow op1's toState
    ends the restore, every key of the group goes out again final, and the sink ends
    with the exact total and nothing tentative."""
    w = direct_migration_with_late_to_state(tmp_path, monkeypatch)
    dead = w.owner()
    holder = next(t for t in OP2_TASKS if t != dead and w.op2[t].coordinator.held.get(G))
    restore = Migrate(key_group=G, epoch=2, protocol=Protocol.RESTORE, source=None, target=holder)
    fast, slow = OP1_TASKS
    for t in (fast, slow):  # the controller's RESTORE goes to the emitters
        w.command(t, restore)
        w.deliver(CONTROLLER_SENDER, t)
    w.queues = {ch: q for ch, q in w.queues.items() if dead not in ch}  # it is gone
    w.deliver(fast, holder)  # the fast op1's toState: still REPLAYING
    w.emit(fast, 140000, 5)
    w.deliver(fast, holder)
    w.tick()
    *_, (_, tentative) = [u for u in w.updates if u[0] == holder]
    assert tentative[4] == [PLANE] and tentative[2] == [[PLANE, 2013, 6, 4]]
    w.deliver(slow, holder)  # the restore ends
    w.tick()
    assert not any(w.queues.values()), w.queues
    for task, values in w.updates:
        w.sink.process(tup(values, component=OP2, task=task))
    w.sink.write()
    with open(w.sink.path, encoding="utf-8") as fh:
        sink = json.load(fh)
    assert sink["totals"]["op2"][PLANE] == {"2013": [6, 4]}
    assert sink["tentative"] == {} and sink["tentative_updates"] == {"op2": 1}
