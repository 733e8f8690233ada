"""elastorm's plugins on a Storm home: installed one way into the project's own home and
an operator's, and the storm.yaml lines printed are the ones the project's daemons run."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from elastorm.errors import UserError
from elastorm.runtime.cluster import nimbus_daemon, supervisor_daemon
from elastorm.runtime.config import load_config
from elastorm.runtime.plugins import (
    EVERY_NODE,
    NIMBUS,
    PLUGIN_DIR,
    PLUGIN_JAR,
    install_plugins,
    storm_home_version,
    storm_yaml_lines,
    supervisor_settings,
)
from elastorm.runtime.storm_home import classpath

PROJECT = Path(__file__).resolve().parents[2]


def parse_lines(text: str) -> dict[str, object]:
    """The printed lines back as settings (each ``key: <JSON>``, as Storm's YAML reads)."""
    pairs = (line.split(": ", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: json.loads(value) for key, value in pairs}


def stock_home(tmp_path: Path, version: str = "2.8.3") -> Path:
    """A Storm home as Storm's own layout has it: its jars in lib/, nothing of elastorm."""
    home = tmp_path / f"apache-storm-{version}"
    (home / "lib").mkdir(parents=True)
    (home / "lib" / f"storm-server-{version}.jar").write_bytes(b"PK")
    return home


def built_jvm(tmp_path: Path) -> Path:
    jvm = tmp_path / "jvm"
    (jvm / "elastorm-daemon").mkdir(parents=True)
    (jvm / "elastorm-daemon" / PLUGIN_JAR).write_bytes(b"PK elastorm")
    return jvm


def test_the_plugin_jar_is_copied_into_extlib_daemon_of_a_home_of_the_pinned_version(
    tmp_path,
) -> None:
    home, jvm = stock_home(tmp_path), built_jvm(tmp_path)
    assert storm_home_version(home) == "2.8.3"
    jar = install_plugins(home, jvm, "2.8.3")
    assert jar == home / PLUGIN_DIR / PLUGIN_JAR and not jar.is_symlink()
    assert jar.read_bytes() == b"PK elastorm"
    # Again (an upgrade of elastorm): replaced, not refused; the project's own home links.
    assert install_plugins(home, jvm, "2.8.3", link=True).is_symlink()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda tmp: stock_home(tmp, "2.6.0"), "runs Storm 2.6.0"),
        (lambda tmp: tmp / "nowhere", "is not a directory"),
        (lambda tmp: tmp, "no lib/storm-server"),
    ],
)
def test_a_home_of_another_storm_or_not_a_home_is_refused_in_one_line(tmp_path, make, why) -> None:
    with pytest.raises(UserError, match=why):
        install_plugins(make(tmp_path), built_jvm(tmp_path), "2.8.3")


def test_a_missing_plugin_jar_says_to_run_setup(tmp_path) -> None:
    with pytest.raises(UserError, match="elastorm setup"):
        install_plugins(stock_home(tmp_path), tmp_path / "jvm", "2.8.3")


def test_the_printed_storm_yaml_is_what_the_projects_own_daemons_run_with(tmp_path) -> None:
    printed = parse_lines(storm_yaml_lines("supervisor-0"))
    assert printed == EVERY_NODE | NIMBUS | supervisor_settings("supervisor-0")
    cfg = dataclasses.replace(load_config(PROJECT), home=tmp_path / "home")
    nimbus = nimbus_daemon(cfg, 16727).storm_conf
    supervisor = supervisor_daemon(cfg, 0, 16727).storm_conf
    assert nimbus.items() >= (EVERY_NODE | NIMBUS).items()
    assert supervisor.items() >= (EVERY_NODE | supervisor_settings("supervisor-0")).items()


def test_storms_daemons_get_extlib_daemon_on_their_classpath_and_other_libs_do_not() -> None:
    home = Path("/storm")
    assert classpath(home).split(":") == ["/storm/lib/*", f"/storm/{PLUGIN_DIR}/*"]
    assert classpath(home, lib="lib-zookeeper") == "/storm/lib-zookeeper/*"


def test_the_command_prints_the_lines_without_installing_with_print_only(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "elastorm.runtime.cli", "storm-plugins", "--storm-home",
         str(tmp_path), "--print-only"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert parse_lines(out)["storm.scheduler"] == "elastorm.jvm.ElasticScheduler"
    assert not (tmp_path / PLUGIN_DIR).exists()
