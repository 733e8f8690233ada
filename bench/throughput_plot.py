"""Plot bench/throughput.py results: CPU per 1,000 tuples by process, before and after,
and the latency of the after run.

Usage::

    .venv/bin/python bench/throughput_plot.py BEFORE.jsonl AFTER.jsonl OUT.png

Each bar of OUT.png is the median over a file's repeats of one variant's CPU per
1,000 tuples at saturation, stacked by process (the JVM, each Python component);
the label on top is the median per-task throughput. OUT_latency.png: every run of
AFTER.jsonl, p50 and p99 at 50% and 90% of its saturation rate, against the
issue's 50 ms p99 target.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# elastic_msgpack: the msgpack variant of the runs before msgpack became the default
ORDER = [
    "plain",
    "elastorm_plain",
    "elastic",
    "elastic_itemwise",
    "elastic_unbatched",
    "elastic_json",
    "elastic_msgpack",
]
PHASES = ("at_50", "at_90")


def medians(path: str) -> dict[str, tuple[float, dict[str, float]]]:
    runs: dict[str, list[dict]] = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        runs.setdefault(r["variant"], []).append(r["saturation"])
    out = {}
    for variant, sats in runs.items():
        kinds = {k for s in sats for k in s["cpu_ms_per_ktuple"]}
        cpu = {
            k: statistics.median(s["cpu_ms_per_ktuple"].get(k, 0.0) for s in sats) for k in kinds
        }
        out[variant] = (statistics.median(s["rate"] for s in sats), cpu)
    return out


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    before, after, out = medians(sys.argv[1]), medians(sys.argv[2]), sys.argv[3]
    bars = [(f"{v}\nbefore", before[v]) for v in ORDER if v in before]
    bars += [(f"{v}\nafter", after[v]) for v in ORDER if v in after]
    bars.sort(key=lambda b: (ORDER.index(b[0].split("\n")[0]), b[0].endswith("after")))
    kinds = sorted({k for _, (_, cpu) in bars for k in cpu}, key=lambda k: (k != "jvm", k))
    fig, ax = plt.subplots(figsize=(10, 5))
    x = range(len(bars))
    bottom = [0.0] * len(bars)
    for kind in kinds:
        heights = [cpu.get(kind, 0.0) for _, (_, cpu) in bars]
        ax.bar(x, heights, bottom=bottom, label=kind)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    for i, (_, (rate, _)) in enumerate(bars):
        ax.text(i, bottom[i] + 1, f"{rate:,.0f}/s", ha="center", fontsize=8)
    ax.set_xticks(list(x), [label for label, _ in bars], fontsize=8)
    ax.set_ylabel("CPU ms per 1,000 tuples (median)")
    ax.set_title("Keyed count on local Storm: CPU per 1k tuples by process (label: tuples/s/task)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plot_latency(sys.argv[2], str(Path(out).with_name(Path(out).stem + "_latency.png")))
    return 0


def plot_latency(path: str, out: str) -> None:
    runs = [json.loads(line) for line in Path(path).read_text().splitlines()]
    runs.sort(key=lambda r: (ORDER.index(r["variant"]), r["repeat"]))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, phase in zip(axes, PHASES, strict=True):
        labels = [f"{r['variant']}\n#{r['repeat']}" for r in runs]
        x = range(len(runs))
        ax.bar([i - 0.2 for i in x], [r[phase]["p50_ms"] for r in runs], 0.4, label="p50")
        ax.bar([i + 0.2 for i in x], [r[phase]["p99_ms"] for r in runs], 0.4, label="p99")
        ax.axhline(50, color="red", linestyle="--", linewidth=1, label="p99 target at 50%")
        ax.set_yscale("log")
        ax.set_xticks(list(x), labels, fontsize=7, rotation=45, ha="right")
        ax.set_title(f"end-to-end latency at {phase[3:]}% of saturation")
    axes[0].set_ylabel("ms (log scale)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
