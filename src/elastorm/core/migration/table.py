"""Phases of a key group on one task, and the transition table (one table, as data).

``TRANSITIONS[(phase, event)] = (handler, allowed next phases)``. A pair missing
from the table is illegal: the machine raises ``MigrationProtocolError`` and
stays ``FAILED``. ``docs/protocols.md`` draws its diagrams from this table.

Messages whose ``epoch`` is older than the machine's are stale leftovers of an
earlier (finished or aborted) migration; they are filtered before the table is
consulted (see ``KeyGroupMachine._stale``).
"""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    IDLE = "idle"  # no live state here (may hold a checkpoint copy)
    ACTIVE = "active"  # owner
    DIRECT_SOURCE = "direct_source"  # owner; full checkpoint sent to target, awaiting ack
    DRAINING = "draining"  # CPA/CPAL source: got some toCheckpoint, awaiting the rest
    REPLAYING = "replaying"  # CPA/RESTORE target: processing replays and new data
    SHADOW = "shadow"  # CPAL target: replays + duplicated data, outputs suppressed
    SYNCING = "syncing"  # CPAL target: sent processedAllReplay, awaiting syncGroup
    REPLICA = "replica"  # active replica (Su & Zhou 2016): shadow state, outputs suppressed
    FAILED = "failed"


LIVE = frozenset(
    {
        Phase.ACTIVE,
        Phase.DIRECT_SOURCE,
        Phase.DRAINING,
        Phase.REPLAYING,
        Phase.SHADOW,
        Phase.SYNCING,
    }
)
"""Phases in which the task holds live state for the group (as its owner or an end
of a migration; a ``REPLICA`` holds a shadow, not the group)."""

QUIET = frozenset({Phase.SHADOW, Phase.REPLICA})
"""Phases that apply data without sending its outputs: another task sends them."""

P = Phase
_OWNERISH = (P.ACTIVE, P.DIRECT_SOURCE, P.DRAINING, P.REPLAYING)

TRANSITIONS: dict[tuple[Phase, str], tuple[str, frozenset[Phase]]] = {
    # data
    (P.IDLE, "Data"): ("_reject_data", frozenset({P.IDLE})),
    **{(p, "Data"): ("_on_data", frozenset({p})) for p in _OWNERISH + (P.SHADOW, P.REPLICA)},
    (P.SYNCING, "Data"): ("_on_data_syncing", frozenset({P.SYNCING})),
    # toState: start or continue being a target
    (P.IDLE, "ToState"): (
        "_on_to_state_idle",
        frozenset({P.REPLAYING, P.SHADOW, P.SYNCING, P.ACTIVE, P.REPLICA}),
    ),
    (P.REPLAYING, "ToState"): ("_on_to_state", frozenset({P.REPLAYING, P.ACTIVE})),
    (P.SHADOW, "ToState"): (
        "_on_to_state",
        frozenset({P.SHADOW, P.SYNCING, P.ACTIVE, P.REPLAYING}),
    ),
    **{
        (p, "ToState"): ("_on_restore", frozenset({P.REPLAYING, P.ACTIVE}))
        for p in (P.ACTIVE, P.DIRECT_SOURCE, P.DRAINING, P.SYNCING)
    },
    # active replica: more replicate toStates, or promotion (a RESTORE toState)
    (P.REPLICA, "ToState"): (
        "_on_to_state",
        frozenset({P.REPLICA, P.REPLAYING, P.ACTIVE, P.SHADOW, P.SYNCING}),
    ),
    (P.REPLICA, "CheckpointDelta"): ("_on_primary_checkpoint", frozenset({P.REPLICA})),
    (P.REPLICA, "DropReplica"): ("_on_drop_replica", frozenset({P.IDLE})),
    (P.IDLE, "DropReplica"): ("_on_drop_idle", frozenset({P.IDLE})),  # not started (yet)
    # toCheckpoint: be a source
    (P.ACTIVE, "ToCheckpoint"): ("_on_to_checkpoint", frozenset({P.DRAINING, P.IDLE})),
    (P.DRAINING, "ToCheckpoint"): ("_on_to_checkpoint", frozenset({P.DRAINING, P.IDLE})),
    # CPAL sync
    (P.SYNCING, "SyncGroup"): ("_on_sync_group", frozenset({P.SYNCING, P.ACTIVE})),
    # direct
    (P.ACTIVE, "Migrate"): ("_on_direct", frozenset({P.DIRECT_SOURCE})),
    # A task with live state forwards the trim (its state covers its own
    # checkpoints); without it the ack is moot (e.g. a restarted task getting
    # the ack of a checkpoint its previous life sent): forwarding could trim
    # beyond the copy the group is being restored from.
    (P.IDLE, "CheckpointAck"): ("_ignore", frozenset({P.IDLE})),
    **{(p, "CheckpointAck"): ("_on_ack", frozenset({p})) for p in LIVE - {P.DIRECT_SOURCE}},
    (P.DIRECT_SOURCE, "CheckpointAck"): ("_on_ack", frozenset({P.DIRECT_SOURCE, P.ACTIVE})),
    **{(p, "CheckpointNack"): ("_on_nack", frozenset({p})) for p in (P.IDLE, *LIVE)},
}
