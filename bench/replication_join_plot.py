"""Plot ``bench/replication_join.py``'s raw file: completeness after the kill per arm,
with each arm's predicted Output Fidelity as a dashed line.

    .venv/bin/python bench/replication_join_plot.py \
        docs/raw/replication_join_<commit>.jsonl docs/img/replication_join.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    raw, png = (Path(a) for a in (argv or sys.argv[1:]))
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    fig, ax = plt.subplots(figsize=(8, 4))
    for row, color in zip(rows, ("tab:red", "tab:blue", "tab:green", "tab:gray"), strict=False):
        values = [x if x is not None else float("nan") for x in row["completeness"]]
        label = f"{row['arm']} (budget {row['budget']}){'' if row['ok'] else ', FAILED'}"
        ax.step(range(len(values)), values, where="post", color=color, label=label)
        if row.get("predicted_of") is not None:
            ax.axhline(row["predicted_of"], color=color, linestyle="--", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xlabel("seconds after the kill")
    ax.set_ylabel("flights into the windows / rate before")
    ax.set_title(f"join + window, {rows[0]['lose']} of {rows[0]['tasks']} nodes killed at once")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
