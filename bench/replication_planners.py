"""Partially active replication planners compared (Su & Zhou 2016, Figs. 13-14 in spirit).

    .venv/bin/python bench/replication_planners.py            # full run (a few minutes)
    .venv/bin/python bench/replication_planners.py --quick    # fewer topologies

Every planner plans for the paper's worst case (every task fails; the replicas
survive) on seeded random topologies from ``random_topology``:

1. small topologies, where the dynamic-programming planner (DP) is affordable:
   Output Fidelity against the replication budget for DP, Structure-Aware, Greedy
   and random placement;
2. larger topologies (structured / full, with and without joins, as in Fig. 14):
   the same without DP;
3. planning time against topology size;
4. tiny topologies: how often DP equals the brute-force optimum;
5. a fault zone fails instead of everything: plans made for that scenario against
   plans made for the worst case, scored under the zone's failure.

Prints Markdown tables, and writes every measurement as JSON plus a plot.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from elastorm.replication.generator import random_topology
from elastorm.replication.mctrees import mc_trees
from elastorm.replication.model import (
    ReplicationModelError,
    TaskGraph,
    output_fidelity,
    tasks_on,
)
from elastorm.replication.planners import (
    brute_force,
    dynamic_programming,
    greedy,
    random_plan,
    structure_aware,
)

ROOT = Path(__file__).resolve().parents[1]
RATIOS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8]
#: DP is skipped where the MC-trees exceed this (its cost grows as |M|^k).
DP_TREE_LIMIT = 64

PLANNERS: dict[str, Callable[[TaskGraph, int, int], frozenset[str]]] = {
    "DP": lambda g, k, seed: dynamic_programming(g, k, limit=DP_TREE_LIMIT),
    "Structure-Aware": lambda g, k, seed: structure_aware(g, k),
    "Greedy": lambda g, k, seed: greedy(g, k),
    "Random": lambda g, k, seed: random_plan(g, k, seed=seed),
}

CONFIGS = {
    "structured": {"full": False, "join_fraction": 0.0},
    "structured+joins": {"full": False, "join_fraction": 0.5},
    "full": {"full": True, "join_fraction": 0.0},
    "full+joins": {"full": True, "join_fraction": 0.5},
}


def run(planner: str, g: TaskGraph, budget: int, seed: int) -> dict | None:
    """One plan: its Output Fidelity under total failure, size and planning time."""
    t0 = time.perf_counter()
    try:
        plan = PLANNERS[planner](g, budget, seed)
    except ReplicationModelError:  # DP over DP_TREE_LIMIT MC-trees
        return None
    seconds = time.perf_counter() - t0
    of = output_fidelity(g, set(g.tasks) - plan)
    return {"planner": planner, "budget": budget, "of": of, "size": len(plan), "seconds": seconds}


def fidelity_vs_budget(panel, configs, planners, seeds, shape, records) -> None:
    """Output Fidelity of each planner at each budget ratio, over seeded topologies."""
    for config in configs:
        for seed in seeds:
            g = random_topology(seed, **shape, **CONFIGS[config])
            for ratio in RATIOS:
                budget = round(ratio * len(g.tasks))
                for planner in planners:
                    r = run(planner, g, budget, seed)
                    if r is not None:
                        records.append(
                            {"panel": panel, "config": config, "seed": seed, "ratio": ratio}
                            | {"tasks": len(g.tasks)}
                            | r
                        )


def dp_seeds(count: int, shape: dict, config: str) -> tuple[list[int], int]:
    """The first ``count`` seeds whose topology has at most DP_TREE_LIMIT MC-trees,
    so every planner of panel (a) runs on the same topologies; and how many were passed."""
    seeds, seed = [], 0
    while len(seeds) < count:
        g = random_topology(seed, **shape, **CONFIGS[config])
        try:
            mc_trees(g, limit=DP_TREE_LIMIT)
            seeds.append(seed)
        except ReplicationModelError:
            pass
        seed += 1
    return seeds, seed - count


def timing(parallelisms, topologies, records) -> None:
    """Planning time against topology size (budget 30% of the tasks)."""
    for p in parallelisms:
        for config in ("structured+joins", "full"):
            for seed in range(topologies):
                g = random_topology(seed, operators=5, parallelism=p, **CONFIGS[config])
                budget = round(0.3 * len(g.tasks))
                for planner in PLANNERS:
                    r = run(planner, g, budget, seed)
                    if r is not None:
                        records.append(
                            {"panel": "time", "config": config, "seed": seed, "parallelism": p}
                            | {"tasks": len(g.tasks), "ratio": 0.3}
                            | r
                        )


ZONE_RATIOS = [0.05, 0.1, 0.15, 0.2, 0.25]


def fault_zone(topologies: int, records: list[dict]) -> None:
    """Zone 0 of 4 (2 of 8 nodes; tasks placed round-robin) fails: OF per budget."""
    for seed in range(topologies):
        g = random_topology(seed, operators=5, parallelism=4, **CONFIGS["structured+joins"])
        placement = {t: f"node{i % 8}" for i, t in enumerate(g.tasks)}
        down = tasks_on(placement, ["node0", "node1"])
        for ratio in ZONE_RATIOS:
            budget = round(ratio * len(g.tasks))
            plans = {
                "Structure-Aware (zone)": structure_aware(g, budget, down),
                "Structure-Aware (worst case)": structure_aware(g, budget),
                "Greedy (zone)": greedy(g, budget, down),
                "Random (zone)": random_plan(g, budget, down, seed=seed),
            }
            for planner, plan in plans.items():
                records.append(
                    {"panel": "zone", "config": "structured+joins", "seed": seed}
                    | {"ratio": ratio, "tasks": len(g.tasks), "failed": len(down)}
                    | {"planner": planner, "budget": budget, "size": len(plan)}
                    | {"of": output_fidelity(g, down - plan)}
                )


def zone_table(records) -> list[str]:
    """Markdown: mean Output Fidelity under the zone failure per planner and budget."""
    planners = sorted({r["planner"] for r in records if r["panel"] == "zone"})
    lines = ["| planner | " + " | ".join(f"{r:.0%}" for r in ZONE_RATIOS) + " |"]
    lines.append("|---|" + "---|" * len(ZONE_RATIOS))
    for planner in planners:
        cells = []
        for ratio in ZONE_RATIOS:
            ofs = fidelities(records, "zone", "structured+joins", planner, ratio)
            cells.append(f"{statistics.fmean(ofs):.3f} (n={len(ofs)})")
        lines.append(f"| {planner} | " + " | ".join(cells) + " |")
    return lines


def tiny(count: int) -> dict:
    """DP against the brute-force optimum on ``count`` tiny topologies and budgets."""
    equal, checked, rows = 0, 0, []
    for seed in range(count):
        shape = {
            "operators": 2 + seed % 2,
            "parallelism": 1 + (seed // 2) % 2,
            "full": bool((seed // 4) % 2),
            "join_fraction": [0.0, 0.5, 1.0][(seed // 8) % 3],
        }
        g = random_topology(seed, **shape)
        if len(g.tasks) > 10:
            continue
        budget = seed % (len(g.tasks) + 1)
        best = output_fidelity(g, set(g.tasks) - brute_force(g, budget))
        ofs = {
            name: output_fidelity(g, set(g.tasks) - PLANNERS[name](g, budget, seed))
            for name in ("DP", "Structure-Aware", "Greedy")
        }
        checked += 1
        equal += abs(ofs["DP"] - best) <= 1e-9
        rows.append({"seed": seed, "tasks": len(g.tasks), "budget": budget, "brute_force": best})
        rows[-1].update(ofs)
    optimal = {
        name: sum(abs(r[name] - r["brute_force"]) <= 1e-9 for r in rows)
        for name in ("DP", "Structure-Aware", "Greedy")
    }
    return {"checked": checked, "dp_equal": equal, "optimal": optimal, "rows": rows}


def fidelities(records, panel, config, planner, ratio) -> list[float]:
    """The Output Fidelities measured for one point of panel (a) or (b)."""
    return [
        r["of"]
        for r in records
        if (r["panel"], r["config"], r["planner"], r["ratio"]) == (panel, config, planner, ratio)
    ]


def matches_dp(records) -> str:
    """How often each heuristic's plan is as good as DP's, per (topology, budget) of (a)."""
    points: dict[tuple, dict[str, float]] = {}
    for r in records:
        if r["panel"] == "small":
            points.setdefault((r["seed"], r["ratio"]), {})[r["planner"]] = r["of"]
    counts = {
        name: sum(abs(v[name] - v["DP"]) <= 1e-9 for v in points.values())
        for name in ("Structure-Aware", "Greedy", "Random")
    }
    return ", ".join(f"{name} {n}/{len(points)}" for name, n in counts.items())


def mean_table(records, panel, configs, planners) -> list[str]:
    """Markdown: mean Output Fidelity per config, planner and budget ratio."""
    lines = ["| topologies | planner | " + " | ".join(f"{r:.0%}" for r in RATIOS) + " |"]
    lines.append("|---|---|" + "---|" * len(RATIOS))
    for config in configs:
        for planner in planners:
            cells = []
            for ratio in RATIOS:
                ofs = fidelities(records, panel, config, planner, ratio)
                cells.append(f"{statistics.fmean(ofs):.3f} (n={len(ofs)})" if ofs else "-")
            lines.append(f"| {config} | {planner} | " + " | ".join(cells) + " |")
    return lines


def time_table(records, parallelisms) -> list[str]:
    """Markdown: median planning time (ms) per size and planner."""
    lines = ["| topologies | parallelism | median tasks | " + " | ".join(PLANNERS) + " |"]
    lines.append("|---|---|---|" + "---|" * len(PLANNERS))
    for config in ("structured+joins", "full"):
        for p in parallelisms:
            rows = [
                r
                for r in records
                if r["panel"] == "time" and r["config"] == config and r["parallelism"] == p
            ]
            if not rows:
                continue
            tasks = statistics.median(r["tasks"] for r in rows if r["planner"] == "Greedy")
            cells = []
            for planner in PLANNERS:
                times = [r["seconds"] * 1000 for r in rows if r["planner"] == planner]
                of = sum(r["planner"] == "Greedy" for r in rows)
                median = f"{statistics.median(times):.1f}" if times else "skipped"
                cells.append(f"{median} (n={len(times)}/{of})")
            lines.append(f"| {config} | {p} | {tasks:g} | " + " | ".join(cells) + " |")
    return lines


def plot(records, parallelisms, path: Path) -> None:
    """Three panels: small topologies with DP, larger ones without, planning time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    styles = {"structured": "-", "structured+joins": "--", "full": ":", "full+joins": "-."}
    colors = {"DP": "k", "Structure-Aware": "C0", "Greedy": "C3", "Random": "C7"}

    def curve(ax, panel, config, planner, label):
        pts = [statistics.fmean(fidelities(records, panel, config, planner, x)) for x in RATIOS]
        ax.plot(RATIOS, pts, styles[config], color=colors[planner], marker="o", label=label)

    for planner in PLANNERS:
        curve(axes[0], "small", "structured+joins", planner, planner)
    axes[0].set_title("(a) small topologies (4 operators, parallelism 2, joins 50%)")
    for config in CONFIGS:
        for planner in ("Structure-Aware", "Greedy", "Random"):
            curve(axes[1], "large", config, planner, f"{planner}, {config}")
    axes[1].set_title("(b) 5 operators, parallelism 4")
    for ax in axes[:2]:
        ax.set_xlabel("replication budget (share of tasks)")
        ax.set_ylabel("mean Output Fidelity (all tasks failed)")
        ax.legend(fontsize=7)
    for planner in PLANNERS:
        for config, marker in (("structured+joins", "o"), ("full", "s")):
            rows = [
                r
                for r in records
                if r["panel"] == "time" and r["planner"] == planner and r["config"] == config
            ]
            if rows:
                axes[2].scatter(
                    [r["tasks"] for r in rows],
                    [r["seconds"] * 1000 for r in rows],
                    s=12,
                    marker=marker,
                    color=colors[planner],
                    label=f"{planner}, {config}",
                )
    axes[2].set_yscale("log")
    axes[2].set_xlabel("tasks")
    axes[2].set_ylabel("planning time (ms, log)")
    axes[2].set_title("(c) planning time, budget 30% of tasks")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer topologies per point")
    parser.add_argument("--topologies", type=int, default=30, help="topologies per point")
    parser.add_argument("--tiny", type=int, default=600, help="tiny topologies for DP vs brute")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "img" / "replication_planners",
        help="output path without suffix: writes .json and .png",
    )
    args = parser.parse_args(argv)
    topologies = 5 if args.quick else args.topologies
    tiny_count = 60 if args.quick else args.tiny
    parallelisms = [2, 4, 8]

    records: list[dict] = []
    small = {"operators": 4, "parallelism": 2}
    small_seeds, passed = dp_seeds(topologies, small, "structured+joins")
    fidelity_vs_budget("small", ["structured+joins"], PLANNERS, small_seeds, small, records)
    large = {"operators": 5, "parallelism": 4}
    others = [p for p in PLANNERS if p != "DP"]
    fidelity_vs_budget("large", CONFIGS, others, range(topologies), large, records)
    timing(parallelisms, max(3, topologies // 3), records)
    check = tiny(tiny_count)
    fault_zone(topologies, records)
    trees = [
        len(mc_trees(random_topology(s, **small, **CONFIGS["structured+joins"])))
        for s in small_seeds
    ]

    print("## Output Fidelity against the replication budget (all tasks failed)\n")
    print("Small topologies (4 operators, parallelism 2, joins 50%), the first")
    print(f"{topologies} seeds with at most {DP_TREE_LIMIT} MC-trees ({passed} seeds passed over;")
    print(f"MC-trees per topology: {min(trees)}-{max(trees)}):\n")
    print("\n".join(mean_table(records, "small", ["structured+joins"], PLANNERS)))
    print("\nPlans as good as DP's, per (topology, budget): " + matches_dp(records))
    print("\nLarger topologies (5 operators, parallelism 4):\n")
    print("\n".join(mean_table(records, "large", CONFIGS, others)))
    print("\n## Planning time (ms, median), 5 operators, budget 30% of the tasks\n")
    print("\n".join(time_table(records, parallelisms)))
    zone = [r for r in records if r["panel"] == "zone"]
    share = statistics.fmean(r["failed"] / r["tasks"] for r in zone)
    print("\n## A fault zone fails (2 of 8 nodes, tasks round-robin; 5 operators,")
    print(f"parallelism 4, joins 50%): {share:.0%} of the tasks on average; budget as a")
    print("share of all tasks; mean Output Fidelity under that failure\n")
    print("\n".join(zone_table(records)))
    print("\n## DP against brute force on tiny topologies\n")
    print(f"DP equal to the brute-force optimum on {check['dp_equal']}/{check['checked']} tiny")
    print("topologies (<= 10 tasks); optimal plans found by each planner: " + str(check["optimal"]))

    out = {
        "command": "bench/replication_planners.py " + " ".join(argv or sys.argv[1:]),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "dp_tree_limit": DP_TREE_LIMIT,
        "small_seeds": small_seeds,
        "small_mc_trees": trees,
        "records": records,
        "tiny": check,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, separators=(",", ":")) + "\n")
    plot(records, parallelisms, args.out.with_suffix(".png"))
    print(f"\nwrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
