"""Deploying a project to the hosts of ``runtime/hosts.py`` the production way.

The hosts reach nothing outside this machine, so what streamparse's ``use_virtualenv``
installs on them comes from a wheelhouse built here (``<home>/wheelhouse``: elastorm's
own wheel and a wheel of every requirement of ``virtualenvs/NAME.txt``), which every
host's pip reads instead of an index (``PIP_CONFIG_FILE``, set by the hosts' sshd). As
the requirements files say, elastorm's wheel is copied to ``/opt/elastorm`` on every
host (scp). A streamparse env for the hosts (``hosts``: the supervisors as workers,
virtualenvs in each host's private folder) is ``config.json``'s ``hosts`` env, for
``sparse ... -e hosts`` with an ssh-agent holding the hosts' key (streamparse's fabric
logs in with the agent's keys).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig, source_checkout
from elastorm.runtime.hosts import HOST_DIR, WHEEL_DIR, Hosts, hosts_wheelhouse
from elastorm.runtime.multihost import NIMBUS_PORT, roles

log = logging.getLogger(__name__)

HOSTS_ENV = "hosts"
VIRTUALENV_ROOT = HOST_DIR / "virtualenvs"
# The components' own log files (pystorm opens them; streamparse makes no folder for them).
COMPONENT_LOGS = HOST_DIR / "streamparse"
# What streamparse's update step installs before the requirements (update_virtualenv.py).
STREAMPARSE_BOOTSTRAP = ("pip>=9.0,!=19.0", "setuptools==69.5.1", "wheel")
_ELASTORM_LINE = re.compile(r"^\s*elastorm\s*@")


def requirements_without_elastorm(text: str) -> str:
    """A requirements file's lines but elastorm's own (``elastorm @ file:...``), which
    the wheelhouse gets from this checkout instead.

    >>> requirements_without_elastorm("elastorm @ file:///opt/elastorm/e.whl\\nkazoo==2\\n")
    'kazoo==2\\n'
    """
    return "".join(line for line in text.splitlines(True) if not _ELASTORM_LINE.match(line))


def hosts_env(hosts: Hosts, project_env: dict) -> dict:
    """The streamparse env of the hosts: the first Nimbus (streamparse takes one), the
    supervisors' hosts as workers, root over ssh, virtualenvs in each host's private
    folder, the options of ``project_env`` (the project's cluster env)."""
    plan = hosts.plan()
    if plan is None:
        raise UserError("no hosts are up: `elastorm hosts up --storm` first")
    r = roles(plan)
    return {
        "user": "root",
        "nimbus": f"{r.nimbuses[0].address}:{NIMBUS_PORT}",
        "workers": [h.address for h in r.supervisors],
        "use_ssh_for_nimbus": False,
        "use_virtualenv": True,
        "virtualenv_root": str(VIRTUALENV_ROOT),
        # The components' own logs, in each host's private folder (else streamparse
        # asks Nimbus for its log dir before every command).
        "log": {"path": str(COMPONENT_LOGS), "level": "info"},
        "options": dict(project_env.get("options", {})),
    }


def check_hosts_env(cfg: ElastormConfig, hosts: Hosts) -> None:
    """``UserError`` with the env to set unless ``config.json``'s ``hosts`` env is the
    one of the hosts that are up (its workers, Nimbus and options)."""
    project = json.loads((cfg.project / "config.json").read_text())
    envs = project.get("envs", {})
    want = hosts_env(hosts, envs.get("cluster", {}))
    if envs.get(HOSTS_ENV) != want:
        raise UserError(
            f"config.json's env {HOSTS_ENV!r} is not the hosts that are up; set it to: "
            + json.dumps(want)
        )


def build_wheelhouse(cfg: ElastormConfig, name: str) -> Path:
    """Wheels of elastorm (the checkout it runs from) and of every requirement of the
    project's ``virtualenvs/<name>.txt`` and streamparse's bootstrap, in
    ``<home>/wheelhouse``; elastorm's wheel's path. Uses this machine's pip (its index
    and cache)."""
    spec = cfg.project / "virtualenvs" / f"{name}.txt"
    if not spec.exists():
        raise UserError(f"{spec} is missing: the requirements of topology {name!r}")
    checkout = source_checkout()
    if checkout is None:
        raise UserError(
            "elastorm is installed from a wheel here: copy that wheel to /opt/elastorm on "
            "the hosts yourself (deploy builds one only from a source checkout)"
        )
    house = hosts_wheelhouse(cfg)
    house.mkdir(parents=True, exist_ok=True)
    reqs = cfg.home / "run" / f"wheelhouse-{name}.txt"
    reqs.parent.mkdir(parents=True, exist_ok=True)
    reqs.write_text(requirements_without_elastorm(spec.read_text()))
    for what in (["--no-deps", str(checkout)], ["-r", str(reqs), *STREAMPARSE_BOOTSTRAP]):
        _pip(["wheel", "-q", "-w", str(house), *what])
    wheels = sorted(house.glob("elastorm-*.whl"))
    if not wheels:
        raise UserError(f"pip made no elastorm wheel in {house}")
    return wheels[-1]


def install_on_hosts(hosts: Hosts, wheel: Path) -> list[str]:
    """Copy elastorm's wheel to ``/opt/elastorm`` on every host and make the folder the
    components log to, as an operator does (scp, ssh); the hosts done. Without the
    folder every Python component dies at its start (pystorm cannot open its log)."""
    plan = hosts.plan()
    if plan is None:
        raise UserError("no hosts are up: `elastorm hosts up` first")
    for h in plan.hosts:
        target = f"root@{h.address}:{WHEEL_DIR / wheel.name}"
        _run(["scp", "-q", *hosts.ssh_options(), str(wheel), target])
        _run(hosts.ssh_command(h.name, f"mkdir -p {COMPONENT_LOGS}"))
    return [h.name for h in plan.hosts]


def _pip(args: list[str]) -> None:
    _run([sys.executable, "-m", "pip", *args])


def _run(cmd: list[str]) -> None:
    log.info("running %s", " ".join(cmd[:6]) + (" ..." if len(cmd) > 6 else ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise UserError(
            f"`{' '.join(cmd[:4])} ...` failed ({proc.returncode}): " + " | ".join(tail)
        )
