"""The pandas reference, against hand-computed numbers and a plain csv fold."""

from __future__ import annotations

import csv
import io
import zipfile

from test_flights_harness import flight_row, write_csv

from demos.flights_reference import compute_reference, main, minutes_in_year
from demos.flights_schema import default_flights_path


def test_minutes_in_year():
    assert minutes_in_year(2013) == 525_600
    assert minutes_in_year(2012) == 527_040


def test_small_file_by_hand(tmp_path):
    lines = [
        flight_row(tailnum="N1", arr_delay="5", air_time="100"),
        flight_row(tailnum="N1", arr_delay="-2", air_time="40"),
        flight_row(tailnum="N1", arr_delay="NA", air_time="NA"),
        flight_row(tailnum="N2", arr_delay="0", air_time="NA"),
        flight_row(tailnum="N2", arr_delay="9", air_time="60", year="2012"),
        flight_row(tailnum="NA"),
        flight_row(tailnum="N3", air_time="ten"),
    ]
    ref = compute_reference(write_csv(tmp_path / "f.csv", lines))
    assert ref.rows == 7
    assert ref.malformed == {"missing_tailnum": 1, "bad_air_time": 1}
    assert ref.na_arr_delay == 1
    assert ref.forwarded == 4
    assert ref.delay == {("N1", 2013): (3, 2), ("N2", 2013): (0, 1), ("N2", 2012): (9, 1)}
    assert ref.air == {("N1", 2013): (140, 2, 0), ("N2", 2013): (0, 0, 1), ("N2", 2012): (60, 1, 0)}
    assert ref.delayed == 2 and ref.delayed_share == 0.5
    assert dict(ref.arr_delay_by_row) == {0: 5, 1: -2, 3: 0, 4: 9}


def test_rows_with_too_many_or_too_few_fields(tmp_path):
    lines = [
        flight_row(tailnum="N1"),
        flight_row(tailnum="N1") + ",surplus",
        "2013,1,1",
        flight_row(tailnum="N2", time_hour=""),
        flight_row(tailnum="N1", arr_delay="1"),
    ]
    ref = compute_reference(write_csv(tmp_path / "f.csv", lines))
    assert ref.rows == 5
    assert ref.malformed == {"bad_row_length": 2, "bad_time_hour": 1}
    assert ref.delay == {("N1", 2013): (12, 2)}
    assert dict(ref.arr_delay_by_row) == {0: 11, 4: 1}


def test_limit_matches_a_plain_fold_of_the_real_file():
    limit = 2000
    ref = compute_reference(limit=limit)
    with zipfile.ZipFile(default_flights_path()) as z, z.open("flights.csv") as raw:
        reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8"))
        rows = [r for _, r in zip(range(limit), reader, strict=False)]
    assert ref.rows == limit
    delay: dict = {}
    missing = na = 0
    for r in rows:
        if r["tailnum"] == "NA":
            missing += 1
        elif r["arr_delay"] == "NA":
            na += 1
        else:
            k = (r["tailnum"], int(r["year"]))
            s, n = delay.get(k, (0, 0))
            delay[k] = (s + int(r["arr_delay"]), n + 1)
    assert missing > 0 and na > 0
    assert ref.malformed == {"missing_tailnum": missing}
    assert ref.na_arr_delay == na
    assert ref.delay == delay


def test_cli_prints_summary(capsys, tmp_path):
    path = write_csv(tmp_path / "f.csv", [flight_row()])
    assert main(["--path", path]) == 0
    out = capsys.readouterr().out
    assert '"forwarded": 1' in out and '"planes": 1' in out
