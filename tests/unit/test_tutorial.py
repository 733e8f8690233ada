"""docs/tutorial.md shows the user project that tests/integration/test_user_project.py runs."""

from __future__ import annotations

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


@pytest.mark.parametrize("name", LISTED)
def test_each_listing_is_the_file_the_integration_test_runs(name: str) -> None:
    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    assert (PROJECT / name).read_text().rstrip() + "\n```" in tutorial, name
