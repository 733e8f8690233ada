"""Run a topology end to end: build the jar, submit, wait until done, kill, check.

``env`` is a streamparse env of config.json: ``local`` starts an embedded
LocalCluster for the run; any other env must already be up (``elastorm cluster
up``, or a real cluster).
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from pathlib import Path

from elastorm.config import ConfigError, DurableConfig, Section, check_conf
from elastorm.durable.store import file_root
from elastorm.errors import as_user_error
from elastorm.runtime import nimbus
from elastorm.runtime.config import ElastormConfig, env_nimbus
from elastorm.runtime.local import LOCAL_ENV, local_cluster
from elastorm.runtime.outcome import Driver, Outcome
from elastorm.runtime.status import ProblemWatch
from elastorm.runtime.storm_home import ensure_storm_home
from elastorm.runtime.topology_jar import build_topology_jar

log = logging.getLogger(__name__)


def checked_options(
    options: dict[str, object], sections: tuple[type[Section], ...] = ()
) -> dict[str, object]:
    """What a driver passes with ``-o``, checked against the topology options and the
    driver's own ``sections`` (:func:`elastorm.config.check_conf`) before anything is
    submitted: a bad value is a one-line ``UserError`` here, not a worker crash."""
    with as_user_error(ConfigError):
        return check_conf(options, *sections)


def default_store_uri(cfg: ElastormConfig) -> str:
    """The default durable store, ``<elastorm.home>/durable`` made absolute on this machine
    (a worker's working directory is Storm's, not the project's)."""
    return file_root(str(cfg.home.resolve()))


def durable_home(cfg: ElastormConfig) -> dict[str, object]:
    """The option that points every run at :func:`default_store_uri`."""
    return {DurableConfig.key("uri"): default_store_uri(cfg)}


def run_topology(
    cfg: ElastormConfig,
    env: str,
    driver: Driver,
    timeout: float,
    output_dir: Path | None = None,
    extra_options: dict[str, object] | None = None,
) -> Outcome:
    """Submit ``driver``'s topology to ``env``, wait for it to finish, kill it, check it."""
    ensure_storm_home(cfg)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    output_dir = output_dir or cfg.home / "runs" / f"{driver.name}-{env}-{stamp}"
    output_dir.mkdir(parents=True, exist_ok=True)
    jar = build_topology_jar(cfg, cfg.home / "jars" / "topology.jar")
    name = f"{driver.name}-{stamp}"
    options = checked_options(
        durable_home(cfg) | driver.options(str(output_dir)) | (extra_options or {}),
        driver.sections,
    )
    driver.topology = name
    local = env == LOCAL_ENV
    context = local_cluster(cfg, jar) if local else nullcontext(None)
    with context:
        host, port = env_nimbus(cfg.project, env)
        nimbus.nimbus_client(host, port)  # fails clearly if Nimbus is down
        # The cluster's own ZooKeeper (a loopback server, or an ensemble on other hosts).
        driver.zk_hosts = cfg.zookeeper if local else nimbus.storm_zookeeper(host, port)
        log.info(
            "submitting %s to %s (Nimbus %s:%d), output in %s", name, env, host, port, output_dir
        )
        started = time.monotonic()
        nimbus.submit(cfg.project, env, driver.name, name, jar, options)
        last = [0.0]
        watch = ProblemWatch((host, port), name)

        def progress(text: str) -> None:
            now = time.monotonic()
            if now - last[0] >= 5:
                last[0] = now
                log.info("[%5.0f s] %s", now - started, text)
                watch.poll(now)

        try:
            driver.wait(str(output_dir), timeout, progress)
            elapsed = time.monotonic() - started
        finally:  # the driver's topology: a driver that resubmits names the new one
            nimbus.kill(cfg.project, env, driver.topology)
    outcome = driver.outcome(str(output_dir))
    outcome.facts["seconds"] = round(elapsed, 1)
    outcome.facts["output_dir"] = str(output_dir)
    return outcome
