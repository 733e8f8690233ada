"""Build the topology jar: the project's Python sources under ``resources/``.

Storm extracts a topology jar's ``resources/`` into each worker's code directory
and runs ShellBolts there, so ``streamparse_run bolts.flights.SumDelays`` imports
straight from it. No Java classes are needed: the components are multilang.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

#: Source packages shipped to the workers.
PACKAGES = ("elastorm", "bolts", "spouts", "controller", "jobs", "runtime")

MANIFEST = "Manifest-Version: 1.0\nCreated-By: elastorm\n\n"


def build_topology_jar(project: Path, out: Path) -> Path:
    """Write the jar to ``out`` (deterministic order) and return it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", MANIFEST)
        for package in PACKAGES:
            root = project / "src" / package
            for path in sorted(root.rglob("*.py")):
                if "__pycache__" in path.parts:
                    continue
                jar.write(path, "resources/" + path.relative_to(project / "src").as_posix())
    tmp.replace(out)
    return out
