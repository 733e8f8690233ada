"""The README's command table says what the CLI accepts (no servers involved)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastorm.runtime import cli
from elastorm.runtime.local_cmd import TOPOLOGIES

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize("command", ["local", "run"])
def test_readme_command_table_lists_exactly_the_accepted_topologies(command: str) -> None:
    rows = [
        line
        for line in README.read_text().splitlines()
        if line.startswith(f"| `elastorm {command} ")
    ]
    assert len(rows) == 1, rows
    listed = re.match(rf"\| `elastorm {command} (?:-e ENV )?([\w\\|]+)`", rows[0]).group(1)
    assert tuple(listed.split("\\|")) == TOPOLOGIES


@pytest.mark.parametrize("command", ["local", "run"])
def test_cli_accepts_every_topology_and_names_them_on_a_typo(command: str, capsys) -> None:
    parser = cli.build_parser()
    for topology in TOPOLOGIES:
        assert parser.parse_args([command, topology]).topology == topology
    with pytest.raises(SystemExit) as exc:
        parser.parse_args([command, "flight_load"])
    assert exc.value.code == 2
    assert "flights_load" in capsys.readouterr().err
