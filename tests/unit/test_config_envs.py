"""config.json's streamparse envs: a typo in a key fails ``elastorm check`` (and every
other command) with one line naming the env and the key (no servers involved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from project_copy import PROJECT, copy_project, edit_config

from elastorm.errors import UserError
from elastorm.runtime import cli
from elastorm.runtime.config import check_envs, load_config


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    copy_project(tmp_path)
    monkeypatch.setenv("ELASTORM_PROJECT", str(tmp_path))
    return tmp_path


_edit = edit_config


def test_shipped_envs_are_valid() -> None:
    check_envs(json.loads((PROJECT / "config.json").read_text())["envs"])


def test_plain_check_names_the_env_and_the_misspelt_key(project: Path, capsys) -> None:
    def typo(raw):
        raw["envs"]["cluster"]["use_virtualenvv"] = raw["envs"]["cluster"].pop("use_virtualenv")

    _edit(project, typo)
    assert cli.main(["check"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(
        f"elastorm check: error: {project / 'config.json'}: envs.cluster: unknown key "
        "'use_virtualenvv'; did you mean 'use_virtualenv'? (streamparse knows: user, nimbus,"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda env: env.update(use_virtualenv="false"), r"envs\.local\.use_virtualenv must be "),
        (lambda env: env.update(workers="127.0.0.1"), r"envs\.local\.workers must be a list"),
        (lambda env: env.update(log={"levl": "info"}), r"envs\.local\.log: unknown key 'levl'"),
        (lambda env: env.update(log={"max_bytes": True}), r"envs\.local\.log\.max_bytes must be"),
        (lambda env: env.update(nimbus="127.0.0.1:nimbus"), r"envs\.local\.nimbus must be host"),
        (lambda env: env.pop("nimbus"), r"envs\.local: missing key 'nimbus'"),
        (
            lambda env: env.pop("use_virtualenv"),
            r"envs\.local: use_virtualenv is true .* virtualenv_root is missing",
        ),
        (lambda env: env.update(optons={}), r"unknown key 'optons'; did you mean 'options'\?"),
    ],
)
def test_env_mistakes_are_named(project: Path, change, message: str) -> None:
    _edit(project, lambda raw: change(raw["envs"]["local"]))
    with pytest.raises(UserError, match=message):
        load_config(project)


def test_every_key_streamparse_reads_is_accepted() -> None:
    env = {
        "user": "storm",
        "nimbus": "nimbus.example:6627",
        "workers": ["w1"],
        "use_ssh_for_nimbus": True,
        "ssh_port": 22,
        "ssh_password": "",
        "use_virtualenv": True,
        "install_virtualenv": False,
        "virtualenv_root": "/data/venvs",
        "virtualenv_name": "elastorm",
        "virtualenv_flags": "-p python3",
        "log": {
            "path": "/var/log",
            "file": "x.log",
            "max_bytes": 1,
            "backup_count": 2,
            "level": "info",
        },
        "log_path": "/var/log",
        "log_file": "x.log",
        "serializer": "json",
        "options": {"topology.workers": 2},
    }
    check_envs({"prod": env})
