"""Node provisioning behind one interface: who starts and stops the machines a
topology scales onto (docs/scaling.md, "Plugging in a real cluster").

* :class:`LocalSupervisors`: this machine's single-machine cluster; a node is one more
  supervisor (``supervisor-<i>``, own slot ports and local dir).
* :class:`CommandProvisioner`: any other cluster, through a script the operator
  provides (``<command> list``, ``<command> start NAME``, ``<command> stop NAME``),
  e.g. a wrapper around an autoscaling group or a Kubernetes deployment's replicas.

A provisioned node is ready once its supervisor is registered with Nimbus; the elastic
scheduler then binds it when the topology's node set wants it.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
from collections.abc import Sequence
from typing import Protocol

from elastorm.errors import UserError
from elastorm.runtime.cluster import CLUSTER_ENV, node_name, supervisor_daemon
from elastorm.runtime.config import ElastormConfig, env_nimbus
from elastorm.runtime.nimbus import cluster_summary
from elastorm.runtime.services import running_pid, start, stop, wait_until

log = logging.getLogger(__name__)

#: Seconds ``LocalSupervisors.stop`` waits for Nimbus to stop listing the supervisor.
FORGET_SECS = 30.0


class NodeProvisioner(Protocol):
    """Starts and stops nodes (Storm supervisors) by name."""

    def live(self) -> tuple[str, ...]:
        """Names of the nodes running now."""
        ...

    def spare(self, count: int) -> tuple[str, ...]:
        """``count`` names of nodes that :meth:`start` can bring up."""
        ...

    def start(self, names: Sequence[str], timeout: float) -> None:
        """Start ``names`` and return once Nimbus lists their supervisors."""
        ...

    def stop(self, name: str) -> None:
        """Stop node ``name`` (its workers with it)."""
        ...


class LocalSupervisors:
    """Supervisors of the single-machine cluster (``elastorm cluster up``)."""

    def __init__(self, cfg: ElastormConfig, slots: int | None = None) -> None:
        self.cfg = cfg
        self.slots = slots or cfg.cluster_slots_per_supervisor
        self.host, self.port = env_nimbus(cfg.project, CLUSTER_ENV)

    def live(self) -> tuple[str, ...]:
        if not self.cfg.run.exists():
            return ()
        names = (p.stem for p in self.cfg.run.glob("supervisor-*.pid"))
        return tuple(sorted(n for n in names if running_pid(self.cfg, n)))

    def spare(self, count: int) -> tuple[str, ...]:
        live = set(self.live())
        out: list[str] = []
        index = 0
        while len(out) < count:
            if index >= 8:
                raise UserError("the single-machine cluster runs at most 8 supervisors")
            if node_name(index) not in live:
                out.append(node_name(index))
            index += 1
        return tuple(out)

    def start(self, names: Sequence[str], timeout: float) -> None:
        """Start ``names``; return once Nimbus lists each as a supervisor that started
        since this call (every supervisor here is 127.0.0.1 to Nimbus, so by uptime: the
        count alone was met by a killed supervisor's entry Nimbus still listed, and a
        topology submitted next was scheduled onto the old set, then moved 5 s later,
        which left an orphan worker JVM holding a slot's port; session 30's CI)."""
        began = time.monotonic()
        new = [n for n in names if not running_pid(self.cfg, n)]
        for name in names:
            index = int(name.removeprefix("supervisor-"))
            start(self.cfg, supervisor_daemon(self.cfg, index, self.port, self.slots))
        expected = len(self.live())

        def registered() -> bool:
            listed = _supervisors(self.host, self.port)
            fresh = [s for s in listed if s["uptime_secs"] <= time.monotonic() - began + 1]
            return len(listed) >= expected and len(fresh) >= len(new)

        wait_until(registered, f"supervisors {', '.join(names)} registered with Nimbus", timeout)

    def stop(self, name: str) -> None:
        """Stop ``name``, then wait (up to ``FORGET_SECS``) until Nimbus no longer lists
        it, so the scheduler's next round does not bind the dead supervisor."""
        stop(self.cfg, name)
        expected = len(self.live())
        try:
            wait_until(
                lambda: len(_supervisors(self.host, self.port)) <= expected,
                f"Nimbus forgetting {name}",
                FORGET_SECS,
            )
        except UserError as exc:
            log.warning("%s (the scheduler may still bind it)", exc)


class CommandProvisioner:
    """Nodes started and stopped by an operator's script: ``<command> list`` prints
    the running nodes' names (one a line), ``<command> spare N`` prints N names it can
    start, ``<command> start NAME...`` starts them and returns once their supervisors
    run, ``<command> stop NAME`` stops one. Any failure is a ``UserError``."""

    def __init__(self, command: str, cfg: ElastormConfig) -> None:
        self.command = shlex.split(command)
        self.host, self.port = env_nimbus(cfg.project, CLUSTER_ENV)

    def _run(self, *args: str) -> list[str]:
        try:
            proc = subprocess.run(
                [*self.command, *args], capture_output=True, text=True, timeout=600
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UserError(f"provisioner {self.command[0]} {args[0]}: {exc}") from None
        if proc.returncode != 0:
            raise UserError(
                f"provisioner {self.command[0]} {args[0]} exited {proc.returncode}: "
                + (proc.stderr.strip().splitlines() or ["no output"])[-1]
            )
        return [line.strip() for line in proc.stdout.splitlines() if line.strip()]

    def live(self) -> tuple[str, ...]:
        return tuple(sorted(self._run("list")))

    def spare(self, count: int) -> tuple[str, ...]:
        return tuple(self._run("spare", str(count)))

    def start(self, names: Sequence[str], timeout: float) -> None:
        if names:
            self._run("start", *names)
            # On a real cluster a node's name is its supervisor's host.
            wait_until(
                lambda: set(names) <= {s["host"] for s in _supervisors(self.host, self.port)},
                f"nodes {', '.join(names)} registered with Nimbus",
                timeout,
            )

    def stop(self, name: str) -> None:
        self._run("stop", name)


def provisioner(spec: str, cfg: ElastormConfig) -> NodeProvisioner:
    """``local`` (this machine's cluster) or ``command:<script>``."""
    if spec == "local":
        return LocalSupervisors(cfg)
    if spec.startswith("command:") and spec[len("command:") :].strip():
        return CommandProvisioner(spec[len("command:") :], cfg)
    raise UserError(f"--provisioner {spec!r}: expected 'local' or 'command:<script>'")


def _supervisors(host: str, port: int) -> list[dict]:
    try:
        return cluster_summary(host, port)["supervisors"]
    except UserError:
        return []
