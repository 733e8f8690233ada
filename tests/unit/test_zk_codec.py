"""Znode layout and the versioned JSON encodings (pure; no ZooKeeper)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from elastorm.controller.model import (
    Allocation,
    ControllerModelError,
    DurableHealth,
    KeyGroupId,
)
from elastorm.core.routing import RoutingTable
from elastorm.zk.codec import (
    MAX_ZNODE_BYTES,
    SCHEMA_VERSION,
    Heartbeat,
    LeaderInfo,
    TaskIdentity,
    TaskRecord,
    ZnodeSchemaError,
    ZnodeTooLargeError,
    decode_checkpoints,
    decode_copies,
    decode_issued,
    decode_leader,
    decode_replicas,
    decode_routing,
    decode_task,
    encode_checkpoints,
    encode_leader,
    encode_replicas,
    encode_routing,
    encode_task,
    encode_term,
)
from elastorm.zk.layout import (
    ZkSettings,
    ZnodeLayout,
    ZnodeLayoutError,
    hosts_from_storm_conf,
    task_id_from_name,
    task_name,
)

IDENT = TaskIdentity(task_id=7, operator="delays", node_id="n1", host="h", pid=42, zone="z1")
HB = Heartbeat(
    key_groups=(3, 1),
    checkpoints=(5,),
    input_rates={1: 2.5, 3: 0.0},
    queue_length=4,
    cpu=0.25,
    node_cpu=0.5,
    memory=1e6,
    state_sizes={1: 100.0},
    buffered={KeyGroupId("sink", 2): 9},
    epoch=3,
)
RECORD = TaskRecord(identity=IDENT, heartbeat=HB, seq=11, time=1000.5)


def _edit(data: bytes, **changes) -> bytes:
    obj = json.loads(data)
    obj.update(changes)
    return json.dumps(obj).encode()


# ------------------------------------------------------------------ layout


def test_layout_paths_live_under_one_root_per_topology() -> None:
    lay = ZnodeLayout("flights")
    assert lay.task(7) == "/elastorm/flights/tasks/7"
    assert lay.routing("delays") == "/elastorm/flights/controller/routing/delays"
    assert lay.checkpoints == "/elastorm/flights/controller/checkpoints"
    assert lay.status("delays") == "/elastorm/flights/controller/status/delays"
    assert lay.request("req-0000000001") == "/elastorm/flights/requests/req-0000000001"
    assert lay.incarnation("delays", 7) == "/elastorm/flights/incarnations/delays-7"
    assert lay.leader == "/elastorm/flights/controller/leader"
    assert lay.term == "/elastorm/flights/controller/term"
    assert ZnodeLayout("t", root="/a/b").tasks == "/a/b/t/tasks"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "-x", "a b", "x" * 201])
def test_layout_refuses_unsafe_names(name: str) -> None:
    with pytest.raises(ZnodeLayoutError):
        ZnodeLayout(name)
    with pytest.raises(ZnodeLayoutError):
        ZnodeLayout("t").routing(name)


@pytest.mark.parametrize("root", ["", "/", "rel", "/a/", "/a//b"])
def test_layout_refuses_bad_roots(root: str) -> None:
    with pytest.raises(ZnodeLayoutError):
        ZnodeLayout("t", root=root)


def test_task_names_round_trip_and_refuse_foreign_children() -> None:
    assert task_id_from_name(task_name(12)) == 12
    for bad in ["x", "-1", "01", ""]:
        with pytest.raises(ZnodeLayoutError):
            task_id_from_name(bad)
    for bad in [-1, True, "3"]:
        with pytest.raises(ZnodeLayoutError):
            task_name(bad)


def test_settings_need_a_heartbeat_well_inside_the_session_timeout() -> None:
    ZkSettings(session_timeout=4.0, heartbeat_interval=2.0)
    with pytest.raises(ZnodeLayoutError):
        ZkSettings(session_timeout=4.0, heartbeat_interval=2.5)
    with pytest.raises(ZnodeLayoutError):
        ZkSettings(hosts="")


def test_hosts_from_storm_conf() -> None:
    conf = {"storm.zookeeper.servers": ["a", "b"], "storm.zookeeper.port": 2182}
    assert hosts_from_storm_conf(conf) == "a:2182,b:2182"
    with pytest.raises(ZnodeLayoutError):
        hosts_from_storm_conf({})


# ------------------------------------------------------------------ task record


def test_task_record_round_trips_and_normalises_order() -> None:
    data = encode_task(RECORD)
    back = decode_task(data)
    assert back == RECORD
    assert back.heartbeat.key_groups == (1, 3)
    obj = json.loads(data)
    assert obj["schema"] == "elastorm.task" and obj["version"] == SCHEMA_VERSION
    assert data == encode_task(back)  # deterministic bytes


def test_minimal_task_record_round_trips() -> None:
    rec = TaskRecord(identity=TaskIdentity(task_id=0, operator="o", node_id="n", host="h", pid=1))
    assert decode_task(encode_task(rec)) == rec


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"schema": "elastorm.routing"}, "expected schema"),
        ({"version": SCHEMA_VERSION + 1}, "newer"),
        ({"version": 0}, "bad version"),
        ({"task_id": -1}, "task_id"),
        ({"pid": 0}, "pid"),
        ({"key_groups": [1, 1]}, "duplicate"),
        ({"key_groups": "1"}, "key_groups"),
        ({"load": {"rates": {"x": 1}}}, "load.rates"),
        ({"load": {"rates": {"1": -2}}}, "load.rates"),
        ({"load": {"queue": "many"}}, "queue_length"),
        ({"buffered": [["op", 1]]}, "buffered"),
        ({"buffered": [["", 1, 2]]}, "operator"),
        ({"operator": "a/b"}, "operator"),
        ({"time": None}, "time"),
    ],
)
def test_task_decoder_names_the_bad_field(changes: dict, message: str) -> None:
    with pytest.raises(ZnodeSchemaError, match=message):
        decode_task(_edit(encode_task(RECORD), **changes))


@pytest.mark.parametrize("data", [None, b"", b"\xff\xfe", b"[1]", b"{not json"])
def test_task_decoder_refuses_garbage(data) -> None:
    with pytest.raises(ZnodeSchemaError):
        decode_task(data)


def test_heartbeat_refuses_bad_values_when_built() -> None:
    with pytest.raises(ControllerModelError):
        Heartbeat(key_groups=(1, 1))
    with pytest.raises(ControllerModelError):
        Heartbeat(queue_length=float("nan"))
    with pytest.raises(ControllerModelError):
        Heartbeat(buffered={("op", 1): 2})


DURABLE = DurableHealth(
    writes=40, bytes=12_345, errors=2, coalesced=1, queue=3, lag=((5, 1, 0.25), (1, 4, 12.5))
)


def test_a_heartbeat_carries_its_durable_writers_numbers() -> None:
    rec = TaskRecord(identity=IDENT, heartbeat=replace(HB, durable=DURABLE), seq=12, time=1001.0)
    data = encode_task(rec)
    back = decode_task(data)
    assert back == rec
    assert back.heartbeat.durable.lag == ((1, 4, 12.5), (5, 1, 0.25))  # sorted by key group
    assert back.heartbeat.durable.behind() == {1: (4, 12.5), 5: (1, 0.25)}
    assert json.loads(data)["durable"] == {
        "writes": 40,
        "bytes": 12_345,
        "errors": 2,
        "coalesced": 1,
        "queue": 3,
        "lag": [[1, 4, 12.5], [5, 1, 0.25]],
    }


def test_a_heartbeat_without_the_durable_field_decodes_with_the_tier_off() -> None:
    """A task from before the field (or with the durable tier off) writes no ``durable``:
    it decodes to None, and such a record encodes to the same bytes as before."""
    old = json.loads(encode_task(RECORD))
    assert "durable" not in old and RECORD.heartbeat.durable is None
    assert decode_task(json.dumps(old).encode()).heartbeat.durable is None
    assert decode_task(_edit(encode_task(RECORD), durable=None)).heartbeat.durable is None
    partial = decode_task(_edit(encode_task(RECORD), durable={"writes": 3}))
    assert partial.heartbeat.durable == DurableHealth(writes=3)


@pytest.mark.parametrize(
    "durable, message",
    [
        ([1, 2], "durable must be an object"),
        ({"writes": -1}, "durable.writes"),
        ({"bytes": 1.5}, "durable.bytes"),
        ({"lag": [[1, 2]]}, "durable.lag"),
        ({"lag": [[1, -2, 0.0]]}, "durable.lag checkpoints"),
        ({"lag": [[1, 2, "x"]]}, "durable.lag seconds"),
        ({"lag": [[1, 2, 0.0], [1, 3, 0.0]]}, "duplicate"),
    ],
)
def test_a_bad_durable_field_is_named(durable, message: str) -> None:
    with pytest.raises(ZnodeSchemaError, match=message):
        decode_task(_edit(encode_task(RECORD), durable=durable))


def test_durable_health_keeps_only_the_groups_that_trail() -> None:
    health = {"writes": 9, "bytes": 900, "errors": 1, "coalesced": 0, "queue": 2, "gated": 5}
    lag = {3: (0, 0.0), 1: (2, 1.23456), 7: (1, 0.5)}
    assert DurableHealth.of(health, lag) == DurableHealth(
        writes=9, bytes=900, errors=1, queue=2, lag=((1, 2, 1.235), (7, 1, 0.5))
    )
    assert DurableHealth.of({}, {}) == DurableHealth()
    with pytest.raises(ControllerModelError):
        Heartbeat(durable={"writes": 1})


# ------------------------------------------------------------------ controller decisions


def test_routing_round_trips_with_epoch() -> None:
    table = RoutingTable(epoch=4, owners=(3, 3, 9))
    op, back = decode_routing(encode_routing("delays", table, controller="c"))
    assert (op, back) == ("delays", table)
    with pytest.raises(ZnodeSchemaError, match="epoch"):
        decode_routing(_edit(encode_routing("d", table, controller="c"), epoch=-1))
    with pytest.raises(ZnodeSchemaError):
        decode_routing(_edit(encode_routing("d", table, controller="c"), owners=[]))


def test_routing_carries_the_highest_epoch_issued() -> None:
    """A replica's start bumps the epoch past the table's; the znode keeps it (never
    below the table's own epoch, and a znode without the field reads as its epoch)."""
    table = RoutingTable(epoch=4, owners=(3, 3, 9))
    assert decode_issued(encode_routing("d", table, controller="c", issued=11)) == 11
    assert decode_issued(encode_routing("d", table, controller="c", issued=2)) == 4
    assert decode_issued(encode_routing("d", table, controller="c")) == 4
    old = json.loads(encode_routing("d", table, controller="c"))
    del old["issued"]
    assert decode_issued(json.dumps(old).encode()) == 4
    with pytest.raises(ZnodeSchemaError, match="issued"):
        decode_issued(_edit(encode_routing("d", table, controller="c"), issued="x"))


def test_routing_carries_where_the_newest_checkpoints_are() -> None:
    table = RoutingTable(epoch=4, owners=(3, 3, 9))
    copies = {0: {9: (4, 12)}, 2: {3: (1, 7), 5: (1, 7)}}
    data = encode_routing("d", table, controller="c", copies=copies)
    assert decode_copies(data) == copies and decode_routing(data)[1] == table
    assert decode_copies(encode_routing("d", table, controller="c")) == {}
    old = json.loads(data)
    del old["copies"]
    assert decode_copies(json.dumps(old).encode()) == {}  # written before the field
    with pytest.raises(ZnodeSchemaError, match="copies"):
        decode_copies(_edit(data, copies=[[0, 9, 4]]))


def test_checkpoints_round_trip_and_refuse_constraint_1_breaks() -> None:
    alloc = Allocation({KeyGroupId("a", 0): ("n2", "n3"), KeyGroupId("b", 5): ("n1",)})
    data = encode_checkpoints(alloc, controller="c")
    assert decode_checkpoints(data) == alloc
    with pytest.raises(ZnodeSchemaError, match="two checkpoints"):
        decode_checkpoints(_edit(data, entries=[["a", 0, ["n2", "n2"]]]))
    with pytest.raises(ZnodeSchemaError, match="twice"):
        decode_checkpoints(_edit(data, entries=[["a", 0, ["n2"]], ["a", 0, ["n3"]]]))
    with pytest.raises(ZnodeSchemaError):
        decode_checkpoints(_edit(data, entries=[["a", -1, ["n2"]]]))


def test_replicas_round_trip_and_are_not_taken_for_checkpoints() -> None:
    replicas = Allocation({KeyGroupId("a", 0): ("n2",), KeyGroupId("b", 5): ("n1",)})
    data = encode_replicas(replicas, controller="c")
    assert decode_replicas(data) == replicas
    assert decode_replicas(encode_replicas(Allocation({}), controller="c")) == Allocation({})
    with pytest.raises(ZnodeSchemaError):
        decode_checkpoints(data)  # another kind of znode
    with pytest.raises(ZnodeSchemaError, match="twice"):
        decode_replicas(_edit(data, entries=[["a", 0, ["n2"]], ["a", 0, ["n3"]]]))


def test_too_large_values_are_refused_before_zookeeper_sees_them() -> None:
    holder = "n" * 500
    big = Allocation({KeyGroupId("op", i): (holder,) for i in range(MAX_ZNODE_BYTES // 500)})
    with pytest.raises(ZnodeTooLargeError):
        encode_checkpoints(big, controller="c")


def test_leader_round_trips_and_term_names_its_controller() -> None:
    info = LeaderInfo(controller="c1", host="h", pid=9)
    assert decode_leader(encode_leader(info)) == info
    with pytest.raises(ZnodeSchemaError):
        decode_leader(encode_term("c1", incarnation="a"))
    term = json.loads(encode_term("c1", incarnation="a"))  # the token is its version
    assert term["schema"] == "elastorm.term" and term["controller"] == "c1"
    assert encode_term("c1", incarnation="a") != encode_term("c1", incarnation="b")
