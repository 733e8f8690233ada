"""Build elastorm's wheel from a clean copy of this repository (shared by the wheel
test and the user-project integration test)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def _source_copy(dest: Path) -> Path:
    """The files git would see (tracked or not ignored), copied to ``dest``: a clean
    tree, so no stale ``build/`` or ``*.egg-info`` of an earlier build leaks in."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=PROJECT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = PROJECT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def build_wheel(tmp: Path) -> Path:
    """``pip wheel <copy of the repository> --no-deps``; return the wheel's path."""
    src = _source_copy(tmp / "src")
    out = tmp / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    (wheel,) = out.glob("elastorm-*.whl")
    return wheel
