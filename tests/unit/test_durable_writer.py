"""The durable writer: the task never waits for the store; writes retry in order; a full
queue coalesces; every k-th checkpoint; lag and health numbers."""

from __future__ import annotations

import threading
import time

import pytest
from test_durable_format import OP, checkpoints

from elastorm.durable.local import LocalStore
from elastorm.durable.restore import load_latest
from elastorm.durable.store import StoreError
from elastorm.durable.writer import DurableWriter


class GatedStore(LocalStore):
    """A store whose puts wait for ``gate`` and fail while ``failures`` > 0 (logs each put)."""

    def __init__(self, root):
        super().__init__(root)
        self.gate = threading.Event()
        self.gate.set()
        self.failures = 0
        self.puts: list[str] = []
        self.lock = threading.Lock()

    def put(self, path, data):
        self.gate.wait()
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                raise StoreError("namenode down")
            self.puts.append(path)
        super().put(path, data)


def wait_until(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


@pytest.fixture
def store(tmp_path):
    return GatedStore(tmp_path)


def test_offer_never_waits_for_a_stuck_store(store):
    store.gate.clear()  # the store hangs
    writer = DurableWriter(store, capacity=4)
    deltas = checkpoints([{"a": 1}] * 200)
    began = time.monotonic()
    for delta in deltas:
        writer.offer(OP, delta)
    assert time.monotonic() - began < 1.0  # 200 offers against a hung store
    health = writer.health()
    assert health["queue"] <= 4 + 1  # bounded: coalesced instead of growing
    assert health["coalesced"] >= 190
    assert writer.lag()[(OP, 3)][0] == 200  # nothing durable yet: the whole history trails
    store.gate.set()
    wait_until(writer.drained)
    found = load_latest(store, OP, 3)
    assert found.copy.entries == {"a": 200} and found.copy.checkpoint == deltas[-1].checkpoint
    assert writer.lag()[(OP, 3)] == (0, 0.0)
    writer.close()


def test_failed_writes_retry_in_order(store):
    store.failures = 3
    writer = DurableWriter(store, retry_max_secs=0.01, capacity=100)
    deltas = checkpoints([{"a": 1}, {"b": 2}, {"a": 3}])
    for delta in deltas:
        writer.offer(OP, delta)
    wait_until(writer.drained)
    assert writer.health()["errors"] == 3 and writer.health()["writes"] == 3
    checkpoints_written = [p.rsplit("/", 1)[1] for p in store.puts if "manifest" not in p]
    assert checkpoints_written == sorted(checkpoints_written)  # in order despite the failures
    assert len(checkpoints_written) == 3
    assert load_latest(store, OP, 3).copy.entries == {"a": 4, "b": 2}
    writer.close()


def test_coalescing_merges_the_oldest_pair_of_one_group(store):
    store.gate.clear()
    writer = DurableWriter(store, capacity=2)
    a = checkpoints([{"x": 1}, {"x": 1}, {"x": 1}], group=1)
    b = checkpoints([{"y": 5}], group=2)
    for delta in a:  # queue: a1 (taken by the thread or pending), a2, a3 ... merged
        writer.offer(OP, delta)
    writer.offer(OP, b[0])  # another group when full: the oldest same-group pair merges
    assert writer.health()["coalesced"] >= 1
    store.gate.set()
    wait_until(writer.drained)
    assert load_latest(store, OP, 1).copy.entries == {"x": 3}
    assert load_latest(store, OP, 2).copy.entries == {"y": 5}
    writer.close()


def test_every_kth_checkpoint_is_written_with_the_ones_between_merged(store):
    writer = DurableWriter(store, every=3)
    deltas = checkpoints([{"a": 1}, {"b": 1}, {"c": 1}, {"a": 1}])
    for delta in deltas:
        writer.offer(OP, delta)
    wait_until(writer.drained)
    assert writer.health()["writes"] == 2  # the 1st (full: a new chain) and the 3rd
    found = load_latest(store, OP, 3)
    assert found.copy.entries == {"a": 1, "b": 1, "c": 1}
    assert found.copy.checkpoint == deltas[2].checkpoint
    assert writer.lag()[(OP, 3)][0] == 1  # the 4th waits for the 6th
    writer.close()


def test_duplicates_are_ignored_and_a_broken_chain_asks_for_a_full_checkpoint(store):
    writer = DurableWriter(store)
    deltas = checkpoints([{"a": 1}, {"a": 1}, {"a": 1}])
    writer.offer(OP, deltas[0])
    writer.offer(OP, deltas[0])  # the same delta sent to the holder and to a replica
    writer.offer(OP, deltas[2])  # deltas[1] never came
    wait_until(writer.drained)
    health = writer.health()
    assert health["duplicates"] == 1 and health["chain_breaks"] == 1
    assert writer.wants_full() == {(OP, 3)} and writer.wants_full() == set()
    writer.close()


def test_a_new_process_continues_the_stored_chain(store):
    deltas = checkpoints([{"a": 1}, {"a": 1}, {"a": 1}])
    first = DurableWriter(store)
    first.offer(OP, deltas[0])
    first.offer(OP, deltas[1])
    wait_until(first.drained)
    first.close()
    second = DurableWriter(store)  # e.g. the worker restarted, or the group moved here
    second.offer(OP, deltas[2])
    wait_until(second.drained)
    assert load_latest(store, OP, 3).copy.entries == {"a": 3}
    second.close()


def test_a_keyed_task_hands_every_checkpoint_it_sends_to_the_writer(store):
    """The Storm adapter's side: a ``Send`` of a checkpoint also goes to the durable writer
    (``KeyedOperator.perform``), and the lag reaches the counters file."""
    from elastorm.core.migration.coordinator import TaskCoordinator
    from elastorm.storm.elastic import KeyedOperator

    bolt = object.__new__(KeyedOperator)  # no Storm: only what perform uses
    sent = []
    bolt.send = sent.append
    bolt._component = OP
    bolt.durable = DurableWriter(store)
    bolt.coordinator = TaskCoordinator(
        task=7, num_key_groups=8, upstreams=[1], owned=[3], holders={3: 9}
    )
    for value in (1, 2, 4):
        bolt.coordinator.state(3).update("a", value)
        bolt.perform(bolt.coordinator.checkpoint(3))
    assert [s.to_task for s in sent] == [9, 9, 9]  # the holder still gets each one
    wait_until(bolt.durable.drained)
    assert load_latest(store, OP, 3).copy.entries == {"a": 7}
    health = bolt.durable_health()
    assert health["writes"] == 3 and health["lag"] == {"3": [0, 0.0]}
    bolt.durable.close()


def test_a_keyed_tasks_heartbeat_carries_its_writers_counts_and_its_groups_lag(store):
    """``KeyedOperator.durable_beat``: the writer's counts, and the lag of only the
    groups the task owns now (of its own operator) that trail; none once written."""
    from elastorm.core.migration.coordinator import TaskCoordinator
    from elastorm.storm.elastic import KeyedOperator

    bolt = object.__new__(KeyedOperator)  # no Storm: only what perform and the beat use
    bolt.send = lambda action: None
    bolt._component = OP
    bolt.durable = DurableWriter(store)
    bolt.coordinator = TaskCoordinator(
        task=7, num_key_groups=8, upstreams=[1], owned=[3, 5], holders={3: 9, 5: 9}
    )
    store.gate.clear()  # the store hangs: the first write waits, the rest queue
    for value in (1, 2, 4):
        bolt.coordinator.state(3).update("a", value)
        bolt.perform(bolt.coordinator.checkpoint(3))
    bolt.durable.offer("other", checkpoints([{"b": 1}])[0])  # another operator's group 3
    beat = bolt.durable_beat(bolt.coordinator.owned())
    ((group, behind, seconds),) = beat.lag  # group 5 has nothing to write: left out
    assert (group, behind, beat.writes) == (3, 3, 0) and seconds >= 0
    assert beat.queue >= 1
    assert bolt.durable_beat([5]).lag == ()  # a group the task no longer owns
    store.gate.set()
    wait_until(bolt.durable.drained)
    beat = bolt.durable_beat(bolt.coordinator.owned())
    assert beat.lag == () and beat.writes == 4 and beat.bytes > 0 and beat.queue == 0
    bolt.durable = None
    assert bolt.durable_beat([3]) is None  # the tier off: no field in the heartbeat


def test_a_peace_gate_holds_writes_until_the_slot_without_holding_the_task(store):
    slot_open = threading.Event()
    writer = DurableWriter(store, gate=lambda: 0.0 if slot_open.is_set() else 0.01)
    deltas = checkpoints([{"a": 1}, {"b": 2}])
    began = time.monotonic()
    for delta in deltas:
        writer.offer(OP, delta)
    assert time.monotonic() - began < 0.5  # the task never waits for the slot
    wait_until(lambda: writer.health().get("gated", 0) >= 2)
    assert store.puts == [] and not writer.drained()  # not its slot: nothing written
    slot_open.set()
    wait_until(writer.drained)
    assert writer.health()["writes"] == 2
    assert load_latest(store, OP, 3).copy.checkpoint == deltas[-1].checkpoint
    writer.close()


def test_close_writes_what_is_queued_outside_the_slot(store):
    writer = DurableWriter(store, gate=lambda: 3600.0)  # the slot is an hour away
    writer.offer(OP, checkpoints([{"a": 1}])[0])
    writer.close(timeout=5.0)
    assert writer.health()["writes"] == 1


def test_start_writer_gates_only_under_peace(tmp_path):
    from elastorm.config import DurableConfig
    from elastorm.durable.local import LocalStore
    from elastorm.durable.submissions import SubmissionView
    from elastorm.durable.writer import start_writer

    view = SubmissionView(LocalStore(tmp_path), "t-1-1")
    common = {"tasks": [4, 5, 6], "period_secs": 6.0}
    assert start_writer(DurableConfig(uri="none"), None, task=5, **common) is None
    plain = start_writer(DurableConfig(uri=f"file://{tmp_path}"), view, task=5, **common)
    assert plain.store.uri == f"{view.root.uri}/t-1-1" and plain.pins == view.pins
    assert plain.gate is None
    peace = DurableConfig(uri=f"file://{tmp_path}", schedule="peace", concurrent_writes=1)
    gated = start_writer(peace, view, task=5, **common)
    assert 0.0 <= gated.gate() < 6.0  # task 5's window: 2-4 s of every 6 s
    off = start_writer(peace, view, task=5, **{**common, "period_secs": 0.0})  # no checkpoints
    assert off.gate is None
    for writer in (plain, gated, off):
        writer.close()


def test_peace_gate_opens_in_the_tasks_own_window():
    from elastorm.durable.writer import peace_gate

    now = [0.0]
    gate = peace_gate(5, [4, 5, 6], capacity=1, cycle_secs=6.0, wall=lambda: now[0])
    assert gate() == pytest.approx(2.0)  # task 5 writes 2-4 s into each 6 s cycle
    now[0] = 602.5
    assert gate() == 0.0
    now[0] = 604.0
    assert gate() == pytest.approx(4.0)
