"""The dashboard's pure parts: snapshots -> events and view, view -> Prometheus text,
and the web app over a fake source (no ZooKeeper, no Nimbus)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from elastorm.controller.model import (
    Allocation,
    DurableHealth,
    Heartbeat,
    KeyGroupId,
    TaskIdentity,
    TaskRecord,
)
from elastorm.controller.requests import MigrationRequest, RequestState
from elastorm.core.messages import Protocol
from elastorm.dashboard.app import create_app
from elastorm.dashboard.metrics import render
from elastorm.dashboard.view import (
    SUSPECT_AFTER,
    LagLimits,
    Snapshot,
    Tracker,
    build_view,
    node_index,
)

T0 = 1_000_000.0
DOCS = Path(__file__).resolve().parents[2] / "docs"
ECHARTS_VERSION = re.search(
    r"Apache ECharts (\d+\.\d+\.\d+)", (DOCS / "dashboard.md").read_text()
).group(1)
"""The version docs/dashboard.md records for the vendored charting library."""


def record(
    task: int, node: str, *, groups=(), rates=(), t=T0, queue=0.0, cpu=0.2, op="op2", lat=None
):
    return TaskRecord(
        identity=TaskIdentity(task_id=task, operator=op, node_id=node, host="h", pid=100 + task),
        heartbeat=Heartbeat(
            key_groups=tuple(groups),
            input_rates=tuple(rates),
            queue_length=queue,
            node_cpu=cpu,
            memory=1e6,
            latency=lat,
            service_time=None if lat is None else lat / 10,
        ),
        seq=1,
        time=t,
    )


def status(owners, holders, *, epoch=0, migrations=(), assisted=None):
    return {
        "epoch": epoch,
        "owners": list(owners),
        "holders": list(holders),
        "assisted": assisted if assisted is not None else [True] * len(owners),
        "tasks": sorted(set(owners) | set(holders)),
        "moving": [m["key_group"] for m in migrations],
        "migrations": list(migrations),
    }


def request(state: RequestState, *, group=1, used=Protocol.CPAL, times=None):
    return MigrationRequest(
        operator="op2",
        key_group=group,
        target="holder",
        protocol=Protocol.CPAL,
        state=state,
        protocol_used=used if state is not RequestState.PENDING else None,
        source=4,
        epoch=1,
        times=times or {},
    )


def snap(at, live, *, departed=None, st=None, requests=(), **kw):
    return Snapshot(
        topology="flights",
        at=at,
        live={r.task_id: r for r in live},
        departed={r.task_id: r for r in (departed or [])},
        statuses={"op2": st} if st else {},
        controllers={"op2": True},
        requests=list(requests),
        **kw,
    )


TASKS = [
    record(4, "node0", groups=[0, 2], rates=[(0, 10.0), (2, 30.0)], queue=5),
    record(5, "node1", groups=[1, 3], rates=[(1, 20.0), (3, 0.0)], queue=7, cpu=0.5),
]
ST = status([4, 5, 4, 5], [5, 4, 5, 4])


def test_view_maps_owners_and_holders_to_nodes_and_loads_per_group():
    tracker = Tracker()
    s = snap(T0, TASKS, st=ST)
    assert tracker.observe(s) == []
    view = build_view(s, tracker)
    (op,) = view["operators"]
    assert op["owners"] == ["node0", "node1", "node0", "node1"]
    assert op["holders"] == ["node1", "node0", "node1", "node0"]
    assert op["load"] == [10.0, 20.0, 30.0, 0.0]
    assert op["usable_share"] == 1.0
    nodes = {n["id"]: n for n in view["nodes"]}
    assert (nodes["node0"]["state"], nodes["node0"]["owned"], nodes["node0"]["held"]) == (
        "alive",
        2,
        2,
    )
    assert nodes["node1"]["cpu"] == 0.5 and nodes["node1"]["queue"] == 7
    assert view["throughput"] == {"op2": [[T0, 60.0]]}
    assert view["latency"] == {"op2": [[T0, None]]}  # no task measured one
    json.dumps(view)  # what the page gets


def test_operator_latency_is_weighted_by_the_tasks_tuples_per_second():
    tasks = [
        record(4, "node0", groups=[0, 2], rates=[(0, 10.0), (2, 30.0)], queue=5, lat=0.1),
        record(5, "node1", groups=[1, 3], rates=[(1, 20.0)], queue=7, lat=0.4),
        record(6, "node2", lat=None),  # measured nothing: left out of the mean
    ]
    tracker = Tracker()
    s = snap(T0, tasks, st=ST)
    tracker.observe(s)
    view = build_view(s, tracker)
    ((load),) = view["operator_load"]
    expected = (40 * 0.1 + 20 * 0.4) / 60
    assert load == {
        "name": "op2",
        "rate": 60.0,
        "latency": pytest.approx(expected),
        "service": pytest.approx(expected / 10),
        "queue": 12.0,
        "tasks": 3,
    }
    assert view["latency"]["op2"] == [[T0, pytest.approx(expected)]]
    families = _families(render(view))
    assert _sample(families, "elastorm_operator_latency_seconds") == pytest.approx(expected)
    assert _sample(families, "elastorm_operator_service_seconds") == pytest.approx(expected / 10)
    assert _sample(families, "elastorm_operator_queue_tuples", operator="op2") == 12
    for name in ("latency_seconds", "service_seconds", "queue_tuples"):  # one series per operator
        assert {tuple(sorted(x.labels)) for x in families[f"elastorm_operator_{name}"].samples} == {
            ("operator", "topology")
        }


def test_a_task_that_stops_heartbeating_is_suspect_then_lost_with_events():
    tracker = Tracker()
    tracker.observe(snap(T0, TASKS, st=ST))
    later = T0 + SUSPECT_AFTER + 1
    fresh = record(4, "node0", groups=[0, 2], t=later)
    s = snap(later, [fresh, TASKS[1]], st=ST)
    assert tracker.observe(s) == []
    states = {n["id"]: n["state"] for n in build_view(s, tracker)["nodes"]}
    assert states == {"node0": "alive", "node1": "suspect"}
    gone = snap(later + 1, [fresh], departed=[TASKS[1]], st=ST)
    events = tracker.observe(gone)
    assert [(e["kind"], e["what"]) for e in events] == [
        ("failure", "task lost"),
        ("failure", "node lost"),
    ]
    assert events[0]["task"] == 5 and events[1]["node"] == "node1"
    view = build_view(gone, tracker)
    assert {n["id"]: n["state"] for n in view["nodes"]}["node1"] == "lost"
    assert (
        view["counters"]["task_failures"] == {"op2": 1} and view["counters"]["node_failures"] == 1
    )
    back = record(5, "node1", t=later + 5)
    events = tracker.observe(snap(later + 5, [fresh, back], st=ST))
    assert [(e["kind"], e["what"], e["task"]) for e in events] == [("recovery", "task back", 5)]


def test_requests_and_routing_changes_become_migration_events_once():
    tracker = Tracker()
    tracker.observe(snap(T0, TASKS, st=ST))
    started = request(RequestState.STARTED, times={"pending": T0, "started": T0 + 0.5})
    flight = {"key_group": 1, "protocol": "cpal", "source": 5, "target": 4, "since": T0}
    moving = status([4, 5, 4, 5], [5, 4, 5, 4], migrations=[flight])
    events = tracker.observe(snap(T0 + 1, TASKS, st=moving, requests=[("req-1", started)]))
    assert [(e["kind"], e["what"], e["group"]) for e in events] == [("migration", "started", 1)]
    done = request(
        RequestState.DONE, times={"pending": T0, "started": T0 + 0.5, "done": T0 + 0.525}
    )
    moved = status([4, 4, 4, 5], [5, 5, 5, 4], epoch=1)
    s = snap(T0 + 2, TASKS, st=moved, requests=[("req-1", done)])
    events = tracker.observe(s)
    assert [(e["kind"], e["what"], e["protocol"]) for e in events] == [
        ("migration", "done", "cpal"),
        ("move", "owner", "cpal"),
    ]
    assert events[0]["seconds"] == pytest.approx(0.025) and events[0]["assisted"] is True
    assert tracker.observe(s) == []  # nothing new: nothing reported twice
    view = build_view(s, tracker)
    assert view["paper"]["assisted_share"] == 1.0 and view["paper"]["migrations_done"] == 1
    assert view["counters"]["moves"] == [["op2", "cpal", 1]]


def test_a_stage_that_raises_loses_none_of_the_events_found_before_it():
    """A request read done is marked seen at once: if a later stage of the same read
    raises (here a controller's ``ended`` record without its time), its ``done`` event
    must still be kept, or the page would never show it."""
    tracker = Tracker()
    tracker.observe(snap(T0, TASKS, st=ST))
    done = request(RequestState.DONE, times={"pending": T0, "started": T0 + 0.5, "done": T0 + 1})
    broken = ST | {"ended": [{"key_group": 2, "epoch": 1, "by": "controller"}]}
    with pytest.raises(KeyError):
        tracker.observe(snap(T0 + 2, TASKS, st=broken, requests=[("req-1", done)]))
    assert [(e["what"], e["group"]) for e in tracker.events] == [("started", 1), ("done", 1)]
    assert tracker.observe(snap(T0 + 3, TASKS, st=ST, requests=[("req-1", done)])) == []


def test_restore_after_a_failure_is_a_recovery_event():
    tracker = Tracker()
    flight = {"key_group": 3, "protocol": "restore", "source": 5, "target": 4, "since": T0}
    tracker.observe(snap(T0, TASKS, st=status([4, 5, 4, 5], [5, 4, 5, 4], migrations=[flight])))
    events = tracker.observe(snap(T0 + 1, TASKS, st=status([4, 5, 4, 4], [5, 4, 5, 5], epoch=1)))
    assert [(e["kind"], e["what"], e["group"]) for e in events] == [
        ("recovery", "key group restored", 3)
    ]


def test_holders_come_from_the_stores_allocation_when_no_status_has_them():
    alloc = Allocation({KeyGroupId("op2", 0): ("node1",), KeyGroupId("op2", 1): ("node0",)})
    st = {"epoch": 0, "owners": [4, 5]}
    s = snap(T0, TASKS, st=st, checkpoints=alloc)
    (op,) = build_view(s, Tracker())["operators"]
    assert op["holders"] == ["node1", "node0"]


def test_node_names_sort_by_number():
    assert sorted(["node10", "node2", "node1"], key=node_index) == ["node1", "node2", "node10"]


def _families(text: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def _sample(families, name, **labels):
    for family in families.values():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {name} {labels}")


def test_metrics_follow_prometheus_conventions():
    tracker = Tracker()
    tracker.observe(snap(T0, TASKS, st=ST))
    done = request(RequestState.DONE, times={"pending": T0, "started": T0 + 0.5, "done": T0 + 0.75})
    refused = request(RequestState.REFUSED, group=2, times={"refused": T0 + 1})
    s = snap(
        T0 + 1,
        TASKS,
        st=status([4, 4, 4, 5], [5, 5, 5, 4], epoch=1),
        requests=[("req-1", done), ("req-2", refused)],
        storm={"supervisors": [{"id": "s", "host": "h", "slots": 2, "used": 1}], "topologies": []},
    )
    tracker.observe(s)
    text = render(build_view(s, tracker))
    families = _families(text)
    assert (
        _sample(
            families, "elastorm_migrations_total", outcome="done", protocol="cpal", operator="op2"
        )
        == 1
    )
    assert _sample(families, "elastorm_migrations_total", outcome="refused") == 1
    assert _sample(families, "elastorm_migration_duration_seconds_sum") == pytest.approx(0.25)
    assert _sample(families, "elastorm_node_up", node="node0", state="alive") == 1
    assert _sample(families, "elastorm_operator_input_tuples_per_second", operator="op2") == 60
    assert _sample(families, "elastorm_key_group_input_tuples_per_second", key_group="2") == 30
    assert _sample(families, "elastorm_storm_supervisors") == 1
    assert _sample(families, "elastorm_key_group_moves_total", protocol="cpal") == 1
    for family in families.values():
        assert family.name.startswith("elastorm_"), family.name
        for sample in family.samples:
            assert sample.labels["topology"] == "flights"
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)


def test_per_key_group_metrics_stop_above_the_cardinality_limit():
    tracker = Tracker()
    s = snap(T0, TASKS, st=ST)
    tracker.observe(s)
    text = render(build_view(s, tracker), key_group_limit=3)
    assert b"elastorm_key_group_input_tuples_per_second{" not in text
    assert b"elastorm_node_up{" in text


class FakeSource:
    """What the app needs of a ``DashboardSource``."""

    def __init__(self, view):
        self._view = view
        self.topology = "flights"
        self.client = None

    def view(self):
        return self._view

    def wait_newer(self, seq, timeout):
        return self._view


def _view():
    tracker = Tracker()
    s = snap(T0, TASKS, st=ST)
    tracker.observe(s)
    return build_view(s, tracker)


def test_app_serves_page_view_metrics_and_events_from_its_own_files():
    client = TestClient(create_app(FakeSource(_view())))
    page = client.get("/")
    assert page.status_code == 200 and "/static/dashboard.js" in page.text
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere
    js = client.get("/static/dashboard.js")
    assert js.status_code == 200 and "EventSource" in js.text and "https://" not in js.text
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts == ["/static/vendor/echarts/echarts.min.js", "/static/dashboard.js"]
    charts = client.get(scripts[0])
    assert charts.status_code == 200 and f'version:"{ECHARTS_VERSION}"' in charts.text
    assert client.get("/api/view").json()["operators"][0]["owners"][0] == "node0"
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert b"elastorm_node_up" in metrics.content
    with client.stream("GET", "/events") as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                assert json.loads(line[6:])["topology"] == "flights"
                break


def test_actions_are_refused_unless_enabled_and_without_the_token():
    body = {"operator": "op2", "group": 1, "target": "holder", "protocol": "cpal"}
    off = TestClient(create_app(FakeSource(_view())))
    assert off.post("/api/migrate", json=body).status_code == 403
    on = TestClient(create_app(FakeSource(_view()), token="s3cret"))
    assert on.post("/api/migrate", json=body).status_code == 401
    bad = {"Authorization": "Bearer wrong"}
    assert on.post("/api/migrate", json=body, headers=bad).status_code == 401
    good = {"Authorization": "Bearer s3cret"}
    assert on.post("/api/migrate", json=body | {"group": -1}, headers=good).status_code == 400


def test_an_operator_without_status_shows_the_stores_routing_table():
    from elastorm.core.routing import RoutingTable

    s = Snapshot(
        topology="shift",
        at=T0,
        live={4: TASKS[0]},
        routing={"op1": RoutingTable(epoch=3, owners=(4, 4))},
    )
    (op,) = build_view(s, Tracker())["operators"]
    assert (op["name"], op["epoch"], op["owners"]) == ("op1", 3, ["node0", "node0"])


def test_a_first_start_is_no_recovery_and_a_fast_move_takes_its_requests_protocol():
    tracker = Tracker()
    tracker.observe(snap(T0, TASKS[:1], st=ST))
    assert tracker.observe(snap(T0 + 1, TASKS, st=ST)) == []  # task 5 starts late
    done = request(RequestState.DONE, times={"started": T0 + 1.5, "done": T0 + 1.52})
    moved = status([4, 4, 4, 5], [5, 5, 5, 4], epoch=1)  # never seen in flight
    events = tracker.observe(snap(T0 + 2, TASKS, st=moved, requests=[("req-1", done)]))
    assert [(e["kind"], e["protocol"]) for e in events] == [
        ("migration", "cpal"),
        ("migration", "cpal"),
        ("move", "cpal"),
    ]


def test_before_the_first_read_the_event_stream_waits_instead_of_spinning():
    import time

    from elastorm.dashboard.source import DashboardSource

    source = DashboardSource(hosts="127.0.0.1:1", topology="flights")  # never started
    began = time.monotonic()
    assert source.wait_newer(-1, 0.3) is None
    assert time.monotonic() - began >= 0.29


def test_the_controllers_allocation_summary_reaches_the_view_and_metrics_finite():
    summary = {
        "theta": 0.5,
        "correlation": {"key_groups": ["op2/0", "op2/1"], "matrix": [[1.0, -0.4], [-0.4, 1.0]]},
        "allocation_score": 3.0,
        "reference_score": float("-inf"),
        "score_drift": 1.25,
    }
    metrics = {"strategy": "correlated", "allocation": summary, "assisted_share": float("nan")}
    tracker = Tracker()
    s = snap(T0, TASKS, st=ST, controller_metrics=metrics)
    tracker.observe(s)
    view = build_view(s, tracker)
    json.dumps(view, allow_nan=False)
    assert view["allocation"]["reference_score"] is None
    assert view["allocation"]["correlation"]["matrix"][0][1] == -0.4
    families = _families(render(view))
    assert _sample(families, "elastorm_allocation_score_drift") == 1.25
    assert _sample(families, "elastorm_allocation_theta") == 0.5
    assert build_view(snap(T0, TASKS, st=ST), Tracker())["allocation"] is None


def test_the_controllers_own_moves_take_the_protocol_it_ordered():
    tracker = Tracker()
    tracker.observe(snap(T0, TASKS, st=ST))
    orders = {"orders": [{"t": T0, "key_group": "op2/1", "protocol": "cpa", "target": "node0"}]}
    moved = status([4, 4, 4, 5], [5, 5, 5, 4], epoch=1)
    events = tracker.observe(snap(T0 + 1, TASKS, st=moved, controller_metrics=orders))
    assert [(e["kind"], e["group"], e["protocol"]) for e in events] == [("move", 1, "cpa")]


# ------------------------------------------------------------------ the durable tier


def durable(task: TaskRecord, t: float, *, writes: int, lag=(), errors=0, queue=0) -> TaskRecord:
    """``task`` at wall-clock ``t`` with a durable writer that wrote ``writes``
    checkpoints of 100 bytes each and has ``lag`` ((group, checkpoints, s), ...)."""
    beat = DurableHealth(
        writes=writes, bytes=100 * writes, errors=errors, queue=queue, lag=tuple(lag)
    )
    return replace(task, heartbeat=replace(task.heartbeat, durable=beat), time=t)


def durable_snaps() -> list[Snapshot]:
    """Two reads 10 s apart: task 4 (groups 0, 2) wrote 20 more checkpoints and its
    group 2 trails by 3 checkpoints; task 5 (groups 1, 3) had 2 failed writes and its
    group 1 trails by 1 checkpoint but for 45 s (the store is failing)."""
    return [
        snap(T0, [durable(TASKS[0], T0, writes=10), durable(TASKS[1], T0, writes=5)], st=ST),
        snap(
            T0 + 10,
            [
                durable(TASKS[0], T0 + 10, writes=30, lag=[(2, 3, 2.5)], queue=1),
                durable(TASKS[1], T0 + 10, writes=5, lag=[(1, 1, 45.0)], errors=2),
            ],
            st=ST,
        ),
    ]


def test_the_view_shows_each_groups_durable_lag_and_each_tasks_writer():
    tracker = Tracker()
    for s in durable_snaps():
        tracker.observe(s)
    view = build_view(s, tracker)
    json.dumps(view, allow_nan=False)
    (op,) = view["operators"]
    assert op["durable"] == {
        "lag": [[0, 0.0], [1, 45.0], [3, 2.5], [0, 0.0]],
        "lagging": [1, 2],  # 3 > 2 checkpoints; 45 > 30 s
        "trailing": 2,
        "max_checkpoints": 3,
        "max_seconds": 45.0,
    }
    d = view["durable"]
    assert d["limits"] == {"checkpoints": 2, "seconds": 30.0}
    t4, t5 = d["tasks"]
    assert (t4["task"], t4["writes"], t4["bytes"], t4["queue"], t4["errors"]) == (4, 30, 3000, 1, 0)
    assert (t4["write_rate"], t4["byte_rate"]) == (2.0, 200.0)  # 20 writes in 10 s
    assert (t5["write_rate"], t5["errors"], t5["lagging"], t5["max_seconds"]) == (0.0, 2, 1, 45.0)
    assert [(r["group"], r["node"], r["checkpoints"], r["lagging"]) for r in d["trailing"]] == [
        (1, "node1", 1, True),  # the most seconds behind first
        (2, "node0", 3, True),
    ]
    assert d["trailing_total"] == 2
    # Looser limits: the same lag, nothing highlighted.
    loose = build_view(s, tracker, limits=LagLimits(checkpoints=5, seconds=60.0))
    assert loose["operators"][0]["durable"]["lagging"] == []
    assert not any(r["lagging"] for r in loose["durable"]["trailing"])


def test_with_the_durable_tier_off_nothing_durable_is_shown_or_exported():
    tracker = Tracker()
    s = snap(T0, TASKS, st=ST)  # heartbeats without a durable field
    tracker.observe(s)
    view = build_view(s, tracker)
    assert view["durable"] is None and view["operators"][0]["durable"] is None
    assert b"elastorm_durable" not in render(view)


def test_a_task_whose_durable_counts_restart_gets_no_negative_rate():
    tracker = Tracker()
    _, second = durable_snaps()
    tracker.observe(second)
    restarted = durable(TASKS[0], T0 + 11, writes=2)  # a new process: counts from 0
    tracker.observe(snap(T0 + 11, [restarted, second.live[5]], st=ST))
    assert tracker.durable_rates(4) is None  # one sample since the restart
    tracker.observe(snap(T0 + 13, [durable(TASKS[0], T0 + 13, writes=6)], st=ST))
    assert tracker.durable_rates(4) == (2.0, 200.0)
    assert tracker.durable_rates(5) is None  # gone from the live tasks


def test_lag_limits_are_checked():
    with pytest.raises(ValueError):
        LagLimits(checkpoints=-1)
    with pytest.raises(ValueError):
        LagLimits(seconds=float("nan"))
    assert LagLimits().lagging(3, 0.0) and LagLimits().lagging(0, 30.5)
    assert not LagLimits().lagging(2, 30.0)


def test_durable_metrics_have_prometheus_names_labels_and_values():
    tracker = Tracker()
    for s in durable_snaps():
        tracker.observe(s)
    families = _families(render(build_view(s, tracker)))
    lag = {"operator": "op2", "topology": "flights"}
    assert _sample(families, "elastorm_durable_lag_checkpoints", key_group="2", **lag) == 3
    assert _sample(families, "elastorm_durable_lag_seconds", key_group="1", **lag) == 45
    assert _sample(families, "elastorm_durable_lag_checkpoints", key_group="0", **lag) == 0
    assert _sample(families, "elastorm_durable_max_lag_checkpoints", **lag) == 3
    assert _sample(families, "elastorm_durable_max_lag_seconds", **lag) == 45
    assert _sample(families, "elastorm_durable_writes_total", task="4", operator="op2") == 30
    assert _sample(families, "elastorm_durable_bytes_total", task="4") == 3000
    assert _sample(families, "elastorm_durable_write_errors_total", task="5") == 2
    assert _sample(families, "elastorm_durable_coalesced_total", task="5") == 0
    assert _sample(families, "elastorm_durable_queue_checkpoints", task="4") == 1
    assert families["elastorm_durable_writes"].type == "counter"
    assert families["elastorm_durable_lag_seconds"].type == "gauge"
    per_group = [
        sample
        for name in ("elastorm_durable_lag_checkpoints", "elastorm_durable_lag_seconds")
        for sample in families[name].samples
    ]
    assert {s.labels["key_group"] for s in per_group} == {"0", "1", "2", "3"}
    # Above the cardinality limit only the per-operator maxima remain.
    capped = render(build_view(s, tracker), key_group_limit=3)
    assert b"elastorm_durable_lag_checkpoints{" not in capped
    assert b"elastorm_durable_max_lag_checkpoints{" in capped


def test_the_view_shows_why_the_topology_cannot_run_in_the_lines_of_elastorm_status():
    from elastorm.controller.problems import StartFailure, TopologyFacts, problems

    failure = StartFailure(
        component="op2", task=4, count=22, reason="ModuleNotFoundError: no nltk", at=T0 - 3
    )
    facts = TopologyFacts(
        topology="flights", now=T0, on_storm=True, elastic_state=True, start_failures=(failure,)
    )
    view = build_view(snap(T0, [], facts=facts), Tracker())
    assert view["problems"][0] == problems(facts)[0].line
    assert view["problems"][0].endswith(
        "failed to start 22 times, last 3 s ago: ModuleNotFoundError: no nltk"
    )
    assert view["problems"][1].startswith("no controller status: flights cannot run: op2 task 4")


def test_a_healthy_or_unread_topology_shows_no_problem_lines():
    from elastorm.controller.problems import TopologyFacts

    facts = TopologyFacts(topology="flights", now=T0, on_storm=True, elastic_state=True)
    assert build_view(snap(T0, TASKS, st=ST, facts=facts), Tracker())["problems"] == []
    assert build_view(snap(T0, TASKS, st=ST), Tracker())["problems"] == []
