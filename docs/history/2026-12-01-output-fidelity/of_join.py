# ruff: noqa: E501  (table-printing lines of a one-off analysis)
"""Output Fidelity of the join-and-window job (topologies/flights_join.py) as the
controller models it and as the runtime actually routes it.  Pure Python, seconds.

    PYTHONPATH=src .venv/bin/python docs/history/2026-12-01-output-fidelity/of_join.py
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
import zlib
from collections import Counter
from pathlib import Path

from demos.flights_schema import default_flights_path
from elastorm.replication.model import InputKind, Operator, Stream, TaskGraph, output_fidelity
from elastorm.replication.planners import dynamic_programming, structure_aware

HERE = Path(__file__).resolve().parent

GROUPS = 20
# owners at the kill in every arm of docs/raw/replication_join_f611a08.jsonl
OWN = {
    9: [g for g in range(GROUPS) if g % 3 == 0],  # node0 (join 9, window 2)
    10: [g for g in range(GROUPS) if g % 3 == 1],  # node1 (join 10, window 3)
    11: [g for g in range(GROUPS) if g % 3 == 2],
}  # node2 (join 11, window 4)
WIN = {9: 2, 10: 3, 11: 4}


def J(t):
    return f"join_flights:{t}"


def W(t):
    return f"daily_windows:{t}"


def group_shares(limit=36_000, lo=0, hi=None):
    """Share of joined flights per key group (crc32(tailnum) % 20) in rows [lo, hi)."""
    hi = hi or limit
    with zipfile.ZipFile(default_flights_path()) as z:
        name = [n for n in z.namelist() if n.endswith(".csv")][0]
        rows = csv.reader(io.TextIOWrapper(z.open(name), encoding="utf-8"))
        head = next(rows)
        i_t, i_a, i_r = head.index("tailnum"), head.index("air_time"), head.index("arr_delay")
        c = Counter()
        for n, row in enumerate(rows):
            if n >= hi:
                break
            if n < lo or row[i_t] in ("", "NA") or row[i_a] in ("", "NA") or row[i_r] in ("", "NA"):
                continue
            c[zlib.crc32(row[i_t].encode()) % GROUPS] += 1
    tot = sum(c.values())
    return {g: c[g] / tot for g in range(GROUPS)}, tot


def graphs(share, join_kind=InputKind.CORRELATED):
    rate = {
        t: sum(share[g] for g in gs) for t, gs in OWN.items()
    }  # same for join t and window WIN[t]
    ops_ = (
        Operator(name="flights_spout", tasks=("flights_spout",)),
        Operator(name="join_flights", tasks=tuple(J(t) for t in OWN), kind=join_kind),
        Operator(name="daily_windows", tasks=tuple(W(WIN[t]) for t in OWN)),
    )
    src = tuple(Stream(source="flights_spout", target=J(t), rate=rate[t]) for t in OWN)
    # what running_graph builds: every join task feeds every window task, in proportion
    full = TaskGraph(
        operators=ops_,
        streams=src
        + tuple(
            Stream(source=J(u), target=W(WIN[t]), rate=rate[t] * rate[u] / sum(rate.values()))
            for t in OWN
            for u in OWN
        ),
    )
    # what the routers do: both operators keyed by tailnum, crc32 % 20, same owners
    aligned = TaskGraph(
        operators=ops_,
        streams=src + tuple(Stream(source=J(t), target=W(WIN[t]), rate=rate[t]) for t in OWN),
    )
    return full, aligned


ARMS = {  # failed tasks after the kill of nodes 1 and 2, by the replicas started
    "none": {J(10), J(11), W(3), W(4)},
    "planned f611a08 {w3,j10}": {J(11), W(4)},
    "planned bfbe70a {w4,j10}": {J(11), W(3)},
    "all": set(),
}
MEASURED_5S = {"none": 0.886, "planned f611a08 {w3,j10}": 0.973, "all": 0.798}
PUBLISHED = {
    "none": 0.108,
    "planned f611a08 {w3,j10}": 0.352,
    "planned bfbe70a {w4,j10}": 0.667,
    "all": 1.0,
}

if __name__ == "__main__":
    out = {}
    for _label, (_lo, _hi) in (
        {
            "equal groups": None,
            "rows 0-36000": (0, 36_000),
            "rows 10800 +-3000": (7_800, 13_800),
        }.items()
        if False
        else []
    ):
        pass
    cases = {"equal groups (7/7/6 of 20)": ({g: 1 / GROUPS for g in range(GROUPS)}, None)}
    s, n = group_shares(36_000)
    cases["flights rows 0-36000"] = (s, n)
    s, n = group_shares(36_000, 7_800, 13_800)
    cases["rows 7800-13800 (around the kill)"] = (s, n)
    for case, (share, n) in cases.items():
        full, aligned = graphs(share)
        full_ind, _ = graphs(share, InputKind.INDEPENDENT)
        print(f"\n== rates: {case}" + (f" ({n} joinable flights)" if n else ""))
        print("   node shares:", {t: round(sum(share[g] for g in gs), 3) for t, gs in OWN.items()})
        print(
            f"   {'arm':<28} {'full (ctl)':>10} {'full, join indep.':>17} {'aligned':>8} {'published':>9} {'meas. 5 s':>9}"
        )
        for arm, failed in ARMS.items():
            row = (
                output_fidelity(full, failed),
                output_fidelity(full_ind, failed),
                output_fidelity(aligned, failed),
            )
            out.setdefault(case, {})[arm] = row
            print(
                f"   {arm:<28} {row[0]:>10.3f} {row[1]:>17.3f} {row[2]:>8.3f}"
                f" {PUBLISHED.get(arm, float('nan')):>9.3f} {MEASURED_5S.get(arm, float('nan')):>9.3f}"
            )
        keyed = frozenset(t for t in full.tasks if ":" in t)
        zone = frozenset({J(10), J(11), W(3), W(4)})
        for gname, g in (("full", full), ("aligned", aligned)):
            for sname, scen in (("worst case (all keyed)", keyed), ("zone nodes 1-2", zone)):
                plan = structure_aware(g, 2, scen)
                dp = dynamic_programming(g, 2, scen)
                real = output_fidelity(aligned, zone - plan)
                print(
                    f"   plan budget 2 on {gname:<7} graph, scenario {sname:<22}: SA {sorted(plan)} DP {sorted(dp)}"
                    f" -> OF at runtime (aligned, nodes 1-2 lost) {real:.3f}"
                )
    json.dump(
        {c: {a: list(v) for a, v in d.items()} for c, d in out.items()},
        open(HERE / "of_join.json", "w"),
        indent=1,
    )
