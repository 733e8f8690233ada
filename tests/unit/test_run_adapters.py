"""Data runs in the Storm adapters (issue 34, stage 1), over a real
``BatchingSerializer`` and no Storm: when an emitter's held runs go out (before any
other emit, with the multilang batch, at ``elastorm.data.batch_size``, on ticks),
so no channel's order changes, and how a keyed task takes them."""

from __future__ import annotations

import msgpack
import pytest
from serializer_stub import Pipe

from elastorm.core.keygroups import key_group
from elastorm.core.messages import (
    CheckpointRequest,
    Data,
    DataRun,
    Migrate,
    Protocol,
    ToCheckpoint,
    Trim,
    decode_runs,
    encode_runs,
    is_runs,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.table import Phase
from elastorm.storm.elastic import STREAM, KeyedEmitting, KeyedOperator, from_wire, to_wire
from elastorm.storm.load import LoadMeter
from elastorm.storm.wire import ELASTORM_SERIALIZER, SERIALIZER_KEY, BatchingSerializer

pytestmark = pytest.mark.usefixtures("emitter_first_start")

G = 4
CONTEXT = {
    "taskid": 1,
    "componentid": "emitter",
    "task->component": {"1": "emitter", "2": "controller", "20": "op", "21": "op"},
}
KEYS = [f"k{i}" for i in range(40)]


class Pystorm:
    """pystorm's ``emit``: one multilang emit message to the serializer."""

    serializer: BatchingSerializer | Pipe

    def emit(self, tup, stream=None, direct_task=None, **_) -> None:
        self.serializer.send_message(
            {"command": "emit", "tuple": tup, "stream": stream, "task": direct_task,
             "need_task_ids": False}
        )  # fmt: skip


class Emitting(KeyedEmitting, Pystorm):
    """An emitter on elastorm's multilang wire."""

    def __init__(self, batch_size: int = 100, **options) -> None:
        self.pipe = self.serializer = Pipe()
        conf = {
            SERIALIZER_KEY: ELASTORM_SERIALIZER,
            "elastorm.key_groups": G,
            "elastorm.operators": {"op": ["emitter"]},
            "elastorm.data.batch_size": batch_size,
            "elastorm.multilang.linger_ms": 10_000,
            "elastorm.multilang.batch_size": 10_000,
        }
        self.setup_emitting(conf | {f"elastorm.{k}": v for k, v in options.items()}, CONTEXT)

    def written(self) -> list[tuple[int, object]]:
        """Every message sent so far, as (task, Data or message), in wire order."""
        out = []
        for msg in self.pipe.sent:
            for emit in msg.get("batch", [msg] if msg.get("command") == "emit" else []):
                values, task = emit["tuple"], emit["task"]
                field = values[0]
                if emit["stream"] != STREAM:  # a carried row: data, then its task
                    field, task = values[-2], values[-1]
                field = msgpack.unpackb(msgpack.packb(field))  # the pipe's codec
                if is_runs(field):
                    out += [(task, d) for r in decode_runs(field) for d in r.data()]
                else:
                    out.append((task, from_wire(field)))
        return out


def data_seqs(written, task: int) -> list[tuple[int, int]]:
    return [(m.key_group, m.item.seq) for t, m in written if t == task and isinstance(m, Data)]


def test_data_waits_in_runs_and_goes_as_one_tuple_per_task() -> None:
    e = Emitting()
    for k in KEYS:
        e.emit_keyed(k, 1, 0.0)
    assert e.serializer.pending == [] and e._runs.held == len(KEYS)
    e.serializer.flush()  # the multilang batch goes: the runs first
    (batch,) = e.pipe.sent[1:]  # after the elastorm_wire hello
    assert sorted(emit["task"] for emit in batch["batch"]) == [20, 21]
    written = e.written()
    for task in (20, 21):
        for g in range(G):
            seqs = [s for h, s in data_seqs(written, task) if h == g]
            assert seqs == list(range(1, len(seqs) + 1))
    assert len(data_seqs(written, 20)) + len(data_seqs(written, 21)) == len(KEYS)
    assert e.emitter_health()["run_tuples"] == 2


def test_a_full_batch_a_tick_and_a_read_that_could_block_send_the_runs() -> None:
    e = Emitting(batch_size=3)
    for k in KEYS[:3]:
        e.emit_keyed(k, 1, 0.0)
    assert e._runs.held == 0 and len(e.serializer.pending) >= 1
    e.emit_keyed(KEYS[3], 1, 0.0)
    e.tick_emitting()
    assert e._runs.held == 0
    e.emit_keyed(KEYS[4], 1, 0.0)
    assert e.serializer.read_message() == "message"  # nothing to read: all flushed first
    assert e._runs.held == 0 and e.serializer.pending == []
    assert len([m for _, m in e.written() if isinstance(m, Data)]) == 5


def test_a_control_message_never_overtakes_the_data_held_for_its_task() -> None:
    e = Emitting()
    g = key_group(KEYS[0], G)
    source = e.emitter.routing.owner(g)
    for _ in range(3):
        e.emit_keyed(KEYS[0], 1, 0.0)
    target = 20 if source == 21 else 21
    e.receive_command(
        Migrate(key_group=g, epoch=1, protocol=Protocol.CPA, source=source, target=target)
    )
    e.serializer.flush()
    to_source = [m for t, m in e.written() if t == source]
    kinds = [type(m).__name__ for m in to_source]
    assert kinds[-1] == "ToCheckpoint" and kinds.count("Data") == 3
    assert isinstance(to_source[-1], ToCheckpoint)


def test_a_checkpoint_request_follows_the_data_that_asked_for_it() -> None:
    e = Emitting(max_buffered=8)  # 8 // (2 x 4 groups): a request at the first tuple
    e.emit_keyed(KEYS[0], 1, 0.0)
    e.serializer.flush()
    (data, request) = [m for _, m in e.written()]
    assert isinstance(data, Data) and isinstance(request, CheckpointRequest)


def test_a_cpal_copy_is_an_entry_in_each_tasks_runs_and_a_carried_row_stays_whole() -> None:
    e = Emitting()
    g = key_group(KEYS[0], G)
    source = e.emitter.routing.owner(g)
    target = 20 if source == 21 else 21
    e.receive_command(
        Migrate(key_group=g, epoch=1, protocol=Protocol.CPAL, source=source, target=target)
    )
    e.serializer.flush()
    e.pipe.sent.clear()  # the toState
    e.emit_keyed(KEYS[0], 7, 0.0)
    e.emit_keyed(KEYS[0], 8, 0.0, carry=["row"], stream="rows")  # after the held runs
    carried = e.serializer.pending[-1]
    assert carried["stream"] == "rows" and carried["tuple"][0] == "row"
    assert is_runs(e.serializer.pending[-2]["tuple"][0])  # the runs went just before it
    e.serializer.flush()
    written = e.written()
    assert [m.item.value for t, m in written if t == source] == [7, 8]
    assert [m.item.value for t, m in written if t == target] == [7, 8]


def test_batch_size_one_is_the_wire_of_one_tuple_per_data() -> None:
    e = Emitting(batch_size=1)
    assert e._runs is None and e.serializer.ahead is None
    e.emit_keyed(KEYS[0], 1, 0.0)
    (emit,) = e.serializer.pending
    assert not is_runs(emit["tuple"][0])


def test_without_the_batched_wire_runs_stay_off_and_say_so(caplog) -> None:
    e = Emitting(batch_size=100, **{"multilang.batch_size": 1})
    assert e._runs is None and not isinstance(e.serializer, BatchingSerializer)
    assert "elastorm.data.batch_size = 100 ignored" in caplog.text


def keyed_task() -> tuple[KeyedOperator, list, list]:
    """A keyed task without Storm (only what receiving uses): it, what it performed,
    the protocol errors it was told of."""
    bolt = object.__new__(KeyedOperator)
    bolt.coordinator = TaskCoordinator(task=20, num_key_groups=G, upstreams=[1], owned=range(G))
    bolt.load_meter = LoadMeter()
    performed: list = []
    errors: list = []
    bolt.perform = performed.extend
    bolt.on_protocol_error = lambda message, exc: errors.append(message.key_group)
    return bolt, performed, errors


class RunsTup:
    stream = STREAM
    task = 1

    def __init__(self, runs: list[DataRun]) -> None:
        self.values = [msgpack.unpackb(msgpack.packb(encode_runs(runs))), 1]


def test_a_run_that_breaks_its_groups_protocol_stops_only_itself() -> None:
    bolt, performed, errors = keyed_task()
    bolt.coordinator.machine(1).phase = Phase.FAILED
    keys = {g: next(k for k in KEYS if key_group(k, G) == g) for g in (1, 2)}
    runs = [DataRun(key_group=g, source="e:1", first=1, items=[(keys[g], 1, 0.0)]) for g in (1, 2)]
    bolt.receive_elastorm(RunsTup(runs))
    assert errors == [1]
    assert [(a.key_group, a.item.seq) for a in performed] == [(2, 1)]


def test_a_keyed_task_applies_the_runs_of_a_tuple() -> None:
    """``KeyedOperator.receive_elastorm`` with a runs field: each run to the coordinator."""
    bolt, performed, _ = keyed_task()
    keys = [k for k in KEYS if key_group(k, G) == 1][:3]
    runs = [
        DataRun(key_group=1, source="e:1", first=1, items=[(k, 1, 0.0) for k in keys]),
        DataRun(key_group=1, source="e:1", first=2, items=[(keys[1], 1, 0.0)]),  # duplicate
    ]

    bolt.receive_elastorm(RunsTup(runs))
    assert [a.item.seq for a in performed] == [1, 2, 3]
    assert bolt.coordinator.stats["in.Data"] == 4


def test_parked_emits_go_after_the_runs_held_before_them() -> None:
    """A full output buffer parks emits (``HoldBack``); the trim that frees it releases
    them after what the runs already held, so each lane stays in sequence order."""
    e = Emitting(max_buffered=4, max_parked=100)
    e.hold_back_sleep = lambda _secs: None
    g = key_group(KEYS[0], G)
    for i in range(10):
        e.emit_keyed(KEYS[0], i, 0.0)  # 4 sent (held in runs), 6 parked
    assert e.emitter_health()["parked"] == 6
    source = e.emitter.source
    e.receive_elastorm(Tup(Trim(key_group=g, watermarks={source: 4}), e.emitter.routing.owner(g)))
    e.receive_elastorm(Tup(Trim(key_group=g, watermarks={source: 8}), e.emitter.routing.owner(g)))
    e.serializer.flush()
    owner = e.emitter.routing.owner(g)
    data = [m for t, m in e.written() if t == owner and isinstance(m, Data)]
    assert [m.item.seq for m in data] == list(range(1, 11))
    assert [m.item.value for m in data] == list(range(10))


class Tup:
    """An ``elastorm`` tuple from a keyed task (a trim, relayed)."""

    stream = STREAM

    def __init__(self, message, sender: int) -> None:
        self.values = [to_wire(message), sender]
        self.task = sender
