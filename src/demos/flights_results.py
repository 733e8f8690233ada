"""Read, wait for and check the flights job's output directory.

Files (all replaced atomically by the components, see ``bolts.common``):

- ``spout-<task>.json``: the spout's progress (``rows_read``, ``emitted``,
  ``malformed``, ``exhausted``);
- ``counts/<component>-<task>.json``: every task's counters (``role``,
  ``tuples_in``, ``out`` per stream, ``errors`` per reason, ``extra``);
- ``sink-<task>.json``: the results sink (totals, ``seen``, errors, sample ids).

**Complete** (``completeness`` returns no unmet condition) means, all read at
the same moment:

1. every spout task reports ``exhausted``;
2. op1's tasks together received every tuple the spout emitted
   (sum of op1 ``tuples_in`` == sum of spout ``out.default``);
3. for op2 and op3: the ``seen`` values applied by the sink, summed over the
   sending tasks, equal the tuples op1 emitted on ``default``; for op4 they equal
   op1's ``sample`` emits and no op1 task holds a sample not yet sent;
4. for every role, the errors the sink received equal the errors that role
   counted as emitted on its ``errors`` stream.

Every update carries the totals of all keys changed up to its ``seen``, so (3)
means the sink holds the final totals. Without acking a lost tuple shows up as a
condition that never holds, and ``wait_until_complete`` times out naming it.
"""

from __future__ import annotations

import glob
import json
import math
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from demos.flights_reference import FlightsReference, minutes_in_year

ROLES = ("spout", "op1", "op2", "op3", "op4", "sink")
OPERATOR_NAMES = {
    "spout": "FlightsSpout",
    "op1": "ExtractDelays",
    "op2": "SumDelays",
    "op3": "AirShare",
    "op4": "SampledDelayShare",
    "sink": "ResultsSink",
}
DEFAULT_Z = 4.0
DEFAULT_MIN_SAMPLES = 30


class IncompleteRunError(TimeoutError):
    """The job's output did not become complete in time; ``result`` is the last read."""

    def __init__(self, message: str, result: FlightsResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class FlightsResult:
    """Everything the job wrote to ``output_dir``, read at one moment."""

    output_dir: str
    spouts: list[dict[str, Any]] = field(default_factory=list)
    counts: list[dict[str, Any]] = field(default_factory=list)
    sinks: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def tasks(self, role: str) -> list[dict[str, Any]]:
        return [c for c in self.counts if c.get("role") == role]

    def tuples_in(self, role: str) -> int:
        return sum(c.get("tuples_in", 0) for c in self.tasks(role))

    def out(self, role: str, stream: str = "default") -> int:
        return sum(c.get("out", {}).get(stream, 0) for c in self.tasks(role))

    def errors(self, role: str) -> dict[str, int]:
        """Errors counted by the tasks of ``role`` (from their counts files)."""
        return _sum_dicts(c.get("errors", {}) for c in self.tasks(role))

    def sink_errors(self, role: str) -> dict[str, int]:
        """Errors of ``role`` that reached the sink on the errors streams."""
        return _sum_dicts(s.get("errors", {}).get(role, {}) for s in self.sinks)

    def seen(self, role: str) -> int:
        """Input tuples of ``role`` whose effect the sink has applied (all tasks).

        Only for plain operators: a keyed task's ``seen`` leads with its incarnation
        (``incarnation * 10**12 + tuples``, so a restarted task's updates are not
        stale), and its sum is no count; use :meth:`flights_in_totals` there.
        """
        return sum(sum(s.get("seen", {}).get(role, {}).values()) for s in self.sinks)

    def flights_in_totals(self, role: str) -> int:
        """Flights the sink's ``role`` totals account for (op2: ``flights``; op3:
        with and without air time; op4: samples), whatever the senders' ``seen``."""
        columns = {"op2": (1,), "op3": (1, 2), "op4": (0,)}[role]
        return sum(v[c] for v in self.totals(role).values() for c in columns)

    def totals(self, role: str) -> dict[tuple[str, int], tuple[int, ...]]:
        """Latest totals of ``role`` at the sink, by ``(key, year)``."""
        merged: dict[tuple[str, int], tuple[int, ...]] = {}
        for sink in self.sinks:
            for key, by_year in sink.get("totals", {}).get(role, {}).items():
                for year, values in by_year.items():
                    merged[key, int(year)] = tuple(values)
        return merged

    def still_tentative(self, role: str) -> list[str]:
        """Keys whose total at the sink came from a tentative update (Su & Zhou 2016:
        made while state it depends on was recovering) and was not rectified yet."""
        return sorted({k for s in self.sinks for k in s.get("tentative", {}).get(role, [])})

    def tentative_updates(self, role: str) -> int:
        """Tentative key updates of ``role`` the sink received in the whole run."""
        return sum(s.get("tentative_updates", {}).get(role, 0) for s in self.sinks)

    @property
    def sample_ids(self) -> list[int]:
        return [i for s in self.sinks for i in s.get("sample_ids", [])]

    @property
    def exhausted(self) -> bool:
        return bool(self.spouts) and all(s.get("exhausted") for s in self.spouts)

    def spout_total(self, name: str) -> int:
        return sum(s.get(name, 0) for s in self.spouts)

    def malformed_by_reason(self) -> dict[str, int]:
        return _sum_dicts(s.get("malformed_by_reason", {}) for s in self.spouts)

    def planes(self) -> set[str]:
        """Planes with op2 totals (any year)."""
        return {key for key, _ in self.totals("op2")}

    def na_arr_delay_by_plane(self) -> dict[str, int] | None:
        """op1's NA ``arr_delay`` rows per plane, as the sink counted them; ``None``
        when no sink reports them (output of a sink older than this field)."""
        found = [s["na_arr_delay_by_plane"] for s in self.sinks if "na_arr_delay_by_plane" in s]
        return _sum_dicts(found) if found else None

    def na_only_planes(self) -> list[str] | None:
        """Planes whose every (valid) flight had an NA ``arr_delay``: op1 sent
        them all to ``errors``, so they have no op2/op3 totals. ``None`` if unknown."""
        by_plane = self.na_arr_delay_by_plane()
        return None if by_plane is None else sorted(set(by_plane) - self.planes())


def _sum_dicts(dicts) -> dict[str, int]:
    total: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            total[k] = total.get(k, 0) + v
    return total


def _load(path: str, since: float | None, result: FlightsResult) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        result.unreadable.append(path)
        return None
    if since is not None and data.get("written_at", 0) < since:
        return None
    return data


def read_results(output_dir: str, since: float | None = None) -> FlightsResult:
    """Read the output directory; files written before ``since`` (epoch s) are ignored."""
    result = FlightsResult(output_dir=output_dir)
    for pattern, target in (
        ("spout-*.json", result.spouts),
        (os.path.join("counts", "*.json"), result.counts),
        ("sink-*.json", result.sinks),
    ):
        for path in sorted(glob.glob(os.path.join(output_dir, pattern))):
            data = _load(path, since, result)
            if data is not None:
                target.append(data)
    return result


def progress_line(result: FlightsResult, unmet: list[str]) -> str:
    """One line on a running job, every number a count of rows or flights:
    rows the spout read, what op1 forwarded, the flights the sink's op2/op3 totals
    cover and op4's samples, then the first unmet condition (or ``complete``)."""
    forwarded, samples = result.out("op1"), result.out("op1", "sample")
    return (
        f"spout read {result.spout_total('rows_read')} rows; "
        f"op1 forwarded {forwarded} of {result.tuples_in('op1')}; "
        f"sink totals: op2 {result.flights_in_totals('op2')} and "
        f"op3 {result.flights_in_totals('op3')} of {forwarded} flights, "
        f"op4 {result.flights_in_totals('op4')} of {samples} samples; "
        + (unmet[0] if unmet else "complete")
    )


def completeness(
    result: FlightsResult, keyed: frozenset[str] = frozenset(), *, replayed: bool = False
) -> list[str]:
    """Conditions (see the module docstring) not yet met; empty when complete.

    For a role in ``keyed`` (an elastic operator whose key groups move between
    tasks, so per-task ``seen`` counts include replays) the sink must instead hold
    totals whose flight counts add up to what op1 forwarded, and at least the errors
    its tasks' counters say they sent (a killed task's counters restart from 0 while
    the sink keeps what it sent before: waiting for equality there waited forever).

    ``replayed``: the spout or op1 may have been restarted and replayed rows. Every
    count still holds (each row is counted once: the spout by its furthest row,
    op1 from its restart point, the sink and op3/op4 drop replayed rows), except
    op1's samples: they are taken by the clock, so a replay does not take the same
    ones; then only "no sample left unsent" is required of op4.
    """
    unmet: list[str] = []
    if not result.spouts:
        unmet.append("no spout stats file yet")
    elif not result.exhausted:
        unmet.append(f"spout not exhausted (rows read: {result.spout_total('rows_read')})")
    if not result.sinks:
        unmet.append("no sink file yet")
    emitted = result.out("spout")
    if result.tuples_in("op1") != emitted:
        unmet.append(f"op1 received {result.tuples_in('op1')} of {emitted} spout tuples")
    forwarded = result.out("op1")
    for role in ("op2", "op3"):
        if role in keyed:
            flights = result.flights_in_totals(role)
            if flights != forwarded:
                unmet.append(f"sink has {role} totals for {flights} of {forwarded} flights")
            if left := result.still_tentative(role):
                unmet.append(f"sink holds {len(left)} tentative {role} totals")
        elif result.seen(role) != forwarded:
            unmet.append(f"sink has {role} totals for {result.seen(role)} of {forwarded} tuples")
    samples = result.out("op1", "sample")
    if not replayed and result.seen("op4") != samples:
        unmet.append(f"sink has op4 totals for {result.seen('op4')} of {samples} samples")
    pending = sum(1 for c in result.tasks("op1") if c.get("extra", {}).get("pending_sample"))
    if pending:
        unmet.append(f"{pending} op1 task(s) hold a sample not yet sent")
    for role in ROLES[:-1]:
        sent, got = result.out(role, "errors"), sum(result.sink_errors(role).values())
        # A keyed task killed and restarted starts its counters again, while the sink
        # keeps the errors its earlier life sent: there the sink may hold more.
        if got < sent or (got > sent and role not in keyed):
            unmet.append(f"sink received {got} of {sent} {role} errors")
    return unmet


def wait_until_complete(
    output_dir: str,
    timeout: float,
    poll: float = 0.5,
    progress_callback: Callable[[FlightsResult, list[str]], None] | None = None,
    *,
    since: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    keyed: frozenset[str] = frozenset(),
    replayed: bool = False,
) -> FlightsResult:
    """Poll ``output_dir`` until ``completeness`` is empty; return that result.

    ``progress_callback(result, unmet)`` is called after every poll. Raises
    ``IncompleteRunError`` (a ``TimeoutError``) naming the unmet conditions when
    ``timeout`` seconds pass first.
    """
    deadline = clock() + timeout
    while True:
        result = read_results(output_dir, since)
        unmet = completeness(result, keyed, replayed=replayed)
        if progress_callback is not None:
            progress_callback(result, unmet)
        if not unmet:
            return result
        if clock() >= deadline:
            raise IncompleteRunError(
                f"flights job incomplete after {timeout:g}s: " + "; ".join(unmet), result
            )
        sleep(poll)


@dataclass(frozen=True)
class Check:
    """One check: ``ok`` is True, False, or None when it could not be judged."""

    name: str
    ok: bool | None
    detail: str


@dataclass
class CheckReport:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """True when no check failed (a check that could not be judged is not a failure)."""
        return all(c.ok is not False for c in self.checks)

    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]


def _equal(name: str, got: Any, want: Any) -> Check:
    return Check(name, got == want, f"got {got}, expected {want}")


def _compare_totals(
    name: str, got: dict[tuple[str, int], tuple[int, ...]], want: dict[tuple[str, int], tuple]
) -> Check:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(want) & set(got) if tuple(got[k]) != tuple(want[k]))
    if not (missing or extra or wrong):
        return Check(name, True, f"all {len(want)} (plane, year) totals match exactly")
    parts = [f"{len(wrong)} wrong, {len(missing)} missing, {len(extra)} unexpected"]
    parts += [f"{k}: got {got[k]}, expected {tuple(want[k])}" for k in wrong[:5]]
    parts += [f"missing {k}" for k in missing[:3]] + [f"unexpected {k}" for k in extra[:3]]
    return Check(name, False, "; ".join(parts))


def _sampled_share_checks(
    result: FlightsResult, reference: FlightsReference, z: float, min_samples: int
) -> list[Check]:
    """op4: exact against the sampled rows, statistical against the whole file."""
    op4 = result.totals("op4")
    samples = sum(v[0] for v in op4.values())
    delayed = sum(v[1] for v in op4.values())
    ids = result.sample_ids
    unknown = [i for i in ids if i not in reference.arr_delay_by_row]
    expect_delayed = sum(1 for i in ids if reference.arr_delay_by_row.get(i, 0) > 0)
    exact_ok = samples == len(ids) and not unknown and delayed == expect_delayed
    checks = [
        Check(
            "op4 samples counted exactly",
            exact_ok,
            f"{samples} samples ({len(ids)} ids, {len(unknown)} not forwarded rows), "
            f"{delayed} delayed, expected {expect_delayed} from the sampled rows",
        )
    ]
    p = reference.delayed_share
    if samples < min_samples or math.isnan(p):
        checks.append(
            Check(
                "op4 sampled delayed share",
                None,
                f"not judged: {samples} samples < {min_samples}",
            )
        )
        return checks
    share = delayed / samples
    tolerance = z * math.sqrt(p * (1 - p) / samples)
    checks.append(
        Check(
            "op4 sampled delayed share",
            abs(share - p) <= tolerance,
            f"{share:.4f} over {samples} samples vs {p:.4f} over all "
            f"{reference.forwarded} rows; tolerance {z:g} sigma = {tolerance:.4f}",
        )
    )
    return checks


def _na_only_planes_check(result: FlightsResult, reference: FlightsReference) -> Check:
    name = "planes whose every flight has an NA arr_delay (no op2/op3 totals)"
    got = result.na_only_planes()
    if got is None:
        return Check(name, None, "not judged: the sink does not count NA rows per plane")
    want = list(reference.na_only_planes)
    return Check(name, got == want, f"got {len(got)} {_names(got)}, expected {len(want)}")


def _names(planes: list[str], at_most: int = 10) -> str:
    """``(A, B, ... +N more)`` or ``""`` when there are none."""
    if not planes:
        return ""
    more = f" +{len(planes) - at_most} more" if len(planes) > at_most else ""
    return f"({', '.join(planes[:at_most])}{more})"


def compare(
    result: FlightsResult,
    reference: FlightsReference,
    *,
    z: float = DEFAULT_Z,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    tolerated: Mapping[str, Collection[str]] | None = None,
) -> CheckReport:
    """Check the job's output against the pandas reference.

    op2 and op3 totals must match for every (plane, year) exactly, and so must
    the row, malformed and NA counts. op4 cannot be exact against the file (it
    sees a random sample), so it gets two checks: exact against the rows it was
    sent (by id), and its share of delayed flights within ``z`` binomial standard
    errors of the file's share. With ``z = 4`` an unbiased sample of independent
    rows fails with probability about 6e-5; samples are taken per 200 ms, not per
    row, so a rate that varies through the run can bias them slightly. Fewer than
    ``min_samples`` samples: not judged. ``tolerated`` names error reasons per role
    that are expected in this run (e.g. a restarted task rejecting tuples that were
    in flight to its previous life; they are replayed from upstream buffers).
    """
    tolerated = tolerated or {}
    expected_errors = {"na_arr_delay": reference.na_arr_delay} if reference.na_arr_delay else {}
    checks = [
        _equal("spout rows read", result.spout_total("rows_read"), reference.rows),
        _equal("spout malformed rows by reason", result.malformed_by_reason(), reference.malformed),
        _equal(
            "sink got the spout's malformed rows", result.sink_errors("spout"), reference.malformed
        ),
        _equal("op1 NA arr_delay rows", result.errors("op1"), expected_errors),
        _equal("sink got op1's NA rows", result.sink_errors("op1"), expected_errors),
        _equal("op1 tuples forwarded", result.out("op1"), reference.forwarded),
        _equal(
            "no errors in op2-op4" + (f" (tolerated: {dict(tolerated)})" if tolerated else ""),
            {
                r: errors
                for r in ("op2", "op3", "op4")
                if (
                    errors := {
                        k: v for k, v in result.errors(r).items() if k not in tolerated.get(r, ())
                    }
                )
            },
            {},
        ),
        _compare_totals(
            "op2 delay sum and flights per plane-year", result.totals("op2"), reference.delay
        ),
        _compare_totals("op3 air minutes per plane-year", result.totals("op3"), reference.air),
        _equal(
            "no total left tentative at the sink",
            {r: keys for r in ("op2", "op3", "op4") if (keys := result.still_tentative(r))},
            {},
        ),
        _na_only_planes_check(result, reference),
    ]
    checks += _sampled_share_checks(result, reference, z, min_samples)
    return CheckReport(checks)


def _format_counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v) or "-"


def format_summary(result: FlightsResult, report: CheckReport | None = None) -> str:
    """Per-operator counts (and the check against pandas, if given) as text."""
    lines = [
        f"flights job output: {result.output_dir}",
        f"{'role':<5} {'operator':<18} {'tasks':>5} {'in':>9} {'out':>9}  other streams / errors",
    ]
    for role in ROLES:
        tasks = result.tasks(role)
        out = _sum_dicts(t.get("out", {}) for t in tasks)
        default = out.pop("default", 0)
        errors = _format_counts(result.errors(role))
        lines.append(
            f"{role:<5} {OPERATOR_NAMES[role]:<18} {len(tasks):>5} {result.tuples_in(role):>9} "
            f"{default:>9}  out: {_format_counts(out)}; errors: {errors}"
        )
    planes = result.planes()
    op4 = result.totals("op4")
    samples = sum(v[0] for v in op4.values())
    share = sum(v[1] for v in op4.values()) / samples if samples else math.nan
    air = result.totals("op3")
    air_share = (
        sum(v[0] / minutes_in_year(y) for (_, y), v in air.items()) / len(air) if air else math.nan
    )
    lines.append(
        f"spout: {result.spout_total('rows_read')} rows read, "
        f"{result.spout_total('malformed')} malformed, exhausted={result.exhausted}; "
        f"sink: {len(planes)} planes, mean air share {air_share:.4f}, "
        f"sampled delayed share {share:.4f} ({samples} samples)"
    )
    na_rows = result.sink_errors("op1").get("na_arr_delay", 0)
    by_plane = result.na_arr_delay_by_plane()
    only_na = result.na_only_planes()
    if by_plane is not None:
        lines.append(
            f"NA arr_delay: {na_rows} rows of {len(by_plane)} planes, left out of op2-op4; "
            f"{len(only_na)} planes had only such flights, so they have no op2/op3 totals"
            + (f": {', '.join(only_na[:10])}" if only_na else "")
            + (f" +{len(only_na) - 10} more" if len(only_na) > 10 else "")
        )
    if report is not None:
        lines.append(f"check against pandas: {'PASS' if report.ok else 'FAIL'}")
        for check in report.checks:
            mark = {True: "ok  ", False: "FAIL", None: "n/a "}[check.ok]
            lines.append(f"  [{mark}] {check.name}: {check.detail}")
    return "\n".join(lines)
