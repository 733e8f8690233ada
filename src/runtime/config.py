"""The project's configuration: ``config.json`` (streamparse envs + an ``elastorm`` section).

Every ``elastorm`` key has a default; unknown or ill-typed keys fail with a one-line
``UserError``. The Storm version is pinned in three places that must agree:
``config.json`` (``elastorm.storm_version``), ``project.clj`` (streamparse reads it)
and ``jvm/pom.xml`` (what Maven assembles).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

from runtime.errors import UserError

#: Defaults for every key of config.json's ``elastorm`` section.
DEFAULTS: dict[str, object] = {
    "storm_version": "2.8.3",
    "home": ".elastorm",
    "zookeeper_port": 12181,
    "local_supervisors": 1,
    "cluster_supervisors": 2,
    "cluster_slots_per_supervisor": 2,
    "cluster_first_slot_port": 16800,
    "worker_heap_mb": 512,
}


@dataclass(frozen=True, kw_only=True)
class ElastormConfig:
    """The validated ``elastorm`` section plus where the project lives."""

    project: Path
    storm_version: str
    home: Path
    zookeeper_port: int
    local_supervisors: int
    cluster_supervisors: int
    cluster_slots_per_supervisor: int
    cluster_first_slot_port: int
    worker_heap_mb: int

    @property
    def storm_home(self) -> Path:
        """Where the Storm home assembled from Maven Central lives."""
        return self.home / f"storm-{self.storm_version}"

    @property
    def logs(self) -> Path:
        """One folder for every daemon's log."""
        return self.home / "logs"

    @property
    def run(self) -> Path:
        """Pid files and per-daemon state."""
        return self.home / "run"


def project_root() -> Path:
    """The project checkout: ``$ELASTORM_PROJECT``, else the one this package runs from."""
    env = os.environ.get("ELASTORM_PROJECT")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[2], Path.cwd()]
    for path in candidates:
        if (path / "config.json").is_file() and (path / "project.clj").is_file():
            return path.resolve()
    raise UserError(
        "no elastorm project found (config.json + project.clj); run from the checkout "
        "or set ELASTORM_PROJECT"
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
    section = raw.get("elastorm", {})
    if not isinstance(section, dict):
        raise UserError(f"{path}: 'elastorm' must be an object")
    unknown = sorted(set(section) - set(DEFAULTS))
    if unknown:
        raise UserError(f"{path}: unknown key elastorm.{unknown[0]} (known: {', '.join(DEFAULTS)})")
    values = {**DEFAULTS, **section}
    for key, default in DEFAULTS.items():
        if type(values[key]) is not type(default):
            raise UserError(
                f"{path}: elastorm.{key} must be {type(default).__name__}, got {values[key]!r}"
            )
    for key in ("zookeeper_port", "cluster_first_slot_port"):
        if not 1024 <= values[key] <= 65000:
            raise UserError(f"{path}: elastorm.{key} must be a port in 1024..65000")
    for key in ("local_supervisors", "cluster_supervisors"):
        if not 1 <= values[key] <= 16:
            raise UserError(f"{path}: elastorm.{key} must be in 1..16, got {values[key]}")
    if not 1 <= values["cluster_slots_per_supervisor"] <= 8:  # 10 ports per supervisor
        raise UserError(f"{path}: elastorm.cluster_slots_per_supervisor must be in 1..8")
    if values["worker_heap_mb"] < 128:
        raise UserError(f"{path}: elastorm.worker_heap_mb must be >= 128")
    home = Path(values["home"])
    values["home"] = home if home.is_absolute() else project / home
    names = {f.name for f in fields(ElastormConfig)} - {"project"}
    return ElastormConfig(project=project, **{k: values[k] for k in names})


def pinned_storm_versions(project: Path) -> dict[str, str | None]:
    """The Storm version each of config.json, project.clj and jvm/pom.xml names."""
    clj = (project / "project.clj").read_text()
    pom = (project / "jvm" / "pom.xml").read_text()
    clj_match = re.search(r"org\.apache\.storm/storm-core\s+\"([^\"]+)\"", clj)
    pom_match = re.search(r"<storm\.version>([^<]+)</storm\.version>", pom)
    conf = json.loads((project / "config.json").read_text()).get("elastorm", {})
    return {
        "config.json": conf.get("storm_version", DEFAULTS["storm_version"]),
        "project.clj": clj_match.group(1) if clj_match else None,
        "jvm/pom.xml": pom_match.group(1) if pom_match else None,
    }


def check_storm_versions(project: Path) -> str:
    """Return the one pinned Storm version or raise ``UserError`` if the pins disagree."""
    pins = pinned_storm_versions(project)
    if len(set(pins.values())) != 1 or None in pins.values():
        listed = ", ".join(f"{k}={v}" for k, v in pins.items())
        raise UserError(f"Storm version mismatch: {listed}; make them equal")
    return next(iter(pins.values()))


def env_nimbus(project: Path, env: str) -> tuple[str, int]:
    """Host and port of Nimbus for a streamparse env of config.json."""
    raw = json.loads((project / "config.json").read_text())
    envs = raw.get("envs", {})
    if env not in envs:
        raise UserError(f"config.json has no env {env!r} (have: {', '.join(sorted(envs))})")
    nimbus = envs[env].get("nimbus")
    if not nimbus:
        raise UserError(f"config.json: envs.{env}.nimbus is missing")
    host, _, port = nimbus.partition(":")
    return host, int(port or 6627)
