"""config.json validation and the CLI's one-line errors (no servers involved)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from project_copy import PROJECT, copy_project, edit_config

from elastorm.config import ProjectConfig
from elastorm.errors import UserError
from elastorm.runtime import cli
from elastorm.runtime.config import check_storm_versions, env_nimbus, load_config


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's config files to break."""
    return copy_project(tmp_path)


_edit = edit_config


def test_shipped_config_is_valid_and_pins_one_storm_version() -> None:
    cfg = load_config(PROJECT)
    assert cfg.storm_version == check_storm_versions(PROJECT)
    assert cfg.storm_home.name == f"storm-{cfg.storm_version}"


def test_missing_elastorm_section_falls_back_to_defaults(project: Path) -> None:
    _edit(project, lambda raw: raw.pop("elastorm"))
    cfg = load_config(project)
    assert cfg.zookeeper_port == ProjectConfig().zookeeper_port == 12181
    assert cfg.home == project / ".elastorm"


def test_missing_envs_is_named(project: Path) -> None:
    _edit(project, lambda raw: raw.pop("envs"))
    with pytest.raises(UserError, match="missing key 'envs'"):
        load_config(project)


def test_unknown_key_is_named(project: Path) -> None:
    _edit(project, lambda raw: raw["elastorm"].update(zookeper_port=1))
    with pytest.raises(
        UserError,
        match="unknown option elastorm.zookeper_port; did you mean elastorm.zookeeper_port",
    ):
        load_config(project)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("zookeeper_port", "2181", "zookeeper_port = '2181': expected a port in 1024..65000"),
        ("zookeeper_port", 80, "expected a port in 1024..65000"),
        ("cluster_supervisors", 0, "expected an integer in 1..16"),
        ("local_supervisors", True, "expected an integer in 1..16"),
        ("worker_heap_mb", 64, "expected an integer >= 128"),
        ("home", 7, "home = 7: expected a path"),
    ],
)
def test_bad_values_are_rejected(project: Path, key: str, value, message: str) -> None:
    _edit(project, lambda raw: raw["elastorm"].update({key: value}))
    with pytest.raises(UserError, match=message):
        load_config(project)


def test_invalid_json_names_the_line(project: Path) -> None:
    (project / "config.json").write_text('{"envs": {\n  "local": }')
    with pytest.raises(UserError, match="not valid JSON .* line 2"):
        load_config(project)


def test_storm_version_mismatch_lists_every_pin(project: Path) -> None:
    _edit(project, lambda raw: raw["elastorm"].update(storm_version="2.6.0"))
    with pytest.raises(UserError, match=r"Storm version mismatch: config.json=2.6.0, project.clj="):
        check_storm_versions(project)


def test_env_nimbus_parses_and_rejects_unknown_env(project: Path) -> None:
    host, port = json.loads((project / "config.json").read_text())["envs"]["local"]["nimbus"].split(
        ":"
    )
    assert env_nimbus(project, "local") == (host, int(port))
    with pytest.raises(UserError, match="no env 'staging'"):
        env_nimbus(project, "staging")


def test_cli_prints_one_line_not_a_traceback(project: Path, monkeypatch, capsys) -> None:
    _edit(project, lambda raw: raw["elastorm"].update(storm_version="2.6.0"))
    monkeypatch.setenv("ELASTORM_PROJECT", str(project))
    monkeypatch.chdir(project)
    assert cli.main(["check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("elastorm check: error: Storm version mismatch")
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_every_subcommand_has_help(capsys) -> None:
    parser = cli.build_parser()
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    names = sorted(actions[0].choices)
    assert {"setup", "local", "run", "jar", "cluster", "check"} <= set(names)
    for name in names:
        with pytest.raises(SystemExit) as exc:
            cli.main([name, "--help"])
        assert exc.value.code == 0
        assert "usage: elastorm " + name in capsys.readouterr().out


def test_check_names_a_missing_msgpack(project: Path, monkeypatch, capsys) -> None:
    """Without msgpack pystorm falls back to a serializer that cannot read: check says so."""
    monkeypatch.setenv("ELASTORM_PROJECT", str(project))
    monkeypatch.chdir(project)
    monkeypatch.setattr("shutil.which", lambda tool: f"/usr/bin/{tool}")
    assert cli.main(["check"]) == 0
    assert "default multilang encoding, msgpack" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "msgpack", None)  # import msgpack now fails
    assert cli.main(["check"]) == 2
    err = capsys.readouterr().err
    assert "elastorm.multilang.encoding is 'msgpack' but" in err
    assert "cannot import msgpack" in err
