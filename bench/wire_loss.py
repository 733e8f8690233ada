"""Tuples lost on the wire between live workers: the flights job with and without loss.

Runs the elastic flights job on the single-machine cluster ``--runs`` times each way,
alternating, in one invocation:

* ``none``: no loss (the baseline);
* ``loss``: each op1 task loses ``--drop`` of its data messages to op2 on the wire
  (``elastorm.chaos.drop_tuples``, every ``--every``-th from the ``--start``-th), each
  buffered but never sent; op2's tasks find the gaps and ask op1 to resend
  (``elastorm.resend_after_secs``). With ``--on spout`` the spout loses ``--drop`` of
  its rows to op1 instead; op1's tasks find the skipped link numbers and ask the
  spout to rewind (docs/failures.md, "Spout -> first emitter").

Every run must end with the flights totals equal to pandas'. Prints one line per run
and, per way, the median time from the first rows read to completion, with the ratio
of ``loss`` to ``none``; writes every run to ``--out`` (JSON lines, default
``docs/raw/wire_loss_<commit>.jsonl``).

    .venv/bin/python bench/wire_loss.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench_common import ROOT, commit

sys.path.insert(0, str(ROOT / "tests" / "integration"))  # WireLossDriver lives with the tests
sys.path.insert(0, str(ROOT))  # the project\'s drivers/

WAYS = ("none", "loss")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=30_000, help="flights rows per run")
    parser.add_argument("--rate", type=float, default=1500.0, help="spout rows per second")
    parser.add_argument("--drop", type=int, default=500, help="data messages lost per op1 task")
    parser.add_argument("--start", type=int, default=2_000)
    parser.add_argument("--every", type=int, default=7)
    parser.add_argument("--on", choices=("emitter", "spout"), default="emitter",
                        help="whose messages are lost (elastorm.chaos.drop_on)")  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from crash_driver import WireLossDriver

    from elastorm.runtime.cluster import down, up
    from elastorm.runtime.config import load_config
    from elastorm.runtime.run import run_topology

    name = "wire_loss" if args.on == "emitter" else "wire_loss_spout"
    out = args.out or ROOT / "docs" / "raw" / f"{name}_{commit()}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg = load_config()
    down(cfg, wipe=True)
    up(cfg)
    failed = 0
    rows: list[dict] = []
    try:
        with out.open("a", encoding="utf-8") as fh:
            for run in range(args.runs):
                for way in WAYS:
                    drop = args.drop if way == "loss" else 0
                    driver = WireLossDriver(
                        args.limit, drop=drop, start=args.start, every=args.every,
                        on=args.on, max_rate=args.rate,
                    )  # fmt: skip
                    began = time.time()
                    try:
                        outcome = run_topology(cfg, "cluster", driver, timeout=600)
                        row = {"way": way, "run": run, "ok": outcome.ok} | {
                            k: outcome.facts.get(k)
                            for k in ("processing_seconds", "wire_lost", "resend_requests",
                                      "resent", "rows", "spout_wire_lost", "link_lost",
                                      "link_rewinds", "spout_rewinds", "rows_rewound",
                                      "op1_dropped")
                            if k in outcome.facts
                        }  # fmt: skip
                        if not outcome.ok:
                            row["summary"] = outcome.summary
                    except Exception as exc:  # a failed run is recorded; the bench goes on
                        row = {"way": way, "run": run, "ok": False, "error": repr(exc)}
                    row |= {"commit": commit(), "started": round(began, 1), "limit": args.limit,
                            "rate": args.rate, "drop": drop, "start": args.start,
                            "every": args.every, "on": args.on}  # fmt: skip
                    failed += not row["ok"]
                    rows.append(row)
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    print(json.dumps(row), flush=True)
    finally:
        down(cfg, wipe=True)
    medians = {}
    for way in WAYS:
        secs = [r["processing_seconds"] for r in rows if r["way"] == way and r["ok"]]
        secs = [s for s in secs if s is not None]
        medians[way] = statistics.median(secs) if secs else None
        print(f"{way}: {len(secs)} passing runs, median {medians[way]} s from first rows to done")
    if medians["none"] and medians["loss"]:
        print(f"ratio loss/none of the medians: {medians['loss'] / medians['none']:.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
