"""Where elastorm keeps things in ZooKeeper, and how to reach it (pure).

One root per topology, ``/elastorm/<topology>``::

    tasks/<task-id>              ephemeral, one per live task: identity + load
    incarnations/<comp>-<task>   durable, how many times a keyed task has started
    fences/<comp>-<task>         durable, the incarnation (zxid) of it declared lost
    controller/leader            ephemeral, the controller that leads
    controller/term              durable fencing counter, bumped by each new leader
    controller/routing/<op>      durable routing table of an operator, with epoch
    controller/checkpoints       durable checkpoint allocation
    controller/replicas          durable active replicas: key group -> its replica's node
    controller/status/<op>       the controller's live view: holders, migrations in flight
    controller/refused           ephemeral, why the controller cannot run this topology
    controller/rescale           the rescale in progress: joining nodes, key groups to move
    controller/figures           the leader's figures for the dashboard (correlations,
                                 allocation score, shares), every few seconds
    failures/<comp>-<task>       durable, a task's failed starts: count, last reason
    requests/req-<seq>           durable migration requests (``elastorm migrate``)
    queries/<task-id>/q-<seq>    ephemeral, a state query to a keyed task, answered in
                                 place (``elastorm state``, ``elastorm.zk.queries``)
    commands/<task-id>/c-<seq>   ephemeral, a command of the controller to a task, read
                                 and deleted by it (``elastorm.zk.commands``)
    scheduler/nodes              durable node set: wanted and draining nodes (``elastorm
                                 scale`` / ``drain``, the controller's releases)
    scheduler/placement          the elastic scheduler's binding of logical nodes to nodes
    submission                   durable, the Storm submission (``storm.id``) the rest belongs to
    archive/<storm-id>/...       durable, an earlier submission's znodes, set aside by the next one

See docs/znodes.md. Nothing here talks to ZooKeeper.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from elastorm.config import TopologyConfig
from elastorm.core.auth import Keyring
from elastorm.files import load_keyring

DEFAULT_ROOT = "/elastorm"

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


class ZnodeLayoutError(ValueError):
    """A name cannot be a znode name, or a path is not one of ours (you built it wrong)."""


def check_name(name: str, what: str = "name") -> str:
    """Return ``name`` if it is a safe single znode name, else raise ``ZnodeLayoutError``.

    Safe: letters, digits, ``_ . -``, not starting with ``.`` or ``-`` (so never
    ``.`` / ``..``), 1..200 characters.
    """
    if not isinstance(name, str) or len(name) > 200 or not _NAME.fullmatch(name):
        raise ZnodeLayoutError(f"{what} {name!r} is not a valid znode name ([A-Za-z0-9_.-])")
    return name


@dataclass(frozen=True, slots=True)
class ZnodeLayout:
    """The znode paths of one topology.

    >>> ZnodeLayout("flights").task(7)
    '/elastorm/flights/tasks/7'
    """

    topology: str
    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        check_name(self.topology, "topology")
        parts = self.root.split("/")
        if not self.root.startswith("/") or self.root == "/" or self.root.endswith("/"):
            raise ZnodeLayoutError(f"root {self.root!r} must be an absolute path like /elastorm")
        for part in parts[1:]:
            check_name(part, "root component")

    @property
    def base(self) -> str:
        return f"{self.root}/{self.topology}"

    @property
    def tasks(self) -> str:
        return f"{self.base}/tasks"

    def task(self, task_id: int) -> str:
        return f"{self.tasks}/{task_name(task_id)}"

    @property
    def controller(self) -> str:
        return f"{self.base}/controller"

    @property
    def leader(self) -> str:
        return f"{self.controller}/leader"

    @property
    def liveness(self) -> str:
        """``host:port`` where the controller takes the keyed tasks' liveness connections."""
        return f"{self.controller}/liveness"

    @property
    def term(self) -> str:
        return f"{self.controller}/term"

    @property
    def routing_dir(self) -> str:
        return f"{self.controller}/routing"

    def routing(self, operator: str) -> str:
        return f"{self.routing_dir}/{check_name(operator, 'operator')}"

    @property
    def checkpoints(self) -> str:
        return f"{self.controller}/checkpoints"

    @property
    def replicas(self) -> str:
        return f"{self.controller}/replicas"

    def status(self, operator: str) -> str:
        return f"{self.controller}/status/{check_name(operator, 'operator')}"

    @property
    def figures(self) -> str:
        """The leading controller's figures for the dashboard (``dashboard_figures``)."""
        return f"{self.controller}/figures"

    @property
    def refused(self) -> str:
        """Why the controller cannot run the topology (ephemeral: gone with its worker)."""
        return f"{self.controller}/refused"

    @property
    def requests(self) -> str:
        return f"{self.base}/requests"

    def request(self, name: str) -> str:
        return f"{self.requests}/{check_name(name, 'request')}"

    @property
    def queries(self) -> str:
        return f"{self.base}/queries"

    def query_dir(self, task_id: int) -> str:
        """Where state queries to keyed task ``task_id`` wait for its answer."""
        return f"{self.queries}/{task_name(task_id)}"

    @property
    def commands(self) -> str:
        return f"{self.base}/commands"

    def command_dir(self, task_id: int) -> str:
        """The mailbox of task ``task_id``: the controller's commands to it, in order."""
        return f"{self.commands}/{task_name(task_id)}"

    @property
    def rescale(self) -> str:
        return f"{self.controller}/rescale"

    @property
    def scheduler_nodes(self) -> str:
        return f"{self.base}/scheduler/nodes"

    @property
    def scheduler_placement(self) -> str:
        return f"{self.base}/scheduler/placement"

    @property
    def submission(self) -> str:
        """Which Storm submission (``storm.id``) the topology's znodes belong to."""
        return f"{self.base}/submission"

    @property
    def archive_dir(self) -> str:
        return f"{self.base}/archive"

    def archive(self, name: str) -> str:
        """Where an earlier submission's znodes are set aside (``elastorm.zk.submission``)."""
        return f"{self.archive_dir}/{check_name(name, 'archive')}"

    @property
    def failures(self) -> str:
        return f"{self.base}/failures"

    def start_failure(self, component: str, task_id: int) -> str:
        """A task's failed starts (``elastorm.zk.problems``)."""
        name = check_name(f"{component}-{task_name(task_id)}", "component")
        return f"{self.failures}/{name}"

    def incarnation(self, component: str, task_id: int) -> str:
        name = check_name(f"{component}-{task_name(task_id)}", "component")
        return f"{self.base}/incarnations/{name}"

    def restart_point(self, component: str, task_id: int) -> str:
        """An emitter's durable restart point (``elastorm.core.replay``)."""
        return f"{self.base}/restart/{check_name(component, 'component')}-{task_name(task_id)}"

    def rewinds(self, source: str) -> str:
        """Restarted emitters' rewind requests to the replayable ``source`` component."""
        return f"{self.base}/rewinds/{check_name(source, 'component')}"

    def fence(self, component: str, task_id: int) -> str:
        name = check_name(f"{component}-{task_name(task_id)}", "component")
        return f"{self.base}/fences/{name}"


def task_name(task_id: int) -> str:
    """The znode name of Storm task ``task_id`` (its decimal id)."""
    if not isinstance(task_id, int) or isinstance(task_id, bool) or task_id < 0:
        raise ZnodeLayoutError(f"task id must be an int >= 0, got {task_id!r}")
    return str(task_id)


def task_id_from_name(name: str) -> int:
    """Inverse of :func:`task_name`; ``ZnodeLayoutError`` for a foreign child."""
    if not name.isdigit() or (len(name) > 1 and name[0] == "0"):
        raise ZnodeLayoutError(f"{name!r} is not a task znode name")
    return int(name)


@dataclass(frozen=True, kw_only=True, slots=True)
class ZkSettings:
    """How to reach ZooKeeper and how fast to notice trouble.

    ``session_timeout`` (s) bounds failure detection: a killed task's ephemeral
    znode disappears between ``session_timeout`` and ``session_timeout + tickTime``
    after its last contact. The server clamps it to its ``minSessionTimeout`` ..
    ``maxSessionTimeout`` (1-40 s for the project's server, ``tickTime=500``).
    Requires ``0 < heartbeat_interval <= session_timeout / 2``. With a ``keyring``
    (the topology's secret) clients authenticate and create znodes with ACLs
    (``elastorm.zk.client.make_client``).
    """

    hosts: str = "127.0.0.1:12181"
    session_timeout: float = 4.0
    heartbeat_interval: float = 1.0
    request_timeout: float = 2.0
    reconnect_max_delay: float = 1.0
    keyring: Keyring | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.hosts, str) or not self.hosts:
            raise ZnodeLayoutError("hosts must be a non-empty 'host:port,...' string")
        if not 0 < self.heartbeat_interval <= self.session_timeout / 2:
            raise ZnodeLayoutError(
                f"need 0 < heartbeat_interval ({self.heartbeat_interval}) <= "
                f"session_timeout / 2 ({self.session_timeout / 2})"
            )
        if self.request_timeout <= 0 or self.reconnect_max_delay <= 0:
            raise ZnodeLayoutError("request_timeout and reconnect_max_delay must be > 0")


def submission_id(conf: Mapping[str, object]) -> str:
    """The Storm id of this submission (``storm.id``, e.g. ``flights-3-1795849642``):
    Storm gives every submission of a name a new one, a restarted worker keeps it."""
    storm_id = conf.get("storm.id")
    if not isinstance(storm_id, str) or not storm_id:
        raise ZnodeLayoutError(f"storm conf has no storm.id (got {storm_id!r})")
    return check_name(storm_id, "storm.id")


def zk_settings(conf: Mapping[str, object]) -> ZkSettings:
    """How elastorm's clients in a topology reach ZooKeeper: its hosts
    (:func:`hosts_from_storm_conf`) and ``elastorm.zookeeper.session_secs``, with a
    heartbeat every third of the session, and the secret of ``elastorm.auth.*``
    (``SecretFileError`` if its file is unreadable or empty)."""
    config = TopologyConfig.from_conf(conf)
    session = config.zookeeper_session_secs
    return ZkSettings(
        hosts=hosts_from_storm_conf(conf),
        session_timeout=session,
        heartbeat_interval=session / 3,
        keyring=load_keyring(config.auth.secret_file, config.auth.previous_secret_file),
    )


def hosts_from_storm_conf(conf: Mapping[str, object]) -> str:
    """``host:port,...`` of elastorm's ZooKeeper from a Storm topology conf.

    ``elastorm.zookeeper.hosts`` if set (elastorm's state in its own ensemble),
    else Storm's own (``storm.zookeeper.servers`` / ``port``).

    >>> hosts_from_storm_conf({"storm.zookeeper.servers": ["127.0.0.1"],
    ...                        "storm.zookeeper.port": 12181})
    '127.0.0.1:12181'
    """
    own = TopologyConfig.from_conf(conf).zookeeper_hosts
    if own:
        return own
    servers = conf.get("storm.zookeeper.servers")
    port = conf.get("storm.zookeeper.port", 2181)
    if not isinstance(servers, list | tuple) or not servers:
        raise ZnodeLayoutError("storm conf has no storm.zookeeper.servers list")
    if not isinstance(port, int) or isinstance(port, bool):
        raise ZnodeLayoutError(f"storm.zookeeper.port must be an int, got {port!r}")
    return ",".join(f"{s}:{port}" for s in servers)
