"""The controller's side of the migration protocols, sans-IO (Madsen & Zhou 2015,
sections 4-5: the controller; state migration).

``MigrationController`` keeps the routing table, checkpoint holders and what each
task reported, and turns an order ("move key group g to task t by CPA") or a
planned recovery into the commands to send, as ``Send`` actions from the controller. The
simulator of the tests (``tests/sim.py``) and the Storm controller bolt both drive it, so the
rules below are written once:

* at most one migration of a key group at a time (wait for both ``MigrationDone``);
* CPA / CPAL only to the group's holder, and only if it reported
  (``CheckpointStored``) the group's newest checkpoint since the group last
  changed owner (Madsen & Zhou 2015: the target must hold the newest checkpoint);
  which protocol a move gets is chosen in one place,
  :func:`~elastorm.core.protocol_choice.choose_protocol` (:meth:`choose` hands it
  this controller's facts), and :meth:`migrate` refuses a CPA/CPAL that cannot run
  instead of changing it; the newest stays the newest when its holder dies, so an
  older copy that survives never passes for it (buffers may be trimmed past that copy);
* after a migration the old owner becomes the holder; after a restore, the next
  live task after the new owner does;
* a crashed task restarts empty, with ``stale_through`` = the epoch at the crash;
  each group it owned or was moving is restored on one of its surviving copies
  (:meth:`surviving_copies`); *which* copy, and where lost checkpoints go, the
  controller's recovery planner decides (``elastorm.controller.recovery``), and
  :meth:`recover` only carries that out;
* an active replica (Su & Zhou 2016) starts only on the group's holder, once it
  reported the newest checkpoint (the REPLICATE toState brings it up to date, as
  CPAL's does), and never while the group moves; a replicated group is not
  migrated (drop its replica first). When the owner dies, the live replica is the
  group's only surviving copy (:meth:`surviving_copies`), so it is promoted by the
  restore; when the replica dies, the upstreams stop feeding it;
* a migration or restore never hangs unseen: one that has not completed within a
  time limit is reported once as stuck, naming the tasks it still waits for
  (:meth:`overdue`); it still completes if they answer later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from elastorm.core.actions import CheckpointStored, MigrationDone, Role, Send
from elastorm.core.messages import (
    CheckpointId,
    DropReplica,
    Migrate,
    Protocol,
    SetHolder,
    StandIn,
)
from elastorm.core.protocol_choice import MOVES, ProtocolChoice, choose_protocol
from elastorm.core.routing import RoutingTable


def next_task(tasks: Iterable[int], task: int, skip: Iterable[int] = ()) -> int:
    """The next id after ``task`` among ``tasks`` (wrapping), skipping ``skip``."""
    skipped = set(skip)
    others = [t for t in tasks if t != task and t not in skipped]
    return min(others, key=lambda t: (t < task, t))


def initial_holders(
    routing: RoutingTable, tasks: Iterable[int], zones: Sequence[str] | None = None
) -> dict[int, int]:
    """Where each key group checkpoints at start: the next task after its owner that is
    outside the owner's fault zone.

    ``zones[i]`` is the zone of the ``i``-th task by id (``None``: each task is a zone of
    its own); if every other task shares the owner's zone, the next task is taken. Every
    task of a keyed operator computes this on its own at start, as does the controller,
    so no message is needed before the first checkpoint. O(K x tasks).

    >>> initial_holders(RoutingTable.round_robin(3, [7, 8, 9]), [7, 8, 9], ["a", "a", "b"])
    {0: 9, 1: 9, 2: 7}
    """
    ordered = sorted(set(tasks))
    zone = dict(zip(ordered, zones, strict=True)) if zones is not None else {}
    holders = {}
    for g in range(routing.num_key_groups):
        owner = routing.owner(g)
        same = [t for t in ordered if t != owner and zone.get(t, t) == zone.get(owner, owner)]
        if len(same) == len(ordered) - 1:
            same = []  # one zone only: the zone rule cannot hold, keep a copy anyway
        holders[g] = next_task(ordered, owner, skip=same)
    return holders


class MigrationRefused(ValueError):
    """An order the controller cannot carry out (group busy, target is the owner...)."""


@dataclass
class Moving:
    """A migration in flight: who moves the group where, and which ends still report.

    ``since`` is the controller's clock when it was ordered; ``stuck`` is set once it
    has been reported overdue (see :meth:`MigrationController.overdue`); ``ordered``:
    when a restore's latest commands went out (it may be ordered again, ``redrive``).
    """

    protocol: Protocol
    source: int | None
    target: int
    epoch: int
    waiting: set[Role] = field(default_factory=set)
    since: float = 0.0
    stuck: bool = False
    ordered: float | None = None

    def waiting_for(self) -> dict[str, int]:
        """Role name -> task of each end that has not reported ``MigrationDone`` yet."""
        ends = {Role.SOURCE: self.source, Role.TARGET: self.target}
        return {
            role.value: task
            for role, task in sorted(ends.items(), key=lambda e: e[0].value)
            if role in self.waiting and task is not None
        }


@dataclass(frozen=True, kw_only=True)
class Overdue:
    """A migration (or restore) of ``key_group`` that did not complete in time."""

    key_group: int
    protocol: Protocol
    source: int | None
    target: int
    epoch: int
    waiting_for: dict[str, int]  # role -> task still to report MigrationDone
    age: float  # seconds since it was ordered

    def describe(self) -> str:
        """One line for logs and the request's ``detail``."""
        ends = ", ".join(f"the {role} (task {task})" for role, task in self.waiting_for.items())
        return (
            f"stuck: {self.protocol.value} of key group {self.key_group} "
            f"(task {self.source} -> {self.target}, epoch {self.epoch}) not complete after "
            f"{self.age:.0f} s; waiting for MigrationDone from {ends}"
        )


@dataclass(frozen=True, kw_only=True)
class CrashPlan:
    """What to do after the ``dead`` tasks died."""

    dead: tuple[int, ...]
    stale_through: int  # restart ``dead`` empty with this floor
    restored: tuple[int, ...]  # groups restored elsewhere
    sends: tuple[Send, ...]  # commands, in order
    promoted: tuple[int, ...] = ()  # of ``restored``: taken over by their active replica
    replicas_lost: tuple[int, ...] = ()  # groups whose replica died (upstreams told)


class MigrationController:
    """Controller of one keyed operator on ``tasks`` fed by ``emitters``.

    ``routing`` defaults to round robin; each group's holder starts as the next
    task after its owner outside its fault zone (``zones``, see :func:`initial_holders`).
    """

    def __init__(
        self,
        *,
        num_key_groups: int,
        tasks: Iterable[int],
        emitters: Iterable[int],
        routing: RoutingTable | None = None,
        zones: Sequence[str] | None = None,
    ) -> None:
        self.tasks = sorted(set(tasks))
        if len(self.tasks) < 2:
            raise ValueError("an elastic operator needs at least two tasks (owner and holder)")
        self.emitters = sorted(set(emitters))
        self.num_key_groups = num_key_groups
        self.routing = routing or RoutingTable.round_robin(num_key_groups, self.tasks)
        self.epoch = self.routing.epoch
        self.holders = initial_holders(self.routing, self.tasks, zones)
        self.moving: dict[int, Moving] = {}
        self.reports: dict[int, dict[int, CheckpointId]] = {g: {} for g in range(num_key_groups)}
        self.replicas: dict[int, int] = {}  # key group -> its active replica's task
        # group -> newest checkpoint reported since it last changed owner, wherever it
        # is now (its holder may have died since: the copy is then lost, not replaced)
        self.newest: dict[int, CheckpointId] = {}
        # group -> the routing epoch its owner got it at (this controller's own changes;
        # loaded groups: unknown, counted as old), to tell a restarted task's groups
        # from those its new incarnation was given (:meth:`lost_key_groups`)
        self.given: dict[int, int] = {}
        # emitter -> the routing epoch its latest life began knowing (EmitterRestarted)
        self.knowing: dict[int, int] = {}
        self.stats: Counter[str] = Counter()

    def owner(self, key_group: int) -> int:
        return self.routing.owner(key_group)

    # -- reports from the tasks ------------------------------------------------------
    def on_checkpoint_stored(self, task: int, report: CheckpointStored) -> None:
        """Task ``task`` now holds checkpoint ``report.checkpoint`` of its group."""
        g = report.key_group
        self.reports[g][task] = report.checkpoint
        if g not in self.newest or report.checkpoint > self.newest[g]:
            self.newest[g] = report.checkpoint

    def on_migration_done(self, done: MigrationDone) -> bool:
        """One end finished; True when the whole migration is complete."""
        moving = self.moving.get(done.key_group)
        if moving is None or moving.epoch != done.epoch:
            return False  # an aborted migration's late report
        moving.waiting.discard(done.role)
        if moving.waiting:
            return False
        del self.moving[done.key_group]
        return True

    def has_newest(self, task: int, key_group: int) -> bool:
        """Whether ``task`` reported the newest checkpoint of ``key_group`` since the
        group last changed owner (and has not since turned it into state or crashed).

        The newest of all reports, not of the surviving ones: when the task holding
        the newest copy dies, no older copy becomes the newest, since the owner may
        have trimmed the upstream buffers to the lost one.
        """
        newest = self.newest.get(key_group)
        return newest is not None and self.reports[key_group].get(task) == newest

    def newest_copies(self) -> dict[int, dict[int, CheckpointId]]:
        """Key group -> task -> id, for every task holding its group's newest checkpoint
        (what a successor needs to know where state survives; persisted with the
        routing table)."""
        return {
            g: {t: cid for t, cid in self.reports[g].items() if self.has_newest(t, g)}
            for g in range(self.num_key_groups)
            if g in self.newest
        }

    def resume_copies(
        self,
        copies: Mapping[int, Mapping[int, CheckpointId]],
        holding: Callable[[int, int], bool],
    ) -> int:
        """Take over a predecessor's :meth:`newest_copies`. Each group's newest id is
        the newest of all of them; a copy counts only if ``holding(task, group)`` says
        that task still holds one (its heartbeat lists the group: a task restarted
        empty meanwhile does not), so a lost newest copy never lets an older one pass
        for it. Returns the copies taken. O(copies)."""
        taken = 0
        for g, by_task in copies.items():
            if not 0 <= g < self.num_key_groups or not by_task:
                continue
            known = [self.newest[g]] if g in self.newest else []
            self.newest[g] = max([*by_task.values(), *known])
            for task, cid in by_task.items():
                if task in self.tasks and task != self.owner(g) and holding(task, g):
                    self.reports[g][task] = cid
                    taken += 1
        return taken

    def can_migrate(self, key_group: int) -> bool:
        """Neither moving nor replicated (drop a group's replica before moving it)."""
        return key_group not in self.moving and key_group not in self.replicas

    def _change_owner(self, key_group: int, owner: int) -> None:
        """Route ``key_group`` to ``owner`` at the current epoch. A new lineage of
        checkpoints starts: the old one's copies stop being bases for CPA."""
        self.routing = self.routing.with_moves({key_group: owner}, epoch=self.epoch)
        self.given[key_group] = self.epoch
        self.reports[key_group].clear()
        self.newest.pop(key_group, None)

    # -- orders ----------------------------------------------------------------------
    def choose(
        self, key_group: int, target: int, wanted: Protocol | None, **rules
    ) -> ProtocolChoice:
        """:func:`~elastorm.core.protocol_choice.choose_protocol` for moving ``key_group``
        to ``target``, with this controller's facts (is ``target`` the holder, did it
        report the newest checkpoint); ``rules``: its other arguments (lazy, waiting).
        Raises ``MigrationRefused`` for a protocol that moves nothing (RESTORE, DURABLE,
        REPLICATE)."""
        if wanted is not None and wanted not in MOVES:
            raise MigrationRefused(f"{wanted.value} is not a migration one can order")
        return choose_protocol(
            wanted,
            target_is_holder=self.holders.get(key_group) == target,
            holder_ready=self.has_newest(target, key_group),
            **rules,
        )

    def migrate(self, key_group: int, target: int, protocol: Protocol, *, now: float) -> list[Send]:
        """Order a migration by ``protocol`` at time ``now``; returns the commands.

        Raises ``MigrationRefused`` for an order that cannot run, including CPA/CPAL
        unless ``target`` is the holder and holds the newest copy (:meth:`choose` says
        which protocol can run, and why; nothing here changes it).
        """
        g = key_group
        if not 0 <= g < self.num_key_groups:
            raise MigrationRefused(f"key group {g} not in [0, {self.num_key_groups})")
        if target not in self.tasks:
            raise MigrationRefused(f"task {target} is not a task of this operator {self.tasks}")
        source = self.owner(g)
        if g in self.replicas:
            raise MigrationRefused(f"key group {g} has an active replica; drop it first")
        if not self.can_migrate(g):
            raise MigrationRefused(f"key group {g} is already moving")
        if target == source:
            raise MigrationRefused(f"task {target} already owns key group {g}")
        if protocol.restores or protocol is Protocol.REPLICATE:
            raise MigrationRefused(f"{protocol.value} is not a migration one can order")
        if protocol is not Protocol.DIRECT:
            choice = self.choose(g, target, protocol)
            if choice.changed:
                raise MigrationRefused(
                    f"{protocol.value} of key group {g} to task {target}: {choice.reason}"
                )
        self.epoch += 1
        cmd = Migrate(
            key_group=g, epoch=self.epoch, protocol=protocol, source=source, target=target
        )
        sends = [Send(to_task=r, message=cmd) for r in self._commanded(protocol, source)]
        self._change_owner(g, target)
        self.holders[g] = source
        sends.append(Send(to_task=target, message=SetHolder(key_group=g, holder=source)))
        self.moving[g] = Moving(
            protocol, source, target, self.epoch, {Role.SOURCE, Role.TARGET}, since=now, ordered=now
        )
        self.stats[f"migrate.{protocol.value}"] += 1
        return sends

    def can_replicate(self, key_group: int, replica: int) -> bool:
        """Whether an active replica of ``key_group`` can start on ``replica`` now: the
        group is not moving nor replicated, ``replica`` is its holder (not its owner)
        and reported its newest checkpoint."""
        g = key_group
        return (
            g not in self.moving
            and g not in self.replicas
            and self.holders[g] == replica != self.owner(g)
            and self.has_newest(replica, g)
        )

    def replicate(self, key_group: int, replica: int, *, now: float) -> list[Send]:
        """Start an active replica of ``key_group`` on ``replica`` (its holder) at time
        ``now``: the upstreams send it their buffers and then every tuple of the group.

        The routing does not change; the epoch does (it names the replica). Done when
        the replica reports ``MigrationDone`` (every upstream's buffer is in). Raises
        ``MigrationRefused`` unless :meth:`can_replicate`.
        """
        g = key_group
        if not self.can_replicate(g, replica):
            raise MigrationRefused(
                f"cannot replicate key group {g} on task {replica}: it must be the group's "
                "holder with the newest checkpoint, and the group neither moving nor replicated"
            )
        self.stats["replicate"] += 1
        return self._order_replicate(g, replica, now=now)

    def _order_replicate(self, g: int, replica: int, *, now: float) -> list[Send]:
        """Tell every emitter, at a new epoch, to send ``replica`` its buffer of ``g``
        and then every tuple of it (as the owner's); in flight until the replica reports
        done. Ordered again for a replica already fed, it brings the buffer of an emitter
        whose new life did not feed it (``redrive``): the replica drops what it has."""
        self.epoch += 1
        owner = self.owner(g)
        cmd = Migrate(
            key_group=g, epoch=self.epoch, protocol=Protocol.REPLICATE, source=owner, target=replica
        )
        self.replicas[g] = replica
        self.moving[g] = Moving(Protocol.REPLICATE, owner, replica, self.epoch, {Role.TARGET}, now)
        return [Send(to_task=u, message=cmd) for u in self.emitters]

    def drop_replica(self, key_group: int, *, alive: bool = True) -> list[Send]:
        """Stop ``key_group``'s active replica: the upstreams stop feeding it and (if
        ``alive``) it keeps its shadow as the group's held copy. Nothing without a
        replica; ``MigrationRefused`` while it is still starting."""
        g = key_group
        replica = self.replicas.get(g)
        if replica is None:
            return []
        moving = self.moving.get(g)
        if alive and moving is not None:
            raise MigrationRefused(f"key group {g}'s replica is still starting")
        if moving is not None and moving.protocol is Protocol.REPLICATE:
            del self.moving[g]
        del self.replicas[g]
        self.epoch += 1
        drop = DropReplica(key_group=g, epoch=self.epoch, replica=replica)
        to = [*self.emitters, replica] if alive else self.emitters
        self.stats["drop_replica"] += 1
        return [Send(to_task=t, message=drop) for t in to]

    def set_holder(self, key_group: int, holder: int) -> list[Send]:
        """Move ``key_group``'s checkpoint to ``holder`` (checkpoint allocation).

        Returns the ``SetHolder`` for the owner (its next checkpoint is then full),
        or nothing while the group moves or has an active replica, or if ``holder``
        is its owner or already its holder. The new holder is no CPA target until it
        reports a checkpoint.
        """
        g = key_group
        if holder not in self.tasks:
            raise MigrationRefused(f"task {holder} is not a task of this operator {self.tasks}")
        if g in self.moving or g in self.replicas or holder in (self.owner(g), self.holders[g]):
            return []  # an active replica stays the holder: its acks alone trim the buffers
        self.holders[g] = holder
        self.stats["set_holder"] += 1
        return [Send(to_task=self.owner(g), message=SetHolder(key_group=g, holder=holder))]

    def on_holder_lost(
        self, task: int, key_group: int, holder: int, *, down: Collection[int]
    ) -> list[Send]:
        """Owner ``task`` of ``key_group`` reports it forgot its holder ``holder`` (a
        ``PeerDown`` of that task: its copies are gone). If ``holder`` is still the
        group's holder here and not ``down`` (it restarted, empty), the ``SetHolder``
        that names it again (its next checkpoint is full); a down holder is re-placed
        by the recovery of its restart. Nothing while the group moves or has a replica.
        """
        g = key_group
        if (
            self.owner(g) != task
            or self.holders[g] != holder
            or holder in down
            or g in self.moving
            or g in self.replicas
        ):
            return []
        self.stats["holder_named_again"] += 1
        return [Send(to_task=task, message=SetHolder(key_group=g, holder=holder))]

    def surviving_copies(self, key_group: int, dead: Collection[int]) -> tuple[int, ...]:
        """The tasks that could take over ``key_group`` after the ``dead`` tasks died (a
        fact of where copies are, not a choice: the recovery planner chooses among them).

        Mid-migration, only the surviving end: it has live state, or a copy at least
        as new as any checkpoint whose ack trimmed a buffer (the source's own
        checkpoints all went to the target). Otherwise every live task that reported
        the newest checkpoint. Empty when no copy survives.
        """
        g = key_group
        replica = self.replicas.get(g)
        if replica is not None and replica not in dead:
            # Its live shadow covers every trimmed tuple (it acks no further).
            return (replica,)
        moving = self.moving.get(g)
        if moving is not None and moving.protocol is Protocol.REPLICATE:
            moving = None  # a replica starting is no migration: the owner has the group
        if moving is not None and not moving.protocol.restores:
            if moving.target in dead:
                assert moving.source is not None
                return () if moving.source in dead else (moving.source,)
            if moving.protocol is not Protocol.DIRECT or moving.target in self.reports[g]:
                return (moving.target,)
        return tuple(t for t in self.tasks if t not in dead and self.has_newest(t, g))

    def involved(self, key_group: int, task: int) -> bool:
        """Whether ``task`` owns ``key_group`` or is the source of its migration."""
        moving = self.moving.get(key_group)
        return self.owner(key_group) == task or (moving is not None and moving.source == task)

    def lost_key_groups(self, dead: int, stale_through: int | None = None) -> list[int]:
        """The key groups ``dead`` owned or was the source of a migration of.

        ``stale_through``: ``dead`` restarted, its new incarnation having read that
        routing epoch at its start; a group routed to it later was given to the new
        incarnation (which takes such orders) and is not lost, so only groups whose
        routing last changed at or before that epoch are (the dead incarnation's)."""
        return [
            g
            for g in range(self.num_key_groups)
            if self.involved(g, dead)
            and (stale_through is None or self.given.get(g, -1) <= stale_through)
        ]

    def recover(
        self,
        dead: Collection[int],
        *,
        restores: Mapping[int, int],
        holders: Mapping[int, int],
        now: float,
        from_store: Collection[int] = (),
        restarted: bool = False,
    ) -> CrashPlan:
        """Carry out a recovery decided elsewhere (the controller's recovery planner):
        the ``dead`` tasks lost everything and were noticed at time ``now``.
        ``restarted``: they are back, empty (new incarnations), so a ``from_store``
        restore may go to one of them (every task of the operator had failed).

        ``restores`` maps each key group to restore to the task that takes it over
        (one of :meth:`surviving_copies`); ``from_store`` names those of them that no
        copy in memory survived: they are DURABLE restores (the target reads the
        group's copy from the durable store). ``holders`` maps key groups to their new
        checkpoint holder. Each restore bumps the routing epoch and is announced to
        the emitters; each changed holder, and each one of the ``dead`` named again, is
        told to the group's owner (after the ``PeerDown`` the caller sends). Decides
        nothing itself. Raises ``MigrationRefused`` for a target that is no task
        of this operator, or a ``from_store`` group that is not restored.
        """
        if not set(from_store) <= set(restores):
            raise MigrationRefused(
                f"key groups {sorted(set(from_store) - set(restores))} have no target"
            )
        floor = self.epoch
        sends: list[Send] = []
        lost_replicas = sorted(g for g, r in self.replicas.items() if r in dead)
        for g in lost_replicas:
            sends += self.drop_replica(g, alive=False)
        promoted = tuple(g for g, t in sorted(restores.items()) if self.replicas.get(g) == t)
        for g, target in sorted(restores.items()):
            protocol = Protocol.DURABLE if g in from_store else Protocol.RESTORE
            back = restarted and protocol is Protocol.DURABLE
            if target not in self.tasks or (target in dead and not back):
                raise MigrationRefused(f"cannot restore key group {g} on task {target}")
            sends += self._order_restore(g, target, protocol, since=now, now=now)
            self.replicas.pop(g, None)
        if not restarted:
            # A group the dead tasks owned or were moving that is not restored now (no
            # live task can take it: it waits for a restart, or is lost): its migration
            # in flight is over. Ordered again it would send the group's tuples to a dead
            # task, and its command could reach that task's restarted incarnation as a
            # restore of its own.
            for g in {g for d in dead for g in self.lost_key_groups(d)} - set(restores):
                self.moving.pop(g, None)
        for g, holder in sorted(holders.items()):
            if holder not in self.tasks:
                raise MigrationRefused(f"task {holder} is not a task of this operator")
            # A dead (or restarted, empty) holder named again holds nothing: its owner
            # forgot it at the ``PeerDown`` and must be told again (the next is full).
            if holder == self.owner(g) or (holder == self.holders[g] and holder not in dead):
                continue
            self.holders[g] = holder
            sends.append(Send(to_task=self.owner(g), message=SetHolder(key_group=g, holder=holder)))
        for reports in self.reports.values():
            for task in dead:
                reports.pop(task, None)
        self.stats["crashes"] += len(dead)
        self.stats["promoted"] += len(promoted)
        return CrashPlan(
            dead=tuple(sorted(dead)),
            stale_through=floor,
            restored=tuple(sorted(restores)),
            sends=tuple(sends),
            promoted=promoted,
            replicas_lost=tuple(lost_replicas),
        )

    def redrive(
        self,
        now: float,
        *,
        epoch: int | None = None,
        emitter: int | None = None,
        waited: float | None = None,
    ) -> list[Send]:
        """Send again what nobody will answer, for each migration in flight; its sends.
        O(moving groups).

        * Restores, ordered again at a new epoch to the same target (every emitter
          answers the new epoch), when ordered at or before routing ``epoch``
          (``emitter`` restarted knowing it, ``EmitterRestarted``: their commands died
          with its earlier life and its new one ignores them; when it was the only
          emitter, nobody started their targets),
          or whose latest commands went out ``waited`` seconds or more before ``now`` (a
          command lost on the way: Storm drops messages to a worker until it has
          reconnected to it). The target keeps what it replayed: a newer RESTORE toState
          replays on top. A restore has no live source, so this never makes a second owner.
        * Every active replica (started or starting), ordered again at a new epoch, when
          an ``emitter`` restarted: its new life knows only the routing table (which
          names no replica), sends the group's tuples to the owner alone and lost any
          replicate command in flight, so the replica would miss them until its
          promotion. The new order brings every emitter's buffer to it again (it drops
          what it has) and feeds it from then on. Each task of the operator reports
          the same restart: every report orders again (a repeat costs a buffer's replay).
        * Moves (CPA, CPAL, direct) not done ``waited`` seconds after their commands,
          once *every* emitter has restarted knowing their epoch: no emitter will send
          the toCheckpoint or toState that starts an end (a direct source asks them for
          a CPA once its full checkpoint is acked), so the controller stands in for them
          (``StandIn``) at each end that has not reported done; an end past it ignores it.
          A direct move also gets its command again at its source first: a source that
          never had it starts (ships its full checkpoint), and a later stand-in drains it
          once the checkpoint is acked.
          Otherwise a move gets its own command again, same epoch: a CPA or CPAL at every
          emitter, one that lost it on the way (Storm drops messages to a worker until
          it has reconnected to it) answering, the others ignoring the repeat; a direct
          one at its source, which starts if it lost it, ships its full checkpoint again
          while unacked (the checkpoint may be what was lost; a holder that has it acks
          it again), and asks its upstreams for the CPA again once it is acked (that
          request may be what was lost).
        """
        if emitter is not None and epoch is not None:
            self.knowing[emitter] = max(epoch, self.knowing.get(emitter, epoch))
        sends: list[Send] = []
        for g, moving in sorted(self.moving.items()):
            ordered = moving.ordered
            lapsed = waited is not None and ordered is not None and now - ordered >= waited
            if moving.protocol is Protocol.REPLICATE:
                continue  # below, with the replicas already fed
            if moving.protocol.restores:
                if not lapsed and (epoch is None or moving.epoch > epoch):
                    continue
                sends += self._order_restore(
                    g, moving.target, moving.protocol, since=moving.since, now=now
                )
                self.moving[g].stuck = moving.stuck
            elif moving.protocol in MOVES and lapsed:
                if all(self.knowing.get(u, -1) >= moving.epoch for u in self.emitters):
                    if moving.protocol is Protocol.DIRECT:  # a source that lost it starts
                        sends += self._again(g, moving, now, Migrate)
                    sends += self._again(g, moving, now, StandIn)
                else:
                    sends += self._again(g, moving, now, Migrate)
            else:
                continue
            self.stats["redriven"] += 1
        if epoch is not None:  # an emitter restarted: no active replica knows of it
            for g, replica in sorted(self.replicas.items()):
                sends += self._order_replicate(g, replica, now=now)
                self.stats["redriven"] += 1
        return sends

    def _again(
        self, g: int, moving: Moving, now: float, kind: type[Migrate | StandIn]
    ) -> list[Send]:
        """For move ``moving`` (``redrive``), sent again each ``waited`` seconds until it is
        done: its own command (``Migrate``, same epoch) to those it went to (every emitter,
        or a direct move's source), one that had it ignoring the repeat, one that lost it
        on the way answering now; or a ``StandIn`` to each end that has not reported it
        done."""
        assert moving.source is not None
        message = kind(
            key_group=g,
            epoch=moving.epoch,
            protocol=moving.protocol,
            source=moving.source,
            target=moving.target,
        )
        moving.ordered = now
        if kind is Migrate:
            self.stats["commands_again"] += 1
            return [
                Send(to_task=r, message=message)
                for r in self._commanded(moving.protocol, moving.source)
            ]
        self.stats["stood_in"] += 1
        ends = {Role.SOURCE: moving.source, Role.TARGET: moving.target}
        return [Send(to_task=ends[r], message=message) for r in sorted(moving.waiting, key=str)]

    def _commanded(self, protocol: Protocol, source: int) -> list[int]:
        """Who gets a move's ``Migrate``: a direct move's source, else every emitter."""
        return [source] if protocol is Protocol.DIRECT else self.emitters

    def _order_restore(
        self, g: int, target: int, protocol: Protocol, *, since: float, now: float
    ) -> list[Send]:
        """Route ``g`` to ``target`` at a new epoch and tell every emitter to replay its
        buffer there (``protocol``: RESTORE or DURABLE) at time ``now``; the restore is in
        flight from ``since``."""
        self.epoch += 1
        cmd = Migrate(key_group=g, epoch=self.epoch, protocol=protocol, source=None, target=target)
        self._change_owner(g, target)
        self.moving[g] = Moving(
            protocol, None, target, self.epoch, {Role.TARGET}, since=since, ordered=now
        )
        return [Send(to_task=u, message=cmd) for u in self.emitters]

    def overdue(self, now: float, limit: float) -> list[Overdue]:
        """Migrations ordered more than ``limit`` seconds before ``now`` that are not
        complete and not yet reported; each is marked so it is reported only once.

        O(moving groups). A stuck migration is not aborted: its ends may still answer
        (a slow, loaded node), and tearing it down could leave two owners. It is made
        visible instead, with the tasks it waits for.
        """
        found = []
        for g, moving in sorted(self.moving.items()):
            if moving.stuck or now - moving.since < limit:
                continue
            moving.stuck = True
            self.stats["stuck"] += 1
            found.append(
                Overdue(
                    key_group=g,
                    protocol=moving.protocol,
                    source=moving.source,
                    target=moving.target,
                    epoch=moving.epoch,
                    waiting_for=moving.waiting_for(),
                    age=now - moving.since,
                )
            )
        return found
