"""The README's command table says what the CLI accepts, and ``elastorm local/run`` find
a topology's driver in the project the way streamparse finds ``topologies/NAME.py``
(no servers involved)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from elastorm.errors import UserError
from elastorm.runtime import cli
from elastorm.runtime.drivers import (
    DriverArgs,
    TimedRun,
    driver_names,
    load_driver,
    project_sections,
    topology_names,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_readme_command_table_lists_exactly_the_project_drivers() -> None:
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `elastorm ")]
    local = [r for r in rows if r.startswith("| `elastorm local NAME`")]
    assert len(local) == 1, rows
    assert any(r.startswith("| `elastorm run -e ENV NAME`") for r in rows)
    listed = re.search(r"This project's drivers: `([\w\\|]+)`", local[0]).group(1)
    assert listed.split("\\|") == driver_names(ROOT)


@pytest.mark.parametrize("command", ["local", "run"])
def test_cli_takes_any_name_and_the_driver_lookup_names_what_exists(command: str) -> None:
    parser = cli.build_parser()
    assert parser.parse_args([command, "flight_load"]).topology == "flight_load"
    with pytest.raises(UserError) as exc:
        load_driver(ROOT, "flight_load", DriverArgs())
    message = str(exc.value)
    assert "no topology 'flight_load'" in message
    assert all(name in message for name in topology_names(ROOT))


def test_every_driver_of_the_project_loads_and_names_its_topology() -> None:
    args = DriverArgs(limit=7, strategy="even")
    for name in driver_names(ROOT):
        driver = load_driver(ROOT, name, args)
        # its own topology, or, for a scenario of another one, that topology
        assert driver.name == name or (name == "quickstart" and driver.name == "flights_elastic")
        assert driver.name in topology_names(ROOT)
        assert driver.sections, name
    assert "quickstart" not in topology_names(ROOT)
    assert load_driver(ROOT, "flights", args).limit == 7
    assert load_driver(ROOT, "shift", args).strategy == "even"
    assert load_driver(ROOT, "smoke", DriverArgs()).count == 1000


def test_a_topology_without_a_driver_is_a_timed_run() -> None:
    assert "throughput_plain" in topology_names(ROOT)
    assert "throughput_plain" not in driver_names(ROOT)
    driver = load_driver(ROOT, "throughput_plain", DriverArgs())
    assert isinstance(driver, TimedRun) and driver.sections == ()
    lines: list[str] = []
    driver.wait("/unused", 0.05, lines.append)
    assert lines and driver.outcome("/unused").ok


def test_a_driver_module_without_the_entry_function_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another project in this process: its own ``drivers`` package, its own sys.path.
    monkeypatch.setattr(sys, "path", list(sys.path))
    for module in [m for m in sys.modules if m == "drivers" or m.startswith("drivers.")]:
        monkeypatch.delitem(sys.modules, module)
    (tmp_path / "topologies").mkdir()
    (tmp_path / "topologies" / "plain_job.py").write_text("")
    (tmp_path / "drivers").mkdir()
    (tmp_path / "drivers" / "__init__.py").write_text("")
    (tmp_path / "drivers" / "plain_job.py").write_text("X = 1\n")
    assert driver_names(tmp_path) == ["plain_job"]
    with pytest.raises(UserError, match=r"defines no make_driver\(args: DriverArgs\)"):
        load_driver(tmp_path, "plain_job", DriverArgs())


def test_project_sections_are_the_drivers_declared_ones_in_order() -> None:
    from demos.options import EXAMPLE_SECTIONS

    assert project_sections(ROOT) == list(EXAMPLE_SECTIONS)
