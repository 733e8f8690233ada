"""Plot bench/throughput.py results: CPU per 1,000 tuples by process, before and after.

Usage::

    .venv/bin/python bench/throughput_plot.py BEFORE.jsonl AFTER.jsonl OUT.png

Each bar is the median over a file's repeats of one variant's CPU per 1,000
tuples at saturation, stacked by process (the JVM, each Python component); the
label on top is the median per-task throughput.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["plain", "elastorm_plain", "elastic"]


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
