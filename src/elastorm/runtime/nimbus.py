"""Talk to Nimbus over Thrift (streamparse's client) and submit with ``sparse submit``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from elastorm.controller.problems import TopologyFacts
from elastorm.errors import UserError

log = logging.getLogger(__name__)

# paramiko (pulled in by streamparse) warns about TripleDES on every import.
warnings.filterwarnings("ignore", message=".*TripleDES.*")


def nimbus_client(host: str, port: int, timeout_ms: int = 10000):
    """A Thrift client for Nimbus; ``UserError`` if nothing answers."""
    from streamparse.util import get_nimbus_client

    from elastorm.runtime.services import port_open

    if not port_open(port, host):
        raise UserError(f"Nimbus at {host}:{port} is unreachable (is the cluster up?)")
    return get_nimbus_client(host=host, port=port, timeout=timeout_ms)


def cluster_summary(host: str, port: int) -> dict:
    """Supervisors and topologies as Nimbus reports them (plain dicts).

    ``UserError`` if nothing listens there, or if what listens does not answer
    ``getClusterInfo`` (Nimbus still starting, or another program on the port).
    """
    from thriftpy2.thrift import TException

    client = nimbus_client(host, port)
    try:
        info = client.getClusterInfo()
    except (TException, OSError, EOFError) as exc:
        raise UserError(
            f"Nimbus at {host}:{port} did not answer getClusterInfo "
            f"({type(exc).__name__}: {exc or 'no detail'})"
        ) from None
    return {
        "nimbuses": [
            {"host": n.host, "port": n.port, "leader": bool(n.isLeader)}
            for n in info.nimbuses or ()
        ],
        "supervisors": [
            {
                "id": s.supervisor_id,
                "host": s.host,
                "slots": s.num_workers,
                "used": s.num_used_workers,
                "uptime_secs": s.uptime_secs,
            }
            for s in info.supervisors
        ],
        "topologies": [
            {
                "name": t.name,
                "id": t.id,
                "status": t.status,
                "workers": t.num_workers,
                "executors": t.num_executors,
                "uptime_secs": t.uptime_secs,
                "sched_status": t.sched_status or "",
            }
            for t in info.topologies
        ],
    }


def storm_zookeeper(host: str, port: int) -> str:
    """``host:port,...`` of the ZooKeeper the Storm cluster of the Nimbus at ``host:port``
    runs on (its ``storm.zookeeper.servers`` and ``port``), which elastorm's topologies
    on it use too (``elastorm.zk.layout.hosts_from_storm_conf``)."""
    import json

    from thriftpy2.thrift import TException

    try:
        conf = json.loads(nimbus_client(host, port).getNimbusConf())
    except (TException, OSError, EOFError, ValueError) as exc:
        raise UserError(f"Nimbus at {host}:{port} did not give its config ({exc!r})") from None
    zk_port = conf.get("storm.zookeeper.port", 2181)
    return ",".join(f"{server}:{zk_port}" for server in conf.get("storm.zookeeper.servers", ()))


def sparse(project: Path, *args: str, timeout: float = 300) -> str:
    """Run a ``sparse`` command in the project (as a user would) and return its output."""
    env = dict(os.environ, LEIN_ROOT="1", PYTHONWARNINGS="ignore")
    exe = Path(sys.executable).parent / "sparse"
    cmd = [str(exe) if exe.exists() else "sparse", *args]
    log.info("running %s", " ".join(cmd))
    try:
        proc = subprocess.run(
            cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"sparse {args[0]} did not finish in {timeout:.0f} s") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        raise UserError(f"sparse {args[0]} failed: " + (lines[-1] if lines else "no output"))
    return proc.stdout


def submit(
    project: Path,
    env: str,
    topology: str,
    name: str,
    jar: Path,
    options: dict[str, object],
    workers: int | None = None,
) -> None:
    """``sparse submit -e env -n topology -N name -j jar -o k=v ...`` (Thrift, no lein)."""
    args = ["submit", "-e", env, "-n", topology, "-N", name, "-j", str(jar), "-f", "--wait", "5"]
    for key, value in options.items():
        args += ["-o", f"{key}={value}"]
    if workers:
        args += ["-w", str(workers)]
    sparse(project, *args)


KILL_ATTEMPTS = 20
KILL_RETRY_SECS = 3.0
"""About a minute in all: after a ZooKeeper restart Nimbus refused Thrift for more than 6 s
(chaos ``join/zk-stop`` at 20d59b4 failed with 3 attempts 2 s apart)."""


def kill(project: Path, env: str, name: str, wait: int = 1) -> None:
    """``sparse kill``; waits until Nimbus no longer lists the topology.

    A failed attempt is tried again, ``KILL_RETRY_SECS`` later, while Nimbus still lists
    the topology (or cannot say): on a loaded machine one of the client's polls found
    Nimbus's Thrift port closed after the kill had been taken (chaos ``join/zk-stop``
    at 613145f). ``UserError`` once ``KILL_ATTEMPTS`` have failed."""
    from elastorm.runtime.config import env_nimbus

    for attempt in range(1, KILL_ATTEMPTS + 1):
        try:
            sparse(project, "kill", "-e", env, "-n", name, "--wait", str(wait))
            return
        except UserError as exc:
            try:
                listed = any(
                    t["name"] == name
                    for t in cluster_summary(*env_nimbus(project, env))["topologies"]
                )
            except UserError:
                listed = True  # cannot tell: try again
            if not listed:
                log.warning(
                    "sparse kill of %s failed (%s), but Nimbus no longer lists it", name, exc
                )
                return
            if attempt == KILL_ATTEMPTS:
                raise
            log.warning(
                "sparse kill of %s failed (%s); again in %.0f s", name, exc, KILL_RETRY_SECS
            )
            time.sleep(KILL_RETRY_SECS)


def executor_nodes(
    host: str, port: int, topology: str, node_of: Callable[[str, int], str] | None = None
) -> dict[str, dict[str, list[int]]]:
    """Where Nimbus runs ``topology``'s executors: ``{component: {node: [task ids]}}``,
    from ``getTopologyInfo`` (what the scheduler applied). A worker's node is
    ``node_of(host, port)`` (default: its host; on the single-machine cluster every
    supervisor is 127.0.0.1, so ``elastorm.runtime.cluster.node_of_port`` tells them
    apart by slot port). Storm's system components (``__acker`` ...) are left out.

    ``UserError`` if no running topology has that name.
    """
    client = nimbus_client(host, port)
    ids = [t.id for t in client.getClusterInfo().topologies if t.name == topology]
    if not ids:
        raise UserError(f"Nimbus runs no topology named {topology!r}")
    out: dict[str, dict[str, list[int]]] = {}
    for ex in client.getTopologyInfo(ids[0]).executors:
        if ex.component_id.startswith("__"):
            continue
        node = node_of(ex.host, ex.port) if node_of else ex.host
        tasks = range(ex.executor_info.task_start, ex.executor_info.task_end + 1)
        out.setdefault(ex.component_id, {}).setdefault(node, []).extend(tasks)
    return {c: {n: sorted(t) for n, t in sorted(by.items())} for c, by in sorted(out.items())}


def storm_facts(host: str, port: int, facts: TopologyFacts) -> TopologyFacts:
    """``facts`` with what Nimbus says of its topology: whether it runs, its status, the
    scheduler's status (the elastic scheduler's refusal, if any), its uptime and the
    errors Storm keeps per component (``getTopologyInfo``: a task that died, with its
    traceback). ``UserError`` if Nimbus does not answer."""
    from thriftpy2.thrift import TException

    from elastorm.controller.problems import StormError

    client = nimbus_client(host, port)
    try:
        found = [t for t in client.getClusterInfo().topologies if t.name == facts.topology]
        if not found:
            return replace(facts, on_storm=False)
        info = client.getTopologyInfo(found[0].id)
    except (TException, OSError, EOFError) as exc:
        raise UserError(
            f"Nimbus at {host}:{port} did not answer ({type(exc).__name__}: {exc or 'no detail'})"
        ) from None
    errors = []
    for component, listed in sorted((info.errors or {}).items()):
        if listed and not component.startswith("__"):
            last = max(listed, key=lambda e: e.error_time_secs)
            errors.append(
                StormError(
                    component=component,
                    count=len(listed),
                    text=last.error,
                    at=float(last.error_time_secs),
                )
            )
    return replace(
        facts,
        on_storm=True,
        storm_status=info.status,
        sched_status=info.sched_status or found[0].sched_status or "",
        uptime_secs=info.uptime_secs,
        storm_errors=tuple(errors),
    )


def rebalance(host: str, port: int, topology: str, wait_secs: int, workers: int) -> None:
    """Storm's own rescale: ``rebalance`` over Thrift (what ``storm rebalance -w W -n N``
    does): Nimbus deactivates the topology for ``wait_secs``, then re-schedules it on
    ``workers`` workers (the workers whose executors change restart)."""
    from streamparse.thrift import storm_thrift

    client = nimbus_client(host, port)
    client.rebalance(
        topology, storm_thrift.RebalanceOptions(wait_secs=wait_secs, num_workers=workers)
    )
