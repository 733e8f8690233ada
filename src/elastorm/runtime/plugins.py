"""elastorm's JVM plugins on a Storm home, and the ``storm.yaml`` settings it needs.

One path for both homes: ``elastorm setup`` lays out the project's own Storm home with
Storm's jars only, then installs the plugins exactly as ``elastorm storm-plugins``
installs them into an operator's existing Storm; and the settings printed for an
operator's ``storm.yaml`` are the ones the project's own daemons run with
(``runtime/cluster.py``). Workers need nothing installed: the topology jar carries
elastorm's multilang serializer, relay and grouping (``runtime/topology_jar.py``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from elastorm.errors import UserError

PLUGIN_JAR = "elastorm-daemon-0.1.0.jar"  # ElasticScheduler (Nimbus) and LocalRunner
# On the classpath of Storm's daemons (Storm's bin/storm adds it), not of its workers.
PLUGIN_DIR = "extlib-daemon"
ELASTIC_SCHEDULER = "elastorm.jvm.ElasticScheduler"
NODE_META = "elastorm.node"

# Every daemon and worker. Ride out a ZooKeeper outage instead of halting: with Storm's
# 5 retries a worker's refresh timer gave up after 9 s of outage and halted the whole
# worker (spout, routers, sink, a controller: chaos join/zk-stop, session 33), and it
# came back only 1.5 min later. 60 retries at most 2 s apart: about 90 s
# (tests/unit/test_cluster_zookeeper_outage.py models Storm's back-off). Never
# blacklist a supervisor: elastorm handles lost nodes itself, and one killed and started
# again stayed blacklisted (no work) for 8.5 min while its bad-slot history lasted.
EVERY_NODE: dict[str, object] = {
    "storm.zookeeper.retry.times": 60,
    "storm.zookeeper.retry.interval": 500,
    "storm.zookeeper.retry.intervalceiling.millis": 2000,
    "blacklist.scheduler.resume.time.secs": 15,
    "blacklist.scheduler.tolerance.count": 1_000_000,
}
# Nimbus: one task of every elastic operator per live node, Storm's default for the rest
# (src/elastorm/jvm/daemon/.../ElasticScheduler.java, docs/scaling.md).
NIMBUS: dict[str, object] = {"storm.scheduler": ELASTIC_SCHEDULER}


def supervisor_settings(node: str) -> dict[str, object]:
    """A supervisor's own line: its node name for the elastic scheduler, ``elastorm
    scale`` and ``elastorm drain``."""
    return {"supervisor.scheduler.meta": {NODE_META: node}}


def storm_yaml_lines(node: str = "<this host's node name>") -> str:
    """What an operator adds to ``storm.yaml``, by where, as YAML (JSON values)."""

    def block(title: str, conf: dict[str, object]) -> str:
        return f"# {title}\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in conf.items())

    return "\n".join(
        (
            block("every node (Nimbus and supervisors)", EVERY_NODE),
            block("Nimbus (with elastorm's jar in its extlib-daemon/)", NIMBUS),
            block("each supervisor, its own name", supervisor_settings(node)),
        )
    )


def storm_home_version(home: Path) -> str:
    """The Storm version of the home at ``home``, read from its ``storm-server`` jar."""
    if not home.is_dir():
        raise UserError(f"{home} is not a directory: give the Storm home (where lib/ is)")
    for jar in sorted((home / "lib").glob("storm-server-*.jar")):
        if match := re.fullmatch(r"storm-server-(\d[\w.\-]*)\.jar", jar.name):
            return match.group(1)
    raise UserError(f"{home} is not a Storm home: no lib/storm-server-<version>.jar in it")


def install_plugins(home: Path, jvm_build: Path, version: str, *, link: bool = False) -> Path:
    """Put elastorm's daemon jar (built for Storm ``version``) into ``home``'s
    ``extlib-daemon/``, copied (``link``: symlinked, for the project's own home);
    return its path. Refused if the home runs another Storm version."""
    found = storm_home_version(home)
    if found != version:
        raise UserError(
            f"{home} runs Storm {found}; elastorm's plugins are built for Storm {version} "
            "(the version pinned in config.json, project.clj and the jvm pom)"
        )
    jar = jvm_build / "elastorm-daemon" / PLUGIN_JAR
    if not jar.is_file():
        raise UserError(f"{jar} is missing: run `elastorm setup` to build it")
    target = home / PLUGIN_DIR / PLUGIN_JAR
    target.parent.mkdir(exist_ok=True)
    target.unlink(missing_ok=True)
    if link:
        target.symlink_to(jar.resolve())
    else:
        shutil.copy2(jar, target)
    return target
