"""The project's configuration: ``config.json`` (streamparse envs + an ``elastorm`` section).

The ``elastorm`` section's keys are options like the topology's, declared once with
their defaults and checks in :class:`elastorm.config.ProjectConfig`; unknown or
ill-typed keys fail with a one-line ``UserError``. The Storm version is pinned in
three places that must agree: ``config.json`` (``elastorm.storm_version``),
``project.clj`` (streamparse reads it) and ``elastorm/jvm/pom.xml`` (what Maven
assembles; package data of elastorm).

The project is any streamparse project: the directory holding ``config.json`` (the
working directory or one of its parents), so elastorm works from a user's own project
as well as from this repository.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

from elastorm.config import ConfigError, ProjectConfig
from elastorm.errors import UserError

#: The Maven sources of the JVM side (poms, LocalRunner, the multilang serializer),
#: shipped inside the package; ``elastorm setup`` builds them into ``<home>/jvm``.
JVM_SOURCES = Path(__file__).resolve().parents[1] / "jvm"

#: Every key streamparse 5 reads from an env of config.json, with its JSON type
#: (``streamparse.util``: nimbus, workers, user, ssh_port, ssh_password,
#: use_ssh_for_nimbus, log, log_path, serializer; ``streamparse.cli.common``:
#: options, log_file and the virtualenv options). Anything else is a typo: streamparse
#: would ignore it silently.
STREAMPARSE_ENV_KEYS: dict[str, type] = {
    "user": str,
    "nimbus": str,
    "workers": list,
    "use_ssh_for_nimbus": bool,
    "ssh_port": int,
    "ssh_password": str,
    "use_virtualenv": bool,
    "install_virtualenv": bool,
    "virtualenv_root": str,
    "virtualenv_name": str,
    "virtualenv_flags": str,
    "log": dict,
    "log_path": str,
    "log_file": str,
    "serializer": str,
    "options": dict,
}

#: The keys of an env's ``log`` object (``streamparse.cli.common.resolve_options``).
STREAMPARSE_LOG_KEYS: dict[str, type] = {
    "path": str,
    "file": str,
    "max_bytes": int,
    "backup_count": int,
    "level": str,
}


@dataclass(frozen=True, kw_only=True)
class ElastormConfig(ProjectConfig, topology=False):
    """The validated ``elastorm`` section plus where the project lives (``home``
    made absolute against it)."""

    project: Path

    @property
    def storm_home(self) -> Path:
        """Where the Storm home assembled from Maven Central lives."""
        return self.home / f"storm-{self.storm_version}"

    @property
    def jvm_build(self) -> Path:
        """Where Maven builds ``JVM_SOURCES`` (one folder per module's artifact id)."""
        return self.home / "jvm"

    @property
    def logs(self) -> Path:
        """One folder for every daemon's log."""
        return self.home / "logs"

    @property
    def run(self) -> Path:
        """Pid files and per-daemon state."""
        return self.home / "run"

    @property
    def zookeeper(self) -> str:
        """This project's ZooKeeper as ``host:port`` (on loopback): what the commands
        and drivers connect to unless told otherwise."""
        return f"127.0.0.1:{self.zookeeper_port}"


def source_checkout() -> Path | None:
    """The source checkout elastorm runs from (an editable install: ``src/elastorm``
    under a ``pyproject.toml``), else None (installed from a wheel)."""
    checkout = Path(__file__).resolve().parents[3]
    return checkout if (checkout / "pyproject.toml").is_file() else None


def project_root() -> Path:
    """The streamparse project elastorm works on.

    ``$ELASTORM_PROJECT`` if set; else the working directory or its nearest parent that
    holds a ``config.json``; else this source checkout when elastorm runs from one
    (an editable install). ``UserError`` if there is none.
    """
    env = os.environ.get("ELASTORM_PROJECT")
    if env:
        if not (Path(env) / "config.json").is_file():
            raise UserError(f"ELASTORM_PROJECT={env} has no config.json")
        return Path(env).resolve()
    cwd = Path.cwd().resolve()
    checkout = source_checkout()
    for path in [cwd, *cwd.parents, *([checkout] if checkout else [])]:
        if (path / "config.json").is_file():
            return path
    raise UserError(
        f"no streamparse project: no config.json in {cwd} or its parents "
        "(run elastorm in your project's directory, or set ELASTORM_PROJECT)"
    )


def load_config(project: Path | None = None) -> ElastormConfig:
    """Read and validate config.json; raise ``UserError`` naming the bad key."""
    project = project or project_root()
    path = project / "config.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path} not found") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw.get("envs"), dict) or not raw["envs"]:
        raise UserError(f"{path}: missing key 'envs' (streamparse environments)")
    check_envs(raw["envs"], path)
    section = raw.get("elastorm", {})
    if not isinstance(section, dict):
        raise UserError(f"{path}: 'elastorm' must be an object")
    try:
        options = ProjectConfig.from_section(section)
    except ConfigError as exc:
        raise UserError(f"{path}: {exc}") from None
    values = {f.name: getattr(options, f.name) for f in fields(ProjectConfig)}
    values["home"] = project / options.home  # an absolute home stays as it is
    return ElastormConfig(project=project, **values)


def _typed(value: object, kind: type) -> bool:
    if kind is int:  # JSON true/false are not numbers
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _known_keys(where: str, given: dict, known: dict[str, type]) -> None:
    """``UserError`` naming the first key of ``given`` that is not in ``known`` or
    not of its type, with the closest known key as a hint."""
    for key in sorted(given):
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UserError(
                f"{where}: unknown key {key!r}{hint} (streamparse knows: {', '.join(known)})"
            )
        if not _typed(given[key], known[key]):
            kind = {dict: "an object", list: "a list", bool: "true or false"}.get(
                known[key], known[key].__name__
            )
            raise UserError(f"{where}.{key} must be {kind}, got {given[key]!r}")


def check_envs(envs: dict, path: Path | str = "config.json") -> None:
    """Validate every streamparse env: known keys of the right type, a ``host[:port]``
    Nimbus, and a ``virtualenv_root`` when streamparse will use a virtualenv.

    Raises ``UserError`` with one line naming the env and the key.
    """
    for name in sorted(envs):
        env = envs[name]
        where = f"{path}: envs.{name}"
        if not isinstance(env, dict):
            raise UserError(f"{where} must be an object, got {env!r}")
        _known_keys(where, env, STREAMPARSE_ENV_KEYS)
        _known_keys(f"{where}.log", env.get("log", {}), STREAMPARSE_LOG_KEYS)
        if "nimbus" not in env:
            raise UserError(f"{where}: missing key 'nimbus' (host or host:port)")
        host, colon, port = env["nimbus"].partition(":")
        if not host or (colon and not (port.isdigit() and 1 <= int(port) <= 65535)):
            raise UserError(f"{where}.nimbus must be host or host:port, got {env['nimbus']!r}")
        # streamparse's default is use_virtualenv: true, and then it needs the root.
        if env.get("use_virtualenv", True) and "virtualenv_root" not in env:
            raise UserError(
                f"{where}: use_virtualenv is true (streamparse's default when it is absent) "
                "but virtualenv_root is missing"
            )


def pinned_storm_versions(project: Path) -> dict[str, str | None]:
    """The Storm version each of config.json, project.clj and elastorm's pom names."""
    clj_path = project / "project.clj"
    if not clj_path.is_file():
        raise UserError(f"{clj_path} not found (streamparse reads Storm's version from it)")
    clj = clj_path.read_text()
    pom = (JVM_SOURCES / "pom.xml").read_text()
    clj_match = re.search(r"org\.apache\.storm/storm-core\s+\"([^\"]+)\"", clj)
    pom_match = re.search(r"<storm\.version>([^<]+)</storm\.version>", pom)
    conf = json.loads((project / "config.json").read_text()).get("elastorm", {})
    return {
        "config.json": conf.get("storm_version", ProjectConfig().storm_version),
        "project.clj": clj_match.group(1) if clj_match else None,
        "elastorm/jvm/pom.xml": pom_match.group(1) if pom_match else None,
    }


def check_storm_versions(project: Path) -> str:
    """Return the one pinned Storm version or raise ``UserError`` if the pins disagree."""
    pins = pinned_storm_versions(project)
    if len(set(pins.values())) != 1 or None in pins.values():
        listed = ", ".join(f"{k}={v}" for k, v in pins.items())
        raise UserError(f"Storm version mismatch: {listed}; make them equal")
    return next(iter(pins.values()))


#: streamparse's variable that overrides every env's Nimbus (streamparse.util).
STREAMPARSE_NIMBUS = "STREAMPARSE_NIMBUS"


def env_nimbus(project: Path, env: str) -> tuple[str, int]:
    """Host and port of Nimbus for a streamparse env of config.json: as streamparse
    takes it, ``$STREAMPARSE_NIMBUS`` before the env's ``nimbus`` (with two Nimbus, an
    operator points streamparse at the leader with it)."""
    raw = json.loads((project / "config.json").read_text())
    envs = raw.get("envs", {})
    if env not in envs:
        raise UserError(f"config.json has no env {env!r} (have: {', '.join(sorted(envs))})")
    nimbus = os.environ.get(STREAMPARSE_NIMBUS) or envs[env].get("nimbus")
    if not nimbus:
        raise UserError(f"config.json: envs.{env}.nimbus is missing")
    host, _, port = nimbus.partition(":")
    if not host or not (port or "6627").isdigit():
        raise UserError(f"config.json: envs.{env}.nimbus must be host or host:port, got {nimbus!r}")
    return host, int(port or 6627)
