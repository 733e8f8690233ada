"""Per-task coordinator: the downstream side of one operator task.

Wraps one :class:`KeyGroupMachine` per key group (wsproto-style nesting) and the
task's :class:`CheckpointHolder`. A Storm bolt adapter feeds it every message it
receives and every tick, and performs the actions it returns, in order.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from elastorm.core.actions import (
    Action,
    CheckpointStored,
    EmitterRestarted,
    HolderLost,
    Rejected,
    Send,
    TuplesStalled,
)
from elastorm.core.checkpoint import CheckpointHolder, HeldCheckpoint, checkpoint_to_state
from elastorm.core.errors import CheckpointOrderError, MigrationProtocolError
from elastorm.core.keygroups import key_group as key_group_of
from elastorm.core.messages import (
    MESSAGE_TYPES,
    CheckpointAck,
    CheckpointDelta,
    CheckpointNack,
    CheckpointRequest,
    Data,
    DataRun,
    Message,
    PeerDown,
    Resend,
    SetHolder,
    UpstreamRecovery,
    UpstreamRestarted,
)
from elastorm.core.migration.keygroup import KEY_MISMATCH, KeyGroupMachine
from elastorm.core.migration.table import COORDINATOR_TABLE, LIVE, Phase
from elastorm.core.state import KeyGroupState, Step, sum_step

_Handler = Callable[["TaskCoordinator", int, Any], list[Action]]


def _control(handler: _Handler) -> _Handler:
    """Mark a handler of a control message (``COORDINATOR_TABLE``): the message is
    counted by kind (``in.<kind>``) and refused if its key group is out of range."""

    @functools.wraps(handler)
    def checked(self: TaskCoordinator, sender: int, message: Any) -> list[Action]:
        self._stats[f"in.{type(message).__name__}"] += 1
        if not 0 <= message.key_group < self.num_key_groups:
            return self._reject(sender, message, "key group out of range")
        return handler(self, sender, message)

    return checked


class TaskCoordinator:
    """Downstream side of task ``task`` of an operator with ``num_key_groups`` groups.

    ``upstreams`` are the emitter tasks feeding this operator (each sends its
    toState / toCheckpoint / syncGroup). ``owned`` groups start ``ACTIVE`` with
    empty state; ``holders`` says where each owned group checkpoints to.
    ``stale_through`` is for a restarted task: the highest epoch the controller
    had issued when it restarted; messages of those migrations are stale here.
    A sequence gap (a tuple lost on the way) is asked for again from the emitter
    that sent the tuples parked behind it every ``resend_after`` seconds, and
    reported (``TuplesStalled``) once it is ``stall_after`` seconds old.
    ``durable_trim``: the durable tier is on; upstream buffers are trimmed no further
    than each group's newest durable copy (``DurableWritten``) as well.
    """

    def __init__(
        self,
        *,
        task: int,
        num_key_groups: int,
        upstreams: Iterable[int],
        step: Step = sum_step,
        owned: Iterable[int] = (),
        holders: Mapping[int, int] | None = None,
        checkpoint_interval: float | None = None,
        stale_through: int = -1,
        stall_after: float = 30.0,
        resend_after: float = 1.5,
        durable_trim: bool = False,
    ) -> None:
        if num_key_groups < 1:
            raise ValueError(f"num_key_groups must be >= 1, got {num_key_groups}")
        if checkpoint_interval is not None and checkpoint_interval <= 0:
            raise ValueError("checkpoint_interval must be > 0")
        if resend_after <= 0:
            raise ValueError(f"resend_after must be > 0, got {resend_after}")
        self.task = task
        self.num_key_groups = num_key_groups
        # the adapter's unconfirmed outputs of a group (``core.outbox.Outbox.pending``),
        # written into the group's copies (``PENDING``); None: outputs not kept
        self.pending_outputs: Callable[[int], dict] | None = None
        self.upstreams: set[int] = set(upstreams)
        # upstream -> the routing epoch its newest life read at its start (it ignores
        # the commands of migrations at or before it: UpstreamRestarted)
        self.restarted: dict[int, int] = {}
        self.step = step
        self.held = CheckpointHolder()
        self.checkpoint_interval = checkpoint_interval
        self.stale_through = stale_through
        self._stats: Counter[str] = Counter()
        self.data_in = 0
        self._machines: dict[int, KeyGroupMachine] = {}
        self._last_checkpoint: dict[int, float] = {}
        self._unacked: set[int] = set()  # groups whose last checkpoint is not acked yet
        self._now: float | None = None  # the last tick's time
        self.stall_after = stall_after
        self.resend_after = resend_after
        self._gaps: dict[tuple[int, str, int], float] = {}  # gap -> first tick that saw it
        self._asked: dict[tuple[int, str, int], float] = {}  # gap -> last Resend sent
        self._reported_gaps: set[tuple[int, str, int]] = set()
        self.upstream_recovering = False
        self.durable_trim = durable_trim
        self._handlers: dict[type[Message], Callable[[int, Any], list[Action]]] = {
            MESSAGE_TYPES[kind]: getattr(self, name) for kind, name in COORDINATOR_TABLE.items()
        }
        for g in owned:
            self._check_group(g)
            self._machines[g] = self._new_machine(g, owned=True)
        for g, holder in (holders or {}).items():
            self.machine(g).set_holder(holder)

    @property
    def stats(self) -> Counter[str]:
        """Counts: ``in.<message type>``, checkpoints, rejected, stale deltas."""
        if self.data_in:
            self._stats["in.Data"] = self.data_in
        return self._stats

    # -- access --------------------------------------------------------------
    def _new_machine(self, g: int, owned: bool = False) -> KeyGroupMachine:
        machine = KeyGroupMachine(
            key_group=g,
            task=self.task,
            upstreams=lambda: self.upstreams,
            awaited=self._awaited,
            holder_store=self.held,
            step=self.step,
            epoch=self.stale_through + 1,
            owned=owned,
            durable_trim=self.durable_trim,
            pending=self._pending_of,
        )
        machine.upstream_recovering = self.upstream_recovering
        return machine

    def _pending_of(self, g: int) -> dict | None:
        """Group ``g``'s unconfirmed outputs from the adapter's ``pending_outputs``
        (None without one: nothing is recorded)."""
        return None if self.pending_outputs is None else self.pending_outputs(g)

    def _check_group(self, g: int) -> None:
        if not 0 <= g < self.num_key_groups:
            raise IndexError(f"key group {g} not in [0, {self.num_key_groups})")

    def machine(self, key_group: int) -> KeyGroupMachine:
        """The machine of ``key_group`` (created ``IDLE`` on first use)."""
        self._check_group(key_group)
        m = self._machines.get(key_group)
        if m is None:
            m = self._machines[key_group] = self._new_machine(key_group)
        return m

    def phase(self, key_group: int) -> Phase:
        return self.machine(key_group).phase

    def peek_phase(self, key_group: int) -> Phase:
        """``key_group``'s phase here, ``IDLE`` if it has no machine (none created: for
        readers such as a state query, which must change nothing)."""
        self._check_group(key_group)
        m = self._machines.get(key_group)
        return Phase.IDLE if m is None else m.phase

    def state(self, key_group: int) -> KeyGroupState | None:
        """Live state of ``key_group`` here, if any (use it for queries and output
        counters; update it only through the actions)."""
        return self.machine(key_group).state

    def start_from(self, copies: Mapping[int, HeldCheckpoint], *, epoch: int) -> list[int]:
        """A new submission restored from a savepoint: every owned group starts from its
        copy in ``copies`` (promoted as a held copy is, ``checkpoint_to_state``: state,
        output counters and watermarks), or empty; all numbered from routing ``epoch``,
        so their checkpoints sort after the copies'. Returns the groups restored."""
        restored = []
        for g in self.owned():
            machine = self._machines[g]
            copy = copies.get(g)
            if copy is None:
                machine.state = KeyGroupState(g, step=self.step, epoch=epoch)
            else:
                machine.state = checkpoint_to_state(copy, epoch=epoch, step=self.step)
                restored.append(g)
        return restored

    def owned(self) -> tuple[int, ...]:
        """Groups this task owns outright (``ACTIVE``)."""
        return tuple(g for g, m in sorted(self._machines.items()) if m.phase is Phase.ACTIVE)

    def owned_epoch(self) -> int:
        """The newest routing epoch under which this task came to own one of its groups
        (-1: it owns none): what its heartbeat claims them at. O(machines)."""
        return max(
            (m.owned_epoch for m in self._machines.values() if m.phase is Phase.ACTIVE),
            default=-1,
        )

    def replicas(self) -> tuple[int, ...]:
        """Groups this task shadows as their active replica."""
        return tuple(g for g, m in sorted(self._machines.items()) if m.phase is Phase.REPLICA)

    def live(self) -> tuple[int, ...]:
        """Groups with live state here (owner, or either end of a migration)."""
        return tuple(g for g, m in sorted(self._machines.items()) if m.phase in LIVE)

    # -- events --------------------------------------------------------------
    def receive(self, sender: int, message: Message) -> list[Action]:
        """Handle ``message`` from task ``sender``; return the actions to perform.

        The message's kind picks its handler (``COORDINATOR_TABLE``). Raises
        ``MigrationProtocolError`` when the message is illegal for its key group's
        phase (that group's machine then stays ``FAILED``).
        """
        try:
            handler = self._handlers[type(message)]
        except KeyError:
            raise MigrationProtocolError(
                f"task {self.task}: {type(message).__name__} from {sender} is no message "
                "for a coordinator"
            ) from None
        return handler(sender, message)

    def _on_data(self, sender: int, message: Data) -> list[Action]:
        """The per-tuple path: refuse a tuple whose key group is out of range or does
        not hold its key, give the rest to the group's machine."""
        self.data_in += 1
        g = message.key_group
        if not 0 <= g < self.num_key_groups:
            return self._reject(sender, message, "key group out of range")
        if key_group_of(message.item.key, self.num_key_groups) != g:
            return self._reject(sender, message, KEY_MISMATCH)
        m = self._machines.get(g)
        if m is None:
            m = self.machine(g)
        return m.receive_data(sender, message)

    def receive_run(self, sender: int, run: DataRun) -> list[Action]:
        """Handle a run of data tuples from task ``sender`` (``DataRun``): an ``ACTIVE``
        owner admits it whole (``KeyGroupMachine.admit_run``); any other phase, or a
        group out of range, takes each of its ``Data`` as :meth:`receive` would (a
        machine's phase never changes on data, so a refusal comes at the first one).
        Counted per tuple (``in.Data``)."""
        g = run.key_group
        m = self._machines.get(g) if g < self.num_key_groups else None
        if m is None or m.phase is not Phase.ACTIVE:
            actions: list[Action] = []
            for message in run.data():
                actions += self._on_data(sender, message)
            return actions
        self.data_in += len(run.items)
        rejected = m.rejected
        actions = m.admit_run(sender, run, self.num_key_groups)
        if m.rejected != rejected:
            self._stats["rejected"] += m.rejected - rejected
        return actions

    @_control
    def _on_group_message(self, sender: int, message: Message) -> list[Action]:
        """A protocol message of one key group: its machine's table decides."""
        return self.machine(message.key_group).receive(sender, message)

    @_control
    def _on_answer(self, sender: int, message: CheckpointAck | CheckpointNack) -> list[Action]:
        """The group's last checkpoint is answered (a request may take another); the
        machine forwards the trim or asks for a full one."""
        self._unacked.discard(message.key_group)
        return self.machine(message.key_group).receive(sender, message)

    @_control
    def _on_set_holder(self, sender: int, message: SetHolder) -> list[Action]:
        """The group checkpoints to ``message.holder`` from now on (the next is full)."""
        self._unacked.discard(message.key_group)
        self.machine(message.key_group).set_holder(message.holder)
        return []

    @_control
    def _on_peer_down(self, sender: int, message: PeerDown) -> list[Action]:
        return self.peer_down(message.task)

    def _awaited(self, epoch: int) -> set[int]:
        """The upstreams a migration of routing ``epoch`` waits for: every one but those
        restarted knowing its outcome (their new life ignores its commands)."""
        restarted = self.restarted
        return {u for u in self.upstreams if restarted.get(u, -1) < epoch}

    @_control
    def _on_upstream_restarted(self, sender: int, message: UpstreamRestarted) -> list[Action]:
        """Upstream ``sender`` began a new life knowing routing epoch ``message.epoch``:
        no machine waits for it in a migration at or before that epoch, and the
        controller hears of it (``EmitterRestarted``: it orders the restores in flight
        again, which nobody may have started)."""
        self.restarted[sender] = max(message.epoch, self.restarted.get(sender, -1))
        actions: list[Action] = [EmitterRestarted(task=sender, epoch=message.epoch)]
        for _, m in sorted(self._machines.items()):
            actions += m.upstream_restarted(sender, message)
        return actions

    @_control
    def _on_upstream_recovery(self, sender: int, message: UpstreamRecovery) -> list[Action]:
        self.set_upstream_recovering(message.recovering)
        return []

    def _on_emitter_message(self, sender: int, message: Message) -> list[Action]:
        """An upstream-side message sent to the downstream side: counted, refused."""
        self._stats[f"in.{type(message).__name__}"] += 1
        return self._reject(sender, message, "emitter message sent to a coordinator")

    def checkpoint(self, key_group: int, *, full: bool = False) -> list[Action]:
        """Checkpoint ``key_group`` now (no-op unless owned and a holder is set)."""
        actions = self.machine(key_group).checkpoint(full=full)
        if actions:
            self.stats["checkpoints"] += 1
            self._unacked.add(key_group)
        return actions

    @_control
    def _on_request(self, sender: int, message: CheckpointRequest) -> list[Action]:
        """An upstream's buffer of the group passed its high-water mark
        (``Emitter.request_at``): checkpoint now, unless a checkpoint is already on its
        way (its ack brings the trim). The clock restarts from the last tick."""
        key_group = message.key_group
        m = self._machines.get(key_group)
        if m is None or key_group in self._unacked:
            self._stats["checkpoint_requests_skipped"] += 1
            return []
        taken = self.checkpoint(key_group)
        if taken:
            self._stats["checkpoints_requested"] += 1
            if self._now is not None:
                self._last_checkpoint[key_group] = self._now
        return taken

    def on_tick(self, now: float) -> list[Action]:
        """Checkpoint every owned group whose interval has elapsed at time ``now``, ask
        again for what gaps wait for, and report gaps that have parked tuples for
        longer than ``stall_after``."""
        self._now = now
        actions: list[Action] = self._stalls(now)
        if self.checkpoint_interval is None:
            return actions
        for g in self.owned():
            last = self._last_checkpoint.get(g)
            if last is None or now - last >= self.checkpoint_interval:
                taken = self.checkpoint(g)
                if taken:
                    self._last_checkpoint[g] = now
                    actions += taken
        return actions

    def _stalls(self, now: float) -> list[Action]:
        """Each gap (key group, source, awaited sequence) is timed from the tick that
        first saw it. Once it is ``resend_after`` old, and again every ``resend_after``
        while it lasts, its sender is asked to ``Resend`` from the awaited sequence up
        to the last parked one (the parked ones come again too and are dropped as
        duplicates; a gap further on is filled with it). Not while that sender's
        toState is still on its way to a migration target (its tuples fill the gap;
        a CPAL toState comes in chunks). Reported once when older
        than ``stall_after``: resending did not help (the emitter's buffer no longer
        holds it, or no sender is known)."""
        seen: dict[tuple[int, str, int], float] = {}
        asked: dict[tuple[int, str, int], float] = {}
        actions: list[Action] = []
        for g, m in sorted(self._machines.items()):
            for source, awaited, parked, last, sender in m.gaps():
                gap = (g, source, awaited)
                since = seen[gap] = self._gaps.get(gap, now)
                previous = asked[gap] = self._asked.get(gap, since)
                due = now - previous >= self.resend_after
                if due and sender is not None and not m.awaits_to_state(sender):
                    asked[gap] = now
                    self.stats["resend_requests"] += 1
                    request = Resend(key_group=g, source=source, first=awaited, last=last)
                    actions.append(Send(to_task=sender, message=request))
                if now - since >= self.stall_after and gap not in self._reported_gaps:
                    self._reported_gaps.add(gap)
                    actions.append(
                        TuplesStalled(
                            key_group=g,
                            source=source,
                            awaited=awaited,
                            parked=parked,
                            seconds=round(now - since, 3),
                        )
                    )
        self._gaps = seen
        self._asked = asked
        self._reported_gaps &= set(seen)
        return actions

    def set_upstream_recovering(self, recovering: bool) -> None:
        """Whether state upstream of this operator is being restored: outputs made
        meanwhile are tentative (``Applied.tentative``). O(machines), on a change only."""
        self.upstream_recovering = recovering
        for m in self._machines.values():
            m.upstream_recovering = recovering

    def peer_down(self, task: int) -> list[Action]:
        """Task ``task`` is gone (its ephemeral znode vanished, say)."""
        self.upstreams.discard(task)
        actions: list[Action] = []
        for g, m in sorted(self._machines.items()):
            if m.holder == task:
                self._unacked.discard(g)
                m.set_holder(None)
                actions.append(HolderLost(key_group=g, holder=task))
            actions += m.peer_down(task)
        return actions

    # -- holder side -----------------------------------------------------------
    @_control
    def _on_delta(self, sender: int, delta: CheckpointDelta) -> list[Action]:
        g = delta.key_group
        if self.machine(g).phase is Phase.REPLICA:  # the owner checkpoints to its replica
            return self.machine(g).receive(sender, delta)
        if self.machine(g).phase in LIVE:
            # We own (or are taking over) the group: an old owner's checkpoint is moot.
            self.stats["stale_deltas"] += 1
            return []
        try:
            copy = self.held.apply(delta)
        except CheckpointOrderError:
            self.stats["refused_deltas"] += 1
            return [
                Send(
                    to_task=sender, message=CheckpointNack(key_group=g, checkpoint=delta.checkpoint)
                )
            ]
        assert copy.checkpoint is not None
        return [
            CheckpointStored(key_group=g, checkpoint=copy.checkpoint),
            Send(
                to_task=sender,
                message=CheckpointAck(
                    key_group=g, checkpoint=copy.checkpoint, watermarks=dict(delta.watermarks)
                ),
            ),
        ]

    def _reject(self, sender: int, message: Message, reason: str) -> list[Action]:
        self.stats["rejected"] += 1
        return [Rejected(sender=sender, message=message, reason=reason)]
