"""Upstream side: the emitter every spout and bolt uses towards a keyed operator.

Looks each tuple's key group up in its routing table, numbers it per
``(source, key group)``, keeps it in the output buffer until a held checkpoint
covers it, and plays the upstream part of the protocols: send toState and
redirect (CPA, Alg. 1 l.3-5), duplicate to source and target until the target
has replayed everything (CPAL, Alg. 2 l.3-4, 11-13), replay after a crash
(RESTORE), and feed an active replica (REPLICATE, Su & Zhou 2016): its buffer
once, then every tuple to the owner and the replica with the same sequence
number, until the replica is promoted (a RESTORE to it) or dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elastorm.core.actions import Action, Rejected, Send
from elastorm.core.buffers import OutputBuffer, SequenceCounters
from elastorm.core.errors import Hint, MigrationProtocolError
from elastorm.core.keygroups import key_group as key_group_of
from elastorm.core.messages import (
    CheckpointRequest,
    Data,
    DataTuple,
    DropReplica,
    Message,
    Migrate,
    ProcessedAllReplay,
    Protocol,
    Resend,
    SyncGroup,
    ToCheckpoint,
    ToState,
    ToStateAck,
    Trim,
    new_unchecked,
    set_unchecked,
)
from elastorm.core.migration.table import EMITTER_TRANSITIONS, Route
from elastorm.core.routing import RoutingTable

_trusted_tuple = DataTuple.trusted
_trusted_data = Data.trusted


def _send(to_task: int, message: Message) -> Send:
    """``Send(to_task=..., message=...)`` without its checks, for the per-tuple path
    (the task comes from the routing table, which checked it)."""
    action = new_unchecked(Send)
    set_unchecked(action, "to_task", to_task)
    set_unchecked(action, "message", message)
    return action


@dataclass(frozen=True, kw_only=True, slots=True)
class _Duplication:
    source: int
    target: int
    epoch: int


@dataclass(kw_only=True, slots=True)
class _Outgoing:
    """A CPAL toState still being sent in chunks: ``items[sent:]`` are left."""

    target: int
    epoch: int
    items: tuple[DataTuple, ...]
    sent: int = 0


class Emitter:
    """Emitter of task ``task`` towards one keyed operator.

    ``source`` names this emitter's own tuples (a spout's stream); a stateful bolt
    passes its own ``source`` and its key group's counters to :meth:`emit` so the
    numbering travels with the group.

    A CPAL toState longer than ``to_state_chunk`` tuples goes in chunks of that
    size, ``to_state_window`` of them unacknowledged at a time (see
    ``ToState``): the emitter then blocks for one chunk's encoding at a time
    instead of the whole buffer's, and data keeps flowing in between.

    ``request_at`` (0: never) is the high-water mark per key group: once that many
    of a group's tuples wait for a checkpoint, the owner gets one
    ``CheckpointRequest``, and no other until a ``Trim`` of the group comes (or
    the group moves). Checkpoints then follow the volume, not only the clock, so
    at a high rate the buffer is trimmed before it reaches its bound.

    ``probe_after``: :meth:`on_tick` re-sends the newest buffered tuple of a lane (key
    group, source) that has not grown for that long, so a loss at the end of a lane
    shows downstream as a gap (see ``Resend``); again after 2, 4, ... up to
    ``max_probe_rounds`` idle rounds while no trim covers it (the probe itself may be
    lost, or refused by a target that has not started yet).
    """

    max_probe_rounds: int = 32

    to_state_chunk: int = 5_000
    to_state_window: int = 2

    def __init__(
        self,
        *,
        task: int,
        routing: RoutingTable,
        source: str | None = None,
        request_at: int = 0,
        probe_after: float = 1.5,
    ) -> None:
        if request_at < 0:
            raise ValueError(f"request_at must be >= 0, not {request_at}")
        if probe_after <= 0:
            raise ValueError(f"probe_after must be > 0, got {probe_after}")
        self.task = task
        self.request_at = request_at
        self._requested: set[int] = set()  # groups asked for a checkpoint, not trimmed since
        self.probe_after = probe_after
        self._probed_at: float | None = None  # the last probe round
        self._lanes: dict[tuple[int, str], int] = {}  # lane -> newest seq at that round
        # lane -> (the seq probed last, the round to probe it again, rounds to wait then)
        self._probed: dict[tuple[int, str], tuple[int, int, int]] = {}
        self._round = 0  # probe rounds so far
        self.routing = routing
        self._initial_epoch = routing.epoch
        self.source = source if source is not None else f"task:{task}"
        self.buffer = OutputBuffer()
        self.counters = SequenceCounters()
        self._stats: Counter[str] = Counter()
        self.emitted = 0
        self._route: dict[int, Route] = {}
        self._dup: dict[int, _Duplication] = {}
        self._epoch: dict[int, int] = {}
        self._outgoing: dict[int, _Outgoing] = {}

    @property
    def stats(self) -> Counter[str]:
        """Counts: ``emitted``, ``replayed``, ``trimmed``, stale and rejected messages."""
        self._stats["emitted"] = self.emitted
        return self._stats

    @property
    def num_key_groups(self) -> int:
        return self.routing.num_key_groups

    def route(self, key_group: int) -> Route:
        return self._route.get(key_group, Route.OWNER)

    def targets(self, key_group: int) -> tuple[int, ...]:
        """Tasks a new tuple of ``key_group`` goes to right now."""
        dup = self._dup.get(key_group)
        if dup is not None:
            return (dup.source, dup.target)
        return (self.routing.owner(key_group),)

    # -- data ---------------------------------------------------------------------
    def emit(
        self,
        key: str,
        value: Any,
        ts: float,
        *,
        source: str | None = None,
        counters: SequenceCounters | None = None,
    ) -> list[Action]:
        """Number, buffer and route one tuple; return the ``Send`` actions.

        The hot path: ``key`` is checked (a ``str``) by ``key_group``; the tuple
        and its messages are built unchecked, since every field is ours.
        """
        g = key_group_of(key, self.routing.num_key_groups)
        if self._route and self._route.get(g) is Route.FAILED:
            raise MigrationProtocolError(f"emitter {self.task}: group {g} failed earlier")
        src = self.source if source is None else source
        seq = (self.counters if counters is None else counters).next(src, g)
        item = _trusted_tuple(src, seq, key, value, ts)
        waiting = self.buffer.append(g, item)
        self.emitted += 1
        message = _trusted_data(g, item)
        dup = self._dup.get(g) if self._dup else None
        sends = (
            [_send(self.routing.owners[g], message)]
            if dup is None
            else [_send(dup.source, message), _send(dup.target, message)]
        )
        if self.request_at and waiting >= self.request_at and g not in self._requested:
            sends.append(self._request_checkpoint(g, sends[0].to_task))
        return sends

    def _request_checkpoint(self, g: int, owner: int) -> Send:
        """Ask ``g``'s owner for a checkpoint (once until the next trim of ``g``)."""
        self._requested.add(g)
        self._stats["checkpoint_requests"] += 1
        return Send(to_task=owner, message=CheckpointRequest(key_group=g))

    # -- control ------------------------------------------------------------------
    def receive(self, sender: int, message: Message) -> list[Action]:
        """Handle a command or a message for the upstream side.

        ``Migrate`` (CPA, CPAL, RESTORE) comes from the controller or, for a
        direct migration, from its source; ``Trim`` from the owner;
        ``ProcessedAllReplay`` from a CPAL target; ``Resend`` from a task that
        waits for a tuple lost on the way.
        """
        if isinstance(message, Trim):
            return self._on_trim(message)
        if isinstance(message, Resend):
            return self._on_resend(sender, message)
        if isinstance(message, Migrate):
            if message.protocol is Protocol.DIRECT:
                return self._reject(sender, message, "direct goes to the source task")
            if message.epoch <= self._epoch.get(message.key_group, self._initial_epoch):
                self.stats["stale_commands"] += 1
                return []
            return self._dispatch(message.key_group, message.protocol.value, message)
        if isinstance(message, ProcessedAllReplay):
            return self._dispatch(message.key_group, "ProcessedAllReplay", message)
        if isinstance(message, ToStateAck):
            return self._dispatch(message.key_group, "ToStateAck", message)
        if isinstance(message, DropReplica):
            if message.epoch <= self._epoch.get(message.key_group, self._initial_epoch):
                self.stats["stale_commands"] += 1
                return []
            return self._dispatch(message.key_group, "DropReplica", message)
        return self._reject(sender, message, "not an emitter message")

    def command(self, message: Migrate) -> list[Action]:
        """A ``Migrate`` from the controller (same as ``receive`` from sender -1)."""
        return self.receive(-1, message)

    def _dispatch(self, g: int, event: str, message: Message) -> list[Action]:
        route = self.route(g)
        if route is Route.FAILED:
            raise MigrationProtocolError(f"emitter {self.task}: group {g} failed earlier")
        entry = EMITTER_TRANSITIONS.get((route, event))
        if entry is None:
            self._route[g] = Route.FAILED
            raise MigrationProtocolError(
                f"emitter {self.task}: {event} for group {g} not allowed while {route.value}",
                hint=Hint.RESTORE_FROM_CHECKPOINT,
            )
        handler: Callable[[Any], list[Action]] = getattr(self, entry[0])
        actions = handler(message)
        if self.route(g) not in entry[1]:
            self._route[g] = Route.FAILED
            raise MigrationProtocolError(f"emitter {self.task}: {entry[0]} broke the table")
        return actions

    def _redirect(self, g: int, target: int, epoch: int) -> None:
        self.routing = self.routing.with_moves(
            {g: target}, epoch=max(epoch, self.routing.epoch + 1)
        )
        self._epoch[g] = epoch
        self._requested.discard(g)  # the new owner has not been asked

    def _to_state(self, m: Migrate) -> Send:
        items = self.buffer.replay(m.key_group)
        self.stats["replayed"] += len(items)
        return Send(
            to_task=m.target,
            message=ToState(key_group=m.key_group, epoch=m.epoch, protocol=m.protocol, items=items),
        )

    def _on_cpa(self, m: Migrate) -> list[Action]:
        assert m.source is not None
        to_state = self._to_state(m)
        self._redirect(m.key_group, m.target, m.epoch)
        assert isinstance(to_state.message, ToState)
        items = to_state.message.items  # the source fills any gap from them (ToCheckpoint)
        to_checkpoint = ToCheckpoint(
            key_group=m.key_group, epoch=m.epoch, protocol=Protocol.CPA, items=items
        )
        return [to_state, Send(to_task=m.source, message=to_checkpoint)]

    def _on_cpal(self, m: Migrate) -> list[Action]:
        assert m.source is not None
        g = m.key_group
        self._epoch[g] = m.epoch
        self._dup[g] = _Duplication(source=m.source, target=m.target, epoch=m.epoch)
        self._route[g] = Route.DUPLICATE
        items = self.buffer.replay(g)
        self.stats["replayed"] += len(items)
        out = _Outgoing(target=m.target, epoch=m.epoch, items=items)
        sends = [self._next_chunk(g, out)]
        while len(sends) < self.to_state_window and g in self._outgoing:
            sends.append(self._next_chunk(g, out))
        return sends

    def _next_chunk(self, g: int, out: _Outgoing) -> Send:
        """The next chunk of ``out`` (the only one, all of it, if short enough)."""
        size = max(1, self.to_state_chunk)
        start, end = out.sent, out.sent + size
        out.sent = min(end, len(out.items))
        more = out.sent < len(out.items)
        if more:
            self._outgoing[g] = out
            self.stats["to_state_chunks"] += 1
        else:
            self._outgoing.pop(g, None)
        items = out.items if start == 0 and not more else out.items[start:end]
        return Send(
            to_task=out.target,
            message=ToState(
                key_group=g, epoch=out.epoch, protocol=Protocol.CPAL, items=items, more=more
            ),
        )

    def _on_to_state_ack(self, m: ToStateAck) -> list[Action]:
        out = self._outgoing.get(m.key_group)
        if out is None or out.epoch != m.epoch:
            self.stats["stale_to_state_acks"] += 1
            return []
        return [self._next_chunk(m.key_group, out)]

    def _ignore_ack(self, m: ToStateAck) -> list[Action]:
        self.stats["stale_to_state_acks"] += 1
        return []

    def _on_processed_all(self, m: ProcessedAllReplay) -> list[Action]:
        g = m.key_group
        dup = self._dup[g]
        if m.epoch != dup.epoch:
            self.stats["stale_processed_all"] += 1
            return []
        del self._dup[g]
        self._route[g] = Route.OWNER
        self._redirect(g, dup.target, dup.epoch)
        items = self.buffer.replay(g)  # each end fills its gaps from it (messages' docs)
        to_checkpoint = ToCheckpoint(
            key_group=g, epoch=dup.epoch, protocol=Protocol.CPAL, items=items
        )
        return [
            Send(to_task=dup.target, message=SyncGroup(key_group=g, epoch=dup.epoch, items=items)),
            Send(to_task=dup.source, message=to_checkpoint),
        ]

    def _on_replicate(self, m: Migrate) -> list[Action]:
        """Start feeding an active replica: it holds the newest checkpoint, so the
        buffer (everything not covered by a held checkpoint) brings it up to date;
        every later tuple goes to both, numbered once."""
        assert m.source is not None
        g = m.key_group
        self._epoch[g] = m.epoch
        self._dup[g] = _Duplication(source=m.source, target=m.target, epoch=m.epoch)
        self._route[g] = Route.REPLICATED
        return [self._to_state(m)]

    def _on_drop_replica(self, m: DropReplica) -> list[Action]:
        self._epoch[m.key_group] = m.epoch
        self._stop_feeding_replica(m.key_group)
        return []

    def _on_cpa_past_drop(self, m: Migrate) -> list[Action]:
        """A CPA newer than the replica this emitter feeds: the controller never moves a
        replicated group, so it dropped the replica at an earlier epoch and the drop is
        still on its way (the move's command came from its direct source, on another
        channel). Drop it now (the late drop is then stale), then start the CPA."""
        self._stop_feeding_replica(m.key_group, by_a_move=True)
        return self._on_cpa(m)

    def _on_cpal_past_drop(self, m: Migrate) -> list[Action]:
        """A CPAL newer than the replica: as :meth:`_on_cpa_past_drop`."""
        self._stop_feeding_replica(m.key_group, by_a_move=True)
        return self._on_cpal(m)

    def _stop_feeding_replica(self, g: int, *, by_a_move: bool = False) -> None:
        self._dup.pop(g, None)
        self._route[g] = Route.OWNER
        if by_a_move:
            self.stats["replicas_dropped_by_a_move"] += 1

    def _on_restore(self, m: Migrate) -> list[Action]:
        self._dup.pop(m.key_group, None)
        self._outgoing.pop(m.key_group, None)  # the RESTORE toState below has it all
        self._route[m.key_group] = Route.OWNER
        action = self._to_state(m)
        self._redirect(m.key_group, m.target, m.epoch)
        return [action]

    def _ignore(self, m: Message) -> list[Action]:
        self.stats["stale_processed_all"] += 1
        return []

    def _on_trim(self, m: Trim) -> list[Action]:
        self.stats["trimmed"] += self.buffer.trim(m.key_group, m.watermarks)
        self._requested.discard(m.key_group)
        return []

    def _on_resend(self, sender: int, m: Resend) -> list[Action]:
        """Send ``m``'s span of the buffer again, as ``Data``, wherever a new tuple of
        the group goes now (the owner, or both ends while duplicating): on the same
        FIFO channels as the migrations' control, so a resent tuple never overtakes a
        redirect. Nothing yet if this emitter has not numbered the span's start (it
        is being replayed: the tuple will come anyway). Rejected (for the adapter to
        log) when a trim already passed the span's start: then resending cannot
        help, and the receiver's stall report stays the signal."""
        items = self.buffer.span(m.key_group, m.source, m.first, m.last)
        if items is None and self.counters.last(m.source, m.key_group) < m.first:
            items = ()  # not numbered yet: a restarted emitter still replaying its input
        if items is None:
            return self._reject(
                sender,
                m,
                f"cannot resend {m.source}#{m.first} of group {m.key_group}: not buffered "
                "(trimmed past it)",
            )
        self.stats["resent"] += len(items)
        targets = self.targets(m.key_group)
        return [_send(t, _trusted_data(m.key_group, item)) for item in items for t in targets]

    def on_tick(self, now: float) -> list[Action]:
        """Every ``probe_after`` seconds: re-send the newest buffered tuple of each lane
        that has not grown since the previous round (again after 2, 4, ... rounds). A
        keyed task finds a lost tuple by the ones behind it (a sequence gap); the last
        tuples of a lane have none behind them until the next emit, which may never
        come (the end of the input). The probe is a duplicate if they arrived (dropped
        by sequence), and shows the gap otherwise. Lanes a checkpoint trimmed empty are
        covered, not probed. O(lanes) per round."""
        if self._probed_at is not None and now - self._probed_at < self.probe_after:
            return []
        self._probed_at = now
        self._round += 1
        newest = self.buffer.newest()
        actions: list[Action] = []
        for lane, item in sorted(newest.items()):
            if self._lanes.get(lane) != item.seq:
                continue  # it grew: a gap would show by itself
            seq, due, wait = self._probed.get(lane, (-1, 0, 1))
            if seq == item.seq and self._round < due:
                continue
            wait = min(2 * wait, self.max_probe_rounds) if seq == item.seq else 2
            self._probed[lane] = (item.seq, self._round + wait, wait)
            self.stats["probes"] += 1
            message = _trusted_data(lane[0], item)
            actions += [_send(t, message) for t in self.targets(lane[0])]
        self._lanes = {lane: item.seq for lane, item in newest.items()}
        self._probed = {lane: seq for lane, seq in self._probed.items() if lane in newest}
        return actions

    def _reject(self, sender: int, message: Message, reason: str) -> list[Action]:
        self.stats["rejected"] += 1
        return [Rejected(sender=sender, message=message, reason=reason)]
