"""Every CLI error path exits 2 with one line on stderr (no servers: ports where
nothing, or something that is not Nimbus, listens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from project_copy import copy_project, edit_config, free_port, serving

from elastorm.runtime import cli, cluster_cmd


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the project whose ZooKeeper and cluster Nimbus ports are unused."""
    copy_project(tmp_path)

    def unused_ports(raw: dict) -> None:
        raw["elastorm"]["zookeeper_port"] = free_port()
        raw["envs"]["cluster"]["nimbus"] = f"127.0.0.1:{free_port()}"

    edit_config(tmp_path, unused_ports)
    monkeypatch.setenv("ELASTORM_PROJECT", str(tmp_path))
    return tmp_path


def _nimbus(project: Path) -> str:
    return json.loads((project / "config.json").read_text())["envs"]["cluster"]["nimbus"]


def _one_error_line(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"elastorm {command}: error: ")
    assert "Traceback" not in err
    return lines[0]


def test_cluster_status_with_nothing_running_exits_2(project: Path, capsys) -> None:
    assert cli.main(["cluster", "status"]) == 2
    out, err = capsys.readouterr()
    line = _one_error_line(err, "cluster")
    assert line == (
        f"elastorm cluster: error: Nimbus at {_nimbus(project)} is unreachable (is the cluster up?)"
    )
    assert "zookeeper srvr   no answer" in out


def test_cluster_status_json_still_prints_json_and_exits_2(project: Path, capsys) -> None:
    assert cli.main(["cluster", "status", "--json"]) == 2
    out, err = capsys.readouterr()
    info = json.loads(out)
    assert info["zookeeper_ok"] is False and "unreachable" in info["nimbus"]["error"]
    _one_error_line(err, "cluster")


def test_cluster_status_against_a_port_that_is_not_nimbus_exits_2(project: Path, capsys) -> None:
    """Something accepts on the Nimbus port and hangs up: one line, not a Thrift traceback."""
    with serving(lambda conn: None) as port:
        edit_config(project, lambda raw: raw["envs"]["cluster"].update(nimbus=f"127.0.0.1:{port}"))
        assert cli.main(["cluster", "status"]) == 2
    line = _one_error_line(capsys.readouterr().err, "cluster")
    assert f"Nimbus at 127.0.0.1:{port} did not answer getClusterInfo" in line


def test_an_unexpected_exception_is_one_line_exit_2(project: Path, monkeypatch, capsys) -> None:
    def broken(cfg):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(cluster_cmd, "status", broken)
    assert cli.main(["cluster", "status"]) == 2
    line = _one_error_line(capsys.readouterr().err, "cluster")
    assert line == (
        "elastorm cluster: error: RuntimeError: boom | second line "
        "(run `elastorm -v ...` for the traceback)"
    )


def test_verbose_shows_the_traceback_and_still_exits_2(project: Path, monkeypatch, capsys):
    def broken(cfg):
        raise RuntimeError("boom")

    monkeypatch.setattr(cluster_cmd, "status", broken)
    assert cli.main(["-v", "cluster", "status"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.strip().splitlines()[-1] == "elastorm cluster: error: RuntimeError: boom"


def test_cluster_up_with_no_supervisors_is_refused_before_starting_anything(
    project: Path, capsys
) -> None:
    assert cli.main(["cluster", "up", "--supervisors", "-1"]) == 2
    line = _one_error_line(capsys.readouterr().err, "cluster")
    assert line.endswith("--supervisors must be at least 1, got -1")
    assert not (project / ".elastorm").exists()  # no Storm home, no daemon


def test_cluster_up_refuses_a_zookeeper_it_did_not_start(project: Path, capsys) -> None:
    """Another checkout's (or a leftover) ZooKeeper on our port: its Storm state would
    leak into this cluster and `down --wipe` could not clear it."""

    def answer_srvr(conn) -> None:  # what a serving ZooKeeper says to `srvr`
        conn.recv(16)
        conn.sendall(b"Zookeeper version: 3.8.4\nMode: standalone\n")

    with serving(answer_srvr) as port:
        edit_config(project, lambda raw: raw["elastorm"].update(zookeeper_port=port))
        assert cli.main(["cluster", "up"]) == 2
    line = _one_error_line(capsys.readouterr().err, "cluster")
    assert f"a ZooKeeper this project did not start answers on 127.0.0.1:{port}" in line
    assert not (project / ".elastorm" / "storm-2.8.3").exists()  # refused before setup


def test_cluster_up_with_zero_supervisors_is_refused_too(project: Path, capsys) -> None:
    assert cli.main(["cluster", "up", "--supervisors", "0"]) == 2
    line = _one_error_line(capsys.readouterr().err, "cluster")
    assert line.endswith("--supervisors must be at least 1, got 0")
    assert not (project / ".elastorm").exists()


def test_a_kill_whose_client_failed_is_tried_again_while_nimbus_lists_the_topology(
    monkeypatch, tmp_path
) -> None:
    """chaos join/zk-stop at 613145f: Nimbus took the kill, then refused one of the
    client's polls on a loaded machine, and the run failed on ``sparse kill failed``."""
    from elastorm.errors import UserError
    from elastorm.runtime import config as runtime_config
    from elastorm.runtime import nimbus

    # Nimbus refused Thrift for over 6 s after a ZooKeeper restart (join/zk-stop, 20d59b4)
    assert (nimbus.KILL_ATTEMPTS - 1) * nimbus.KILL_RETRY_SECS >= 30
    calls, listings = [], iter([True, False])
    monkeypatch.setattr(runtime_config, "env_nimbus", lambda project, env: ("127.0.0.1", 1))
    monkeypatch.setattr(nimbus, "KILL_RETRY_SECS", 0.0)

    def sparse(project, *args, **kw):
        calls.append(args[0])
        raise UserError("sparse kill failed: TTransportException(Could not connect)")

    monkeypatch.setattr(nimbus, "sparse", sparse)
    monkeypatch.setattr(
        nimbus,
        "cluster_summary",
        lambda host, port: {"topologies": [{"name": "t"}] if next(listings) else []},
    )
    nimbus.kill(tmp_path, "cluster", "t")  # failed twice; gone after the second
    assert calls == ["kill", "kill"]
    listings = iter([True, True, True])
    monkeypatch.setattr(
        nimbus, "cluster_summary", lambda host, port: {"topologies": [{"name": "t"}]}
    )
    with pytest.raises(UserError, match="sparse kill failed"):
        nimbus.kill(tmp_path, "cluster", "t")  # still listed after every attempt
    assert calls.count("kill") == 2 + nimbus.KILL_ATTEMPTS


def test_an_unreadable_secret_file_is_one_line_naming_it(project: Path, monkeypatch, capsys):
    """``--secret-file`` (or ``$ELASTORM_SECRET_FILE``) is read before ZooKeeper is asked."""
    missing = project / "no-such.secret"
    command = ["migrate", "--topology", "t", "--group", "0", "--zookeeper", "127.0.0.1:1"]
    assert cli.main([*command, "--secret-file", str(missing)]) == 2
    line = _one_error_line(capsys.readouterr().err, "migrate")
    assert f"secret file {missing} is unreadable" in line
    empty = project / "empty.secret"
    empty.write_text("\n")
    monkeypatch.setenv("ELASTORM_SECRET_FILE", str(empty))
    assert cli.main(["state", "--topology", "t", "--operator", "op", "--key", "k",
                     "--zookeeper", "127.0.0.1:1"]) == 2  # fmt: skip
    assert f"secret file {empty} is empty" in _one_error_line(capsys.readouterr().err, "state")
