"""What ``elastorm forget`` finds and deletes: every znode elastorm keeps for a topology
name (``/elastorm/<name>``: the current submission's decisions and the earlier
submissions set aside under ``archive/``), never while the topology runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from elastorm.zk.codec import Submission, ZnodeSchemaError
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.submission import read_submission, read_tree


@dataclass(frozen=True, kw_only=True, slots=True)
class Inventory:
    """elastorm's znodes of one topology name: how many under each top-level part, the
    submission they belong to (None: none recorded or unreadable), the earlier
    submissions set aside, and the ephemeral znodes of sessions still open."""

    base: str
    parts: Mapping[str, int]
    submission: Submission | None
    archived: tuple[str, ...]
    live: tuple[str, ...]

    @property
    def znodes(self) -> int:
        return sum(self.parts.values())


def inventory(client: KazooClient, layout: ZnodeLayout) -> Inventory | None:
    """The topology's znodes as they are now; None if it has none."""
    if client.exists(layout.base) is None:
        return None
    tree = read_tree(client, layout.base)
    try:
        submission = read_submission(client, layout)
    except ZnodeSchemaError:
        submission = None
    return Inventory(
        base=layout.base,
        parts=dict(sorted(Counter(p.split("/")[0] for p in tree).items())),
        submission=submission,
        archived=tuple(sorted(p.split("/")[1] for p in tree if p.count("/") == 1 and _arch(p))),
        live=tuple(sorted(p for p, z in tree.items() if z.ephemeral)),
    )


def _arch(path: str) -> bool:
    return path.startswith("archive/")


def refusal(topology: str, inv: Inventory, running: Mapping[str, object] | None) -> str | None:
    """Why the znodes of ``topology`` must not be deleted now (None: they may be).

    ``running`` is Nimbus's entry for a topology of that name (any status: a killed
    one is still shutting down), None if Nimbus runs none. Open sessions' ephemeral
    znodes mean some task still runs (or was killed less than a session ago).
    """
    if running is not None:
        return (
            f"Nimbus runs {topology} (storm id {running.get('id')}, status "
            f"{running.get('status')}): kill it first (sparse kill -n {topology})"
        )
    if inv.live:
        shown = ", ".join(inv.live[:3]) + (" ..." if len(inv.live) > 3 else "")
        return (
            f"{len(inv.live)} znodes of {topology} belong to open ZooKeeper sessions "
            f"({shown}): a task still runs, or was killed less than a session timeout ago"
        )
    return None


def running_entry(topology: str, summary: Mapping[str, object]) -> Mapping[str, object] | None:
    """Nimbus's entry for ``topology`` in a ``cluster_summary``, None if it runs none."""
    for entry in summary.get("topologies", ()):
        if entry.get("name") == topology:
            return entry
    return None


def forget(client: KazooClient, layout: ZnodeLayout) -> None:
    """Delete every znode of the topology (its base, recursively)."""
    try:
        client.delete(layout.base, recursive=True)
    except NoNodeError:
        pass  # deleted meanwhile: forgotten all the same
