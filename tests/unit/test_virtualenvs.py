"""``virtualenvs/<topology>.txt``: what each topology's Python components need on a worker.

streamparse 5 (``sparse submit`` with ``use_virtualenv``) pip-installs
``<virtualenv_specs>/<topology>.txt`` into ``<virtualenv_root>/<topology>`` on
every worker over ssh, and refuses a file that does not name streamparse
(``streamparse.cli.update_virtualenv.create_or_update_virtualenvs``).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_import_graph import SRC, build_graph

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = sorted(p.stem for p in (ROOT / "topologies").glob("*.py") if p.stem != "__init__")
VIRTUALENVS = ROOT / "virtualenvs"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CONSTRAINTS = {
    canonicalize_name(name): version
    for name, _, version in (
        line.partition("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
}


def requirements(topology: str) -> dict[str, Requirement]:
    """The requirement lines of ``virtualenvs/<topology>.txt`` by canonical name."""
    found = {}
    for line in (VIRTUALENVS / f"{topology}.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        req = Requirement(line)
        found[canonicalize_name(req.name)] = req
    return found


def test_config_points_streamparse_at_virtualenvs() -> None:
    config = json.loads((ROOT / "config.json").read_text())
    assert config["virtualenv_specs"].rstrip("/") == "virtualenvs"
    assert config["topology_specs"].rstrip("/") == "topologies"


def test_every_topology_has_a_requirements_file_and_every_file_a_topology() -> None:
    assert TOPOLOGIES, "no topologies found"
    files = sorted(p.stem for p in VIRTUALENVS.glob("*.txt"))
    assert files == TOPOLOGIES


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_file_names_streamparse_as_sparse_submit_requires(topology: str) -> None:
    # sparse submit's own check: some line contains "streamparse".
    text = (VIRTUALENVS / f"{topology}.txt").read_text()
    assert any("streamparse" in line for line in text.splitlines())
    assert "streamparse" in requirements(topology)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_file_installs_this_elastorm_from_a_wheel_or_git(topology: str) -> None:
    # A direct reference, never a bare name that pip would look up on an index.
    url = requirements(topology)["elastorm"].url or ""
    wheel = f"elastorm-{PYPROJECT['version']}-py3-none-any.whl"
    assert (url.startswith("file:///") and url.endswith("/" + wheel)) or url.startswith("git+"), (
        f"virtualenvs/{topology}.txt: elastorm must be file:///.../{wheel} or git+..., got {url!r}"
    )


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_file_pins_every_runtime_dependency_to_constraints(topology: str) -> None:
    listed = requirements(topology)
    for spec in PYPROJECT["dependencies"]:
        dep = Requirement(spec)
        name = canonicalize_name(dep.name)
        assert name in listed, f"virtualenvs/{topology}.txt lacks {dep.name} (pyproject.toml)"
        pinned = str(listed[name].specifier)
        expected = f"=={CONSTRAINTS[name]}"
        assert pinned == expected, (
            f"virtualenvs/{topology}.txt pins {dep.name}{pinned}, constraints.txt has "
            f"{expected}: update the virtualenvs/ files after bin/lock"
        )
        assert dep.specifier.contains(CONSTRAINTS[name]), (dep, CONSTRAINTS[name])


@functools.cache
def _src_graph():
    return build_graph(SRC)


def _component_modules(topology: str) -> set[str]:
    """The third-party packages that a topology definition's modules of src/ import,
    directly or through other modules of src/."""
    graph = _src_graph()
    tree = ast.parse((ROOT / "topologies" / f"{topology}.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    seen: set[str] = set()
    todo = [n for n in names if n in graph.files]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.edges(module))
    return {i.name.split(".")[0] for m in seen for i in graph.external(m)} - sys.stdlib_module_names


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_file_covers_every_package_the_components_import(topology: str) -> None:
    imported = _component_modules(topology)
    assert "streamparse" in imported  # the components were found
    dists = _distributions()
    listed = requirements(topology)
    for module in sorted(imported):
        provided_by = {canonicalize_name(d) for d in dists.get(module, [])}
        assert provided_by & set(listed), (
            f"topology {topology} imports {module} (from {sorted(provided_by)}), "
            f"not in virtualenvs/{topology}.txt"
        )
