"""Why a topology cannot run, one line per problem (elastorm.controller.problems), and the
ZooKeeper record of failed starts it reads (elastorm.zk.problems), on an in-memory fake."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from elastorm.controller.model import Heartbeat, TaskIdentity, TaskRecord
from elastorm.controller.problems import (
    PLACEMENT_REFUSED,
    Problem,
    StartFailure,
    StormError,
    TopologyFacts,
    one_line,
    problems,
    why_no_status,
)
from elastorm.runtime.status import Gathered, busiest_task
from elastorm.runtime.status_cmd import lines
from elastorm.zk.codec import (
    Submission,
    ZnodeSchemaError,
    decode_start_failure,
    encode_start_failure,
    encode_submission,
)
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.problems import count_start_failure, read_start_failures, zk_facts

NOW = 1_000_000.0
TRACEBACK = (
    "java.lang.RuntimeException: Error when launching multilang subprocess\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/bin/streamparse_run", line 8, in <module>\n'
    "ModuleNotFoundError: No module named 'nltk'\n"
    "\tat org.apache.storm.utils.ShellProcess.launch(ShellProcess.java:96)\n"
    "Caused by: java.io.IOException: Stream closed\n"
)


def _facts(**changes) -> TopologyFacts:
    return replace(
        TopologyFacts(topology="wc", now=NOW, on_storm=True, elastic_state=True), **changes
    )


def test_a_traceback_gives_its_python_exception_line() -> None:
    assert one_line(TRACEBACK) == "ModuleNotFoundError: No module named 'nltk'"


def test_one_line_of_a_plain_message_is_its_first_line_and_bounded() -> None:
    assert one_line("it broke\nsecond") == "it broke"
    assert one_line("") == "(no detail)"
    assert len(one_line("x" * 1000)) == 240


def test_a_healthy_topology_has_no_problem() -> None:
    assert problems(_facts(statuses=("counts",), controller_alive=True)) == ()


def test_a_refused_placement_is_a_problem_of_the_scheduler() -> None:
    status = f"{PLACEMENT_REFUSED} (operator counts has executors with several tasks)"
    (found,) = problems(_facts(sched_status=status))
    assert found.where == "scheduler"
    assert found.line.startswith("cannot be placed elastically (operator counts has executors")


def test_the_schedulers_ordinary_status_is_no_problem() -> None:
    assert problems(_facts(sched_status="elastorm: node supervisor-0 bound to 0")) == ()


def test_a_controllers_refusal_is_reported_with_its_reason() -> None:
    (found,) = problems(_facts(refusal="every keyed operator needs tasks on two nodes at least"))
    assert found == Problem(
        where="controller",
        line="the controller cannot run it: every keyed operator needs tasks on two nodes at least",
    )


def test_failed_starts_are_summed_per_component_with_the_newest_reason() -> None:
    failures = (
        StartFailure(component="counts", task=4, count=3, reason="OSError: old", at=NOW - 50),
        StartFailure(component="counts", task=3, count=19, reason="ValueError: new", at=NOW - 7),
    )
    (found,) = problems(_facts(start_failures=failures))
    assert found.line == "counts tasks 3, 4 failed to start 22 times, last 7 s ago: ValueError: new"
    assert found.seconds_ago == 7


def test_a_storm_error_is_reported_in_one_line_with_its_age() -> None:
    err = StormError(component="counts", count=10, text=TRACEBACK, at=NOW - 300)
    (found,) = problems(_facts(storm_errors=(err,)))
    assert found.line == (
        "counts: Storm reported 10 times an error, last 5 min ago: "
        "ModuleNotFoundError: No module named 'nltk'"
    )


def test_a_storm_error_no_newer_than_elastorms_record_is_not_reported_twice() -> None:
    failure = StartFailure(component="counts", task=3, count=1, reason="ValueError: x", at=NOW - 10)
    same = StormError(component="counts", count=1, text="ValueError: x", at=NOW - 9)
    later = StormError(component="counts", count=2, text="KeyError: y", at=NOW - 1)
    assert len(problems(_facts(start_failures=(failure,), storm_errors=(same,)))) == 1
    both = problems(_facts(start_failures=(failure,), storm_errors=(later,)))
    assert len(both) == 2
    assert both[0].line.endswith("ValueError: x") and both[1].line.endswith("KeyError: y")


def test_problems_come_most_serious_first() -> None:
    facts = _facts(
        sched_status=f"{PLACEMENT_REFUSED} (x)",
        refusal="r",
        start_failures=(StartFailure(component="a", task=1, count=1, reason="E: e", at=NOW),),
        storm_errors=(StormError(component="b", count=1, text="F: f", at=NOW),),
    )
    assert [p.where for p in problems(facts)] == ["scheduler", "controller", "a", "b"]


def test_a_start_failure_counts_at_least_once() -> None:
    with pytest.raises(ValueError):
        StartFailure(component="a", task=1, count=0, reason="r", at=0.0)


@pytest.mark.parametrize(
    ("facts", "says"),
    [
        (_facts(refusal="no"), "wc cannot run: the controller cannot run it: no"),
        (_facts(on_storm=False, elastic_state=False), "not submitted, or under another name"),
        (_facts(on_storm=False), "Nimbus runs no topology wc (killed?)"),
        (_facts(elastic_state=False, uptime_secs=9), "written no elastorm state (up 9 s): not an"),
        (_facts(storm_status="INACTIVE"), "wc is INACTIVE on Storm"),
        (_facts(uptime_secs=30), "has not published a status yet (up 30 s)"),
        (_facts(on_storm=None), "has not published a status yet:"),
    ],
)
def test_a_missing_status_says_why(facts: TopologyFacts, says: str) -> None:
    assert says in why_no_status(facts)


def test_a_start_failure_round_trips_through_its_znode() -> None:
    failure = StartFailure(component="counts", task=3, count=2, reason="E: e", at=5.0)
    assert decode_start_failure(encode_start_failure(failure, storm_id="wc-1-2")) == (
        "wc-1-2",
        failure,
    )
    with pytest.raises(ZnodeSchemaError):
        decode_start_failure(
            encode_start_failure(failure, storm_id="s").replace(b'"count":2', b'"count":0')
        )


class MemoryZk:
    """Enough of kazoo's client for the failure records: versioned get/create/set."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}

    def get(self, path: str):
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, SimpleNamespace(version=version)

    def create(self, path: str, data: bytes = b"", makepath: bool = False, **_) -> str:
        if path in self.nodes:
            raise NodeExistsError(path)
        parent = path.rsplit("/", 1)[0]
        while parent and parent not in self.nodes:
            self.nodes[parent] = (b"", 0)
            parent = parent.rsplit("/", 1)[0]
        self.nodes[path] = (data, 0)
        return path

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        if path not in self.nodes:
            raise NoNodeError(path)
        if version not in (-1, self.nodes[path][1]):
            raise BadVersionError(path)
        self.nodes[path] = (data, self.nodes[path][1] + 1)

    def exists(self, path: str):
        return SimpleNamespace() if path in self.nodes else None

    def get_children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return sorted(
            {p[len(path) + 1 :].split("/")[0] for p in self.nodes if p.startswith(path + "/")}
        )


def _failure(at: float, reason: str = "ImportError: x") -> StartFailure:
    return StartFailure(component="counts", task=3, count=1, reason=reason, at=at)


def test_failed_starts_are_counted_per_submission_and_read_back() -> None:
    zk, layout = MemoryZk(), ZnodeLayout("wc")
    zk.create(
        layout.submission,
        encode_submission(Submission(storm_id="wc-1-1", since=0.0)),
        makepath=True,
    )
    count_start_failure(zk, layout, "wc-1-1", _failure(1.0))
    stored = count_start_failure(zk, layout, "wc-1-1", _failure(2.0, "ImportError: y"))
    assert (stored.count, stored.reason, stored.at) == (2, "ImportError: y", 2.0)
    assert read_start_failures(zk, layout) == (stored,)
    # A new submission of the name starts counting again; the old record is not reported.
    zk.set(layout.submission, encode_submission(Submission(storm_id="wc-2-9", since=3.0)))
    assert read_start_failures(zk, layout) == ()
    assert count_start_failure(zk, layout, "wc-2-9", _failure(4.0)).count == 1


def test_zookeeper_facts_of_a_name_without_elastorm_state() -> None:
    facts = zk_facts(MemoryZk(), TopologyFacts(topology="wc", now=NOW))
    assert not facts.elastic_state and facts.start_failures == ()


def test_zookeeper_facts_gather_the_refusal_and_the_failures() -> None:
    zk, layout = MemoryZk(), ZnodeLayout("wc")
    zk.create(layout.refused, b"one task", makepath=True)
    count_start_failure(zk, layout, "wc-1-1", _failure(1.0))
    facts = zk_facts(zk, TopologyFacts(topology="wc", now=NOW))
    assert facts.elastic_state and facts.refusal == "one task"
    assert facts.start_failures == (_failure(1.0),)
    assert not facts.controller_alive and facts.statuses == ()


def _task(task: int, groups: tuple[int, ...], operator: str = "counts") -> TaskRecord:
    identity = TaskIdentity(
        task_id=task, operator=operator, node_id=f"node{task}", host="h", pid=100 + task
    )
    return TaskRecord(identity=identity, heartbeat=Heartbeat(key_groups=groups))


def test_the_task_to_kill_owns_the_most_key_groups() -> None:
    tasks = {
        1: _task(1, (0,)),
        2: _task(2, (1, 2)),
        3: _task(3, (3, 4)),
        4: _task(4, (5, 6, 7), "x"),
    }
    assert busiest_task(tasks, "counts").identity.pid == 102
    assert busiest_task(tasks, "sums") is None


def test_status_lines_show_the_tasks_and_each_problem() -> None:
    facts = _facts(uptime_secs=12, storm_status="ACTIVE", refusal="one task")
    out = lines(Gathered(facts=facts, tasks={2: _task(2, (1, 2))}))
    assert out[0] == "wc: ACTIVE on Storm, up 12 s; no controller leads"
    assert out[1] == "  counts task 2: pid 102 on node2, 2 key groups, 0 checkpoints held"
    assert out[2] == "no controller status: wc cannot run: the controller cannot run it: one task"
    assert out[3] == "problem: the controller cannot run it: one task"


def test_a_bolt_whose_start_fails_records_why_and_still_dies(monkeypatch) -> None:
    from elastorm.storm.elastic import recording_start
    from elastorm.zk import problems as zk_problems

    recorded = []
    monkeypatch.setattr(
        zk_problems, "record_start_failure", lambda *args: recorded.append(args[1:4])
    )
    with pytest.raises(ValueError, match="bad"):
        with recording_start({}, {"componentid": "counts", "taskid": 3}):
            raise ValueError("bad\n  option")
    assert recorded == [("counts", 3, "ValueError: bad option")]
    with recording_start({}, {"componentid": "counts", "taskid": 3}):
        pass
    assert len(recorded) == 1


def test_a_crash_not_seen_again_becomes_an_earlier_problem_a_refusal_never_does() -> None:
    from elastorm.controller.problems import RECENT_SECS

    old = StormError(component="counts", count=1, text="E: killed", at=NOW - RECENT_SECS - 1)
    new = replace(old, at=NOW - 1)
    assert not problems(_facts(storm_errors=(old,)))[0].current
    assert problems(_facts(storm_errors=(new,)))[0].current
    assert problems(_facts(refusal="r"))[0].current
    # An earlier crash does not explain a missing status.
    assert "has not published a status yet" in why_no_status(_facts(storm_errors=(old,)))
    assert "cannot run" in why_no_status(_facts(storm_errors=(new,)))


def test_status_marks_an_earlier_problem() -> None:
    from elastorm.controller.problems import RECENT_SECS

    old = StormError(component="counts", count=1, text="E: killed", at=NOW - RECENT_SECS - 60)
    out = lines(Gathered(facts=_facts(storm_errors=(old,), statuses=("counts",))))
    assert out[-2:] == [
        "controller status of: counts",
        "earlier: counts: Storm reported once an error, last 2 min ago: E: killed",
    ]


def test_nimbus_facts_map_storms_errors_and_scheduler_status(monkeypatch) -> None:
    from elastorm.runtime import nimbus

    err = lambda text, t: SimpleNamespace(error=text, error_time_secs=t)  # noqa: E731
    info = SimpleNamespace(
        status="ACTIVE",
        sched_status=f"{PLACEMENT_REFUSED} (x)",
        uptime_secs=42,
        errors={"counts": [err("E: old", 10), err(TRACEBACK, 20)], "__acker": [err("A: a", 5)]},
    )
    client = SimpleNamespace(
        getClusterInfo=lambda: SimpleNamespace(
            topologies=[SimpleNamespace(name="wc", id="wc-1-1", sched_status="")]
        ),
        getTopologyInfo=lambda storm_id: info,
    )
    monkeypatch.setattr(nimbus, "nimbus_client", lambda host, port: client)
    facts = nimbus.storm_facts("h", 1, TopologyFacts(topology="wc", now=NOW))
    assert (facts.on_storm, facts.storm_status, facts.uptime_secs) == (True, "ACTIVE", 42)
    assert facts.storm_errors == (StormError(component="counts", count=2, text=TRACEBACK, at=20.0),)
    assert [p.where for p in problems(facts)] == ["scheduler", "counts"]
    gone = nimbus.storm_facts("h", 1, TopologyFacts(topology="other", now=NOW))
    assert gone.on_storm is False


def test_a_run_logs_each_components_problem_once_as_it_appears(monkeypatch, caplog) -> None:
    """``ProblemWatch`` (run_topology's wait): Nimbus asked at most every ``every`` s; a
    component's error logged once, with its reason's line; nothing when Nimbus does not
    answer."""
    import time as time_module

    from elastorm.errors import UserError
    from elastorm.runtime import status

    errors: list = []
    asked = []

    def facts(host, port, blank):
        asked.append(host)
        if errors == ["down"]:
            raise UserError("Nimbus at n:6627 did not answer")
        return replace(blank, on_storm=True, storm_errors=tuple(errors))

    monkeypatch.setattr(status, "storm_facts", facts)
    monkeypatch.setattr(time_module, "time", lambda: NOW)
    watch = status.ProblemWatch(("n", 6627), "t", every=30.0)
    assert watch.poll(0.0) == []
    errors.append(StormError(component="sum_delays", count=6, text=TRACEBACK, at=NOW - 5))
    assert watch.poll(10.0) == [] and len(asked) == 1  # not asked again within 30 s
    with caplog.at_level("WARNING", logger="elastorm.runtime.status"):
        first = watch.poll(30.0)
        assert watch.poll(60.0) == []  # the same component: logged once
    assert len(first) == 1 and "sum_delays" in first[0] and "nltk" in first[0]
    assert [r.getMessage() for r in caplog.records] == [f"t: {first[0]}"]
    errors[:] = ["down"]
    assert watch.poll(90.0) == [] and len(asked) == 4
