"""Read-only access to a topology's znodes, for observers (``elastorm dashboard``).

Nothing here writes: an observer must never take a controller's lead, bump a
term or create a znode. Every read goes through the paths of
:class:`~elastorm.zk.layout.ZnodeLayout` and the
decoders of :mod:`elastorm.zk.codec` / :mod:`elastorm.controller.requests`, so
there is still one layout. ``CountingReads`` counts the ZooKeeper calls made, for
the dashboard's cost measurements.
"""

from __future__ import annotations

import json
import logging
import posixpath
from dataclasses import dataclass, field, replace

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from elastorm.controller.model import Allocation
from elastorm.controller.requests import FINAL, MigrationRequest, RequestError, decode_request
from elastorm.controller.scaling import (
    Binding,
    NodeSet,
    RescaleProgress,
    ScalingError,
    decode_binding,
    decode_node_set,
    decode_rescale,
)
from elastorm.core.routing import RoutingTable
from elastorm.zk.codec import ZnodeSchemaError, decode_checkpoints, decode_routing
from elastorm.zk.layout import DEFAULT_ROOT, ZnodeLayout

log = logging.getLogger(__name__)


class CountingReads:
    """Counts the reads an observer makes (``get`` and ``get_children`` calls)."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client
        self.reads = 0

    def get(self, path: str) -> bytes:
        self.reads += 1
        return self.client.get(path)[0]

    def children(self, path: str) -> list[str]:
        self.reads += 1
        try:
            return self.client.get_children(path)
        except NoNodeError:
            return []

    def exists(self, path: str) -> bool:
        self.reads += 1
        return self.client.exists(path) is not None


def list_topologies(reader: CountingReads, root: str = DEFAULT_ROOT) -> list[str]:
    """Names of the topologies that have a root under ``root``, sorted."""
    return sorted(reader.children(root))


def status_operators(reader: CountingReads, topology: str) -> list[str]:
    """Operators whose controller published a status (``controller/status/<op>``), sorted."""
    return sorted(reader.children(posixpath.dirname(ZnodeLayout(topology).status("any"))))


def read_operator_status(reader: CountingReads, topology: str, operator: str) -> dict | None:
    """The controller's published status of ``operator`` (see ``RequestBoard``) with the
    routing table's ``epoch`` and ``owners`` (the store's), or None."""
    layout = ZnodeLayout(topology)
    try:
        data = reader.get(layout.status(operator))
        _, table = decode_routing(reader.get(layout.routing(operator)))
    except (NoNodeError, ZnodeSchemaError):
        return None
    try:
        value = json.loads(data.decode()) if data else None
    except ValueError:
        log.warning("status of %s/%s does not decode", topology, operator)
        return None
    if not isinstance(value, dict):
        return None
    return {**value, "epoch": table.epoch, "owners": list(table.owners)}


def read_figures(reader: CountingReads, topology: str) -> dict | None:
    """The leading controller's figures (``controller/figures``), or None if it published
    none (yet) or they do not decode."""
    try:
        value = json.loads(reader.get(ZnodeLayout(topology).figures).decode())
    except NoNodeError:
        return None
    except ValueError:
        log.warning("the controller's figures of %s do not decode", topology)
        return None
    return value if isinstance(value, dict) else None


def controller_running(reader: CountingReads, topology: str, operator: str) -> bool:
    """Whether a controller leads ``topology`` (its ephemeral leader znode)."""
    return reader.exists(ZnodeLayout(topology).leader)


@dataclass
class RequestCache:
    """Requests already read in a final state (``done``, ``refused``) are not read again."""

    final: dict[str, MigrationRequest] = field(default_factory=dict)


def read_requests(
    reader: CountingReads, topology: str, cache: RequestCache
) -> list[tuple[str, MigrationRequest]]:
    """Every migration request of ``topology`` (name order = submission order).

    Malformed requests are skipped (the controller refuses them itself).
    """
    path = ZnodeLayout(topology).requests
    out = []
    for name in sorted(reader.children(path)):
        if name in cache.final:
            out.append((name, cache.final[name]))
            continue
        try:
            request = decode_request(reader.get(f"{path}/{name}"))
        except (NoNodeError, RequestError):
            continue
        if request.state in FINAL:
            cache.final[name] = request
        out.append((name, request))
    return out


def read_routing_tables(reader: CountingReads, layout: ZnodeLayout) -> dict[str, RoutingTable]:
    """The routing tables the controller store persisted (operator -> table)."""
    tables = {}
    for op in sorted(reader.children(layout.routing_dir)):
        try:
            operator, table = decode_routing(reader.get(layout.routing(op)))
        except (NoNodeError, ZnodeSchemaError) as exc:
            log.debug("routing of %s unreadable: %s", op, exc)
            continue
        tables[operator] = table
    return tables


def read_scaling(reader: CountingReads, layout: ZnodeLayout) -> tuple[Binding, RescaleProgress]:
    """The elastic scheduler's binding (logical node -> named node) and the controller's
    rescale progress (joining and draining nodes); empty where nothing was published (a
    topology not scheduled elastically) or a znode does not decode (logged).

    A node drains from the moment a drain request names it in ``scheduler/nodes``
    until the controller releases it there, so those count as draining too: the
    controller publishes its progress on its rescale rounds, and a small node can be
    emptied and released between two of the dashboard's reads."""
    out: list = []
    for path, decode, empty in (
        (layout.scheduler_placement, decode_binding, Binding()),
        (layout.rescale, decode_rescale, RescaleProgress()),
        (layout.scheduler_nodes, decode_node_set, NodeSet()),
    ):
        try:
            out.append(decode(reader.get(path)))
        except NoNodeError:
            out.append(empty)
        except ScalingError as exc:
            log.warning("%s unreadable: %s", path, exc)
            out.append(empty)
    binding, rescale, nodes = out
    draining = tuple(sorted(set(rescale.draining) | set(nodes.draining)))
    return binding, replace(rescale, draining=draining)


def read_checkpoint_allocation(reader: CountingReads, layout: ZnodeLayout) -> Allocation | None:
    """The checkpoint allocation the controller store persisted, or None."""
    try:
        return decode_checkpoints(reader.get(layout.checkpoints))
    except NoNodeError:
        return None
    except ZnodeSchemaError as exc:
        log.warning("checkpoint allocation unreadable: %s", exc)
        return None
