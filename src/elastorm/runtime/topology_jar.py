"""Build the topology jar: Python sources under ``resources/``, elastorm's JVM classes.

Storm extracts a topology jar's ``resources/`` into each worker's code directory
and runs ShellBolts there, so ``streamparse_run bolts.wordcount.CountWords`` imports
straight from it. ``resources/`` holds the installed ``elastorm`` package (wherever
it is installed: a wheel in site-packages or this checkout) and every top-level
package or module under the project's own ``src/`` (streamparse's layout:
``src/bolts``, ``src/spouts``, ...). The only Java inside is
``elastorm.jvm.MultilangSerializer`` (with its ``MsgpackCodec`` and the classes of
``org.msgpack:msgpack-core``), ``elastorm.jvm.TaskFieldGrouping`` and the relay
``elastorm.jvm.RelayBolt`` (``elastorm/jvm/multilang``, built by ``elastorm setup``);
config.json names the serializer as ``topology.multilang.serializer``: Storm 2.8's own
serializer breaks direct emits from Python.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import elastorm
from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig

MANIFEST = "Manifest-Version: 1.0\nCreated-By: elastorm\n\n"


def python_sources(project: Path) -> dict[str, Path]:
    """Every ``.py`` file shipped to the workers: jar path below ``resources/`` -> file.

    The installed ``elastorm`` package, then each top-level package (a directory with
    ``__init__.py``) and module under ``<project>/src``; a project's own ``src/elastorm``
    (this checkout) is the installed one and is not shipped twice.
    """
    roots: list[tuple[str, Path]] = [("elastorm", Path(elastorm.__file__).resolve().parent)]
    src = project / "src"
    if src.is_dir():
        for path in sorted(src.iterdir()):
            if path.name == "elastorm" or not path.name.isidentifier():
                continue
            if path.is_dir() and (path / "__init__.py").is_file():
                roots.append((path.name, path))
            elif path.suffix == ".py" and path.stem.isidentifier():
                roots.append((path.name, path))
    sources: dict[str, Path] = {}
    for name, root in roots:
        if root.is_file():
            sources[name] = root
            continue
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                sources[f"{name}/{path.relative_to(root).as_posix()}"] = path
    return sources


def build_topology_jar(cfg: ElastormConfig, out: Path) -> Path:
    """Write the jar to ``out`` (deterministic order) and return it.

    Needs the JVM side built (``elastorm setup``) for the serializer classes.
    """
    classes = cfg.jvm_build / "elastorm-multilang" / "classes"
    class_files = sorted(classes.rglob("*.class"))
    if not class_files:
        raise UserError(f"{classes} holds no classes; run `elastorm setup` first")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", MANIFEST)
        for path in class_files:
            jar.write(path, path.relative_to(classes).as_posix())
        for name, path in python_sources(cfg.project).items():
            jar.write(path, "resources/" + name)
    tmp.replace(out)
    return out
