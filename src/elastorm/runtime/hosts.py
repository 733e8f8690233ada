"""Several hosts on this one machine, for deployment as an operator does it.

Each host is a network namespace with its own address on one bridge, and an sshd
running in a mount namespace of its own: inside a host, ``HOST_DIR`` is that host's
private directory (``<home>/hosts/<name>/root`` on the machine), so a virtualenv or a
``storm.local.dir`` made there by one host is not seen by another, as on separate
machines; everything else of the filesystem is shared (the JDK, Python, the project).
The machine itself is the bridge's first address (``gateway``): the hosts reach the
machine's services there, and the machine reaches each host at its own address, by
ssh with the key ``up`` makes (``ssh_command``). Cutting a host's link
(:func:`set_link`) partitions it from the others for real.

Names and the /24 derive from the cluster's ZooKeeper port, as ``runtime/netns.py``'s
do, so checkouts on one machine never collide; the namespaced supervisor of
``netns.py`` uses 10.231.0.0/16, these hosts 10.232.0.0/16.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from elastorm.errors import UserError
from elastorm.runtime.config import ElastormConfig
from elastorm.runtime.netns import NETNS_DIR, check_can_create, exec_prefix, run_ip

log = logging.getLogger(__name__)

#: The /16 the hosts' /24 is cut from (private, apart from ``netns.SUBNETS``).
SUBNETS = ipaddress.IPv4Network("10.232.0.0/16")
#: Where each host sees its private directory.
HOST_DIR = Path("/var/lib/elastorm-host")
#: Where the requirements files (virtualenvs/*.txt) expect elastorm's wheel on a worker:
#: private to each host too (``<home>/hosts/<name>/opt``), copied there by scp.
WHEEL_DIR = Path("/opt/elastorm")
#: Hosts at most (addresses .10 to .29 of the /24).
MAX_HOSTS = 20
SSHD = Path("/usr/sbin/sshd")
STATE_FILE = "hosts.json"


@dataclass(frozen=True, kw_only=True, slots=True)
class HostPlan:
    """One host: ``namespace`` joined to the bridge by the veth pair ``outer`` (on the
    bridge) / ``inner`` (inside, with ``address``)."""

    name: str
    namespace: str
    outer: str
    inner: str
    address: str


@dataclass(frozen=True, kw_only=True, slots=True)
class HostsPlan:
    """The bridge (the machine's side, at ``gateway``) and its hosts, on one /24."""

    bridge: str
    gateway: str
    prefix: int
    hosts: tuple[HostPlan, ...]

    def host(self, name: str) -> HostPlan:
        """The host called ``name``; ``UserError`` naming the hosts if there is none."""
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts) or "none"
        raise UserError(f"no host {name!r} (hosts: {known})")


def hosts_plan(zookeeper_port: int, count: int) -> HostsPlan:
    """The names and addresses of ``count`` hosts (1..``MAX_HOSTS``) of the cluster whose
    ZooKeeper listens on ``zookeeper_port``: the /24 number ``port mod 256`` of
    10.232.0.0/16, the bridge at .1, host ``i`` at .(10 + i). O(count).

    >>> p = hosts_plan(12181, 2)
    >>> (p.bridge, p.gateway, [(h.name, h.namespace, h.outer, h.inner, h.address) for h in p.hosts])
    ('ehb12181', '10.232.149.1', [('host0', 'elastorm-12181-host0', 'eh12181o0', 'eh12181i0', \
'10.232.149.10'), ('host1', 'elastorm-12181-host1', 'eh12181o1', 'eh12181i1', '10.232.149.11')])
    """
    if not 1 <= zookeeper_port <= 65535:
        raise ValueError(f"zookeeper_port must be in 1..65535, got {zookeeper_port}")
    if not 1 <= count <= MAX_HOSTS:
        raise ValueError(f"hosts must be 1..{MAX_HOSTS}, got {count}")
    net = list(SUBNETS.subnets(new_prefix=24))[zookeeper_port % 256]
    base = net.network_address
    hosts = tuple(
        HostPlan(
            name=f"host{i}",
            namespace=f"elastorm-{zookeeper_port}-host{i}",
            outer=f"eh{zookeeper_port}o{i}",
            inner=f"eh{zookeeper_port}i{i}",
            address=str(base + 10 + i),
        )
        for i in range(count)
    )
    return HostsPlan(bridge=f"ehb{zookeeper_port}", gateway=str(base + 1), prefix=24, hosts=hosts)


def setup_commands(plan: HostsPlan) -> list[list[str]]:
    """The ``ip`` commands that make the bridge and join every host to it, in order."""
    cidr = f"/{plan.prefix}"
    cmds = [
        ["ip", "link", "add", plan.bridge, "type", "bridge"],
        ["ip", "addr", "add", plan.gateway + cidr, "dev", plan.bridge],
        ["ip", "link", "set", plan.bridge, "up"],
    ]
    for h in plan.hosts:
        inside = [*exec_prefix(h.namespace), "ip"]
        cmds += [
            ["ip", "netns", "add", h.namespace],
            ["ip", "link", "add", h.outer, "type", "veth", "peer", "name", h.inner],
            ["ip", "link", "set", h.inner, "netns", h.namespace],
            ["ip", "link", "set", h.outer, "master", plan.bridge],
            ["ip", "link", "set", h.outer, "up"],
            [*inside, "addr", "add", h.address + cidr, "dev", h.inner],
            [*inside, "link", "set", h.inner, "up"],
            [*inside, "link", "set", "lo", "up"],
            [*inside, "route", "add", "default", "via", plan.gateway],
        ]
    return cmds


def sshd_config(host: HostPlan, folder: Path, keys: Path) -> str:
    """An sshd listening on the host's address only, keys from ``keys`` (root by key,
    no password, no PAM: nothing of the machine's own login setup is used); its
    sessions' pip reads ``keys/pip.conf``."""
    return (
        f"ListenAddress {host.address}\n"
        "Port 22\n"
        f"HostKey {folder / 'ssh_host_ed25519_key'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\n"
        f"PidFile {folder / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "Subsystem sftp internal-sftp\n"  # scp, and fabric's put
        f"SetEnv ELASTORM_HOST={host.name} PIP_CONFIG_FILE={keys / 'pip.conf'}\n"
    )


def hosts_wheelhouse(cfg: ElastormConfig) -> Path:
    """Where the hosts' pip finds every package (``hosts_deploy.build_wheelhouse``)."""
    return cfg.home / "wheelhouse"


def pip_conf(wheelhouse: Path) -> str:
    """The hosts' pip configuration: the wheelhouse, never an index (the hosts reach
    nothing outside this machine)."""
    return f"[global]\nno-index = true\nfind-links = {wheelhouse}\n"


def link_command(host: HostPlan, *, up: bool) -> list[str]:
    """Cut (``up=False``) or restore ``host``'s only link, at its inner end (as
    ``netns.link_command``: the others see silence, the host sees no route)."""
    return [*exec_prefix(host.namespace), "ip", "link", "set", host.inner, "up" if up else "down"]


class Hosts:
    """The hosts of one checkout: ``<home>/hosts/`` keeps the ssh key, each host's
    folder (sshd config, host key, log, private ``root/``) and what is up."""

    def __init__(self, cfg: ElastormConfig) -> None:
        self.cfg = cfg
        self.folder = cfg.home / "hosts"
        self.key = self.folder / "id_ed25519"

    def plan(self) -> HostsPlan | None:
        """The hosts that are up (as ``up`` recorded them), or None."""
        path = self.folder / STATE_FILE
        if not path.exists():
            return None
        count = int(json.loads(path.read_text())["count"])
        return hosts_plan(self.cfg.zookeeper_port, count)

    def up(self, count: int, timeout: float = 30.0) -> HostsPlan:
        """Make ``count`` hosts (any earlier ones removed first), each with its sshd,
        and wait until each answers ssh; ``UserError`` (with what was made removed) if
        any step fails."""
        check_can_create()
        if not SSHD.exists():
            raise UserError(f"{SSHD} is missing: install openssh-server (bin/setup does)")
        plan = hosts_plan(self.cfg.zookeeper_port, count)
        self.down()
        self._keys()
        try:
            for cmd in setup_commands(plan):
                run_ip(cmd)
            for mount_point in (HOST_DIR, WHEEL_DIR):
                mount_point.mkdir(parents=True, exist_ok=True)
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privsep dir
            (self.folder / STATE_FILE).write_text(json.dumps({"count": count}) + "\n")
            for h in plan.hosts:
                self._start_sshd(h)
            for h in plan.hosts:
                self._wait_ssh(h, timeout)
        except (UserError, OSError, subprocess.SubprocessError):
            self.down(plan)
            raise
        log.info(
            "%d hosts up on %s (%s/%d): %s",
            count, plan.bridge, plan.gateway, plan.prefix,
            ", ".join(f"{h.name} {h.address}" for h in plan.hosts),
        )  # fmt: skip
        return plan

    def down(self, plan: HostsPlan | None = None) -> list[str]:
        """Stop everything running in the hosts, delete them and the bridge; the names
        of the hosts removed (also whatever an interrupted ``up`` left)."""
        plan = plan or self.plan() or hosts_plan(self.cfg.zookeeper_port, MAX_HOSTS)
        removed = []
        for h in plan.hosts:
            if not (NETNS_DIR / h.namespace).exists():
                continue
            _kill_namespace(h.namespace)
            run_ip(["ip", "netns", "delete", h.namespace])
            removed.append(h.name)
        if Path(f"/sys/class/net/{plan.bridge}").exists():
            run_ip(["ip", "link", "delete", plan.bridge])
        (self.folder / STATE_FILE).unlink(missing_ok=True)
        if removed:
            log.info("removed hosts %s and bridge %s", ", ".join(removed), plan.bridge)
        return removed

    def ssh_command(self, host: str, *command: str) -> list[str]:
        """The ssh command line that runs ``command`` on ``host`` as root."""
        plan = self.plan()
        if plan is None:
            raise UserError("no hosts are up: `elastorm hosts up` first")
        return ["ssh", *self.ssh_options(), f"root@{plan.host(host).address}", *command]

    def ssh_options(self) -> list[str]:
        """ssh's options for these hosts: the key ``up`` made, their own known_hosts."""
        return [
            "-i", str(self.key),
            "-o", f"UserKnownHostsFile={self.folder / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5",
        ]  # fmt: skip

    def enter(self, host: str) -> tuple[str, ...]:
        """What runs a command inside ``host``: ``nsenter`` into its sshd's network and
        mount namespaces (so the command sees the host's address and private folder)."""
        pid_file = self.folder / host / "sshd.pid"
        if not pid_file.exists():
            raise UserError(f"host {host}: no sshd running (`elastorm hosts up` first)")
        pid = pid_file.read_text().strip()
        return ("nsenter", f"--target={pid}", "--net", "--mount", "--")

    def set_link(self, host: str, *, up: bool) -> None:
        """Cut ``host`` off the bridge (``up=False``) or join it again."""
        plan = self.plan()
        if plan is None:
            raise UserError("no hosts are up: `elastorm hosts up` first")
        run_ip(link_command(plan.host(host), up=up))
        log.info("host %s: link %s", host, "restored" if up else "cut")

    def _keys(self) -> None:
        """The client key (made once) and its ``authorized_keys``; a fresh known_hosts."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.key.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)])
        pub = self.key.with_suffix(".pub").read_text()
        (self.folder / "authorized_keys").write_text(pub)
        (self.folder / "pip.conf").write_text(pip_conf(hosts_wheelhouse(self.cfg)))
        (self.folder / "known_hosts").unlink(missing_ok=True)

    def _start_sshd(self, host: HostPlan) -> None:
        """sshd in ``host``'s network namespace and a mount namespace of its own, with
        the host's private folders mounted on ``HOST_DIR`` and ``WHEEL_DIR``."""
        folder = self.folder / host.name
        root, opt = folder / "root", folder / "opt"
        for private in (root, opt):
            private.mkdir(parents=True, exist_ok=True)
        (root / "name").write_text(host.name + "\n")
        hostkey = folder / "ssh_host_ed25519_key"
        if not hostkey.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)])
        config = folder / "sshd_config"
        config.write_text(sshd_config(host, folder, self.folder))
        mount = (
            f"mount --bind {root} {HOST_DIR} && mount --bind {opt} {WHEEL_DIR} && "
            f"exec {SSHD} -D -f {config} -E {folder / 'sshd.log'}"
        )
        cmd = [*exec_prefix(host.namespace), "unshare", "--mount", "--propagation", "private",
               "sh", "-c", mount]  # fmt: skip
        subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def _wait_ssh(self, host: HostPlan, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        probe = ["ssh", *self.ssh_options(), f"root@{host.address}", "cat", str(HOST_DIR / "name")]
        while True:
            proc = subprocess.run(probe, capture_output=True, text=True, timeout=15)
            if proc.returncode == 0 and proc.stdout.strip() == host.name:
                return
            if time.monotonic() > deadline:
                log_file = self.folder / host.name / "sshd.log"
                raise UserError(
                    f"host {host.name} ({host.address}): ssh not answering after "
                    f"{timeout:.0f} s ({proc.stderr.strip()[-200:]}); see {log_file}"
                )
            time.sleep(0.3)


def _kill_namespace(namespace: str) -> None:
    """SIGKILL every process in ``namespace`` (its sshd and all it started)."""
    proc = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30
    )
    for pid in proc.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _run(cmd: list[str]) -> None:
    if shutil.which(cmd[0]) is None:
        raise UserError(f"`{cmd[0]}` is not on PATH (install openssh-client)")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise UserError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
