"""The import graph of ``src/``: no cycles, a pure core, a library apart from the examples.

The graph is built from the source with ``ast``, without importing anything. It
sees every ``import`` and ``from ... import`` statement, including those inside
functions, methods and ``if`` blocks, so a cycle cannot be hidden in a function
body. Imports made by strings (``importlib.import_module``) are not seen; the
only ones, in ``elastorm.runtime.cli``, go from the CLI to its subcommand modules.

Rules:

1. no import cycles among the modules of ``src/`` (no strongly connected
   component with more than one module, and no module importing itself);
2. ``elastorm.core.*``, the sans-IO core, imports no other part of ``elastorm``
   and none of ``bolts``, ``spouts``, ``controller``, ``streamparse``, ``pystorm``,
   ``kazoo`` or ``pyspark``;
3. the installed library (``elastorm.*``) never imports the example project's
   ``bolts``, ``spouts``, ``controller``, ``demos`` or ``drivers`` (they are not in the
   wheel);
4. no module of ``elastorm.jobs`` or ``demos`` (the offline jobs, and the demo jobs'
   flights row schema, pandas references and options, shared with the Storm side)
   reaches ``streamparse`` or ``pystorm``, either directly or through other modules of
   ``src/``;
5. no two packages of ``elastorm`` import each other (``mutual_packages``), and the
   layer order of ``pyproject.toml``'s import-linter contract holds (``lint-imports``,
   run here so that CI checks it; ``python -m tests.unit.test_import_graph`` prints the
   package-level import counts).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

CORE = "elastorm.core"
CORE_FORBIDDEN = frozenset(
    {"bolts", "spouts", "controller", "streamparse", "pystorm", "kazoo", "pyspark"}
)
LIBRARY = "elastorm"
EXAMPLE_PROJECT = frozenset({"bolts", "spouts", "controller", "demos", "drivers"})
OFFLINE = ("elastorm.jobs", "demos")
STORM = frozenset({"streamparse", "pystorm"})


@dataclass(frozen=True)
class Import:
    """One imported name: ``target`` is a module of ``src/`` or, if None, external."""

    line: int
    name: str  # the dotted name as written (resolved if relative)
    target: str | None


@dataclass
class Graph:
    files: dict[str, Path]  # module -> file
    imports: dict[str, list[Import]]  # module -> what it imports

    def edges(self, module: str) -> set[str]:
        return {i.target for i in self.imports[module] if i.target is not None}

    def external(self, module: str) -> Iterable[Import]:
        return (i for i in self.imports[module] if i.target is None)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path) -> dict[str, Path]:
    """Every ``.py`` file under ``root`` as a dotted module name (skips caches, egg-info)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).parts
        if any(
            p == "__pycache__" or p.startswith(".") or p.endswith(".egg-info") for p in relative
        ):
            continue
        modules[module_name(path, root)] = path
    return modules


def build_graph(root: Path) -> Graph:
    files = find_modules(root)

    def resolve(name: str) -> str | None:
        """The module of ``src/`` that importing ``name`` loads, or None if external."""
        while name:
            if name in files:
                return name
            name = name.rpartition(".")[0]
        return None

    imports: dict[str, list[Import]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: list[Import] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.append(Import(node.lineno, alias.name, resolve(alias.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".") if package else []
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    # ``from a import b``: the submodule a.b if there is one, else a.
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in files else resolve(base)
                    found.append(Import(node.lineno, sub if sub in files else base, target))
        imports[module] = found
    return Graph(files, imports)


def strongly_connected_components(graph: Graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components in reverse topological order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph.files):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.edges(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.edges(succ)))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def cycles(graph: Graph) -> list[str]:
    """One line per cycle: its modules, and each import inside it with file and line."""
    found = []
    for component in strongly_connected_components(graph):
        members = set(component)
        if len(component) == 1 and component[0] not in graph.edges(component[0]):
            continue
        links = [
            f"{module} -> {i.target} ({graph.files[module].name}:{i.line})"
            for module in component
            for i in graph.imports[module]
            if i.target in members
        ]
        found.append(f"cycle {component}: " + "; ".join(sorted(set(links))))
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def core_violations(graph: Graph, core: str = CORE) -> list[str]:
    """Imports of the core that leave it: adapters, Storm, ZooKeeper, Spark, the rest of
    its own library."""
    library = core.rpartition(".")[0]
    return [
        f"{module} imports {i.name} (line {i.line})"
        for module in graph.files
        if _in(module, core)
        for i in graph.imports[module]
        if i.name.split(".")[0] in CORE_FORBIDDEN
        or (library and _in(i.name, library) and not _in(i.name, core))
    ]


def library_violations(graph: Graph) -> list[str]:
    """Imports from the installed library into the example project (not in the wheel)."""
    return [
        f"{module} imports {i.name} (line {i.line})"
        for module in graph.files
        if _in(module, LIBRARY)
        for i in graph.imports[module]
        if i.name.split(".")[0] in EXAMPLE_PROJECT
    ]


def storm_paths(graph: Graph, package: str) -> list[str]:
    """Each module of ``package`` that reaches streamparse/pystorm, with the import chain."""
    found = []
    for start in sorted(m for m in graph.files if _in(m, package)):
        # breadth-first over src/ modules, remembering how each was reached
        came_from: dict[str, str | None] = {start: None}
        queue = [start]
        for module in queue:
            hits = [i for i in graph.external(module) if i.name.split(".")[0] in STORM]
            if hits:
                chain = [module]
                while (prev := came_from[chain[-1]]) is not None:
                    chain.append(prev)
                path = " -> ".join([*reversed(chain), hits[0].name])
                found.append(f"{start} reaches Storm: {path} (line {hits[0].line})")
                break
            for succ in sorted(graph.edges(module)):
                if succ not in came_from:
                    came_from[succ] = module
                    queue.append(succ)
    return found


def package_of(module: str) -> str:
    """The part of ``elastorm`` a module belongs to: its subpackage, or itself for a
    top-level module (``elastorm.config``)."""
    return ".".join(module.split(".")[:2])


def package_imports(graph: Graph, library: str = LIBRARY) -> dict[tuple[str, str], int]:
    """How many imports go from each part of ``library`` to each other part."""
    counts: dict[tuple[str, str], int] = {}
    for module in graph.files:
        if not _in(module, library) or module == library:
            continue
        for i in graph.imports[module]:
            if i.target is None or not _in(i.target, library) or i.target == library:
                continue
            pair = (package_of(module), package_of(i.target))
            if pair[0] != pair[1]:
                counts[pair] = counts.get(pair, 0) + 1
    return counts


def mutual_packages(graph: Graph, library: str = LIBRARY) -> list[str]:
    """Each pair of parts of ``library`` that import each other, with both counts."""
    counts = package_imports(graph, library)
    return [
        f"{a} <-> {b} ({n} and {counts[(b, a)]} imports)"
        for (a, b), n in sorted(counts.items())
        if a < b and (b, a) in counts
    ]


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(SRC)


def test_the_graph_sees_the_packages_of_src(graph: Graph) -> None:
    packages = {m.split(".")[0] for m in graph.files}
    assert packages == {"elastorm", "bolts", "spouts", "controller", "demos"}
    assert "elastorm.core.migration.keygroup" in graph.files
    assert "demos.flights_schema" in graph.edges("spouts.flights")


def test_no_import_cycles_in_src(graph: Graph) -> None:
    assert cycles(graph) == []


def test_core_imports_no_adapter_and_no_storm_zookeeper_or_spark(graph: Graph) -> None:
    assert core_violations(graph) == []


def test_the_library_never_imports_the_example_project(graph: Graph) -> None:
    assert library_violations(graph) == []


@pytest.mark.parametrize("package", OFFLINE)
def test_offline_jobs_never_reach_streamparse_or_pystorm(graph: Graph, package: str) -> None:
    assert storm_paths(graph, package) == []


def test_no_two_packages_of_the_library_import_each_other(graph: Graph) -> None:
    assert mutual_packages(graph) == []


def test_the_layers_contract_holds() -> None:
    # import-linter's ``layers`` contract (pyproject.toml), on the source tree.
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint), "--config", str(SRC.parent / "pyproject.toml"), "--no-cache"],
        cwd=SRC.parent,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kept, 0 broken" in done.stdout and "BROKEN" not in done.stdout


def test_flights_schema_is_pure(graph: Graph) -> None:
    # The flights row schema shared by spouts, bolts and offline jobs: the standard
    # library only, and no other module of src/.
    assert graph.edges("demos.flights_schema") == set()
    external = {i.name.split(".")[0] for i in graph.external("demos.flights_schema")}
    assert external <= sys.stdlib_module_names


# The checker itself, on small hand-made trees.


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "a/__init__.py": "",
            "a/one.py": "from a.two import X\n",
            "a/two.py": "X = 1\ndef f():\n    from a import one\n    return one\n",
            "a/three.py": "from . import two\n",
        },
    )
    found = cycles(build_graph(root))
    assert len(found) == 1
    assert "['a.one', 'a.two']" in found[0]
    assert "a.two -> a.one (two.py:3)" in found[0]
    assert "a.one -> a.two (one.py:1)" in found[0]


def test_relative_imports_and_packages_resolve(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "p/__init__.py": "",
            "p/q/__init__.py": "",
            "p/q/r.py": "from ..s import thing\nfrom . import t\n",
            "p/q/t.py": "",
            "p/s.py": "thing = 1\n",
        },
    )
    graph = build_graph(root)
    assert graph.edges("p.q.r") == {"p.s", "p.q.t"}
    assert cycles(graph) == []


def test_a_module_importing_itself_is_a_cycle(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"m.py": "import m\n"})
    assert len(cycles(build_graph(root))) == 1


def test_core_and_jobs_rules_catch_indirect_and_nested_imports(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "elastorm/__init__.py": "",
            "elastorm/core/__init__.py": "",
            "elastorm/core/m.py": "def f():\n    import kazoo.client\n    from bolts import x\n"
            "from elastorm.storm import y\n",
            "elastorm/storm.py": "from bolts import x\n",
            "bolts/__init__.py": "",
            "bolts/x.py": "from streamparse import Bolt\n",
            "jobs/__init__.py": "",
            "jobs/offline.py": "import bolts.x\n",
            "jobs/clean.py": "import json\n",
        },
    )
    graph = build_graph(root)
    assert sorted(core_violations(graph)) == [
        "elastorm.core.m imports bolts.x (line 3)",
        "elastorm.core.m imports elastorm.storm (line 4)",
        "elastorm.core.m imports kazoo.client (line 2)",
    ]
    assert sorted(library_violations(graph)) == [
        "elastorm.core.m imports bolts.x (line 3)",
        "elastorm.storm imports bolts.x (line 1)",
    ]
    assert storm_paths(graph, "jobs") == [
        "jobs.offline reaches Storm: jobs.offline -> bolts.x -> streamparse (line 1)"
    ]


def test_mutual_packages_are_found_and_counted(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "elastorm/__init__.py": "",
            "elastorm/config.py": "",
            "elastorm/zk/__init__.py": "",
            "elastorm/zk/a.py": "from elastorm.ctl.b import X\nfrom elastorm import config\n",
            "elastorm/ctl/__init__.py": "",
            "elastorm/ctl/b.py": "X = 1\ndef f():\n    from elastorm.zk import a\n",
            "elastorm/ctl/c.py": "from elastorm.config import Y\n",
        },
    )
    graph = build_graph(root)
    assert package_imports(graph) == {
        ("elastorm.zk", "elastorm.ctl"): 1,
        ("elastorm.zk", "elastorm.config"): 1,
        ("elastorm.ctl", "elastorm.zk"): 1,
        ("elastorm.ctl", "elastorm.config"): 1,
    }
    assert mutual_packages(graph) == ["elastorm.ctl <-> elastorm.zk (1 and 1 imports)"]


if __name__ == "__main__":
    # The package-level import counts and the mutual pairs (target: none), of this
    # checkout's src/ or of the src/ folder given (e.g. an older commit's, from git archive).
    g = build_graph(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
    for (a, b), n in sorted(package_imports(g).items()):
        print(f"{a:24} -> {b:24} {n:3}")
    pairs = mutual_packages(g)
    print(f"package pairs importing each other: {len(pairs)}")
    for line in pairs:
        print("  " + line)
