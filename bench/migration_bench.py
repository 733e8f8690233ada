"""Migration pause and completion time on real Storm.

Madsen & Zhou 2015, section 7.1 (migration latency and completion time, Figs. 5-6).

Usage::

    .venv/bin/python bench/migration_bench.py [--quick] [--repeats R] [--window S] [--json PATH]
        [--plots DIR]

One LocalCluster run of ``topologies/synthetic.py`` (``drivers.synthetic``):
a rate-limited spout, a pass-through emitter, a counting operator with 20 key
groups on 3 tasks. One *hot* key group is migrated again and again, by direct,
CPA and CPAL (order rotated per repeat):

* **state size** sweep: the hot group grows to each of ``--keys`` distinct keys
  (preloaded), then each protocol moves it with a small replay (``--small-replay``);
* **replay size** sweep at the largest state: each protocol moves it after about
  ``--replays`` of its tuples piled up in the emitter's buffer since its last
  checkpoint (the number actually replayed is recorded);
* **idle** windows (no migration) give the noise floor of the pause measure.

Pause = highest latency of the group's outputs during ``[started, started +
--window]`` minus the group's median latency before; idle windows are exactly as
long, so the noise floor is a maximum over as many buckets as a pause (a migration
not done 1 s before its window ends is counted as not covered); completion = request started ->
done on the controller. Ratios are of medians measured in the same run. Raw
records go to ``--json``; plots to ``--plots`` (needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # the project's drivers/

from drivers.synthetic import (  # noqa: E402
    Settings,
    Step,
    SyntheticDriver,
    private_zookeeper,
)
from elastorm.errors import UserError  # noqa: E402
from elastorm.runtime.config import load_config  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402

PROTOCOLS = ("direct", "cpa", "cpal")


def build_plan(
    keys: list[int], replays: list[int], small: int, repeats: int, idles: int, window: float
) -> list[Step]:
    plan: list[Step] = []
    for i, k in enumerate(keys):
        plan.append(Step(kind="keys", keys=k))
        plan += [
            Step(kind="idle", seconds=window, tag="idle") for _ in range(idles if i == 0 else 0)
        ]
        for r in range(repeats):
            order = PROTOCOLS[r % 3 :] + PROTOCOLS[: r % 3]
            plan += [Step(kind="migrate", protocol=p, replay=small, tag="state") for p in order]
    for r in range(repeats):
        for j, n in enumerate(replays):
            order = PROTOCOLS[(r + j) % 3 :] + PROTOCOLS[: (r + j) % 3]
            plan += [Step(kind="migrate", protocol=p, replay=n, tag="replay") for p in order]
    plan += [Step(kind="idle", seconds=window, tag="idle") for _ in range(idles)]
    return plan


def run_with_retry(cfg, driver_factory, attempts: int = 3):
    """One run on a private ZooKeeper; a busy LocalCluster port (someone else's local
    run) is waited out."""
    for attempt in range(attempts):
        try:
            with private_zookeeper(cfg) as own:
                return run_topology(own, "local", driver_factory(), timeout=3600)
        except UserError as exc:
            if "is taken" not in str(exc) or attempt == attempts - 1:
                raise
            print(f"LocalCluster port busy ({exc}); retrying in 30 s", flush=True)
            time.sleep(30)
    raise AssertionError("unreachable")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(records, tag, by):
    """``{(protocol, by-value): [records]}`` for migrations tagged ``tag``."""
    out: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        if r["kind"] == "migrate" and r["tag"] == tag:
            out.setdefault((r["protocol"], r[by]), []).append(r)
    return out


def summarise(records: list[dict], replays: list[int], keys: list[int]) -> list[str]:
    """Median tables and ratios; pauses only of steady records (baseline not backlogged)."""
    migrations = [r for r in records if r["kind"] == "migrate"]
    lines = [
        f"{len(migrations)} migrations, {sum(r['kind'] == 'idle' for r in records)} idle "
        f"windows; pause windows {sorted({r.get('window_s') for r in records}, key=str)} s; "
        f"{sum(not r.get('covered', True) for r in migrations)} migrations not done 1 s "
        f"before their window's end"
    ]
    idle = [r for r in records if r["kind"] == "idle" and r["steady"]]
    for what in ("pause_ms", "hop_pause_ms"):
        values = [r[what] for r in idle if r[what] is not None]
        lines.append(
            f"noise floor ({what}, idle windows, no migration): median {_f(median(values))} ms, "
            f"max {_f(max(values, default=None))} ms over {len(values)}"
        )
    for tag, by, axis in (("state", "keys", keys), ("replay", "replay_asked", replays)):
        groups = table(records, tag, by)
        lines.append(f"-- {tag} sweep (medians; pauses of steady runs only) --")
        lines.append(
            f"{by:>12} {'protocol':>8} {'steady/n':>8} {'replayed':>9} {'pause ms':>9} "
            f"{'hop pause':>9} {'complete ms':>11} {'pickup ms':>9}"
        )
        for x in axis:
            med: dict[str, dict[str, float | None]] = {}
            for p in PROTOCOLS:
                rs = groups.get((p, x), [])
                ok = [r for r in rs if r["steady"]]
                med[p] = {m: median([r[m] for r in ok]) for m in ("pause_ms", "hop_pause_ms")}
                med[p]["completion_ms"] = median([r["completion_ms"] for r in rs])
                lines.append(
                    f"{x:>12} {p:>8} {len(ok):>4}/{len(rs):<3} "
                    f"{_f(median([r['replayed'] for r in rs])):>9} "
                    f"{_f(med[p]['pause_ms']):>9} {_f(med[p]['hop_pause_ms']):>9} "
                    f"{_f(med[p]['completion_ms']):>11} "
                    f"{_f(median([r['pickup_ms'] for r in rs])):>9}"
                )
            lines.append(
                f"{'':>12} ratios: CPAL/direct pause "
                f"{_ratio(med['cpal']['pause_ms'], med['direct']['pause_ms'])} "
                f"(hop {_ratio(med['cpal']['hop_pause_ms'], med['direct']['hop_pause_ms'])}), "
                f"CPA/direct pause {_ratio(med['cpa']['pause_ms'], med['direct']['pause_ms'])}, "
                f"CPA/CPAL completion "
                f"{_ratio(med['cpa']['completion_ms'], med['cpal']['completion_ms'])}"
            )
    return lines


def _f(v) -> str:
    return "-" if v is None else f"{v:.0f}"


def _ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.3f}"


def plot(records: list[dict], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    out_dir.mkdir(parents=True, exist_ok=True)
    idle = [r for r in records if r["kind"] == "idle" and r["steady"]]
    panels = (
        ("pause_ms", "pause from the spout's stamp (ms)", True),
        ("hop_pause_ms", "pause from the emitter's stamp (ms)", True),
        ("completion_ms", "completion (ms)", False),
    )
    for tag, by, xlabel, name in (
        ("replay", "replayed", "tuples replayed (toState size)", "migration_replay.png"),
        ("state", "keys", "state size (distinct keys in the group)", "migration_state.png"),
    ):
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        mine = [r for r in records if r["kind"] == "migrate" and r["tag"] == tag]
        for p, marker in zip(PROTOCOLS, "osD", strict=True):
            rs = [r for r in mine if r["protocol"] == p]
            for ax, (field, _, steady_only) in zip(axes, panels, strict=True):
                pts = [r for r in rs if r["steady"] or not steady_only]
                ax.scatter(
                    [r[by] or 0 for r in pts], [r[field] for r in pts], marker=marker, label=p
                )
        for ax, (field, ylabel, steady_only) in zip(axes, panels, strict=True):
            if steady_only and idle:
                top = max(r[field] for r in idle)
                ax.axhline(top, color="grey", linestyle=":", label="idle max (noise)")
            ax.set_ylabel(ylabel)
            ax.set_xlabel(xlabel)
            if tag == "state":
                ax.set_xscale("log")
            ax.grid(alpha=0.3)
            ax.legend()
        skipped = sum(not r["steady"] for r in mine)
        fig.suptitle(
            f"Migration on Storm LocalCluster, {tag} sweep "
            f"({skipped} of {len(mine)} runs started backlogged: left out of the pause panels)"
        )
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (~4 min)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--rate", type=float, default=1500.0, help="steady tuples/s (default 1500)")
    parser.add_argument("--hot-share", type=float, default=0.6)
    parser.add_argument("--keys", default=None, help="comma-separated state sizes")
    parser.add_argument("--replays", default=None, help="comma-separated replay sizes")
    parser.add_argument("--small-replay", type=int, default=1000)
    parser.add_argument(
        "--window",
        type=float,
        default=Settings.window,
        help=f"pause window of migrations and idle windows alike, s (default {Settings.window})",
    )
    parser.add_argument("--json", default=str(ROOT / "docs/img/migration_bench.json"))
    parser.add_argument("--plots", default=str(ROOT / "docs/img"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    keys = [
        int(k)
        for k in (args.keys or ("1000,10000" if args.quick else "1000,10000,100000")).split(",")
    ]
    replays = [
        int(n)
        for n in (args.replays or ("5000,20000" if args.quick else "5000,20000,50000")).split(",")
    ]
    repeats = args.repeats or (1 if args.quick else 2)
    plan = build_plan(
        keys, replays, args.small_replay, repeats, idles=2 if args.quick else 5, window=args.window
    )
    settings = Settings(rate=args.rate, hot_share=args.hot_share, keys=keys[0], window=args.window)
    print(
        f"{len(plan)} steps: state sizes {keys}, replay sizes {replays} (+{args.small_replay} "
        f"in the state sweep), {repeats} repeat(s), {args.rate:.0f} tuples/s, "
        f"{settings.hot_rate:.0f}/s in the migrated group",
        flush=True,
    )
    started = time.monotonic()
    outcome = run_with_retry(load_config(), lambda: SyntheticDriver(plan, settings))
    records = outcome.facts["records"]
    print(outcome.summary)
    print("\n".join(summarise(records, replays, keys)))
    check = "OK" if outcome.ok else "FAILED"
    print(f"benchmark took {time.monotonic() - started:.0f} s; check {check}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "settings": {
                    "rate": settings.rate,
                    "hot_share": settings.hot_share,
                    "keys": keys,
                    "replays": replays,
                    "small_replay": args.small_replay,
                    "repeats": repeats,
                    "window": args.window,
                },
                "ok": outcome.ok,
                "final": outcome.facts["final"],
                "records": records,
            },
            indent=1,
        )
    )
    print(f"raw results: {out}")
    try:
        for path in plot(records, Path(args.plots)):
            print(f"plot: {path}")
    except ImportError:
        print("matplotlib not installed: no plots")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
