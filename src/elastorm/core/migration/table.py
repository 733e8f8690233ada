"""The migration protocols' tables, as data, in one place (h11's ``_state.py``).

* ``COORDINATOR_TABLE``: which handler of a task's ``TaskCoordinator`` takes each
  message kind (every kind of ``core.messages`` has a row).
* ``TRANSITIONS``: one key group on one task (``KeyGroupMachine``),
  ``(phase, event) -> (handler, allowed next phases)``.
* ``EMITTER_TRANSITIONS``: one key group at an upstream ``Emitter``,
  ``(route, event) -> (handler, allowed next routes)``.

A pair missing from a transition table is illegal: the machine raises
``MigrationProtocolError`` and stays ``FAILED``; a handler that moves to a phase its
row does not allow is a bug and fails the same way. ``docs/protocols.md`` shows
these tables (``tests/unit/test_protocol_tables.py`` checks them against the code).

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
    REPLAYING = "replaying"  # CPA/RESTORE/DURABLE target: processing replays and new data
    SHADOW = "shadow"  # CPAL target: replays + duplicated data, outputs suppressed
    SYNCING = "syncing"  # CPAL target: sent processedAllReplay, awaiting syncGroup
    REPLICA = "replica"  # active replica (Su & Zhou 2016): shadow state, outputs suppressed
    LOADING = "loading"  # DURABLE target: reading the group's copy from the durable store
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

PEER_DOWN = "peer_down"
"""The event of a peer's death at a key group's machine (not a message type name)."""

UPSTREAM_RESTARTED = "upstream_restarted"
"""The event of an upstream's new life at a key group's machine (the coordinator's
``UpstreamRestarted``, told to every machine; not a message type name)."""

P = Phase
_OWNERISH = (P.ACTIVE, P.DIRECT_SOURCE, P.DRAINING, P.REPLAYING)

TRANSITIONS: dict[tuple[Phase, str], tuple[str, frozenset[Phase]]] = {
    # data
    (P.IDLE, "Data"): ("_reject_data", frozenset({P.IDLE})),
    **{(p, "Data"): ("_on_data", frozenset({p})) for p in _OWNERISH + (P.REPLICA,)},
    (P.SHADOW, "Data"): ("_on_data_shadow", frozenset({P.SHADOW})),
    (P.SYNCING, "Data"): ("_on_data_syncing", frozenset({P.SYNCING})),
    # toState: start or continue being a target
    (P.IDLE, "ToState"): (
        "_on_to_state_idle",
        frozenset({P.REPLAYING, P.SHADOW, P.SYNCING, P.ACTIVE, P.REPLICA, P.LOADING}),
    ),
    # DURABLE target: keep toStates and data, in order, until the store's copy is in
    (P.LOADING, "ToState"): ("_on_while_loading", frozenset({P.LOADING})),
    (P.LOADING, "Data"): ("_on_while_loading", frozenset({P.LOADING})),
    (P.LOADING, "DurableLoaded"): ("_on_durable_loaded", frozenset({P.REPLAYING, P.ACTIVE})),
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
    (P.ACTIVE, "Migrate"): ("_on_direct", frozenset({P.DIRECT_SOURCE, P.ACTIVE})),
    # the controller's repeat of a direct command this source already had (redrive)
    **{
        (p, "Migrate"): ("_on_direct_again", frozenset({p}))
        for p in (P.DIRECT_SOURCE, P.DRAINING, P.IDLE)
    },
    # A task with live state forwards the trim (its state covers its own
    # checkpoints); without it the ack is moot (e.g. a restarted task getting
    # the ack of a checkpoint its previous life sent): forwarding could trim
    # beyond the copy the group is being restored from.
    (P.IDLE, "CheckpointAck"): ("_ignore", frozenset({P.IDLE})),
    (P.LOADING, "CheckpointAck"): ("_ignore", frozenset({P.LOADING})),
    **{(p, "CheckpointAck"): ("_on_ack", frozenset({p})) for p in LIVE - {P.DIRECT_SOURCE}},
    (P.DIRECT_SOURCE, "CheckpointAck"): ("_on_ack", frozenset({P.DIRECT_SOURCE, P.ACTIVE})),
    **{(p, "CheckpointNack"): ("_on_nack", frozenset({p})) for p in (P.IDLE, P.LOADING, *LIVE)},
    # The durable copy of an owned group advanced: trim upstream up to the older of
    # it and the held copy. Moot where the task has no live state of the group.
    **{(p, "DurableWritten"): ("_on_durable_written", frozenset({p})) for p in LIVE},
    **{(p, "DurableWritten"): ("_ignore", frozenset({p})) for p in (P.IDLE, P.REPLICA, P.LOADING)},
    # A peer died (not a message: the coordinator's PeerDown, fanned out to every
    # group): stop waiting for it, which may complete a migration; a direct source
    # whose target died aborts and owns the group again. A FAILED machine ignores it.
    **{
        (p, PEER_DOWN): ("_on_peer_down", frozenset({p}))
        for p in (P.IDLE, P.ACTIVE, P.REPLICA, P.LOADING)
    },
    (P.DIRECT_SOURCE, PEER_DOWN): ("_on_peer_down", frozenset({P.DIRECT_SOURCE, P.ACTIVE})),
    (P.DRAINING, PEER_DOWN): ("_on_peer_down", frozenset({P.DRAINING, P.IDLE})),
    (P.REPLAYING, PEER_DOWN): ("_on_peer_down", frozenset({P.REPLAYING, P.ACTIVE})),
    (P.SHADOW, PEER_DOWN): ("_on_peer_down", frozenset({P.SHADOW, P.SYNCING, P.ACTIVE})),
    (P.SYNCING, PEER_DOWN): ("_on_peer_down", frozenset({P.SYNCING, P.ACTIVE})),
    # An upstream restarted, unaware of the migrations at or before the epoch it read:
    # stop waiting for it there (its replay brings what it had); a CPAL target takes
    # its tuples as a synced upstream's (queued, applied with outputs as the owner).
    **{
        (p, UPSTREAM_RESTARTED): ("_on_upstream_restarted", frozenset({p}))
        for p in (P.IDLE, P.ACTIVE, P.DIRECT_SOURCE, P.LOADING)
    },
    (P.REPLICA, UPSTREAM_RESTARTED): ("_on_upstream_restarted", frozenset({P.REPLICA})),
    (P.REPLAYING, UPSTREAM_RESTARTED): (
        "_on_upstream_restarted",
        frozenset({P.REPLAYING, P.ACTIVE}),
    ),
    (P.DRAINING, UPSTREAM_RESTARTED): ("_on_upstream_restarted", frozenset({P.DRAINING, P.IDLE})),
    (P.SHADOW, UPSTREAM_RESTARTED): (
        "_on_upstream_restarted",
        frozenset({P.SHADOW, P.SYNCING, P.ACTIVE}),
    ),
    (P.SYNCING, UPSTREAM_RESTARTED): ("_on_upstream_restarted", frozenset({P.SYNCING, P.ACTIVE})),
    # The controller stands in for emitters that will never answer a move (every one
    # restarted knowing its epoch): its source drains, its target starts from its held
    # copy. Anywhere else the end has started already (or cannot start): nothing to do.
    (P.ACTIVE, "StandIn"): ("_on_stand_in", frozenset({P.ACTIVE, P.DRAINING, P.IDLE})),
    (P.IDLE, "StandIn"): (
        "_on_stand_in",
        frozenset({P.IDLE, P.REPLAYING, P.SHADOW, P.SYNCING, P.ACTIVE}),
    ),
    **{
        (p, "StandIn"): ("_ignore", frozenset({p}))
        for p in (
            P.DIRECT_SOURCE,
            P.DRAINING,
            P.REPLAYING,
            P.SHADOW,
            P.SYNCING,
            P.REPLICA,
            P.LOADING,
        )
    },  # fmt: skip
}
"""``(phase, event) -> (handler, allowed next phases)`` of one key group on one task;
events are message type names, ``PEER_DOWN`` and ``UPSTREAM_RESTARTED``."""


class Route(Enum):
    """How an emitter sends one key group's tuples."""

    OWNER = "owner"  # to the routing table's owner
    DUPLICATE = "duplicate"  # CPAL: to source and target
    REPLICATED = "replicated"  # to the owner and its active replica
    FAILED = "failed"


R = Route

EMITTER_TRANSITIONS: dict[tuple[Route, str], tuple[str, frozenset[Route]]] = {
    (R.OWNER, "cpa"): ("_on_cpa", frozenset({R.OWNER})),
    (R.OWNER, "cpal"): ("_on_cpal", frozenset({R.DUPLICATE})),
    **{
        (r, p): ("_on_restore", frozenset({R.OWNER}))
        for r in (R.OWNER, R.DUPLICATE, R.REPLICATED)
        for p in ("restore", "durable")
    },
    (R.DUPLICATE, "ProcessedAllReplay"): (
        "_on_processed_all",
        frozenset({R.OWNER, R.DUPLICATE}),  # DUPLICATE: a stale epoch, ignored
    ),
    (R.OWNER, "ProcessedAllReplay"): ("_ignore", frozenset({R.OWNER})),
    (R.DUPLICATE, "ToStateAck"): ("_on_to_state_ack", frozenset({R.DUPLICATE})),
    (R.OWNER, "ToStateAck"): ("_ignore_ack", frozenset({R.OWNER})),  # stale
    (R.OWNER, "replicate"): ("_on_replicate", frozenset({R.REPLICATED})),
    # ordered again (an emitter restarted: MigrationController.redrive): the buffer again
    (R.REPLICATED, "replicate"): ("_on_replicate", frozenset({R.REPLICATED})),
    (R.REPLICATED, "DropReplica"): ("_on_drop_replica", frozenset({R.OWNER})),
    # a move of a newer epoch: the controller dropped the replica first, and the move's
    # command (from a direct source) overtook the drop (from the controller)
    (R.REPLICATED, "cpa"): ("_on_cpa_past_drop", frozenset({R.OWNER})),
    (R.REPLICATED, "cpal"): ("_on_cpal_past_drop", frozenset({R.DUPLICATE})),
    (R.OWNER, "DropReplica"): ("_on_drop_replica", frozenset({R.OWNER})),  # moot
    (R.REPLICATED, "ProcessedAllReplay"): ("_ignore", frozenset({R.REPLICATED})),
    (R.REPLICATED, "ToStateAck"): ("_ignore_ack", frozenset({R.REPLICATED})),
}
"""``(route, event) -> (handler, allowed next routes)`` of one key group at an
emitter; events are the protocol of a ``Migrate`` command or a message type name."""

EMITTER_MESSAGES = ("Trim", "ProcessedAllReplay", "ToStateAck", "Resend")
"""Messages for the task's upstream-side :class:`Emitter`, not for the coordinator."""

COORDINATOR_TABLE: dict[str, str] = {
    "Data": "_on_data",  # the per-tuple path: range and key checks, then the machine
    **dict.fromkeys(
        ("ToState", "ToCheckpoint", "SyncGroup", "Migrate", "DropReplica", "StandIn"),
        "_on_group_message",
    ),
    # from the task's own durable tier (its writer, its store reader): the machine
    **dict.fromkeys(("DurableWritten", "DurableLoaded"), "_on_group_message"),
    "CheckpointAck": "_on_answer",  # the checkpoint is answered, then the machine
    "CheckpointNack": "_on_answer",
    "CheckpointDelta": "_on_delta",  # holder side (a replica's machine takes its own)
    "CheckpointRequest": "_on_request",
    "SetHolder": "_on_set_holder",
    "PeerDown": "_on_peer_down",  # every machine (``PEER_DOWN``), holders lost
    "UpstreamRestarted": "_on_upstream_restarted",  # every machine (``UPSTREAM_RESTARTED``)
    "UpstreamRecovery": "_on_upstream_recovery",
    **dict.fromkeys(EMITTER_MESSAGES, "_on_emitter_message"),  # refused
}
"""``message kind -> handler`` of a ``TaskCoordinator``: the one dispatch of what a
task's downstream side receives. Every kind but ``Data`` and the emitter's is counted
and refused if its key group is out of range before its handler runs."""
