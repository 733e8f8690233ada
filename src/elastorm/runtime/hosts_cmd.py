"""``elastorm hosts up|down|status|ssh|cut|join``: several hosts on this machine."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from elastorm.runtime import hosts_deploy, multihost
from elastorm.runtime.config import load_config
from elastorm.runtime.hosts import HOST_DIR, MAX_HOSTS, Hosts, hosts_plan
from elastorm.runtime.multihost import roles


def register(subparsers) -> None:
    """Add the ``hosts`` subcommand."""
    parser = subparsers.add_parser(
        "hosts",
        help="several hosts on this machine: network namespaces on a bridge, each with sshd",
        description="Hosts for deployment tests, on this one machine (root): each a network "
        "namespace with its own address on a bridge and an sshd, reached by ssh with a key "
        f"kept in <home>/hosts/; inside a host, {HOST_DIR} is that host's private folder "
        "(<home>/hosts/<name>/root). `cut`/`join` take a host off the bridge and back.",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="make the hosts (removing earlier ones) and start sshd")
    up.add_argument("--count", type=int, default=4, help=f"hosts, 1..{MAX_HOSTS} (4)")
    up.add_argument(
        "--storm",
        action="store_true",
        help="also start Storm across them: a 3-server ZooKeeper ensemble, Nimbus on two "
        "hosts, supervisors on the others (at least 4 hosts)",
    )
    sub.add_parser("down", help="stop everything in the hosts and remove them")
    sub.add_parser("status", help="each host's address and whether ssh answers")
    ssh = sub.add_parser("ssh", help="run a command on a host (a shell without one)")
    ssh.add_argument("host")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    deploy = sub.add_parser(
        "deploy",
        help="make a topology deployable to the hosts the production way",
        description="Build a wheelhouse of elastorm (this checkout) and of every requirement "
        "of virtualenvs/NAME.txt (the hosts' pip reads only it), copy elastorm's wheel to "
        "/opt/elastorm on every host, and print the sparse commands that build the "
        "workers' virtualenvs over ssh and submit (config.json's env `hosts` must name the "
        "hosts that are up: it says what to set if not).",
    )
    deploy.add_argument("name", help="the topology (topologies/NAME.py, virtualenvs/NAME.txt)")
    for name, what in (("cut", "cut HOST off the bridge"), ("join", "put HOST back")):
        p = sub.add_parser(name, help=what)
        p.add_argument("host")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    cfg = load_config()
    hosts = Hosts(cfg)
    if args.action == "up":
        if args.storm:
            roles(hosts_plan(cfg.zookeeper_port, args.count))  # refused before any host
        plan = hosts.up(args.count)
        for h in plan.hosts:
            print(f"{h.name} {h.address} (ssh: elastorm hosts ssh {h.name})")
        print(f"this machine on the hosts' network: {plan.gateway}")
        if args.storm:
            summary = multihost.up(cfg, hosts)
            leader = ", ".join(n["host"] for n in summary["nimbuses"] if n["leader"]) or "?"
            nimbuses, supervisors = len(summary["nimbuses"]), len(summary["supervisors"])
            print(f"Storm: leading Nimbus {leader} of {nimbuses}, {supervisors} supervisors")
    elif args.action == "down":
        stopped = multihost.down(cfg, hosts)
        if stopped:
            print(f"stopped {', '.join(stopped)}")
        removed = hosts.down()
        print(f"removed {', '.join(removed)}" if removed else "no hosts were up")
    elif args.action == "status":
        return _status(hosts)
    elif args.action == "deploy":
        hosts_deploy.check_hosts_env(cfg, hosts)
        wheel = hosts_deploy.build_wheelhouse(cfg, args.name)
        copied = hosts_deploy.install_on_hosts(hosts, wheel)
        print(f"wheelhouse {wheel.parent}; {wheel.name} copied to {', '.join(copied)}")
        print(f"then, from {cfg.project}, with the hosts' key in an ssh-agent:")
        print(f"  eval $(ssh-agent -s) && ssh-add {hosts.key}")
        print(f"  LEIN_ROOT=1 sparse update_virtualenv -e hosts -n {args.name}")
        print(f"  LEIN_ROOT=1 sparse submit -e hosts -n {args.name} -j $(elastorm jar)")
    elif args.action == "ssh":
        cmd = hosts.ssh_command(args.host, *args.command)
        return subprocess.call(cmd if args.command else [cmd[0], "-t", *cmd[1:]])
    else:
        hosts.set_link(args.host, up=args.action == "join")
    return 0


def _status(hosts: Hosts) -> int:
    plan = hosts.plan()
    if plan is None:
        print("no hosts are up")
        return 1
    down = 0
    for h in plan.hosts:
        probe = hosts.ssh_command(h.name, "true")
        ok = subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
        pid_file = hosts.folder / h.name / "sshd.pid"
        pid = pid_file.read_text().strip() if pid_file.exists() else "-"
        alive = pid != "-" and Path(f"/proc/{pid}").exists()
        print(f"{h.name} {h.address}: ssh {'answers' if ok else 'DOES NOT ANSWER'}, "
              f"sshd {'pid ' + pid if alive else 'not running'}")  # fmt: skip
        down += not ok
    return 1 if down else 0
