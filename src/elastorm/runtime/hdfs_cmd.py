"""``elastorm hdfs up|down|status|namenode|datanode``: elastorm's own HDFS on loopback."""

from __future__ import annotations

import argparse
import json

from elastorm.runtime import hdfs
from elastorm.runtime.config import load_config


def register(subparsers) -> None:
    """Add the ``hdfs`` subcommand."""
    parser = subparsers.add_parser(
        "hdfs",
        help="run an HDFS on this machine (a NameNode and DataNodes) for durable checkpoints",
        description="Start, stop or inspect a real HDFS on loopback: Hadoop's MiniDFSCluster "
        "(one NameNode, elastorm.hdfs_datanodes DataNodes, replication "
        "elastorm.hdfs_replication) with WebHDFS, from Maven Central's jars. Durable "
        "checkpoints go there with -o elastorm.durable.uri=hdfs://127.0.0.1:<hdfs_http_port>/"
        "elastorm (docs/hdfs.md).",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p_up = sub.add_parser(
        "up",
        help="start the HDFS (idempotent)",
        description="Start the NameNode and DataNodes; wait until WebHDFS answers and every "
        "DataNode has registered.",
    )
    p_up.set_defaults(func=_up)
    p_down = sub.add_parser("down", help="stop the HDFS", description="Stop the HDFS's JVM.")
    p_down.add_argument(
        "--wipe", action="store_true", help="also delete its data (the next `up` formats anew)"
    )
    p_down.set_defaults(func=_down)
    p_status = sub.add_parser(
        "status",
        help="the NameNode's and DataNodes' states",
        description="Show the launcher's pid, whether the NameNode serves, each DataNode's "
        "state and the durable store URI.",
    )
    p_status.add_argument("--json", action="store_true", help="print JSON")
    p_status.set_defaults(func=_status)
    p_nn = sub.add_parser(
        "namenode",
        help="stop or start the NameNode alone (fault tests)",
        description="Stop the NameNode (clients get connection refused; DataNodes keep "
        "running and re-register when it is back) or start it again.",
    )
    p_nn.add_argument("what", choices=("stop", "start"))
    p_nn.set_defaults(func=_namenode)
    p_dn = sub.add_parser(
        "datanode",
        help="kill or start one DataNode (fault tests)",
        description="Kill DataNode I (shut down without decommission: the NameNode "
        "notices from missed heartbeats, stale after 3 s, dead after 20 s) or start it "
        "again on its ports.",
    )
    p_dn.add_argument("what", choices=("kill", "start"))
    p_dn.add_argument("index", type=int, metavar="I", help="DataNode index, from 0")
    p_dn.set_defaults(func=_datanode)


def _show(info: dict) -> None:
    print(f"namenode   {info['namenode']}")
    for index, state in enumerate(info["datanodes"]):
        print(f"datanode {index} {state}")


def _up(args: argparse.Namespace) -> int:
    info = hdfs.up(load_config())
    print(f"hdfs up (pid {info['pid']}): {len(info['datanodes'])} DataNodes; uri {info['uri']}")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = hdfs.down(load_config(), wipe=args.wipe)
    print("stopped: hdfs" if stopped else "stopped: nothing was running")
    return 0


def _status(args: argparse.Namespace) -> int:
    info = hdfs.status(load_config())
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"hdfs       {'pid ' + str(info['pid']) if info['pid'] else 'not running'}")
    _show(info)
    print(f"webhdfs    {info['webhdfs']}")
    print(f"store uri  {info['uri']}")
    return 0


def _namenode(args: argparse.Namespace) -> int:
    _show(hdfs.namenode(load_config(), args.what))
    return 0


def _datanode(args: argparse.Namespace) -> int:
    _show(hdfs.datanode(load_config(), args.what, args.index))
    return 0
