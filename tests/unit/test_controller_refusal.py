"""A controller that cannot run its topology (a keyed operator with one task, from a
jar older than the raise to two at submit) says why once and stops there: one ERROR
line, the reason in ZooKeeper for ``elastorm migrate``, no exception for Storm to
restart its worker into, over and over."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest
from memory_zk import MemoryZk

import elastorm.storm.controller_bolt as bolt_module
import elastorm.storm.controller_runtime as runtime_module
from elastorm.controller.loop import Placement
from elastorm.controller.model import ControllerModelError
from elastorm.errors import UserError
from elastorm.runtime.migrate import keyed_operator, wait_for_status
from elastorm.storm.controller_bolt import MigrationControllerBolt
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import read_refusal

CONTEXT = {
    "taskid": 2,
    "componentid": "controller",
    "task->component": {
        "1": "router",
        "2": "controller",
        **{str(t): "counts" for t in (10, 11, 12)},
        **{str(t): "letters" for t in (20,)},
    },
}
CONF = {
    "topology.name": "t",
    "storm.zookeeper.servers": ["127.0.0.1"],
    "elastorm.key_groups": 6,
    "elastorm.operators": {"counts": ["router"], "letters": ["counts"]},
}
REASON = (
    "every keyed operator needs tasks on two nodes at least (a key group's owner and its "
    "checkpoint holder), got: counts on 3, letters on 1"
)


def test_placement_names_each_operators_nodes() -> None:
    with pytest.raises(ControllerModelError) as refused:
        Placement.by_index({"letters": [20], "counts": [10, 11, 12]})
    assert str(refused.value) == REASON


@pytest.fixture
def refused(monkeypatch, caplog):
    """The controller bolt of a topology whose keyed operators have 3 and 1 tasks, on a
    ZooKeeper that is not connected yet: (bolt, its ZooKeeper)."""
    zk = MemoryZk()
    zk.connected = False
    zk.start_async = lambda: None
    monkeypatch.setattr(runtime_module, "make_client", lambda settings: zk)

    def never(*args):
        raise AssertionError("a refused controller must not start its runtime")

    monkeypatch.setattr(bolt_module.ControllerRuntime, "start", never)
    bolt = MigrationControllerBolt(
        input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None
    )
    monkeypatch.setattr(bolt, "send", never, raising=False)
    with caplog.at_level(logging.ERROR):
        bolt.initialize(CONF, CONTEXT)
    return bolt, zk


def test_it_logs_one_error_line_and_publishes_the_reason_once_zookeeper_answers(
    refused, caplog
) -> None:
    bolt, zk = refused
    logged = caplog.get_records("setup")  # the fixture initialized the bolt
    errors = [r.getMessage() for r in logged if r.levelno >= logging.ERROR]
    assert errors == [f"controller: cannot run topology t: {REASON}"]
    bolt.process_tick(None)  # ZooKeeper not connected yet: tried again next tick
    assert read_refusal(zk, ZnodeLayout("t")) is None
    zk.connected = True
    bolt.process_tick(None)
    assert read_refusal(zk, ZnodeLayout("t")) == REASON
    assert ZnodeLayout("t").refused in zk.owners  # ephemeral: gone with the topology
    bolt.process(SimpleNamespace(stream="elastorm_reports", task=10, values=["{}"]))
    bolt.process_tick(None)  # published once, decides nothing
    assert zk.versions[ZnodeLayout("t").refused] == 0


def test_migrate_prints_the_reason_instead_of_waiting(refused) -> None:
    bolt, zk = refused
    zk.connected = True
    bolt.process_tick(None)
    zk.get_children = lambda path: []  # no routing table was ever written
    expected = f"the controller of t cannot run it: {REASON}"
    with pytest.raises(UserError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
        keyed_operator(zk, "t", timeout=60)
    with pytest.raises(UserError, match="cannot run it: every keyed operator needs tasks on two"):
        wait_for_status(zk, "t", "counts", timeout=60)


def test_a_status_read_that_zookeeper_drops_is_read_again(monkeypatch) -> None:
    """CI, session 24: under load the join test's own ZooKeeper session expired and
    ``wait_for_status`` raised ``SessionExpiredError`` out of the run; kazoo reconnects by
    itself, so the read is tried again until the timeout."""
    from kazoo.exceptions import ConnectionLoss, SessionExpiredError

    import elastorm.runtime.migrate as migrate_module

    answers = [SessionExpiredError(), ConnectionLoss(), {"owners": [1]}]

    def read(client, layout, operator):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(migrate_module, "read_status", read)
    monkeypatch.setattr(migrate_module.time, "sleep", lambda s: None)
    assert wait_for_status(object(), "t", "counts", timeout=60) == {"owners": [1]}
    assert not answers
    answers[:] = [ConnectionLoss()] * 3
    with pytest.raises(UserError, match="dropped the connection"):
        wait_for_status(object(), "t", "counts", timeout=-1)
