"""The Storm adapters' routing of control messages (no Storm: a fake context)."""

from __future__ import annotations

import pytest

from elastorm.config import ConfigError, TopologyConfig
from elastorm.core.keygroups import key_group
from elastorm.core.messages import CheckpointRequest, Data, Migrate, Protocol, Trim
from elastorm.storm.elastic import (
    STREAM,
    KeyedEmitting,
    carrier_fields,
    from_wire,
    initial_routing,
    to_wire,
)

pytestmark = pytest.mark.usefixtures("emitter_first_start")

CONTEXT = {
    "taskid": 1,
    "componentid": "emitter",
    "task->component": {
        "1": "emitter",
        "2": "controller",
        "10": "op1",
        "11": "op1",
        "20": "op2",
        "21": "op2",
    },
}


class Tup:
    def __init__(self, message, sender: int) -> None:
        self.values = [to_wire(message), sender]
        self.stream = STREAM
        self.task = sender


CONF = {"elastorm.key_groups": 4, "elastorm.operators": {"op1": ["emitter"], "op2": ["emitter"]}}


class TwoOperators(KeyedEmitting):
    def __init__(self) -> None:
        self.sent = []
        self.emitted = []

    def send(self, action) -> None:
        self.sent.append(action)

    def emit(self, values, stream="default", **_) -> None:
        self.emitted.append((stream, list(values)))


def test_an_emitter_per_keyed_operator_and_commands_reach_the_right_one() -> None:
    e = TwoOperators()
    e.setup_emitting(CONF, CONTEXT)
    assert set(e.emitters) == {"op1", "op2"}
    e.emit_keyed("k", 1, 0.0, operator="op2")
    assert e.sent[-1].to_task in (20, 21)
    e.emit_keyed("k", 1, 0.0, operator="op1")
    assert e.sent[-1].to_task in (10, 11)
    # A CPA command of op2 from the controller names op2's tasks: op2's emitter takes it.
    g = 1
    cmd = Migrate(key_group=g, epoch=1, protocol=Protocol.CPA, source=21, target=20)
    e.receive_command(cmd)  # read from its mailbox (elastorm.zk.commands)
    assert e.emitters["op2"].routing.owner(g) == 20
    assert e.emitters["op1"].routing.owner(g) == 11


def test_initial_routing_on_named_nodes_and_its_errors() -> None:
    def routing(conf, op, tasks):
        return initial_routing(TopologyConfig.from_conf(conf), op, tasks, epoch=0)

    conf = {"elastorm.key_groups": 4, "elastorm.initial_nodes": {"op2": [1]}}
    assert {routing(conf, "op2", [21, 20]).owner(g) for g in range(4)} == {21}
    assert {routing(conf, "op1", [10, 11]).owner(g) for g in range(4)} == {10, 11}
    with pytest.raises(ConfigError, match=r"elastorm.initial_nodes\[op2\] = \[5\]"):
        routing({"elastorm.initial_nodes": {"op2": [5]}}, "op2", [20, 21])
    with pytest.raises(ConfigError, match="non-empty"):
        routing({"elastorm.initial_nodes": {"op2": []}}, "op2", [20, 21])


def test_a_carried_row_holds_its_data_message_and_a_cpal_copy_goes_direct() -> None:
    e = TwoOperators()
    e.setup_emitting(CONF, CONTEXT)
    row = ["r1", "k", [2013, 5], 0.0]
    e.emit_keyed("k", 5, 0.0, operator="op2", carry=row)
    assert e.sent == []  # one emit, nothing direct
    ((stream, values),) = e.emitted
    assert stream == "default" and len(values) == len(carrier_fields(row))
    assert values[:4] == row
    g = key_group("k", 4)
    message = from_wire(values[-2])
    assert isinstance(message, Data) and message.key_group == g
    assert values[-1] == e.emitters["op2"].routing.owner(g)
    # While a CPAL migration duplicates the group, the row rides with the source's
    # copy and the target's copy goes on the elastorm stream.
    source = e.emitters["op2"].routing.owner(g)
    target = 20 if source == 21 else 21
    cmd = Migrate(key_group=g, epoch=1, protocol=Protocol.CPAL, source=source, target=target)
    e.receive_command(cmd)
    e.emitted.clear()
    e.sent.clear()
    e.emit_keyed("k", 6, 0.0, operator="op2", carry=row)
    assert [v[-1] for _, v in e.emitted] == [source]
    assert [a.to_task for a in e.sent if isinstance(a.message, Data)] == [target]


def test_a_full_output_buffer_parks_emits_until_a_trim_frees_it() -> None:
    e = TwoOperators()
    e.setup_emitting({**CONF, "elastorm.max_buffered": 3}, CONTEXT)
    slept: list[float] = []
    e.hold_back_sleep = slept.append
    for _ in range(3):
        e.emit_keyed("k", 1, 0.0, operator="op2")
    # the 2nd tuple passed the high-water mark (3 // (2 x 4 groups) = 1): the owner was asked
    asked = [a for a in e.sent if isinstance(a.message, CheckpointRequest)]
    assert len(asked) == 1 and asked[0].to_task == e.emitters["op2"].routing.owner(
        key_group("k", 4)
    )
    e.sent = [a for a in e.sent if isinstance(a.message, Data)]
    assert len(e.emitters["op2"].buffer) == 3 and len(e.sent) == 3
    e.emit_keyed("k", 4, 0.0, operator="op2")  # the buffer is full: no checkpoint trimmed it
    e.emit_keyed("k", 5, 0.0, operator="op2")
    e.emit_keyed("k", 1, 0.0, operator="op1")  # op1's buffer has room: not held
    e.sent = [a for a in e.sent if isinstance(a.message, Data)]  # (op1 asked, too)
    health = e.emitter_health()
    assert slept == [] and len(e.sent) == 4 and health["parked"] == 2
    assert health["held_back"] == 0 and health["buffered"] == 4
    g = key_group("k", 4)
    source = e.emitters["op2"].source
    trim = Trim(key_group=g, watermarks={source: 3})
    e.receive_elastorm(Tup(trim, e.emitters["op2"].routing.owner(g)))
    # the trim made room: the parked emits went out at once, in order, numbered on
    sent = [a.message for a in e.sent[4:] if isinstance(a.message, Data)]
    assert [(m.item.value, m.item.seq) for m in sent] == [(4, 4), (5, 5)]
    health = e.emitter_health()
    assert (health["parked"], health["parked_total"], health["buffered"]) == (0, 2, 3)


def test_parked_emits_over_their_bound_slow_the_emitter() -> None:
    e = TwoOperators()
    e.setup_emitting({**CONF, "elastorm.max_buffered": 2, "elastorm.max_parked": 1}, CONTEXT)
    slept: list[float] = []
    e.hold_back_sleep = slept.append
    for value in range(5):
        e.emit_keyed("k", value, 0.0, operator="op2")
    # 2 sent, 1 parked for free, 2 more parked after a pause each
    data = [a for a in e.sent if isinstance(a.message, Data)]
    assert len(data) == 2 and len(slept) == 2 and e.emitter_health()["held_back"] == 2
    assert e.emitter_health()["parked"] == 3


def test_wire_loss_buffers_a_lost_tuple_keeps_the_carried_row_and_resends_on_request() -> None:
    """Fault injection (``elastorm.chaos.*``) loses the 2nd data message: op2's copy is
    never sent, the carried row still goes out (no task named, so only the other
    subscribers get it), and a ``Resend`` from op2 brings it from the buffer."""
    from elastorm.core.messages import Resend

    conf = {
        "elastorm.key_groups": 4,
        "elastorm.operators": {"op2": ["emitter"]},
        "elastorm.chaos.drop_tuples": 1,
        "elastorm.chaos.drop_from": 2,
    }
    e = TwoOperators()
    e.setup_emitting(conf, CONTEXT)
    key = next(f"k{i}" for i in range(100) if key_group(f"k{i}", 4) == 0)
    for value in (1, 2, 3):
        e.emit_keyed(key, value, 0.0, carry=["row", value], stream="default")
    assert [row[-2:] for _, row in e.emitted][1] == [None, None]
    assert [from_wire(row[-2]).item.seq for _, row in e.emitted if row[-1] is not None] == [1, 3]
    assert e.emitter_health()["wire_lost"] == 1 and len(e.emitter.buffer) == 3
    owner = e.emitter.routing.owner(0)
    e.receive_elastorm(Tup(Resend(key_group=0, source="emitter:1", first=2, last=3), owner))
    assert [(a.to_task, a.message.item.seq) for a in e.sent] == [(owner, 2), (owner, 3)]
    assert e.emitter_health()["resent"] == 2
