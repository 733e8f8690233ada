"""Build the topology jar: the project's Python sources under ``resources/``.

Storm extracts a topology jar's ``resources/`` into each worker's code directory
and runs ShellBolts there, so ``streamparse_run bolts.flights.SumDelays`` imports
straight from it. The only Java inside is ``elastorm.jvm.MultilangSerializer``
(``jvm/multilang``), which config.json names as ``topology.multilang.serializer``:
Storm 2.8's own serializer breaks direct emits from Python.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from elastorm.runtime.errors import UserError

#: Source packages shipped to the workers.
PACKAGES = ("elastorm", "bolts", "spouts")

MANIFEST = "Manifest-Version: 1.0\nCreated-By: elastorm\n\n"


def build_topology_jar(project: Path, out: Path) -> Path:
    """Write the jar to ``out`` (deterministic order) and return it.

    Needs the JVM side built (``elastorm setup``) for the serializer classes.
    """
    classes = project / "jvm" / "multilang" / "target" / "classes"
    class_files = sorted(classes.rglob("*.class"))
    if not class_files:
        raise UserError("jvm/multilang is not built; run `elastorm setup` first")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", MANIFEST)
        for path in class_files:
            jar.write(path, path.relative_to(classes).as_posix())
        for package in PACKAGES:
            root = project / "src" / package
            for path in sorted(root.rglob("*.py")):
                if "__pycache__" in path.parts:
                    continue
                jar.write(path, "resources/" + path.relative_to(project / "src").as_posix())
    tmp.replace(out)
    return out
