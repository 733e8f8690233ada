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


def python() -> Path:
    """The PyFlink virtualenv's interpreter, built first if absent or out of date."""
    return built(VENV, REQUIREMENTS)


def built(venv: Path, requirements: Path) -> Path:
    """The interpreter of the virtualenv ``venv`` with ``requirements`` installed by pip,
    built first if absent or out of date (also the side-by-side's Bytewax venv)."""
    exe = venv / "bin" / "python"
    stamp = venv / "requirements.installed"
    wanted = requirements.read_text()
    if exe.exists() and stamp.exists() and stamp.read_text() == wanted:
        return exe
    print(f"building {venv} ({requirements.name}); this takes a few minutes", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(exe), "-m", "pip", "install", "-q", "-r", str(requirements)], check=True)
    stamp.write_text(wanted)
    return exe


if __name__ == "__main__":
    print(python())
