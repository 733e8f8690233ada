"""The join-and-window job's pure parts: its operator functions and a pandas reference.

The flights rows are split into two keyed streams by plane (``tailnum``): arrivals
(``row, arr_delay``) and air times (``row, air_time, ts``). A correlated-input
operator joins them by plane on the row id (a flight joins when both its arrival
delay and its air time are known), and a tumbling-window operator sums, per plane
and UTC day (``ts`` is the row's scheduled hour), the joined flights, their arrival
delays and their air minutes. Two keyed operators in a row, so a restore of the
join makes the window's outputs tentative (Su & Zhou 2016).

The reference reads the file with pandas and aggregates with ``groupby``; it shares
only the spout's row rules (``flights_schema``).
"""

from __future__ import annotations

from dataclasses import dataclass

from demos.flights_schema import NA_TOKENS, default_flights_path, parse_event_time

DAY_SECS = 86_400
ARRIVAL, AIR = "arr", "air"  # the join's two sides


def split_flight(row_no: int, tailnum: str, arr_delay: int | None, air_time: int | None, ts: int):
    """A row as its two sides: ``(arrival or None, air or None)``; an NA side is None
    (that flight never joins).

    >>> split_flight(7, "N1", 3, None, 60)
    (['N1', 7, 3], None)
    """
    arrival = None if arr_delay is None else [tailnum, row_no, arr_delay]
    air = None if air_time is None else [tailnum, row_no, air_time, ts]
    return arrival, air


def join_side(pending: dict[str, list], side: str, row_no: int, rest: list):
    """Symmetric hash join of one plane's sides on the row id.

    ``pending`` maps a row id (str) to ``[side, *values]`` not yet joined. Returns the
    new ``pending`` (a copy when changed) and the joined ``[arr_delay, air_time, ts]``
    or None. A side seen twice for one row keeps the first (a replay repeats it).

    >>> p, out = join_side({}, "arr", 4, [12])
    >>> join_side(p, "air", 4, [95, 3600])
    ({}, [12, 95, 3600])
    """
    row = str(row_no)
    other = pending.get(row)
    if other is None or other[0] == side:
        if other is not None:
            return pending, None
        return {**pending, row: [side, *rest]}, None
    left = {k: v for k, v in pending.items() if k != row}
    arrival, air = (other[1:], rest) if side == AIR else (rest, other[1:])
    return left, [arrival[0], air[0], air[1]]


def window_of(ts: int) -> int:
    """The tumbling window (a UTC day) of event time ``ts``: its start, in seconds."""
    return ts - ts % DAY_SECS


def add_to_window(totals: list[int] | None, arr_delay: int, air_time: int) -> list[int]:
    """``[flights, arr_delay sum, air minutes]`` of a window with one joined flight more."""
    flights, delay, air = totals or (0, 0, 0)
    return [flights + 1, delay + arr_delay, air + air_time]


@dataclass(frozen=True)
class JoinWindowReference:
    """What the job must produce: ``windows[(tailnum, day start)] = (flights, delay
    sum, air minutes)`` over the flights with both sides, and ``joined`` = their count."""

    rows: int
    joined: int
    windows: dict[tuple[str, int], tuple[int, int, int]]


def compute_join_reference(path: str | None = None, limit: int | None = None):
    """The expected windows, by pandas over the first ``limit`` rows of ``path``.

    pandas is imported here, not with the module: every worker of the join job imports
    this module for its operator functions, and pandas was half of each one's start
    (1.6 s CPU of 2.9 s, ``bench/worker_imports.py``)."""
    import pandas as pd

    from demos.flights_reference import _number, _read

    df = _read(path or default_flights_path(), limit)

    def known(text: str) -> bool:  # an integer, not NA (a Series of them turns float)
        return isinstance(_number(text), int)

    ok = (
        ~df["tailnum"].isin(NA_TOKENS)
        & df["arr_delay"].map(known).astype(bool)
        & df["air_time"].map(known).astype(bool)
    )
    arr, air = df["arr_delay"][ok].map(int), df["air_time"][ok].map(int)
    hours = {t: parse_event_time(t) for t in df.loc[ok, "time_hour"].unique()}
    joined = pd.DataFrame(
        {
            "tailnum": df.loc[ok, "tailnum"],
            "day": df.loc[ok, "time_hour"].map(hours).map(window_of),
            "arr": arr.astype("int64"),
            "air": air.astype("int64"),
        }
    )
    sums = joined.groupby(["tailnum", "day"]).agg(
        flights=("arr", "size"), delay=("arr", "sum"), air=("air", "sum")
    )
    windows = {
        (str(t), int(d)): (int(r.flights), int(r.delay), int(r.air))
        for (t, d), r in sums.iterrows()
    }
    return JoinWindowReference(rows=len(df), joined=len(joined), windows=windows)
