"""One key group on one downstream task: the machine behind direct, CPA and CPAL.

Driven by messages from upstream emitters, the holder and the controller; returns
actions. All roles a task can play for a group (owner, direct source, CPA/CPAL
source, CPA/CPAL/RESTORE target) are phases of this one machine, because a group
passes through them in sequence; the per-protocol views are in docs/protocols.md.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from itertools import islice
from typing import NamedTuple

from elastorm.core.actions import (
    Action,
    Applied,
    CheckpointStored,
    LoadDurable,
    MigrationAborted,
    MigrationDone,
    Rejected,
    Role,
    Send,
)
from elastorm.core.checkpoint import (
    CheckpointHolder,
    checkpoint_to_state,
    full_copy,
    state_to_checkpoint,
)
from elastorm.core.errors import Hint, MigrationProtocolError
from elastorm.core.keygroups import key_group as key_group_of
from elastorm.core.messages import (
    CheckpointAck,
    CheckpointDelta,
    CheckpointNack,
    Data,
    DataRun,
    DataTuple,
    DropReplica,
    DurableLoaded,
    DurableWritten,
    Message,
    Migrate,
    PeerDown,
    ProcessedAllReplay,
    Protocol,
    StandIn,
    SyncGroup,
    ToCheckpoint,
    ToState,
    ToStateAck,
    Trim,
    UpstreamRestarted,
    new_unchecked,
    set_unchecked,
)
from elastorm.core.migration.table import (
    LIVE,
    PEER_DOWN,
    QUIET,
    TRANSITIONS,
    UPSTREAM_RESTARTED,
    Phase,
)
from elastorm.core.outbox import PENDING
from elastorm.core.state import KeyGroupState, Step

KEY_MISMATCH = "key not in the named key group"
"""Why a data tuple whose key hashes to another group is refused."""

_OWNING = frozenset({Phase.ACTIVE, Phase.DIRECT_SOURCE, Phase.DRAINING})
"""Phases of a task that owns the group and keeps owning it when it turns ``ACTIVE``
(a direct source back from shipping its full checkpoint)."""


def _applied(
    key_group: int, item: DataTuple, result: object, emit: bool, tentative: bool
) -> Applied:
    """``Applied(...)`` built field by field (it has no checks to skip; this only
    saves the keyword-argument call once per tuple)."""
    action = new_unchecked(Applied)
    set_unchecked(action, "key_group", key_group)
    set_unchecked(action, "item", item)
    set_unchecked(action, "result", result)
    set_unchecked(action, "emit_output", emit)
    set_unchecked(action, "tentative", tentative)
    return action


class Gap(NamedTuple):
    """Tuples of ``source`` parked behind sequence ``awaited``, which has not come.

    ``parked`` tuples wait, the highest numbered ``last``; ``sender`` is the task that
    sent them (its output buffer holds the missing ones), if known.
    """

    source: str
    awaited: int
    parked: int
    last: int
    sender: int | None


_AWAITING_TO_STATE = frozenset({Phase.REPLAYING, Phase.SHADOW, Phase.REPLICA})
"""Phases whose pending upstreams are those whose toState has not all arrived."""

_TARGET_PHASE = {
    Protocol.CPA: Phase.REPLAYING,
    Protocol.RESTORE: Phase.REPLAYING,
    Protocol.CPAL: Phase.SHADOW,
    Protocol.REPLICATE: Phase.REPLICA,
}
"""The phase a task enters as the target of a toState of each protocol."""


class KeyGroupMachine:
    """Key group ``key_group`` as seen by task ``task``.

    ``upstreams()`` returns the live upstream emitter tasks (shared with the
    coordinator); ``awaited(epoch)`` those of them a migration of routing ``epoch``
    waits for (all of them, but an upstream restarted after that migration was
    ordered; ``TaskCoordinator``); ``holder`` is the task receiving this group's
    checkpoints.
    ``durable_trim``: the durable tier is on, so upstream buffers are trimmed no
    further than the newest durable copy (``DurableWritten``) either.
    """

    def __init__(
        self,
        *,
        key_group: int,
        task: int,
        upstreams: Callable[[], Set[int]],
        awaited: Callable[[int], Set[int]],
        holder_store: CheckpointHolder,
        step: Step,
        epoch: int = 0,
        owned: bool = False,
        durable_trim: bool = False,
        pending: Callable[[int], dict | None] | None = None,
    ) -> None:
        self.key_group = key_group
        self._unconfirmed = pending  # the adapter's unconfirmed outputs of a group (PENDING)
        self._durable_trim = durable_trim
        self._acked: dict[str, int] | None = None  # the held copy's positions
        self._durable: dict[str, int] | None = None  # the durable copy's positions
        self._trimmed: dict[str, int] | None = None  # the last Trim sent
        self._kept: list[tuple[int, Message]] = []  # LOADING: toStates and data, in order
        self.task = task
        self._upstreams = upstreams
        self._awaited = awaited
        self._holder_store = holder_store
        self._step = step
        self.epoch = epoch
        self.phase = Phase.ACTIVE if owned else Phase.IDLE
        #: The routing epoch under which this task came to own the group: a direct
        #: move's source keeps it while it numbers its last checkpoints in the move's
        #: epoch, so an owner's claim never shares an epoch with the next owner's.
        self.owned_epoch = epoch
        self.state: KeyGroupState | None = (
            KeyGroupState(key_group, step=step, epoch=epoch) if owned else None
        )
        self.holder: int | None = None
        self.protocol: Protocol | None = None
        self._pending: set[int] = set()  # upstreams we still wait for
        self._queue: list[DataTuple] = []  # CPAL: data from synced upstreams
        self._synced: set[int] = set()
        self._replay_emits = True
        self._parked: dict[str, dict[int, tuple[DataTuple, bool]]] = {}
        self._parked_from: dict[str, int] = {}  # source -> the task that sent its parked ones
        self._direct: CheckpointDelta | None = None  # the full checkpoint sent, until acked
        self._direct_target: int | None = None
        self._replica_ready = False  # REPLICA: every upstream's replicate toState is in
        self._primary_checkpoint = 0  # REPLICA: owner epoch of the last checkpoint acked
        self.upstream_recovering = False  # set by the coordinator (UpstreamRecovery)
        self.rejected = 0

    # -- entry points ------------------------------------------------------
    def receive(self, sender: int, message: Message) -> list[Action]:
        """Handle one message from ``sender``; raise ``MigrationProtocolError`` if
        ``(phase, message)`` is not in the transition table."""
        if self.phase is Phase.FAILED:
            raise MigrationProtocolError(
                f"group {self.key_group} on task {self.task} failed earlier; got "
                f"{type(message).__name__} from {sender}"
            )
        if self._stale(message):
            return self._on_stale(sender, message)
        return self._transition(sender, type(message).__name__, message)

    def _transition(self, sender: int, event: str, message: Message) -> list[Action]:
        """Run ``(phase, event)``'s handler from ``TRANSITIONS``: the one way the phase
        changes; a missing pair, or a handler that leaves the row's allowed phases,
        fails the machine."""
        entry = TRANSITIONS.get((self.phase, event))
        if entry is None:
            return self._fail(
                f"{event} from task {sender} not allowed in phase {self.phase.value}",
                self._hint_for(message),
            )
        handler, allowed = entry
        before = self.phase
        try:
            actions = getattr(self, handler)(sender, message)
        except MigrationProtocolError:
            self.phase = Phase.FAILED
            raise
        if self.phase not in allowed:  # the table is the spec: keep code and table in step
            return self._fail(f"{handler} moved to {self.phase.value}, not in {allowed}")
        if self.phase is Phase.ACTIVE and before not in _OWNING:
            self.owned_epoch = self.epoch  # taken over (a move's target, a restore)
        return actions

    def checkpoint(self, *, full: bool = False) -> list[Action]:
        """Take a checkpoint now if this task owns the group and a holder is set.

        Only in ``ACTIVE``: mid-migration the holder is, or is about to be, the
        target, which would refuse it anyway.
        """
        if self.phase is not Phase.ACTIVE or self.holder in (None, self.task):
            return []
        assert self.state is not None
        self._record_pending()
        delta = self.state.begin_checkpoint(full=full)
        self.state.finish_checkpoint()
        return [Send(to_task=self.holder, message=delta)]

    def _record_pending(self) -> None:
        """Before any copy of the group is taken: its outputs no consumer confirmed yet
        (the adapter's, ``core.outbox.PENDING``) into its reserved entry, so the copy
        carries them to whoever takes the group over. Written only when changed."""
        if self._unconfirmed is None or self.state is None:
            return
        pending = self._unconfirmed(self.key_group)
        if pending is not None and self.state.get(PENDING, {}) != pending:
            self.state.put(PENDING, pending)

    def set_holder(self, holder: int | None) -> None:
        """Checkpoints go to ``holder`` from now on; the next one is full."""
        if holder != self.holder and self.state is not None:
            self.state.needs_full = True
        self.holder = holder

    def upstream_restarted(self, task: int, message: UpstreamRestarted) -> list[Action]:
        """Upstream ``task`` began a new life (the ``UPSTREAM_RESTARTED`` event; ignored
        once ``FAILED``, as a peer's death is)."""
        if self.phase is Phase.FAILED:
            return []
        return self._transition(task, UPSTREAM_RESTARTED, message)

    def peer_down(self, task: int) -> list[Action]:
        """Task ``task`` died: the ``PEER_DOWN`` event (ignored once ``FAILED``: a
        failed machine refuses messages, but a peer's death is no fault of the
        caller's, and the coordinator tells every machine)."""
        if self.phase is Phase.FAILED:
            return []
        return self._transition(-1, PEER_DOWN, PeerDown(key_group=self.key_group, task=task))

    # -- helpers -----------------------------------------------------------
    def _fail(self, reason: str, hint: Hint = Hint.NONE) -> list[Action]:
        self.phase = Phase.FAILED
        raise MigrationProtocolError(
            f"group {self.key_group} on task {self.task}: {reason}", hint=hint
        )

    @staticmethod
    def _hint_for(message: Message) -> Hint:
        if isinstance(message, ToState):
            if message.protocol.restores:
                return Hint.UNRECOVERABLE
            return Hint.FALL_BACK_TO_DIRECT
        return Hint.RESTORE_FROM_CHECKPOINT

    def _stale(self, message: Message) -> bool:
        epoch = getattr(message, "epoch", None)
        return epoch is not None and epoch < self.epoch

    def _on_stale(self, sender: int, message: Message) -> list[Action]:
        # A toState of an older migration still carries genuine tuples: a live
        # owner folds them in (dedup drops what it has); everything else is moot.
        if isinstance(message, ToState) and self.phase in LIVE:
            return self._replay(message.items, emit=True, sender=sender)
        if isinstance(message, ToState) and self.phase is Phase.REPLICA:
            return self._replay(message.items, emit=False, sender=sender)
        return []

    def receive_data(self, sender: int, message: Data) -> list[Action]:
        """:meth:`receive` for a ``Data``; the owner's case (``ACTIVE``, whose table
        entry is ``_on_data`` and stays ``ACTIVE``) skips the table lookup."""
        if self.phase is Phase.ACTIVE:
            return self._admit(message.item, True, sender)
        return self.receive(sender, message)

    @property
    def tentative(self) -> bool:
        """Whether outputs made now are tentative: the group is being restored (a
        RESTORE target still replaying) or state upstream of it is."""
        return self.upstream_recovering or (
            self.phase is Phase.REPLAYING and self.protocol is not None and self.protocol.restores
        )

    def _admit(self, item: DataTuple, emit: bool, sender: int | None) -> list[Action]:
        """Apply ``item`` if it is its source's next, with every parked one it frees;
        drop a duplicate; park an early one (remembering ``sender``, the task whose
        buffer holds what it waits for, when known)."""
        state = self.state
        assert state is not None
        tentative = self.tentative
        # state.admission(item), inlined: this runs once per tuple.
        source, seq = item.source, item.seq
        last = state.applied.get(source, 0)
        if seq <= last:  # Admission.DUPLICATE
            return []
        if seq != last + 1:  # Admission.EARLY: an earlier tuple of this source is in flight
            self._parked.setdefault(source, {})[seq] = (item, emit)
            if sender is not None:
                self._parked_from[source] = sender
            return []
        result = state.apply_next(item)
        actions: list[Action] = [_applied(self.key_group, item, result, emit, tentative)]
        parked = self._parked.get(source) if self._parked else None
        while parked:
            nxt = parked.pop(state.applied[source] + 1, None)
            if nxt is None:
                break
            result = state.apply_next(nxt[0])
            actions.append(_applied(self.key_group, nxt[0], result, nxt[1], tentative))
        return actions

    def admit_run(self, sender: int, run: DataRun, num_key_groups: int) -> list[Action]:
        """The owner's (``ACTIVE``) admission of a whole run from ``sender``: what its
        ``Data`` one by one would do, with one duplicate and order check per run.

        A run wholly applied already is dropped; one overlapping the applied ones starts
        after them; an early one (a gap before it), or one of a source with tuples
        parked (which it may hold too), goes tuple by tuple (parked, or freeing the
        parked ones). Each tuple's key is still checked against the group
        (``num_key_groups``), and its source's position moves per tuple, so a failing
        step leaves it exact. O(run).
        """
        state = self.state
        assert state is not None and self.phase is Phase.ACTIVE
        source, first, items = run.source, run.first, run.items
        last = state.applied.get(source, 0)
        if run.last <= last:
            return []  # every tuple a duplicate
        if first > last + 1 or (self._parked and self._parked.get(source)):
            return self._admit_each(sender, run, num_key_groups, 0)
        g, tentative, apply_next = self.key_group, self.tentative, state.apply_next
        trusted = DataTuple.trusted
        actions: list[Action] = []
        append = actions.append
        seq = last + 1
        for key, value, ts in items[seq - first :]:
            if key_group_of(key, num_key_groups) != g:
                return actions + self._admit_each(sender, run, num_key_groups, seq - first)
            item = trusted(source, seq, key, value, ts)
            append(_applied(g, item, apply_next(item), True, tentative))
            seq += 1
        return actions

    def _admit_each(
        self, sender: int, run: DataRun, num_key_groups: int, start: int
    ) -> list[Action]:
        """A run's tuples from index ``start`` on, one by one as their ``Data`` would be:
        a key outside the group refused, the rest admitted (applied, dropped or parked)."""
        actions: list[Action] = []
        g = self.key_group
        for item in islice(run.tuples(), start, None):
            if key_group_of(item.key, num_key_groups) != g:
                self.rejected += 1
                bad = Data.trusted(g, item)
                actions.append(Rejected(sender=sender, message=bad, reason=KEY_MISMATCH))
            else:
                actions += self._admit(item, True, sender)
        return actions

    def _replay(
        self, items: tuple[DataTuple, ...], *, emit: bool, sender: int | None = None
    ) -> list[Action]:
        actions: list[Action] = []
        admit = self._admit
        for item in items:
            done = admit(item, emit, sender)
            if done:
                actions.extend(done)
        return actions

    @property
    def parked(self) -> int:
        """Tuples waiting for an earlier sequence of their source."""
        return sum(len(p) for p in self._parked.values())

    def gaps(self) -> list[Gap]:
        """A :class:`Gap` for every source with parked tuples. O(parked tuples)."""
        if not self._parked or self.state is None:
            return []
        applied = self.state.applied
        return [
            Gap(
                source=source,
                awaited=applied.get(source, 0) + 1,
                parked=len(parked),
                last=max(parked),
                sender=self._parked_from.get(source),
            )
            for source, parked in sorted(self._parked.items())
            if parked
        ]

    def awaits_to_state(self, task: int) -> bool:
        """Whether this task, as a migration's target or a replica, still waits for
        ``task``'s toState: a gap in ``task``'s tuples is then expected (a CPAL toState
        comes in chunks while new tuples are duplicated here), not a loss."""
        return task in self._pending and self.phase in _AWAITING_TO_STATE

    def _to_all_upstreams(self, make: Callable[[], Message]) -> list[Action]:
        return [Send(to_task=u, message=make()) for u in sorted(self._upstreams())]

    def _done(self, role: Role) -> list[Action]:
        assert self.protocol is not None
        return [
            MigrationDone(
                key_group=self.key_group, epoch=self.epoch, protocol=self.protocol, role=role
            )
        ]

    def _maybe_complete(self) -> list[Action]:
        """Advance when nobody is pending any more."""
        if self._pending:
            return []
        if self.phase is Phase.REPLAYING:
            self.phase = Phase.ACTIVE
            self._holder_store.drop(self.key_group)
            return self._done(Role.TARGET)
        if self.phase is Phase.REPLICA:
            if self._replica_ready:
                return []
            self._replica_ready = True  # shadowing from now on: tell the controller once
            return self._done(Role.TARGET)
        if self.phase is Phase.SHADOW:
            self.phase = Phase.SYNCING
            self._pending = set(self._awaited(self.epoch))
            self._synced = set(self._upstreams()) - self._pending
            epoch = self.epoch
            g = self.key_group
            actions = self._to_all_upstreams(lambda: ProcessedAllReplay(key_group=g, epoch=epoch))
            return actions + self._maybe_complete()
        if self.phase is Phase.SYNCING:
            queued, self._queue = self._queue, []
            actions = self._replay(tuple(queued), emit=True)
            self.phase = Phase.ACTIVE
            self._holder_store.drop(self.key_group)
            return actions + self._done(Role.TARGET)
        if self.phase is Phase.DRAINING:
            assert self.state is not None
            self._record_pending()
            copy = state_to_checkpoint(self.state, epoch=self.epoch)
            self._holder_store.put(copy)
            self.state = None
            self._parked.clear()
            self._parked_from.clear()
            self.phase = Phase.IDLE
            # The drained state is a copy the new owner's state grows from: until the
            # new owner's first checkpoint is acked (and trims past it), it and the
            # upstream buffers are the group, should the new owner die.
            assert copy.checkpoint is not None
            stored = CheckpointStored(key_group=self.key_group, checkpoint=copy.checkpoint)
            return [stored, *self._done(Role.SOURCE)]
        return []

    # -- handlers (named in TRANSITIONS) -----------------------------------
    def _reject_data(self, sender: int, message: Data) -> list[Action]:
        self.rejected += 1
        return [Rejected(sender=sender, message=message, reason="not the owner")]

    def _on_data(self, sender: int, message: Data) -> list[Action]:
        return self._admit(message.item, self.phase not in QUIET, sender)

    def _on_data_shadow(self, sender: int, message: Data) -> list[Action]:
        """Quietly (the source sends the outputs), but an upstream restarted since the
        migration began sends only here: its tuples wait for the end, as a synced one's."""
        if sender in self._synced:
            self._queue.append(message.item)
            return []
        return self._admit(message.item, False, sender)

    def _on_data_syncing(self, sender: int, message: Data) -> list[Action]:
        if sender in self._synced:
            self._queue.append(message.item)
            return []
        return self._admit(message.item, False, sender)

    def _start_target(self, message: ToState) -> None:
        self.epoch = message.epoch
        self.protocol = message.protocol
        self._pending = set(self._awaited(message.epoch))
        self._replay_emits = message.protocol.restores
        self._synced = set(self._upstreams()) - self._pending
        self._replica_ready = False
        self._acked = self._durable = self._trimmed = None  # a new lineage of checkpoints

    def _on_to_state_idle(self, sender: int, message: ToState) -> list[Action]:
        if message.protocol is Protocol.DURABLE:
            # No copy survived in memory: ask the adapter for the store's, and keep
            # this toState (and what follows) until it is in.
            self._start_target(message)
            self.phase = Phase.LOADING
            self._kept = [(sender, message)]
            return [LoadDurable(key_group=self.key_group, epoch=self.epoch)]
        copy = self._holder_store.get(self.key_group)
        if copy is None:
            return self._fail(
                f"{message.protocol.value} toState but no checkpoint held here",
                self._hint_for(message),
            )
        self._holder_store.take(self.key_group)
        self.state = checkpoint_to_state(copy, epoch=message.epoch, step=self._step)
        self._start_target(message)
        self.phase = _TARGET_PHASE[message.protocol]
        return self._on_to_state(sender, message)

    def _on_to_state(self, sender: int, message: ToState) -> list[Action]:
        if message.epoch != self.epoch:
            if message.protocol.restores:
                return self._on_restore(sender, message)
            if self.phase is Phase.REPLICA and message.epoch > self.epoch:
                # Dropped, then made a replica or a CPA/CPAL target here again, before
                # the drop arrived (it comes on the controller's channel, this on an
                # emitter's). The shadow is a per-source prefix covering every trim (it
                # acked no further), as good as the held copy it would have become.
                if message.protocol is not Protocol.REPLICATE:
                    self._own_shadow(message.epoch)
                self._start_target(message)
                self.phase = _TARGET_PHASE[message.protocol]
                return self._on_to_state(sender, message)
            return self._fail(f"toState of epoch {message.epoch} during epoch {self.epoch}")
        if message.more:  # a chunk: more of this upstream's buffer follows
            actions = self._replay(message.items, emit=self._replay_emits, sender=sender)
            ack = ToStateAck(key_group=self.key_group, epoch=self.epoch)
            return [*actions, Send(to_task=sender, message=ack)]
        self._pending.discard(sender)
        actions = self._replay(message.items, emit=self._replay_emits, sender=sender)
        return actions + self._maybe_complete()

    def _own_shadow(self, epoch: int) -> None:
        """The shadow becomes the group's state from routing epoch ``epoch``: its
        checkpoints are numbered in that epoch, as a state made from a held copy is
        (``checkpoint_to_state``), so a holder keeping an older lineage's copy takes
        them; the first is full."""
        assert self.state is not None
        self.state.checkpoint = (epoch, 0)
        self.state.needs_full = True

    def _on_restore(self, sender: int, message: ToState) -> list[Action]:
        """A RESTORE (or DURABLE) toState at a task that still has live state: keep
        that state (it is a per-source prefix like any checkpoint, and no older than a
        durable copy) and replay on top."""
        if not message.protocol.restores or message.epoch <= self.epoch:
            return self._fail(
                f"{message.protocol.value} toState (epoch {message.epoch}) at a task that "
                f"already has live state (epoch {self.epoch})",
                self._hint_for(message),
            )
        queued, self._queue = self._queue, []
        self._direct = None
        if self.phase is Phase.REPLICA:
            self._own_shadow(message.epoch)
        self._start_target(message)
        self.phase = Phase.REPLAYING
        actions = self._replay(tuple(queued), emit=True)
        return actions + self._on_to_state(sender, message)

    def _on_to_checkpoint(self, sender: int, message: ToCheckpoint) -> list[Action]:
        if self.phase is Phase.ACTIVE:
            direct = self.protocol is Protocol.DIRECT and message.epoch == self.epoch
            self.protocol = Protocol.DIRECT if direct else message.protocol
            self.epoch = message.epoch
            self._pending = set(self._awaited(message.epoch))
            self.phase = Phase.DRAINING
        elif message.epoch != self.epoch:
            return self._fail(f"toCheckpoint of epoch {message.epoch} during {self.epoch}")
        # What ``sender`` sent here before it turned to the target but never arrived,
        # and what is parked behind it: applied now with its outputs (the target
        # replays these tuples without), so no tuple's outputs are skipped.
        actions = self._replay(message.items, emit=True, sender=sender)
        self._pending.discard(sender)
        return actions + self._maybe_complete()

    def _on_sync_group(self, sender: int, message: SyncGroup) -> list[Action]:
        if message.epoch != self.epoch:
            return self._fail(f"syncGroup of epoch {message.epoch} during {self.epoch}")
        # Before ``sender`` counts as synced (its later tuples wait for the end and are
        # sent outputs for): what it sent before the switch and a loss kept from here,
        # applied quietly, as the source sends those tuples' outputs.
        actions = self._replay(message.items, emit=False, sender=sender)
        self._synced.add(sender)
        self._pending.discard(sender)
        return actions + self._maybe_complete()

    def _on_direct(self, sender: int, message: Migrate) -> list[Action]:
        if message.protocol is not Protocol.DIRECT or message.source != self.task:
            return self._fail(f"{message.protocol.value} command for source {message.source}")
        if message.epoch == self.epoch and self.protocol is Protocol.DIRECT:
            return self._on_direct_again(sender, message)
        if message.epoch <= self.epoch:
            return self._fail(f"direct migration epoch {message.epoch} <= {self.epoch}")
        assert self.state is not None
        self.epoch = message.epoch
        self.protocol = Protocol.DIRECT
        self.set_holder(message.target)
        self._record_pending()
        delta = self.state.begin_checkpoint(full=True)
        self.state.finish_checkpoint()
        self._direct = delta
        self._direct_target = message.target
        self.phase = Phase.DIRECT_SOURCE
        return [Send(to_task=message.target, message=delta)]

    def _on_direct_again(self, sender: int, message: Migrate) -> list[Action]:
        """The controller's repeat of this direct move's command (``redrive``: it heard
        nothing of the move for the retry time). Before the full checkpoint's ack, ship
        it again: it may be what was lost (Storm drops messages to a worker until it has
        reconnected to it; chaos join/cpal-source at 8b5584d stayed stuck 3 min), and a
        holder that has it acks it again. Past the ack (active or draining), ask the
        upstreams for the CPA again (that request may be what was lost; an upstream that
        had it ignores the repeat)."""
        if (
            message.protocol is not Protocol.DIRECT
            or message.source != self.task
            or message.epoch != self.epoch
        ):
            return self._fail(f"{message.protocol.value} command in phase {self.phase.value}")
        if self._direct_target != message.target:
            return []  # done, or aborted (its target died)
        if self.phase is Phase.DIRECT_SOURCE and self._direct is not None:
            return [Send(to_task=message.target, message=self._direct)]
        if self.phase not in (Phase.ACTIVE, Phase.DRAINING):
            return []
        return self._ask_for_cpa(message.target)

    def _ask_for_cpa(self, target: int) -> list[Action]:
        """A direct source's request to every upstream: move the group on by CPA to
        ``target`` (Alg. 1), at this move's epoch."""
        g, epoch = self.key_group, self.epoch
        return self._to_all_upstreams(
            lambda: Migrate(
                key_group=g, epoch=epoch, protocol=Protocol.CPA, source=self.task, target=target
            )
        )

    def _on_while_loading(self, sender: int, message: Message) -> list[Action]:
        """LOADING: keep ``message`` to handle, in arrival order, once the copy is in."""
        self._kept.append((sender, message))
        return []

    def _on_durable_loaded(self, sender: int, message: DurableLoaded) -> list[Action]:
        """The store's copy is in: promote it exactly as a held copy is
        (``checkpoint_to_state``), or start empty when the store had none (the
        adapter reports the loss), then handle what was kept, in order. Upstream
        replays its buffer; the copy's ``watermarks`` drop what it already reflects."""
        if message.epoch != self.epoch:
            return self._fail(f"durable copy for epoch {message.epoch} during {self.epoch}")
        if message.checkpoint is None:
            self.state = KeyGroupState(self.key_group, step=self._step, epoch=self.epoch)
        else:
            copy = full_copy(message)
            self.state = checkpoint_to_state(copy, epoch=self.epoch, step=self._step)
        self.phase = Phase.REPLAYING
        kept, self._kept = self._kept, []
        actions: list[Action] = []
        for s, m in kept:
            actions += self.receive(s, m)
        return actions + self._maybe_complete()

    def _on_durable_written(self, sender: int, message: DurableWritten) -> list[Action]:
        self._durable = dict(message.watermarks)
        return self._trim()

    def _trim(self) -> list[Action]:
        """Tell every upstream how far it may trim its buffer of the group: to the held
        copy's positions, and with the durable tier on to the elementwise minimum of
        them and the durable copy's (none yet: nothing), so a DURABLE restore finds
        every tuple after its copy still buffered. A trim of nothing, or a repeat of
        the last one, is not sent (it would re-arm the emitters' checkpoint requests
        while the store lags, for nothing)."""
        if self._acked is None:
            return []
        marks = self._acked
        if self._durable_trim:
            durable = self._durable or {}
            low = {s: min(seq, durable.get(s, 0)) for s, seq in marks.items()}
            marks = {s: seq for s, seq in low.items() if seq > 0}
            if not marks:
                return []
        if marks == self._trimmed:
            return []
        self._trimmed = marks
        g = self.key_group
        return self._to_all_upstreams(lambda: Trim(key_group=g, watermarks=marks))

    def _on_ack(self, sender: int, message: CheckpointAck) -> list[Action]:
        self._acked = dict(message.watermarks)
        actions = self._trim()
        direct = self._direct
        if self.phase is Phase.DIRECT_SOURCE and direct and message.checkpoint == direct.checkpoint:
            # Alg. 1 follows once the target holds the newest checkpoint.
            assert self._direct_target is not None
            actions += self._ask_for_cpa(self._direct_target)
            self._direct = None
            self.phase = Phase.ACTIVE
        return actions

    def _ignore(self, sender: int, message: Message) -> list[Action]:
        return []

    def _on_primary_checkpoint(self, sender: int, delta: CheckpointDelta) -> list[Action]:
        """The owner checkpointed to its active replica: nothing to store (the replica's
        live shadow is the copy), but ack what the shadow already covers, so the
        upstream buffers are trimmed by the primary's progress as far as the replica
        has kept up (the elementwise minimum of both). The owner's unconfirmed outputs
        in it (``PENDING``) are taken: a promotion sends them again."""
        assert self.state is not None
        if PENDING in delta.entries:
            self.state.put(PENDING, delta.entries[PENDING])
        applied = self.state.applied
        marks = {s: min(seq, applied.get(s, 0)) for s, seq in delta.watermarks.items()}
        self._primary_checkpoint = delta.checkpoint[0]
        ack = CheckpointAck(key_group=self.key_group, checkpoint=delta.checkpoint, watermarks=marks)
        return [Send(to_task=sender, message=ack)]

    def _on_drop_replica(self, sender: int, message: DropReplica) -> list[Action]:
        """The replica is dropped: its shadow becomes this task's held copy (the group's
        checkpoint, as new as the shadow; the owner's next delta is refused, so its
        next checkpoint here is full)."""
        assert self.state is not None
        self.epoch = message.epoch
        copy = state_to_checkpoint(self.state, epoch=self._primary_checkpoint)
        self._holder_store.put(copy)
        self.state = None
        self._parked.clear()
        self._parked_from.clear()
        self.phase = Phase.IDLE
        return []

    def _on_drop_idle(self, sender: int, message: DropReplica) -> list[Action]:
        """A drop before the replica started here: later toStates of that replica are
        stale from now on, so it never starts."""
        self.epoch = max(self.epoch, message.epoch)
        return []

    def _on_peer_down(self, sender: int, message: PeerDown) -> list[Action]:
        """Stop waiting for the dead task (which may complete a migration); abort a
        direct migration whose target it was (the source owns the group again)."""
        task = message.task
        actions: list[Action] = []
        if self.phase is Phase.DIRECT_SOURCE and self._direct_target == task:
            self.phase = Phase.ACTIVE
            self._direct = self._direct_target = None
            actions.append(
                MigrationAborted(
                    key_group=self.key_group,
                    epoch=self.epoch,
                    reason=f"direct target {task} died",
                    hint=Hint.FALL_BACK_TO_DIRECT,
                )
            )
        if self._pending:
            self._pending.discard(task)
            actions += self._maybe_complete()
        return actions

    def _on_upstream_restarted(self, sender: int, message: UpstreamRestarted) -> list[Action]:
        """Upstream ``sender`` restarted knowing routing epoch ``message.epoch``: in a
        migration at or before it, it sends no toState, toCheckpoint or syncGroup (it
        ignores their commands) and routes to the new owner only; its replay brings what
        it had. Stop waiting for it (which may complete the migration); a CPAL target
        queues its tuples as a synced upstream's."""
        if self.epoch > message.epoch or sender not in self._pending:
            return []
        self._pending.discard(sender)
        self._synced.add(sender)
        return self._maybe_complete()

    def _on_stand_in(self, sender: int, message: StandIn) -> list[Action]:
        """The controller stands in for the emitters of a move none will answer: as the
        source not yet draining, drain as on their toCheckpoint (a direct source only
        once its full checkpoint is acked: it is ``ACTIVE`` at the move's epoch); as the
        target not yet started, start from the held copy as on a toState with no
        tuples. Ignored otherwise (this end is past it, or holds no copy to start from)."""
        g, e = self.key_group, message.epoch
        protocol = Protocol.CPA if message.protocol is Protocol.DIRECT else message.protocol
        if self.phase is Phase.ACTIVE and message.source == self.task:
            if message.protocol is Protocol.DIRECT:  # its full checkpoint acked
                waits = self.protocol is Protocol.DIRECT and self.epoch == e
            else:  # no toCheckpoint of the move reached it
                waits = self.epoch < e
            if not waits:
                return []
            return self._on_to_checkpoint(
                sender, ToCheckpoint(key_group=g, epoch=e, protocol=protocol)
            )
        if (
            self.phase is Phase.IDLE
            and message.target == self.task
            and self._holder_store.get(g) is not None
        ):
            return self._on_to_state_idle(
                sender, ToState(key_group=g, epoch=e, protocol=protocol, items=())
            )
        return []

    def _on_nack(self, sender: int, message: CheckpointNack) -> list[Action]:
        if self.state is not None:
            self.state.needs_full = True
        return []
