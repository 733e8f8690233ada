"""Nothing in ``src/`` is reachable only from the tests.

Two checks over the code that runs (``src/``, ``topologies/``, ``drivers/``, ``bench/``;
``bin/`` holds shell scripts only), never ``tests/``:

- modules: every module of ``src/elastorm`` is imported, directly or through others,
  from a root: the ``elastorm`` command (``elastorm.runtime.cli``), a topology, a
  driver, a component of the example project (``src/bolts``, ``src/spouts``) or a
  benchmark;
- names: ``vulture`` finds no unused function, class, method, property or variable,
  except Storm/streamparse callbacks, dataclass fields, a topology's components, and
  the handlers the migration machines dispatch by name.

There are no exceptions: what only a test needs lives in ``tests/`` (the protocol
simulator ``tests/sim.py``, the controller's oracles ``tests/controller_oracle.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import vulture

ROOT = Path(__file__).resolve().parents[2]
USER_PROJECT = ROOT / "tests" / "integration" / "user_project"  # a user's code: the API's caller
SCANNED = [ROOT / "src", ROOT / "topologies", ROOT / "drivers", ROOT / "bench", ROOT / "bin"]
SCANNED += [USER_PROJECT]

#: Called by Storm/streamparse/pystorm, or read by them from a class.
CALLBACKS = [
    "initialize",
    "process",
    "process_tick",
    "process_batch",
    "next_tuple",
    "ack",
    "fail",
    "activate",
    "deactivate",
    "auto_ack",
    "auto_anchor",
    "auto_fail",
    "outputs",
    "config",
    "parallelism_hint",  # a Thrift ComponentCommon field, sent to Nimbus by streamparse
    "process_element",  # PyFlink's KeyedProcessFunction (bench/pyflink/keyed_sum.py)
    "extract_timestamp",  # PyFlink's TimestampAssigner (bench/side_by_side/), and its
    "record_timestamp",  # second argument, which PyFlink passes
    # Bytewax's source and sink partitions (bench/bytewax/keyed_sum.py) and the
    # arguments its runtime passes to their builders
    "next_batch",
    "write_batch",
    "step_id",
    "worker_index",
    "worker_count",
]
#: Python calls it: a module's lazy ``__getattr__`` (``elastorm``'s public names); and
#: ``elastorm local/run`` call a project driver's entry function by its name.
PROTOCOL = ["__getattr__", "make_driver"]
#: The per-key state handles' methods (PyFlink's ValueState / MapState): the user's API.
STATE_API = ["value", "update", "clear", "get", "put", "remove", "contains"]
STATE_API += ["keys", "values", "items", "is_empty"]
#: A WindowState's callback: the bolt's method it names (``fire``), called by name.
STATE_API += ["on_window"]
#: A chaos job's hooks (``bench/chaos_jobs.py``) that only the fault drivers call: they
#: live in ``tests/integration/crash_driver.py`` (run by ``bench/chaos.py``), not scanned.
JOB_HOOKS = ["_input_ended_at", "_progress", "_tentative_updates"]
#: The migration machines dispatch messages to handlers by name (``getattr``).
DISPATCHED = ["_on_*", "_ignore*", "_reject_*"]


def _py_files() -> list[Path]:
    return sorted(p for d in SCANNED if d.is_dir() for p in d.rglob("*.py"))


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _declared_lines(path: Path) -> set[int]:
    """Lines vulture may call unused that are used by declaration: dataclass fields,
    and a topology file's Topology classes and their component attributes."""
    lines: set[int] = set()
    topology = path.parent in (ROOT / "topologies", USER_PROJECT / "topologies")
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        if topology:
            lines.add(node.lineno)
        if topology or _is_dataclass(node):
            lines.update(s.lineno for s in node.body if isinstance(s, ast.AnnAssign | ast.Assign))
    return lines


def _fired(paths: list[Path]) -> list[str]:
    """The methods a ``WindowState(..., fire="name")`` names: the window calls them by
    name when it fires."""
    return [
        kw.value.value
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg == "fire" and isinstance(kw.value, ast.Constant)
    ]


def unused_names() -> set[str]:
    """``path:name`` of everything vulture finds unused, less the declared lines."""
    ignored = CALLBACKS + PROTOCOL + STATE_API + DISPATCHED + JOB_HOOKS + _fired(_py_files())
    scan = vulture.Vulture(ignore_names=ignored)
    scan.scavenge([str(p) for p in _py_files()])
    found = set()
    declared = {p: _declared_lines(p) for p in _py_files()}
    for item in scan.get_unused_code(min_confidence=60):
        path = Path(item.filename).resolve()
        if item.first_lineno in declared.get(path, set()):
            continue
        found.add(f"{path.relative_to(ROOT).as_posix()}:{item.name}")
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT / "src").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Modules of ``modules`` that ``path`` imports anywhere in it (also in functions),
    or names in a string (``importlib.import_module``, as the CLI loads its commands)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Constant) and node.value in modules:
            names = [node.value]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            parts = name.split(".")
            found.update(m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)))
    return found & modules


def unreached_modules() -> set[str]:
    """``module X`` for every module of ``src/elastorm`` that no root reaches."""
    files = {_module_name(p): p for p in (ROOT / "src").rglob("*.py")}
    modules = set(files)
    roots = [ROOT / "src/elastorm/runtime/cli.py"]
    roots += [
        p
        for d in ("topologies", "drivers", "bench", "src/bolts", "src/spouts")
        for p in (ROOT / d).rglob("*.py")
    ]
    reached: set[str] = set()
    todo = [m for p in roots for m in _imports(p, modules)] + ["elastorm.runtime.cli"]
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        todo.extend(_imports(files[module], modules) - reached)
    return {f"module {m}" for m in modules - reached if m.startswith("elastorm")}


def test_nothing_in_src_is_reachable_only_from_tests() -> None:
    found = sorted(unused_names() | unreached_modules())
    assert not found, "unused outside tests (use it, move it to tests/, or delete it):\n" + (
        "\n".join(found)
    )
