"""In-memory cluster: upstream emitters, operator tasks and FIFO channels.

Like h11's ``ConnectionPair``: real machines wired together without I/O, for
tests and benchmarks. The caller decides which channel delivers next, so any
interleaving that keeps per-channel FIFO can be produced. A tiny controller
(``migrate``, ``crash``) plays the rules the real controller must follow:

* at most one migration of a key group at a time (wait for ``MigrationDone``);
* CPA / CPAL only to the group's holder, and only if it reported
  (``CheckpointStored``) the group's newest checkpoint since the group last
  changed owner, else DIRECT (seed 001: the target must have the newest checkpoint);
* after a migration the old owner becomes the holder; after a restore, the
  lowest live task other than the new owner does;
* a crashed task restarts empty, with ``stale_through`` = the current epoch; each
  group it owned or was moving is restored (:meth:`Cluster.restore_target`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elastorm.actions import (
    Action,
    Applied,
    CheckpointStored,
    MigrationDone,
    Rejected,
    Role,
    Send,
)
from elastorm.messages import CheckpointId, Message, Migrate, Protocol, SetHolder
from elastorm.migration.coordinator import EMITTER_MESSAGES, TaskCoordinator
from elastorm.migration.emitter import Emitter
from elastorm.routing import RoutingTable
from elastorm.state import Combine, sum_combine

CONTROLLER = -1
"""Sender id of the controller's own channels (commands are FIFO per receiver too)."""


@dataclass
class _Moving:
    protocol: Protocol
    source: int | None
    target: int
    epoch: int
    waiting: set[Role] = field(default_factory=set)


class Cluster:
    """Emitters ``emitters`` feed an operator of ``num_key_groups`` groups on ``tasks``."""

    def __init__(
        self,
        *,
        num_key_groups: int,
        tasks: Iterable[int],
        emitters: Iterable[int],
        combine: Combine = sum_combine,
        routing: RoutingTable | None = None,
    ) -> None:
        self.tasks = sorted(set(tasks))
        if len(self.tasks) < 2:
            raise ValueError("a cluster needs at least two tasks (owner and holder)")
        self.emitter_ids = sorted(set(emitters))
        if set(self.tasks) & set(self.emitter_ids):
            raise ValueError("task and emitter ids must differ")
        self.num_key_groups = num_key_groups
        self.combine = combine
        self.routing = routing or RoutingTable.round_robin(num_key_groups, self.tasks)
        self.epoch = self.routing.epoch
        self.holders = {g: self._next_task(self.routing.owner(g)) for g in range(num_key_groups)}
        self.coordinators = {t: self._new_task(t, owned=True) for t in self.tasks}
        self.emitters = {
            u: Emitter(task=u, routing=self.routing, source=f"u{u}") for u in self.emitter_ids
        }
        self.channels: dict[tuple[int, int], deque[Message]] = {}
        self.moving: dict[int, _Moving] = {}
        self.reports: dict[int, dict[int, CheckpointId]] = {g: {} for g in range(num_key_groups)}
        self.applied: list[tuple[int, Applied]] = []
        self.rejected: list[tuple[int, Rejected]] = []
        self.stats: Counter[str] = Counter()

    # -- wiring --------------------------------------------------------------------
    def _next_task(self, task: int, skip: Iterable[int] = ()) -> int:
        others = [t for t in self.tasks if t != task and t not in set(skip)]
        return min(others, key=lambda t: (t < task, t))  # the next id after ``task``, wrapping

    def _new_task(self, t: int, *, owned: bool, floor: int = -1) -> TaskCoordinator:
        groups = self.routing.key_groups_of(t) if owned else ()
        return TaskCoordinator(
            task=t,
            num_key_groups=self.num_key_groups,
            upstreams=self.emitter_ids,
            combine=self.combine,
            owned=groups,
            holders={g: self.holders[g] for g in groups},
            stale_through=floor,
        )

    def _send(self, sender: int, receiver: int, message: Message) -> None:
        self.channels.setdefault((sender, receiver), deque()).append(message)
        self.stats["sent"] += 1

    def perform(self, actor: int, actions: list[Action]) -> None:
        """Carry out ``actions`` returned by ``actor``'s machine."""
        for action in actions:
            if isinstance(action, Send):
                self._send(actor, action.to_task, action.message)
            elif isinstance(action, Applied):
                self.applied.append((actor, action))
            elif isinstance(action, Rejected):
                self.rejected.append((actor, action))
            elif isinstance(action, MigrationDone):
                self._on_done(action)
            elif isinstance(action, CheckpointStored):
                self.reports[action.key_group][actor] = action.checkpoint
            self.stats[type(action).__name__] += 1

    # -- driving -------------------------------------------------------------------
    def emit(self, emitter: int, key: str, value: Any, ts: float = 0.0) -> None:
        self.perform(emitter, self.emitters[emitter].emit(key, value, ts))

    def pending(self) -> list[tuple[int, int]]:
        """Channels with messages in flight, sorted."""
        return sorted(ch for ch, q in self.channels.items() if q)

    def deliver(self, channel: tuple[int, int]) -> Message:
        """Deliver the oldest message of ``channel`` to its receiver."""
        sender, receiver = channel
        message = self.channels[channel].popleft()
        if receiver in self.emitters:
            actions = self.emitters[receiver].receive(sender, message)
        elif type(message).__name__ in EMITTER_MESSAGES:
            raise AssertionError(f"{type(message).__name__} sent to task {receiver}")
        else:
            actions = self.coordinators[receiver].receive(sender, message)
        self.perform(receiver, actions)
        self.stats["delivered"] += 1
        return message

    def run_until_quiet(self, *, max_steps: int = 1_000_000) -> int:
        """Deliver round-robin over channels until nothing is in flight."""
        steps = 0
        while steps < max_steps:
            chans = self.pending()
            if not chans:
                return steps
            for ch in chans:
                self.deliver(ch)
                steps += 1
        raise RuntimeError(f"not quiet after {max_steps} deliveries")

    def checkpoint(self, task: int, key_group: int) -> None:
        self.perform(task, self.coordinators[task].checkpoint(key_group))

    def tick(self, now: float) -> None:
        for t, c in self.coordinators.items():
            self.perform(t, c.on_tick(now))

    # -- controller ----------------------------------------------------------------
    def owner(self, key_group: int) -> int:
        return self.routing.owner(key_group)

    def has_newest(self, task: int, key_group: int) -> bool:
        """Whether ``task`` reported the newest checkpoint of ``key_group`` (and has
        not since turned it into state or crashed)."""
        reports = self.reports[key_group]
        return task in reports and reports[task] == max(reports.values())

    def can_migrate(self, key_group: int) -> bool:
        return key_group not in self.moving

    def migrate(self, key_group: int, target: int, protocol: Protocol) -> Protocol:
        """Order a migration; CPA/CPAL fall back to DIRECT unless ``target`` is the
        holder and holds a copy. Returns the protocol used."""
        g = key_group
        source = self.owner(g)
        if not self.can_migrate(g):
            raise ValueError(f"group {g} is already moving")
        if target == source:
            raise ValueError("target is the owner")
        if protocol is Protocol.RESTORE:
            raise ValueError("restores follow crash()")
        assisted = self.holders[g] == target and self.has_newest(target, g)
        if protocol is not Protocol.DIRECT and not assisted:
            protocol = Protocol.DIRECT
        self.epoch += 1
        cmd = Migrate(
            key_group=g, epoch=self.epoch, protocol=protocol, source=source, target=target
        )
        if protocol is Protocol.DIRECT:
            self._send(CONTROLLER, source, cmd)
        else:
            for u in self.emitter_ids:
                self._send(CONTROLLER, u, cmd)
        self.routing = self.routing.with_moves({g: target}, epoch=self.epoch)
        # Ownership changes: copies of the old lineage stop being bases for CPA.
        self.reports[g].clear()
        self.holders[g] = source
        self._send(CONTROLLER, target, SetHolder(key_group=g, holder=source))
        self.moving[g] = _Moving(protocol, source, target, self.epoch, {Role.SOURCE, Role.TARGET})
        self.stats[f"migrate.{protocol.value}"] += 1
        return protocol

    def _on_done(self, done: MigrationDone) -> None:
        moving = self.moving.get(done.key_group)
        if moving is None or moving.epoch != done.epoch:
            return  # an aborted migration's late report
        moving.waiting.discard(done.role)
        if not moving.waiting:
            del self.moving[done.key_group]

    def restore_target(self, key_group: int, dead: int) -> int:
        """Where to restore ``key_group`` after ``dead`` died.

        Mid-migration, the surviving end: it has live state, or a copy at least
        as new as any checkpoint whose ack trimmed a buffer (the source's own
        checkpoints all went to the target). Otherwise the task that reported
        the newest checkpoint. Raises ``RuntimeError`` when no copy survives.
        """
        g = key_group
        moving = self.moving.get(g)
        if moving is not None and moving.protocol is not Protocol.RESTORE:
            if dead == moving.target:
                assert moving.source is not None
                return moving.source
            if moving.protocol is not Protocol.DIRECT or moving.target in self.reports[g]:
                return moving.target
        for t in self.tasks:
            if t != dead and self.has_newest(t, g):
                return t
        raise RuntimeError(f"group {g}: no checkpoint survives task {dead}")

    def crash(self, task: int) -> list[int]:
        """Kill ``task`` (losing its state, copies and inbox), restart it empty and
        restore what it owned or was moving. Returns the restored groups."""
        dead = task
        for ch in [ch for ch in self.channels if ch[1] == dead]:
            self.stats["lost_in_flight"] += len(self.channels.pop(ch))
        floor = self.epoch
        restored: list[int] = []
        for g in range(self.num_key_groups):
            if self.involved(g, dead):
                restored.append(g)
                target = self.restore_target(g, dead)
                self.epoch += 1
                cmd = Migrate(
                    key_group=g,
                    epoch=self.epoch,
                    protocol=Protocol.RESTORE,
                    source=None,
                    target=target,
                )
                for u in self.emitter_ids:
                    self._send(CONTROLLER, u, cmd)
                self.routing = self.routing.with_moves({g: target}, epoch=self.epoch)
                self.reports[g].clear()
                self.moving[g] = _Moving(Protocol.RESTORE, None, target, self.epoch, {Role.TARGET})
            if self.holders[g] in (dead, self.owner(g)):
                self.holders[g] = self._next_task(self.owner(g))
                self._send(
                    CONTROLLER, self.owner(g), SetHolder(key_group=g, holder=self.holders[g])
                )
        for reports in self.reports.values():
            reports.pop(dead, None)
        self.coordinators[dead] = self._new_task(dead, owned=False, floor=floor)
        for t, c in self.coordinators.items():
            if t != dead:
                self.perform(t, c.peer_down(dead))
        self.stats["crashes"] += 1
        return restored

    # -- inspection ----------------------------------------------------------------
    def involved(self, key_group: int, task: int) -> bool:
        """Whether ``task`` owns ``key_group`` or is the source of its migration."""
        moving = self.moving.get(key_group)
        return self.owner(key_group) == task or (moving is not None and moving.source == task)

    def coverage(self, task: int, key_group: int) -> dict[str, int] | None:
        """Watermarks of the live state, else of the held copy, of ``key_group`` on ``task``."""
        c = self.coordinators[task]
        state = c.state(key_group)
        if state is not None:
            return dict(state.applied)
        copy = c.held.get(key_group)
        return None if copy is None else dict(copy.watermarks)

    def trimmed(self, key_group: int) -> dict[str, int]:
        """Highest trim watermark per source over all emitters."""
        marks: dict[str, int] = {}
        for e in self.emitters.values():
            for source, seq in e.trimmed(key_group).items():
                marks[source] = max(marks.get(source, 0), seq)
        return marks

    def survives(self, dead: int) -> bool:
        """God's view: can every group ``dead`` is involved in be restored by
        :meth:`restore_target` without losing a trimmed tuple?"""
        for g in range(self.num_key_groups):
            if not self.involved(g, dead):
                continue
            try:
                target = self.restore_target(g, dead)
            except RuntimeError:
                return False
            have = self.coverage(target, g) or {}
            if any(have.get(s, 0) < seq for s, seq in self.trimmed(g).items()):
                return False
        return True

    def live_states(self, key_group: int) -> dict[int, Mapping[str, Any]]:
        """Task -> merged live state of ``key_group``, for every task that has one."""
        out = {}
        for t, c in self.coordinators.items():
            s = c.state(key_group)
            if s is not None:
                out[t] = s.items()
        return out
