"""Assemble a Storm home from Maven Central (Storm publishes no binary tarball there).

Layout, as the Storm daemons expect it::

    <home>/storm-<ver>/lib/          storm-server, storm-core + deps (Storm's own)
    <home>/storm-<ver>/extlib-daemon/   elastorm's daemon jar (ElasticScheduler, LocalRunner),
                                     installed as into any Storm (``runtime/plugins.py``)
    <home>/storm-<ver>/lib-worker/   storm-client + deps (what worker JVMs run on)
    <home>/storm-<ver>/lib-zookeeper/, lib-hdfs/   elastorm's ZooKeeper and HDFS servers
    <home>/storm-<ver>/log4j2/       cluster.xml (daemons), worker.xml (workers)

Maven resolves and caches the jars (``elastorm/jvm/pom.xml``, package data, so a user's
own project builds the same); it builds into ``<home>/jvm/`` of the project, never into
the package, and this module links the jars into place. Idempotent: nothing is rebuilt
unless a pom or a Java source changed.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime.config import JVM_SOURCES, ElastormConfig, check_storm_versions
from elastorm.runtime.plugins import PLUGIN_DIR, PLUGIN_JAR, install_plugins

log = logging.getLogger(__name__)

_LAYOUT = '<PatternLayout pattern="%d{yyyy-MM-dd HH:mm:ss.SSS} %t %c{1.} [%p] %msg%n"/>'


def _log4j_xml(purpose: str, path: str, quiet: tuple[str, ...]) -> str:
    """A log4j2 config: one size-rolled file at ``path``, ``quiet`` loggers at warn."""
    loggers = "\n".join(f'    <Logger name="{name}" level="warn"/>' for name in quiet)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- elastorm: log4j2 for {purpose}. -->
<Configuration monitorInterval="60" shutdownHook="disable">
  <Appenders>
    <RollingFile name="file" fileName="{path}" filePattern="{path}.%i">
      <PatternLayout pattern="%d{{yyyy-MM-dd HH:mm:ss.SSS}} %t %c{{1.}} [%p] %msg%n"/>
      <Policies><SizeBasedTriggeringPolicy size="100 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
{loggers}
    <Root level="info"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


_SHADED_ZK = (
    "org.apache.storm.shade.org.apache.zookeeper",
    "org.apache.storm.shade.org.apache.curator",
)
CLUSTER_XML = _log4j_xml(
    "Storm daemons (Nimbus, supervisors, ZooKeeper, local mode)",
    "${sys:storm.log.dir}/${sys:logfile.name}",
    ("org.apache.zookeeper", *_SHADED_ZK),
)
WORKER_XML = _log4j_xml(
    "Storm workers; one log per worker port",
    "${sys:workers.artifacts}/${sys:storm.id}/${sys:worker.port}/${sys:logfile.name}",
    _SHADED_ZK,
)


def _inputs() -> list[Path]:
    modules = ("daemon", "worker", "zookeeper", "multilang", "hdfs")
    return [
        JVM_SOURCES / "pom.xml",
        *(JVM_SOURCES / m / "pom.xml" for m in modules),
        *sorted((JVM_SOURCES / "daemon" / "src").rglob("*.java")),
        *sorted((JVM_SOURCES / "multilang" / "src").rglob("*.java")),
        *sorted((JVM_SOURCES / "hdfs" / "src").rglob("*.java")),
    ]


def _stale(stamp: Path, inputs: list[Path]) -> bool:
    if not stamp.exists():
        return True
    built = stamp.stat().st_mtime
    return any(p.stat().st_mtime > built for p in inputs)


def build_jvm(out: Path) -> None:
    """Run Maven over ``JVM_SOURCES`` into ``out`` (downloads Storm's jars on first use,
    then works from ``~/.m2``)."""
    if shutil.which("mvn") is None:
        raise UserError("Maven (mvn) is not on PATH; install it (e.g. apt-get install maven)")
    if shutil.which("java") is None:
        raise UserError("java is not on PATH; install a JDK 17 (Storm 2.8 targets Java 17)")
    log.info("building the JVM side with Maven (first run downloads Storm and Hadoop)")
    pom = JVM_SOURCES / "pom.xml"
    cmd = ["mvn", "-q", "-B", "-f", str(pom), f"-Delastorm.build={out}", "package"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise UserError(f"Maven build of {JVM_SOURCES} failed: " + " | ".join(tail))


def ensure_storm_home(cfg: ElastormConfig) -> Path:
    """Build (if needed) and lay out the Storm home; return its path."""
    version = check_storm_versions(cfg.project)
    jvm = cfg.jvm_build
    home = cfg.storm_home
    stamp = home / ".assembled"
    links = [*(home / "lib").glob("*.jar"), home / PLUGIN_DIR / PLUGIN_JAR]
    built = all(link.exists() for link in links) if stamp.exists() else False
    if built and not _stale(stamp, _inputs()):
        return home
    build_jvm(jvm)
    daemon = jvm / "elastorm-daemon"
    sources = {
        "lib": sorted((daemon / "lib").glob("*.jar")),
        "lib-worker": sorted((jvm / "elastorm-worker" / "lib-worker").glob("*.jar")),
        "lib-zookeeper": sorted((jvm / "elastorm-zookeeper" / "lib-zookeeper").glob("*.jar")),
        "lib-hdfs": [
            *sorted((jvm / "elastorm-hdfs" / "lib-hdfs").glob("*.jar")),
            jvm / "elastorm-hdfs" / "elastorm-hdfs-0.1.0.jar",
        ],
    }
    if not any(p.name == f"storm-client-{version}.jar" for p in sources["lib-worker"]):
        raise UserError(
            f"Maven did not produce storm-client-{version}.jar; check {JVM_SOURCES / 'pom.xml'}"
        )
    for sub, jars in sources.items():
        target = home / sub
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for jar in jars:
            (target / jar.name).symlink_to(jar.resolve())
    (home / "log4j2").mkdir(exist_ok=True)
    (home / "log4j2" / "cluster.xml").write_text(CLUSTER_XML)
    (home / "log4j2" / "worker.xml").write_text(WORKER_XML)
    (home / "conf").mkdir(exist_ok=True)
    (home / "conf" / "storm.yaml").write_text("# per-daemon configs live under run/\n")
    (home / "extlib").mkdir(exist_ok=True)
    install_plugins(home, jvm, version, link=True)
    stamp.write_text(version + "\n")
    log.info("Storm %s home ready at %s", version, home)
    return home


def classpath(home: Path, *first: Path, lib: str = "lib") -> str:
    """A daemon classpath: ``first`` entries (e.g. a topology jar), then ``<lib>/*``;
    Storm's daemons (``lib``) also get ``extlib-daemon/*``, as Storm's bin/storm gives
    them, where elastorm's plugins are installed."""
    extra = [home / PLUGIN_DIR / "*"] if lib == "lib" else []
    return ":".join([*(str(p) for p in first), str(home / lib / "*"), *map(str, extra)])
