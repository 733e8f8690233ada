"""Key selectors: a field, a field list, a function (``elastorm.core.keys``), their
wiring at submit and the router that calls them per tuple."""

from __future__ import annotations

import io
import json

import key_functions
import pytest
from streamparse import Bolt, Grouping

from elastorm import ElasticTopology, GeneratedSpout, KeyedBolt, ValueState, keyed
from elastorm.core.keys import (
    KeySelectorError,
    field_list_key,
    function_path,
    select_key,
    split_path,
)
from elastorm.core.routing import RoutingTable
from elastorm.storm.controller_bolt import MigrationControllerBolt
from elastorm.storm.keyed_bolt import ROUTER_KEYS, KeyRouter, resolve_key_function
from elastorm.storm.topology import WiringError


class Flights(GeneratedSpout):
    fields = ["airline", "year", "delay"]


class Sink(Bolt):
    outputs = []


class Count(KeyedBolt):
    outputs = ["key", "n"]
    n = ValueState(default=0)

    def process_keyed(self, key, values):
        self.n.update(self.n.value() + 1)


# -- the pure selector ------------------------------------------------------------


def test_one_field_is_the_values_str_as_before() -> None:
    assert select_key(0, ["AA", 2013]) == "AA"
    assert select_key(1, ["AA", 2013]) == "2013"


def test_a_field_list_is_the_compact_json_array_of_its_values() -> None:
    assert select_key([0, 1], ["AA", 2013, 5]) == '["AA",2013]'
    assert select_key([1, 0], ["AA", 2013, 5]) == '[2013,"AA"]'
    assert field_list_key(["a,b"]) != field_list_key(["a", "b"])
    assert field_list_key([1]) != field_list_key(["1"])
    assert field_list_key(["é", {"b": 1, "a": 2}]) == '["é",{"a":2,"b":1}]'


def test_a_function_gets_the_values_and_a_non_str_key_is_strd() -> None:
    assert select_key(key_functions.first_letter, ["apple", 1]) == "a"
    assert select_key(key_functions.length, ["apple", 1]) == "5"


def test_select_key_raises_what_the_tuple_or_function_does() -> None:
    with pytest.raises(IndexError):
        select_key(3, ["a"])
    with pytest.raises(TypeError):
        select_key([0], [object()])
    with pytest.raises(ValueError, match="boom"):
        select_key(key_functions.picky, ["boom"])


def test_function_path_of_a_top_level_function() -> None:
    assert function_path(key_functions.first_letter) == "key_functions:first_letter"
    assert split_path("key_functions:first_letter") == ("key_functions", "first_letter")


def _nested():
    def inner(values):
        return values[0]

    return inner


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (lambda values: values[0], "is a lambda"),
        (_nested(), "not at the top level"),
        (key_functions.Holder.method, "not at the top level"),
        (42, "is not a function"),
    ],
)
def test_function_path_refuses_what_a_worker_cannot_import(fn, why) -> None:
    with pytest.raises(KeySelectorError, match=why) as err:
        function_path(fn)
    message = str(err.value)
    assert "\n" not in message and "top level of a module" in message


@pytest.mark.parametrize("path", ["no_colon", "a.b:", ":f", "a..b:f", "a:f-g"])
def test_split_path_refuses_a_malformed_path(path) -> None:
    with pytest.raises(KeySelectorError, match="package.module:function"):
        split_path(path)


def test_resolve_names_what_does_not_import() -> None:
    assert resolve_key_function("key_functions:picky") is key_functions.picky
    with pytest.raises(KeySelectorError, match="does not import"):
        resolve_key_function("no_such_module_here:f")
    with pytest.raises(KeySelectorError, match="has no nothing"):
        resolve_key_function("key_functions:nothing")


# -- wiring ----------------------------------------------------------------------


def _router(topology):
    bolt = topology.thrift_bolts["counts_router"]
    keys = json.loads(bolt.common.json_conf)[ROUTER_KEYS]
    inputs = bolt.common.inputs.items()
    (grouping,) = [g for k, g in inputs if (k.componentId, k.streamId) == ("flights", "default")]
    return keys["flights:default"], grouping


def test_wiring_a_field_list_groups_by_those_fields() -> None:
    class ByAirlineYear(ElasticTopology):
        flights = Flights.spec(par=2)
        counts = Count.spec(inputs={flights: keyed(["airline", "year"])}, par=2)
        sink = Sink.spec(inputs={counts: Grouping.SHUFFLE})

    selector, grouping = _router(ByAirlineYear)
    assert selector == [1, 2]  # after the spout's position field
    assert grouping.fields == ["airline", "year"]


def test_wiring_one_field_is_unchanged() -> None:
    class ByAirline(ElasticTopology):
        flights = Flights.spec(par=2)
        counts = Count.spec(inputs={flights: keyed("airline")}, par=2)

    selector, grouping = _router(ByAirline)
    assert selector == 1 and grouping.fields == ["airline"]


@pytest.mark.parametrize("by", [key_functions.first_letter, "key_functions:first_letter"])
def test_wiring_a_function_sends_its_input_to_one_router_task(by) -> None:
    class ByLetter(ElasticTopology):
        flights = Flights.spec(par=2)
        counts = Count.spec(inputs={flights: keyed(by)}, par=2)

    selector, grouping = _router(ByLetter)
    assert selector == "key_functions:first_letter"
    assert grouping == Grouping.GLOBAL


def topology_file_key(values):
    return values[0]


@pytest.mark.parametrize(
    ("by", "why"),
    [
        (lambda values: values[0], "is a lambda"),
        (topology_file_key, "defined in the topology file"),
        ("key_functions:nothing", "has no nothing"),
        (["airline", "tail"], "not there: \\['tail'\\]"),
        (["airline", "airline"], "distinct fields"),
        ([], "distinct fields"),
        ("tail", "has no field 'tail'"),
        (None, "needs a key selector"),
    ],
)
def test_wiring_refuses_a_bad_selector_in_one_line(by, why) -> None:
    with pytest.raises(WiringError, match=why) as err:

        class Bad(ElasticTopology):
            flights = Flights.spec()
            counts = Count.spec(inputs={flights: keyed(by)}, par=2)

    assert "\n" not in str(err.value) and "counts: flights:default" in str(err.value)


# -- the router ------------------------------------------------------------------


def _running_router(monkeypatch, selector) -> tuple[KeyRouter, list]:
    router = KeyRouter(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    sent: list = []
    monkeypatch.setattr(KeyRouter, "send", lambda self, action: sent.append(action))
    context = {
        "taskid": 1,
        "componentid": "counts_router",
        "task->component": {"1": "counts_router", "2": "controller", "3": "counts", "4": "counts"},
    }
    conf = {
        "elastorm.key_groups": 4,
        "elastorm.operators": {"counts": ["counts_router"]},
        "storm.id": "t-1-1",
        ROUTER_KEYS: json.dumps({"words:default": selector}),
    }
    router.initialize(conf, context)
    return router, sent


class _Tuple:
    stream, component, task = "default", "words", 7

    def __init__(self, *values) -> None:
        self.values = list(values)


@pytest.mark.usefixtures("emitter_first_start")
@pytest.mark.parametrize(
    ("selector", "key"),
    [(0, "apple"), ([1, 0], '[3,"apple"]'), ("key_functions:first_letter", "a")],
)
def test_router_keys_each_tuple_by_its_selector(monkeypatch, selector, key) -> None:
    router, sent = _running_router(monkeypatch, selector)
    router.process(_Tuple("apple", 3))
    (send,) = sent
    assert send.message.item.key == key and send.message.item.value == ["apple", 3]
    assert send.to_task == RoutingTable.round_robin(4, [3, 4]).owner(send.message.key_group)


@pytest.mark.usefixtures("emitter_first_start")
def test_router_counts_and_logs_a_tuple_whose_key_function_raises(monkeypatch, caplog) -> None:
    router, sent = _running_router(monkeypatch, "key_functions:picky")
    router.process(_Tuple("boom", 1))
    router.process(_Tuple("fine", 2))
    assert router.unkeyed == 1
    assert [s.message.item.key for s in sent] == ["fine"]
    assert "no key for words:default (tuple dropped, 1 so far): ['boom', 1]" in caplog.text
    assert "no key for boom" in caplog.text  # the function's own error, with its traceback


@pytest.mark.usefixtures("emitter_first_start")
def test_router_refuses_at_initialize_a_function_that_does_not_import(monkeypatch) -> None:
    with pytest.raises(KeySelectorError, match="does not import"):
        _running_router(monkeypatch, "gone_module:f")


class ProjectController(MigrationControllerBolt):
    """A project's own controller component (``src/controller/``)."""


def _controller_command(topology) -> str:
    shell = topology.thrift_bolts["controller"].bolt_object.shell
    return f"{shell.execution_command} {shell.script}"


def test_a_topology_runs_elastorms_controller_or_the_subclass_it_names() -> None:
    """``controller_bolt`` names the controller component's class (a project keeps its
    own in ``src/controller/``); unnamed, elastorm's; anything but a subclass of
    elastorm's is refused in one line."""

    class Plain(ElasticTopology):
        flights = Flights.spec(par=2)
        counts = Count.spec(inputs={flights: keyed("airline")}, par=2)

    class Own(ElasticTopology):
        controller_bolt = ProjectController
        flights = Flights.spec(par=2)
        counts = Count.spec(inputs={flights: keyed("airline")}, par=2)

    assert _controller_command(Plain).endswith("controller_bolt.MigrationControllerBolt")
    assert _controller_command(Own).endswith(f"{__name__}.ProjectController")
    assert not hasattr(Own, "controller_bolt")
    with pytest.raises(WiringError, match="controller_bolt must be a subclass"):

        class Bad(ElasticTopology):
            controller_bolt = Count
            flights = Flights.spec(par=2)
            counts = Count.spec(inputs={flights: keyed("airline")}, par=2)
