"""The join-and-window job: its operator functions, its bolts' tentative outputs and
rectification, and a fold of its functions against the pandas reference."""

from __future__ import annotations

import io

import pytest
from streamparse import Bolt, Stream

import elastorm.zk.requests
from bolts.flights_join import JOINED_FIELDS, DailyWindows, JoinFlights, JoinWindowSink
from demos.flights_join import (
    add_to_window,
    compute_join_reference,
    join_side,
    split_flight,
    window_of,
)
from demos.flights_schema import (
    REQUIRED_COLUMNS,
    default_flights_path,
    open_rows,
    parse_row,
)
from drivers.flights_join import compare_windows
from elastorm.controller.replication import downstream_operators, operator_inputs
from elastorm.core.actions import Applied, Send
from elastorm.core.messages import CheckpointAck, Data, DataTuple, Protocol, UpstreamRecovery
from elastorm.core.migration.table import Phase
from elastorm.storm.elastic import STREAM, to_wire


def test_a_flight_joins_whichever_side_comes_first() -> None:
    p, out = join_side({}, "arr", 4, [12])
    assert p == {"4": ["arr", 12]} and out is None
    assert join_side(p, "air", 4, [95, 3600]) == ({}, [12, 95, 3600])
    p, _ = join_side({}, "air", 5, [80, 7200])
    assert join_side(p, "arr", 5, [-3]) == ({}, [-3, 80, 7200])


def test_a_side_seen_twice_keeps_the_first_and_joins_once() -> None:
    p, _ = join_side({}, "arr", 4, [12])
    again, out = join_side(p, "arr", 4, [99])
    assert again is p and out is None
    assert join_side(again, "air", 4, [1, 0])[1] == [12, 1, 0]


def test_na_sides_are_not_sent_and_windows_are_utc_days() -> None:
    assert split_flight(1, "N", None, 30, 90_000) == (None, ["N", 1, 30, 90_000])
    assert window_of(86_400 * 3 + 5) == 86_400 * 3 and window_of(0) == 0
    assert add_to_window(add_to_window(None, 5, 60), -2, 40) == [2, 3, 100]


def test_a_fold_of_the_functions_equals_pandas_on_the_first_rows() -> None:
    limit = 4000
    rows = open_rows(default_flights_path())
    header = next(rows)
    index = tuple(header.index(c) for c in REQUIRED_COLUMNS)
    pending: dict[str, dict] = {}
    windows: dict[str, list] = {}
    for row_no, row in zip(range(limit), rows, strict=False):
        reason, parsed = parse_row(row, index, len(header))
        if reason is not None:
            continue
        tailnum, _, arr_delay, air_time, ts = parsed
        for side in split_flight(row_no, tailnum, arr_delay, air_time, ts):
            if side is None:
                continue
            kind = "air" if len(side) == 4 else "arr"
            pending[tailnum], joined = join_side(pending.get(tailnum, {}), kind, row_no, side[2:])
            if joined is not None:
                key = f"{tailnum}|{window_of(joined[2])}"
                windows[key] = add_to_window(windows.get(key), joined[0], joined[1])
    rows.close()
    expected = compute_join_reference(limit=limit)
    report = compare_windows({k: [*v, False] for k, v in windows.items()}, expected)
    assert report["ok"], report
    assert expected.joined > 3000


def test_compare_windows_names_missing_wrong_and_tentative() -> None:
    expected = compute_join_reference(limit=50)
    (key, day), totals = next(iter(expected.windows.items()))
    got = {f"{t}|{d}": [*v, False] for (t, d), v in expected.windows.items()}
    assert compare_windows(got, expected)["ok"]
    got[f"{key}|{day}"] = [totals[0], totals[1] + 1, totals[2], True]
    del got[next(k for k in got if k != f"{key}|{day}")]
    report = compare_windows(got, expected)
    assert (report["missing"], report["wrong"], report["tentative_left"]) == (1, 1, 1)


# -- the bolts -------------------------------------------------------------------------


def _bolt(monkeypatch, tmp_path, cls):
    monkeypatch.setattr(elastorm.zk.requests, "task_start", lambda *a: (1, -1))
    bolt = cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    context = {
        "taskid": 3,
        "componentid": "w",
        "task->component": {"1": "w_router", "2": "controller", "3": "w", "4": "w"},
    }
    conf = {
        "elastorm.key_groups": 1,  # one group, owned by task 3, held on 4
        "elastorm.operators": {"w": ["w_router"]},
        "storm.id": "t-1-1",
        "elastorm.heartbeats": False,
        "elastorm.output_dir": str(tmp_path),
    }
    bolt.initialize(conf, context)
    return bolt


class _Tup:
    def __init__(self, message, sender=1) -> None:
        self.values = [to_wire(message), sender]
        self.stream = STREAM
        self.task = sender
        self.component = "w_router"


def _joined(seq: int, row: int, delay: int, air: int, ts: int = 0, out: int | None = None) -> _Tup:
    """The window's ``seq``-th input: joined ``row``, with the join's output id (its
    group 2's ``out``-th output, ``row`` unless given)."""
    values = ["N1", row, delay, air, ts, 2, "jr:1", row if out is None else out, "final"]
    return _Tup(Data(key_group=0, item=DataTuple("r:1", seq, "N1", values, 0.0)))


@pytest.fixture
def emitted(monkeypatch):
    out: list = []
    monkeypatch.setattr(
        Bolt, "emit", lambda self, values, stream=None, **kw: out.append((stream, values))
    )
    return out


def test_the_window_skips_a_joined_row_sent_again_and_marks_tentative_then_rectifies(
    monkeypatch, tmp_path, emitted
) -> None:
    bolt = _bolt(monkeypatch, tmp_path, DailyWindows)
    bolt.process(_joined(1, 10, 5, 60))
    bolt.process(_joined(2, 10, 5, 60))  # a restored join sends row 10 again: same id
    assert [v for s, v in emitted if s is None] == [["N1", 0, 1, 5, 60, False]]
    bolt.process(_Tup(UpstreamRecovery(key_group=0, recovering=True), sender=2))
    bolt.process(_joined(3, 11, -1, 40))
    assert emitted[-1] == (None, ["N1", 0, 2, 4, 100, True])
    bolt.process_tick(None)  # still recovering upstream: nothing rectified
    assert [v for s, v in emitted if s is None][-1][-1] is True
    bolt.process(_Tup(UpstreamRecovery(key_group=0, recovering=False), sender=2))
    bolt.process_tick(None)
    assert [v for s, v in emitted if s is None][-1] == ["N1", 0, 2, 4, 100, False]
    bolt.process_tick(None)  # rectified once
    assert sum(1 for s, v in emitted if s is None and v[-1] is False) == 2


def test_the_window_counts_a_joined_row_that_comes_after_a_later_one(
    monkeypatch, tmp_path, emitted
) -> None:
    """join cpal-source at e498c55 and 58535de (docs/benchmarks.md, "Session 27"): 135
    and 428 flights of the moved key group missing from the windows. A move's old
    owner, seconds behind, sent its last joined rows after the new owner sent later
    ones, and the window dropped every row below the highest it had seen as "sent
    again". Repeats are found by output id (``elastorm.core.once``), not by order."""
    bolt = _bolt(monkeypatch, tmp_path, DailyWindows)
    bolt.process(_joined(1, 20, 5, 60))  # from the new owner
    bolt.process(_joined(2, 12, 1, 30))  # from the old owner, late
    bolt.process(_joined(3, 12, 1, 30))  # and again (a resend): skipped by its id
    assert [v for s, v in emitted if s is None][-1] == ["N1", 0, 2, 6, 90, False]


def test_the_join_emits_a_flight_once_both_sides_came(monkeypatch, tmp_path, emitted) -> None:
    bolt = _bolt(monkeypatch, tmp_path, JoinFlights)
    arrival = [14, "N1", 7, 12]  # [position, tailnum, row, arr_delay], as the spout sends
    air = [15, "N1", 7, 95, 3600]
    for seq, values in enumerate([arrival, air], start=1):
        bolt.process(_Tup(Data(key_group=0, item=DataTuple("r:1", seq, "N1", values, 0.0))))
    [joined] = [v for s, v in emitted if s is None]
    assert joined[:5] == ["N1", 7, 12, 95, 3600]
    assert joined[5:] == [0, "r:1", 1, "final"]  # its output id: the window applies it once
    assert bolt.coordinator.state(0).get("N1") is None  # nothing left pending


class _SinkTup:
    def __init__(self, *values) -> None:
        self.values = list(values)


def test_the_sink_keeps_the_larger_count_and_counts_rectifications(tmp_path) -> None:
    sink = JoinWindowSink(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    sink.initialize({"elastorm.output_dir": str(tmp_path)}, {"taskid": 9})
    sink.process(_SinkTup("N1", 0, 2, 4, 100, True))
    sink.process(_SinkTup("N1", 0, 1, 5, 60, False))  # older: skipped
    assert sink.windows["N1|0"] == [2, 4, 100, True]
    sink.process(_SinkTup("N1", 0, 2, 4, 100, False))  # the final value of a tentative one
    assert sink.windows["N1|0"] == [2, 4, 100, False] and sink.rectified == 1
    assert sink.tentative_updates == 1 and sum(sink.timeline.values()) == 2


def test_a_restarted_sink_task_reads_its_last_file_back(tmp_path) -> None:
    """Storm restarts a plain bolt empty: the sink resumes from the file it last wrote,
    so a window no update reaches after the restart is not forgotten, and the larger
    count still wins over an older update sent again."""

    def started() -> JoinWindowSink:
        sink = JoinWindowSink(
            input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None
        )
        sink.initialize({"elastorm.output_dir": str(tmp_path)}, {"taskid": 9})
        return sink

    first = started()
    first.process(_SinkTup("N1", 0, 2, 4, 100, True))
    first.process(_SinkTup("N2", 0, 1, 7, 50, False))
    first.process_tick(None)
    again = started()
    assert again.windows == {"N1|0": [2, 4, 100, True], "N2|0": [1, 7, 50, False]}
    assert (again.tentative_updates, sum(again.timeline.values())) == (1, 3)
    again.process(_SinkTup("N1", 0, 1, 5, 60, False))  # older: skipped still
    again.process(_SinkTup("N1", 0, 2, 4, 100, False))
    assert again.windows["N1|0"] == [2, 4, 100, False] and again.rectified == 1


def test_a_keyed_bolt_behind_another_is_downstream_of_it() -> None:
    ops = operator_inputs(
        {"join": ["join_router"], "win": ["win_router"]}, {"join": ["split"], "win": ["join"]}
    )
    assert ops == {"join": ("split",), "win": ("join",)}
    assert downstream_operators(ops, ["join"]) == {"win"}


class _Machine:
    def __init__(self, phase, protocol=None) -> None:
        self.phase, self.protocol, self.tentative = phase, protocol, False


class _Coordinator:
    """Stands in for the task's coordinator: group 0 in a phase the test sets."""

    num_key_groups = 1

    def __init__(self) -> None:
        self.m = _Machine(Phase.REPLICA)

    def machine(self, g):
        return self.m

    def phase(self, g):
        return self.m.phase


class _Unidentified(JoinFlights):
    """The join with a stream without output ids: the replica's shadowed outputs below
    are plain values, numbered by nobody."""

    outputs = [Stream(fields=JOINED_FIELDS)]


def _applied(seq: int, row: int, emit: bool) -> Applied:
    item = DataTuple("r:1", seq, "N1", ["N1", row], 0.0)
    return Applied(key_group=0, item=item, result=[(["N1", row], None)], emit_output=emit)


def test_a_promoted_replica_first_sends_the_outputs_its_owner_had_not_covered(
    monkeypatch, tmp_path, emitted
) -> None:
    bolt = _bolt(monkeypatch, tmp_path, _Unidentified)
    bolt.coordinator = _Coordinator()
    bolt.perform([_applied(1, 10, False), _applied(2, 11, False), _applied(3, 12, False)])
    assert not emitted  # a replica sends nothing
    ack = CheckpointAck(key_group=0, checkpoint=(1, 1), watermarks={"r:1": 2})
    bolt.perform([Send(to_task=3, message=ack)])  # the owner's checkpoint covers 1-2
    bolt.coordinator.m = _Machine(Phase.REPLAYING, Protocol.RESTORE)  # promoted
    bolt.perform([_applied(4, 13, True)])
    assert [v for s, v in emitted if s is None] == [["N1", 12], ["N1", 13]]


def test_a_dropped_replica_forgets_its_outputs(monkeypatch, tmp_path, emitted) -> None:
    bolt = _bolt(monkeypatch, tmp_path, _Unidentified)
    bolt.coordinator = _Coordinator()
    bolt.perform([_applied(1, 10, False)])
    bolt.coordinator.m = _Machine(Phase.IDLE, Protocol.REPLICATE)
    bolt.perform([])
    assert not emitted and not bolt._shadow


def test_the_driver_waits_for_a_sink_that_never_wrote_instead_of_settling(
    tmp_path, monkeypatch
) -> None:
    """chaos join/lose-1, session 28: the sink's Python process had not started 68 s
    after Storm prepared it (load 127); the wait settled 20 s after the spout ended and
    the run reported every flight lost. No sink output is a stall, for the timeout."""
    import json

    import drivers.flights_join as driver_module
    from drivers.flights_join import JoinWindowDriver
    from elastorm.errors import UserError

    (tmp_path / "spout-11.json").write_text(json.dumps({"rows_read": 100, "exhausted": True}))
    monkeypatch.setattr(driver_module, "SETTLE_SECS", 0.5)
    driver = JoinWindowDriver(100)
    driver.expected = type("Ref", (), {"joined": 7})()
    with pytest.raises(UserError, match="not complete"):
        driver.wait(str(tmp_path), 3.0, lambda line: None)


def test_workers_start_without_pandas_or_networkx() -> None:
    """Every worker of the join job imports ``bolts.flights_join`` and every keyed
    worker ``elastorm.storm.keyed_bolt``; pandas (for the reference) and networkx (for
    the Peace schedule, off by default) were most of their start's CPU
    (``bench/worker_imports.py``). Loaded only where used."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, bolts.flights_join, elastorm.storm.keyed_bolt\n"
        "print(sorted(m for m in ('pandas', 'networkx') if m in sys.modules))"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout
