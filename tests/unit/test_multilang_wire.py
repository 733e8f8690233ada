"""elastorm's side of the multilang pipe (``elastorm.storm.wire``): emits batched in
order, flushed before anything else is written and before a read could block;
acks and anchors dropped only where the JVM releases inputs itself."""

from __future__ import annotations

import os

import pytest
from serializer_stub import Pipe

from elastorm.config import TopologyConfig
from elastorm.storm.wire import (
    ACKERS_KEY,
    ELASTORM_SERIALIZER,
    SERIALIZER_KEY,
    BatchingSerializer,
    released_on_delivery,
    use_elastorm_wire,
)


def emit(n: int, task: int | None = None) -> dict:
    return {"command": "emit", "tuple": [n], "task": task, "need_task_ids": False}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_emits_go_out_as_one_batch_when_full_in_order() -> None:
    pipe = Pipe()
    wire = BatchingSerializer(pipe, max_batch=3, linger_secs=1.0, clock=Clock())
    for n in range(7):
        wire.send_message(emit(n, task=n % 2))
    assert pipe.sent == [
        {"command": "batch", "batch": [emit(0, 0), emit(1, 1), emit(2, 0)]},
        {"command": "batch", "batch": [emit(3, 1), emit(4, 0), emit(5, 1)]},
    ]
    assert wire.pending == [emit(6, 0)]


def test_any_other_message_flushes_the_batch_first_so_order_holds() -> None:
    pipe = Pipe()
    wire = BatchingSerializer(pipe, max_batch=100, linger_secs=1.0, clock=Clock())
    wire.send_message(emit(1))
    wire.send_message({"command": "sync"})
    needs_ids = {"command": "emit", "tuple": [2]}  # pystorm leaves need_task_ids out
    wire.send_message(needs_ids)
    assert pipe.sent == [{"command": "batch", "batch": [emit(1)]}, {"command": "sync"}, needs_ids]


def test_linger_bounds_how_long_an_emit_waits() -> None:
    pipe, clock = Pipe(), Clock()
    wire = BatchingSerializer(pipe, max_batch=100, linger_secs=0.005, clock=clock)
    wire.send_message(emit(1))
    clock.now = 0.004
    wire.send_message(emit(2))
    assert pipe.sent == []
    clock.now = 0.0051
    wire.send_message(emit(3))
    assert pipe.sent == [{"command": "batch", "batch": [emit(1), emit(2), emit(3)]}]


def test_a_read_that_could_block_flushes_first() -> None:
    pipe = Pipe()
    wire = BatchingSerializer(pipe, max_batch=100, linger_secs=1.0, clock=Clock())
    wire.send_message(emit(1))
    os.write(pipe.write_fd, b"a")  # input waiting: the read will not block, keep batching
    assert wire.read_message() == "message"
    assert pipe.sent == []
    os.read(pipe.read_fd, 1)  # nothing waiting: flushed before the read
    assert wire.read_message() == "message"
    assert pipe.sent == [{"command": "batch", "batch": [emit(1)]}]


class Component:
    auto_ack = True
    auto_anchor = True

    def __init__(self) -> None:
        self.serializer = Pipe()


def test_the_wire_is_used_only_with_the_elastorm_serializer() -> None:
    stock = {SERIALIZER_KEY: "org.apache.storm.multilang.JsonSerializer", ACKERS_KEY: 0}
    component = Component()
    use_elastorm_wire(component, stock)
    assert not released_on_delivery(stock)
    assert component.auto_ack and isinstance(component.serializer, Pipe)

    tracked = {SERIALIZER_KEY: ELASTORM_SERIALIZER}  # ackers: Storm's default
    use_elastorm_wire(component, tracked)
    assert component.auto_ack and component.auto_anchor
    assert isinstance(component.serializer, BatchingSerializer)

    released = {SERIALIZER_KEY: ELASTORM_SERIALIZER, ACKERS_KEY: 0}
    component = Component()
    use_elastorm_wire(component, released | TopologyConfig.overrides(multilang_batch_size=1))
    assert not component.auto_ack and not component.auto_anchor
    assert isinstance(component.serializer, Pipe)  # batches of one: not wrapped


def test_a_batch_from_the_jvm_is_read_one_tuple_at_a_time() -> None:
    tuples = [
        {"id": str(n), "comp": "c", "stream": "default", "task": 1, "tuple": [n]} for n in (1, 2)
    ]
    pipe = Pipe()
    incoming = [{"command": "batch", "batch": tuples}, [7]]  # then task ids
    pipe.read_message = lambda: incoming.pop(0)
    wire = BatchingSerializer(pipe, max_batch=100, linger_secs=1.0, clock=Clock())
    assert [wire.read_message() for _ in range(3)] == [*tuples, [7]]


def test_the_jvm_is_told_once_that_this_side_unpacks_batches() -> None:
    component = Component()
    pipe = component.serializer
    conf = {SERIALIZER_KEY: ELASTORM_SERIALIZER}
    use_elastorm_wire(component, conf)
    use_elastorm_wire(component, conf)
    assert pipe.sent == [{"command": "elastorm_wire"}]


def test_an_elastic_topology_starts_every_python_component_with_its_encoding():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "topologies" / "throughput_elastic_json.py"
    spec = importlib.util.spec_from_file_location("throughput_elastic_json", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    topology = module.ThroughputElasticJson
    shells = [b.bolt_object.shell for b in topology.thrift_bolts.values()]
    scripts = [s.script for s in shells if s is not None]
    scripts += [s.spout_object.shell.script for s in topology.thrift_spouts.values()]
    assert len(scripts) == 4  # spout, router, counter, controller (the relay is in the JVM)
    assert all(script.startswith("-s json ") for script in scripts)
    relay = topology.thrift_bolts["relay"].bolt_object
    assert relay.shell is None and relay.java_object.full_class_name == "elastorm.jvm.RelayBolt"
    default = importlib.util.spec_from_file_location(
        "throughput_elastic", path.with_name("throughput_elastic.py")
    )
    module = importlib.util.module_from_spec(default)
    default.loader.exec_module(module)
    bolts = module.ThroughputElastic.thrift_bolts.values()
    shells = [b.bolt_object.shell for b in bolts if b.bolt_object.shell is not None]
    assert len(shells) == 3 and all(s.script.startswith("-s msgpack ") for s in shells)


def test_the_encoding_is_one_of_pystorms_serializers():
    from elastorm.config import ConfigError

    assert TopologyConfig.overrides(multilang_encoding="msgpack") == {
        "elastorm.multilang.encoding": "msgpack"
    }
    with pytest.raises(ConfigError, match="elastorm.multilang.encoding"):
        TopologyConfig.overrides(multilang_encoding="protobuf")


def test_a_missing_msgpack_is_a_clear_error_at_submit_and_at_start(monkeypatch) -> None:
    """pystorm without msgpack maps ``-s msgpack`` to a serializer whose reads raise
    NotImplementedError ("pipe broken" in the worker log): elastorm names the cause."""
    import io
    import sys

    from streamparse import Spout

    from elastorm import ElasticTopology, KeyedBolt, keyed
    from elastorm.storm.keyed_bolt import KeyRouter
    from elastorm.storm.topology import WiringError
    from elastorm.storm.wire import EncodingUnavailable, require_encoding

    class Words(Spout):
        outputs = ["word"]

    class Count(KeyedBolt):
        pass

    def start(cls, encoding: str):
        return cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None,
                   serializer=encoding)  # fmt: skip

    require_encoding("msgpack")  # installed here: no error
    start(KeyRouter, "msgpack")
    monkeypatch.setitem(sys.modules, "msgpack", None)  # import msgpack now fails
    require_encoding("json")
    for cls in (KeyRouter, Count):
        with pytest.raises(EncodingUnavailable, match="cannot import msgpack.*or set the option"):
            start(cls, "msgpack")
        start(cls, "json")
    with pytest.raises(WiringError, match="Job: elastorm.multilang.encoding is 'msgpack' but"):

        class Job(ElasticTopology):
            words = Words.spec()
            counts = Count.spec(inputs={words: keyed("word")}, par=2)

    class JsonJob(ElasticTopology):
        config = TopologyConfig.overrides(multilang_encoding="json", sources_at_most_once=["words"])
        words = Words.spec()
        counts = Count.spec(inputs={words: keyed("word")}, par=2)


class Ahead:
    """A ``Held`` (an emitter's data runs): emits held ahead of the serializer."""

    def __init__(self, wire: BatchingSerializer, held: list[dict], since: float) -> None:
        self.wire, self.held, self.since = wire, held, since

    def held_since(self) -> float | None:
        return self.since if self.held else None

    def flush(self) -> None:
        held, self.held = self.held, []
        for msg in held:
            self.wire.send_message(msg)


def test_what_is_held_ahead_joins_the_batch_first_whenever_it_goes() -> None:
    pipe, clock = Pipe(), Clock()
    wire = BatchingSerializer(pipe, max_batch=100, linger_secs=1.0, clock=clock)
    wire.ahead = Ahead(wire, [emit(1), emit(2)], since=0.0)
    wire.send_message({"command": "sync"})
    assert pipe.sent == [{"command": "batch", "batch": [emit(1), emit(2)]}, {"command": "sync"}]


def test_a_read_that_could_block_sends_what_is_held_ahead() -> None:
    pipe, clock = Pipe(), Clock()
    wire = BatchingSerializer(pipe, max_batch=100, linger_secs=1.0, clock=clock)
    wire.ahead = Ahead(wire, [emit(1)], since=0.0)
    assert wire.read_message() == "message"  # nothing waiting on the pipe: flushed first
    assert pipe.sent == [{"command": "batch", "batch": [emit(1)]}]
    os.write(pipe.write_fd, b"x")  # input waiting, the hold young: it stays held
    wire.ahead = Ahead(wire, [emit(2)], since=0.0)
    wire.read_message()
    assert wire.ahead.held == [emit(2)]
    clock.now = 2.0  # ... until it is older than the linger
    wire.read_message()
    assert wire.ahead.held == [] and pipe.sent[-1] == {"command": "batch", "batch": [emit(2)]}
