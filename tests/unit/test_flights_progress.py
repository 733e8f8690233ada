"""Progress lines of a running flights job print counts of rows and flights, never a
keyed task's incarnation-stamped ``seen`` (no servers: hand-written output files)."""

from __future__ import annotations

import json
from pathlib import Path

from demos.flights_results import FlightsResult, progress_line
from drivers.flights import FlightsDriver
from drivers.flights_elastic import ElasticFlightsDriver

INCARNATION = 10**12  # a keyed task sends seen = incarnation * 10**12 + tuples


def _write(out: Path, *, keyed_seen: bool) -> None:
    """A complete run of 5 rows: 1 NA delay, 4 flights of 2 planes, 2 samples."""
    (out / "counts").mkdir(parents=True)
    files = {
        "spout-1.json": {"rows_read": 5, "exhausted": True},
        "counts/spout-1.json": {"role": "spout", "out": {"default": 5}},
        "counts/op1-2.json": {
            "role": "op1",
            "tuples_in": 5,
            "out": {"default": 4, "sample": 2, "errors": 1},
            "errors": {"na_arr_delay": 1},
        },
        "sink-9.json": {
            "seen": {
                # Two op2 tasks; keyed ones stamp their incarnation (1) on seen.
                "op2": {"3": INCARNATION + 3, "4": INCARNATION + 1}
                if keyed_seen
                else {"3": 3, "4": 1},
                "op3": {"5": 4},
                "op4": {"6": 2},
            },
            "totals": {
                "op2": {"N1": {"2013": [7, 3]}, "N2": {"2013": [-2, 1]}},
                "op3": {"N1": {"2013": [300, 2, 1]}, "N2": {"2013": [90, 1, 0]}},
                "op4": {"*": {"2013": [2, 1]}},
            },
            "errors": {"op1": {"na_arr_delay": 1}},
            "sample_ids": [0, 3],
        },
    }
    for name, data in files.items():
        (out / name).write_text(json.dumps(data))


EXPECTED = (
    "spout read 5 rows; op1 forwarded 4 of 5; sink totals: op2 4 and op3 4 of 4 flights, "
    "op4 2 of 2 samples; complete"
)


def test_progress_line_counts_flights_not_stamped_seen(tmp_path) -> None:
    from demos.flights_results import read_results

    _write(tmp_path, keyed_seen=True)
    result = read_results(str(tmp_path))
    assert result.seen("op2") == 2 * INCARNATION + 4  # the sum that used to be printed
    line = progress_line(result, [])
    assert line == EXPECTED
    assert str(INCARNATION)[:4] not in line


def test_progress_line_names_the_first_unmet_condition() -> None:
    result = FlightsResult(output_dir="out")
    line = progress_line(result, ["no spout stats file yet", "no sink file yet"])
    assert line == (
        "spout read 0 rows; op1 forwarded 0 of 0; sink totals: op2 0 and op3 0 of 0 flights, "
        "op4 0 of 0 samples; no spout stats file yet"
    )


def test_elastic_driver_progress_is_counts(tmp_path) -> None:
    _write(tmp_path, keyed_seen=True)
    lines: list[str] = []
    ElasticFlightsDriver(script=()).wait(str(tmp_path), timeout=5, progress=lines.append)
    assert lines == [EXPECTED]


def test_plain_driver_progress_is_counts(tmp_path) -> None:
    _write(tmp_path, keyed_seen=False)
    lines: list[str] = []
    FlightsDriver().wait(str(tmp_path), timeout=5, progress=lines.append)
    assert lines == [EXPECTED]


def test_a_scripted_migration_refused_as_already_moving_is_asked_again(monkeypatch) -> None:
    """CI, session 24: the controller began a move of the scripted group itself between
    the driver's look and its request, and refused the request ("already moving"); the
    run failed as not done as asked. The driver asks again once that move is over."""
    import elastorm.runtime.migrate as migrate_module
    from elastorm.controller.requests import MigrationRequest, RequestState
    from elastorm.core.messages import Protocol

    def answer(state: RequestState, detail: str = "") -> MigrationRequest:
        return MigrationRequest(
            operator="sum_delays", key_group=3, target="holder", protocol=Protocol.CPAL,
            state=state, protocol_used=Protocol.CPAL if state is RequestState.DONE else None,
            detail=detail, times={"started": 1.0, "done": 1.5},
        )  # fmt: skip

    answers = [
        answer(RequestState.REFUSED, "key group 3 is already moving"),
        answer(RequestState.DONE),
    ]
    looks = []
    monkeypatch.setattr(migrate_module, "wait_until_movable", lambda *a, **k: looks.append(1))
    monkeypatch.setattr(migrate_module, "request_migration", lambda *a, **k: answers.pop(0))
    driver = ElasticFlightsDriver(script=())
    driver._client = object()
    done = driver._migrate(0, "cpal")
    assert done["state"] == "done" and done["used"] == "cpal" and len(looks) == 2
