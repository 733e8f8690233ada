"""The long property run: every property test with many more generated examples.

Some protocol bugs show only after thousands of interleavings (issue 3's output bug
needed 3,000 examples of the migration machine). The suite runs each property test
with its CI example count; this runs them all again with the counts multiplied:

    .venv/bin/python bench/property_long.py --scale 20

``--scale`` sets ``ELASTORM_PROPERTY_SCALE`` (``tests/property_scale.py``). Prints
pytest's summary and Hypothesis's statistics (examples run per test) and writes
pytest's whole output to ``--out`` (default ``docs/raw/property_long_<commit>.txt``),
so the figures in docs/benchmarks.md have their raw record beside them. Exits with
pytest's status.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_common import ROOT, commit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=20, help="example-count multiplier (20)")
    parser.add_argument("--out", type=Path, help="where pytest's output goes")
    parser.add_argument("paths", nargs="*", default=["tests/property"], help="tests to run")
    args = parser.parse_args(argv)
    if args.scale < 1:
        parser.error("--scale must be >= 1")
    out = args.out or ROOT / "docs" / "raw" / f"property_long_{commit()}.txt"
    env = {**os.environ, "ELASTORM_PROPERTY_SCALE": str(args.scale)}
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
        "--hypothesis-show-statistics", *args.paths,
    ]  # fmt: skip
    print(f"running {' '.join(command[3:])} with ELASTORM_PROPERTY_SCALE={args.scale}", flush=True)
    began = time.monotonic()
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.monotonic() - began
    header = f"# commit {commit()}, scale {args.scale}, {took:.0f} s, exit {run.returncode}\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + run.stdout + run.stderr)
    lines = run.stdout.splitlines()
    for line in lines:  # Hypothesis's statistics: each test, then its counts
        if line.startswith("tests/") and line.endswith(":") or " passing, " in line:
            print(line.strip())
    print(lines[-1] if lines else "(no output)")
    print(f"{took:.0f} s; full output in {out}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
