"""The PyFlink virtualenv of the throughput benchmark: ``.elastorm/pyflink-venv``.

PyFlink (``apache-flink`` from PyPI, pinned in ``requirements.txt`` beside this
file) is a comparison point, not a dependency of elastorm, so it lives in a
virtualenv of its own, built the first time a benchmark asks for it (about 850 MB:
PyFlink brings Apache Beam, pandas and pyarrow). Run directly to build it:
``python bench/pyflink/venv.py``. PyFlink 2.x runs its mini-cluster on the
machine's Java 17.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = ROOT / ".elastorm" / "pyflink-venv"
REQUIREMENTS = HERE / "requirements.txt"
STAMP = VENV / "requirements.installed"


def python() -> Path:
    """The PyFlink virtualenv's interpreter, built first if absent or out of date."""
    exe = VENV / "bin" / "python"
    wanted = REQUIREMENTS.read_text()
    if exe.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return exe
    print(f"building {VENV} ({REQUIREMENTS.name}); this takes a few minutes", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(exe), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    STAMP.write_text(wanted)
    return exe


if __name__ == "__main__":
    print(python())
