"""docs/tutorial.md shows the user project that tests/integration/test_user_project.py runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "integration" / "user_project"
LISTED = sorted(
    p.relative_to(PROJECT).as_posix()
    for p in PROJECT.rglob("*")
    if p.is_file() and p.stat().st_size and "__pycache__" not in p.parts
)


def test_the_tutorial_lists_every_file_of_the_user_project() -> None:
    assert {"src/bolts/wordcount.py", "topologies/wordcount.py", "config.json"} <= set(LISTED)


#: The second page's files (the windowed join): listed there, not in tutorial.md.
PART_2 = ["src/bolts/orderspaid.py", "src/bolts/shopsink.py", "src/spouts/shop.py"]
PART_2 += ["topologies/shop.py"]


@pytest.mark.parametrize("name", LISTED)
def test_each_listing_is_the_file_the_integration_test_runs(name: str) -> None:
    page = "tutorial_windows.md" if name in PART_2 else "tutorial.md"
    tutorial = (ROOT / "docs" / page).read_text()
    assert (PROJECT / name).read_text().rstrip() + "\n```" in tutorial, name


def test_the_second_page_lists_its_files() -> None:
    assert set(PART_2) <= set(LISTED)


@pytest.mark.parametrize(
    "name", ["wordcount", "wordfiles", "windowcount", "windowkinds", "shop", "chained"]
)
def test_the_user_topologies_fit_the_cluster_the_tutorial_starts(name: str, monkeypatch) -> None:
    """Each builds (``sparse submit`` loads it so) with every keyed bolt at one task per
    supervisor of the default ``elastorm cluster up``: none waits on an unbound node."""
    from elastorm.config import ProjectConfig
    from elastorm.storm.elastic import KeyedOperator

    monkeypatch.syspath_prepend(str(PROJECT / "src"))
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("bolts", "spouts")]:
        monkeypatch.delitem(sys.modules, loaded)  # this repository's own bolts/ and spouts/
    spec = importlib.util.spec_from_file_location(f"user_{name}", PROJECT / f"topologies/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    topology = next(v for v in vars(module).values() if getattr(v, "thrift_bolts", None))
    keyed = [s for s in topology.specs if issubclass(s.component_cls, KeyedOperator)]
    assert keyed
    assert {s.par for s in keyed} == {ProjectConfig().cluster_supervisors}


def test_the_commands_the_integration_test_runs_are_the_pages_verbatim() -> None:
    """``tests/integration/tutorial_commands.py`` holds what test_user_project.py runs
    through bash, as a user copying from the page would (sections 6 to 10)."""
    path = ROOT / "tests" / "integration" / "tutorial_commands.py"
    spec = importlib.util.spec_from_file_location("tutorial_commands", path)
    commands = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(commands)
    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    assert len(commands.ALL) >= 10
    for command in commands.ALL:
        assert command in tutorial, command
    # Every sparse command carries LEIN_ROOT=1, so each works alone as root.
    for line in tutorial.splitlines():
        if "venv/bin/sparse " in line and not line.startswith("`"):
            assert line.startswith("LEIN_ROOT=1 venv/bin/sparse "), line
