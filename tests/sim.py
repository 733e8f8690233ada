"""In-memory cluster: upstream emitters, operator tasks and FIFO channels.

Like h11's ``ConnectionPair``: real machines wired together without I/O, for
the tests (unit and property). The caller decides which channel delivers next, so any
interleaving that keeps per-channel FIFO can be produced. ``migrate`` and
``crash`` go through the same :class:`elastorm.core.control.MigrationController` the
Storm controller bolt uses, whose rules are listed there.

With ``durable=True`` the cluster also has a durable tier (Kwon et al. 2008), modelled
as the Storm adapters run it: each task's writer takes every checkpoint the task
sends and writes it when :meth:`Cluster.persist` says so (then tells the task, a
``DurableWritten``); the store keeps each group's newest copy; a ``LoadDurable`` is
answered with a ``DurableLoaded`` on a channel of its own, so it may arrive at any
point among the restore's other messages.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from elastorm.core.actions import (
    Action,
    Applied,
    CheckpointStored,
    EmitterRestarted,
    LoadDurable,
    MigrationDone,
    Rejected,
    Send,
)
from elastorm.core.checkpoint import CheckpointHolder, HeldCheckpoint
from elastorm.core.control import MigrationController, Moving, next_task
from elastorm.core.errors import CheckpointOrderError
from elastorm.core.messages import (
    CheckpointDelta,
    Data,
    DataRun,
    DurableLoaded,
    DurableWritten,
    Message,
    Protocol,
    Trim,
    UpstreamRestarted,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.emitter import Emitter
from elastorm.core.migration.runs import RunBuilder
from elastorm.core.migration.table import EMITTER_MESSAGES, Phase
from elastorm.core.outputs import LatestValues
from elastorm.core.routing import RoutingTable
from elastorm.core.state import Step, sum_step

CONTROLLER = -1
"""Sender id of the controller's own channels (commands are FIFO per receiver too)."""
STORE = -2
RESTORE_RETRY = 10.0
"""``elastorm.restore_retry_secs``' default, for the controller's tick."""
"""Sender id of the durable store's answers (``DurableLoaded``)."""


class Cluster:
    """Emitters ``emitters`` feed an operator of ``num_key_groups`` groups on ``tasks``."""

    def __init__(
        self,
        *,
        num_key_groups: int,
        tasks: Iterable[int],
        emitters: Iterable[int],
        step: Step = sum_step,
        routing: RoutingTable | None = None,
        request_at: int = 0,
        durable: bool = False,
    ) -> None:
        self.tasks = sorted(set(tasks))
        if len(self.tasks) < 2:
            raise ValueError("a cluster needs at least two tasks (owner and holder)")
        self.emitter_ids = sorted(set(emitters))
        if set(self.tasks) & set(self.emitter_ids):
            raise ValueError("task and emitter ids must differ")
        self.num_key_groups = num_key_groups
        self.durable = durable
        # The durable tier: each task's writer (its copy of every group it checkpointed,
        # as offered), and the store (each group's newest written copy).
        self.writers: dict[int, CheckpointHolder] = {t: CheckpointHolder() for t in self.tasks}
        self.store: dict[int, HeldCheckpoint] = {}
        self.now = 0.0  # the clock of the last tick(); the controller stamps orders with it
        self.step = step
        self.control = MigrationController(
            num_key_groups=num_key_groups,
            tasks=self.tasks,
            emitters=self.emitter_ids,
            routing=routing,
        )
        self.coordinators = {t: self._new_task(t, owned=True) for t in self.tasks}
        self.emitters = {
            u: Emitter(task=u, routing=self.routing, source=f"u{u}", request_at=request_at)
            for u in self.emitter_ids
        }
        self.channels: dict[tuple[int, int], deque[Message]] = {}
        # each emitter's input, in order: what its new life replays after a restart
        self.inputs: dict[int, list[tuple[str, Any, float]]] = {u: [] for u in self.emitter_ids}
        self.applied: list[tuple[int, Applied]] = []
        # The output side: each task sends ``key -> current value`` updates as the
        # flights job's op2 does (``elastorm.core.outputs``), here at once after each step.
        self.latest = {t: LatestValues() for t in self.tasks}
        self.outputs: list[tuple[int, str, Any]] = []  # (task, key, value) in send order
        self.tentative: dict[str, bool] = {}  # key -> its newest update was tentative
        self.rejected: list[tuple[int, Rejected]] = []
        # channel -> the data delivered on it lately, newest last (what an echo repeats)
        self.delivered: dict[tuple[int, int], deque[Data]] = {}
        self.stats: Counter[str] = Counter()
        # key group -> source -> highest watermark any emitter was told to trim to
        self._trims: dict[int, dict[str, int]] = {}

    # -- wiring --------------------------------------------------------------------
    @property
    def routing(self):
        return self.control.routing

    @property
    def epoch(self) -> int:
        return self.control.epoch

    @property
    def holders(self) -> dict[int, int]:
        return self.control.holders

    @property
    def moving(self) -> dict[int, Moving]:
        return self.control.moving

    @property
    def reports(self):
        return self.control.reports

    def _new_task(self, t: int, *, owned: bool, floor: int = -1) -> TaskCoordinator:
        groups = self.routing.key_groups_of(t) if owned else ()
        return TaskCoordinator(
            task=t,
            num_key_groups=self.num_key_groups,
            upstreams=self.emitter_ids,
            step=self.step,
            owned=groups,
            holders={g: self.holders[g] for g in groups},
            stale_through=floor,
            durable_trim=self.durable,
        )

    def _send(self, sender: int, receiver: int, message: Message) -> None:
        self.channels.setdefault((sender, receiver), deque()).append(message)
        self.stats["sent"] += 1

    def perform(self, actor: int, actions: list[Action]) -> None:
        """Carry out ``actions`` returned by ``actor``'s machine."""
        latest = self.latest.get(actor)
        for action in actions:
            if isinstance(action, Send):
                self._send(actor, action.to_task, action.message)
                if self.durable and type(action.message) is CheckpointDelta:
                    self._offer(actor, action.message)
            elif isinstance(action, LoadDurable):
                self._send(STORE, actor, self._load(action))
            elif isinstance(action, Applied):
                coordinator = self.coordinators.get(actor)
                if action.emit_output and coordinator is not None:
                    phase = coordinator.phase(action.key_group)
                    assert phase is not Phase.REPLICA, (actor, action)  # outputs suppressed
                self.applied.append((actor, action))
                if latest is not None:
                    latest.applied(action)
            elif isinstance(action, Rejected):
                self.rejected.append((actor, action))
            elif isinstance(action, MigrationDone):
                self.control.on_migration_done(action)
                if latest is not None:
                    m = self.coordinators[actor].machine(action.key_group)
                    latest.reported(action, m.state, tentative=m.tentative)
            elif isinstance(action, CheckpointStored):
                self.control.on_checkpoint_stored(actor, action)
            elif isinstance(action, EmitterRestarted):
                self._send_all(
                    self.control.redrive(self.now, epoch=action.epoch, emitter=action.task)
                )
            self.stats[type(action).__name__] += 1
        coordinator = self.coordinators.get(actor)
        if latest is not None and coordinator is not None:
            latest.settle(coordinator)  # rectify what is no longer tentative
        if latest:
            values, marked = latest.take_marked()
            self.outputs.extend((actor, k, v) for k, v in values.items())
            for k in values:  # whether the newest update of each key is tentative
                self.tentative[k] = k in marked

    # -- the durable tier ----------------------------------------------------------
    def _offer(self, task: int, delta: CheckpointDelta) -> None:
        """``task``'s writer takes a checkpoint it sent (a repeat, or a delta off its
        chain, is dropped: the real writer then asks for a full one)."""
        try:
            self.writers[task].apply(delta)
        except CheckpointOrderError:
            self.stats["durable_refused"] += 1

    def persist(self, task: int, key_group: int) -> bool:
        """``task``'s writer writes its newest copy of ``key_group`` (the store keeps
        the newest by checkpoint id) and tells the task. False if it has none."""
        copy = self.writers[task].get(key_group)
        if copy is None or copy.checkpoint is None:
            return False
        stored = self.store.get(key_group)
        if stored is None or copy.checkpoint > stored.checkpoint:
            self.store[key_group] = HeldCheckpoint(
                key_group=key_group,
                checkpoint=copy.checkpoint,
                entries=dict(copy.entries),
                watermarks=dict(copy.watermarks),
                out_seq=dict(copy.out_seq),
                epoch=copy.epoch,
            )
        written = DurableWritten(
            key_group=key_group, checkpoint=copy.checkpoint, watermarks=dict(copy.watermarks)
        )
        self.perform(task, self.coordinators[task].receive(task, written))
        self.stats["durable_writes"] += 1
        return True

    def _load(self, load: LoadDurable) -> DurableLoaded:
        """The store's answer to ``load``: its newest copy of the group, or none."""
        copy = self.store.get(load.key_group)
        if copy is None:
            return DurableLoaded.missing(load.key_group, load.epoch)
        return DurableLoaded(
            key_group=load.key_group,
            epoch=load.epoch,
            checkpoint=copy.checkpoint,
            entries=dict(copy.entries),
            watermarks=dict(copy.watermarks),
            out_seq=dict(copy.out_seq),
        )

    # -- driving -------------------------------------------------------------------
    def emit(self, emitter: int, key: str, value: Any, ts: float = 0.0) -> None:
        self.inputs[emitter].append((key, value, ts))
        self.perform(emitter, self.emitters[emitter].emit(key, value, ts))

    def emit_lost(self, emitter: int, key: str, value: Any, ts: float = 0.0) -> None:
        """Emit a tuple whose data messages are lost on the wire: numbered and buffered
        by its emitter, never delivered (Storm dropping tuples between live workers)."""
        self.inputs[emitter].append((key, value, ts))
        actions = self.emitters[emitter].emit(key, value, ts)
        self.stats["lost_on_wire"] += len(actions)

    def restart_emitter(self, emitter: int) -> None:
        """Kill ``emitter`` and start its new life as ``KeyedEmitting`` does: what it had
        in flight and its inbox are lost; it reads the routing table in force (the
        controller's, as ZooKeeper has it), tells every task the epoch it read
        (``UpstreamRestarted``) and replays its whole input (a restart point at the
        start), numbered as before."""
        for ch in [ch for ch in self.channels if emitter in ch]:
            self.stats["lost_in_flight"] += len(self.channels.pop(ch))
        old = self.emitters[emitter]
        new = self.emitters[emitter] = Emitter(
            task=emitter, routing=self.routing, source=old.source, request_at=old.request_at
        )
        notice = UpstreamRestarted(key_group=0, epoch=new.routing.epoch)
        for t in self.tasks:
            self._send(emitter, t, notice)
        for key, value, ts in self.inputs[emitter]:
            self.perform(emitter, new.emit(key, value, ts))
        self.stats["emitter_restarts"] += 1

    def lose(self, channel: tuple[int, int]) -> Message:
        """The oldest message in flight on ``channel`` is lost on the way."""
        self.stats["lost_on_wire"] += 1
        return self.channels[channel].popleft()

    def gaps(self) -> int:
        """Tuples parked behind a sequence gap, over every task and key group."""
        return sum(
            c.machine(g).parked
            for c in self.coordinators.values()
            for g in (*c.live(), *c.replicas())
        )

    def pending(self) -> list[tuple[int, int]]:
        """Channels with messages in flight, sorted."""
        return sorted(ch for ch, q in self.channels.items() if q)

    def deliver(self, channel: tuple[int, int]) -> Message:
        """Deliver the oldest message of ``channel`` to its receiver."""
        sender, receiver = channel
        message = self.channels[channel].popleft()
        if receiver in self.emitters:
            if isinstance(message, Trim):
                marks = self._trims.setdefault(message.key_group, {})
                for source, seq in message.watermarks.items():
                    marks[source] = max(marks.get(source, 0), seq)
            actions = self.emitters[receiver].receive(sender, message)
        elif type(message).__name__ in EMITTER_MESSAGES:
            raise AssertionError(f"{type(message).__name__} sent to task {receiver}")
        else:
            actions = self.coordinators[receiver].receive(sender, message)
            if type(message) is Data:
                self._delivered(channel).append(message)
        self.perform(receiver, actions)
        self.stats["delivered"] += 1
        return message

    def _delivered(self, channel: tuple[int, int]) -> deque[Data]:
        """The data delivered on ``channel`` lately, newest last (what an echo repeats)."""
        return self.delivered.setdefault(channel, deque(maxlen=16))

    def data_ahead(self, channel: tuple[int, int]) -> int:
        """How many data messages lead ``channel`` (0: its next is not data)."""
        n = 0
        for message in self.channels.get(channel, ()):
            if type(message) is not Data:
                break
            n += 1
        return n

    def echoable(self, channel: tuple[int, int]) -> int:
        """How many of the data last delivered on ``channel`` may go again: those of
        groups its receiver owns (``ACTIVE`` and the routing owner) now, as a probe or
        a resend to the owner would repeat them."""
        c = self.coordinators.get(channel[1])
        n = 0
        for message in reversed(self.delivered.get(channel, ())):
            g = message.key_group
            if c is None or self.owner(g) != channel[1] or c.peek_phase(g) is not Phase.ACTIVE:
                break
            n += 1
        return n

    def deliver_runs(self, channel: tuple[int, int], size: int, echo: int = 0) -> list[DataRun]:
        """Deliver the next ``size`` data messages of ``channel`` as one Storm tuple of
        data runs (issue 34), grouped as the emitter's ``RunBuilder`` does: an emitter
        flushes its runs before any other message, so a tuple's runs are data that
        follow each other on the channel. ``echo`` of the data delivered last on it go
        again at the front (a probe or a resend the runs then overlap or repeat).
        Returns the runs delivered."""
        sender, receiver = channel
        queue = self.channels[channel]
        assert 1 <= size <= self.data_ahead(channel) and echo <= self.echoable(channel)
        history = self._delivered(channel)
        again = list(history)[len(history) - echo :] if echo else []
        taken = [queue.popleft() for _ in range(size)]
        history.extend(taken)
        builder = RunBuilder()
        for message in (*again, *taken):
            builder.add(receiver, message.key_group, message.item)
        runs = builder.take()[receiver]
        coordinator = self.coordinators[receiver]
        for run in runs:
            self.perform(receiver, coordinator.receive_run(sender, run))
        self.stats["delivered"] += size
        self.stats["runs"] += len(runs)
        return runs

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

    def heal(self, *, rounds: int = 8, every: float = 2.0) -> None:
        """Tick (probes, resends) and deliver until nothing is parked behind a gap and
        nothing is in flight, as the runtime's timers would."""
        for _ in range(rounds):
            self.tick(self.now + every)
            self.run_until_quiet()

    def checkpoint(self, task: int, key_group: int) -> None:
        self.perform(task, self.coordinators[task].checkpoint(key_group))

    def tick(self, now: float) -> None:
        self.now = now
        # the controller's tick: restores not done RESTORE_RETRY s after their commands
        self._send_all(self.control.redrive(now, waited=RESTORE_RETRY))
        for t, c in self.coordinators.items():
            self.perform(t, c.on_tick(now))
        for u, e in self.emitters.items():
            self.perform(u, e.on_tick(now))

    # -- controller ----------------------------------------------------------------
    def owner(self, key_group: int) -> int:
        return self.control.owner(key_group)

    def has_newest(self, task: int, key_group: int) -> bool:
        return self.control.has_newest(task, key_group)

    def can_migrate(self, key_group: int) -> bool:
        return self.control.can_migrate(key_group)

    def restore_target(self, key_group: int, dead: Collection[int]) -> int:
        """The simulator's recovery rule: the first surviving copy (by task id).

        The Storm controller asks ``elastorm.controller.recovery.plan_recovery``
        instead; the simulator stays inside the sans-IO core, so it keeps this
        fixed rule, enough to check the protocols survive any choice of copy.
        With the durable tier, a group no copy in memory survived goes to the first
        live task, restored from the store (when every task died, to its own owner's
        new incarnation). Raises ``RuntimeError`` when no copy survives anywhere.
        """
        copies = self.control.surviving_copies(key_group, dead)
        if copies:
            return copies[0]
        if self.from_store(key_group, dead):
            live = [t for t in self.tasks if t not in dead]
            return min(live) if live else self.control.owner(key_group)
        raise RuntimeError(f"group {key_group}: no checkpoint survives tasks {sorted(dead)}")

    def from_store(self, key_group: int, dead: Collection[int]) -> bool:
        """Whether ``key_group`` would be restored from the durable store if ``dead``
        died: the tier is on and no copy in memory survives. The store need not have a
        copy (the controller's rule, ``MigrationControllerBolt.durable_copies``): with none,
        nothing was trimmed, and the group comes back empty plus the whole replay."""
        return self.durable and not self.control.surviving_copies(key_group, dead)

    def involved(self, key_group: int, task: int) -> bool:
        return self.control.involved(key_group, task)

    def _send_all(self, sends: Iterable[Send]) -> None:
        for send in sends:
            self._send(CONTROLLER, send.to_task, send.message)

    def migrate(self, key_group: int, target: int, protocol: Protocol) -> Protocol:
        """Order a migration through the controller; returns the protocol used (the one
        ``choose_protocol`` picks: direct when the target cannot run ``protocol``)."""
        used = self.control.choose(key_group, target, protocol).protocol
        sends = self.control.migrate(key_group, target, used, now=self.now)
        self._send_all(sends)
        self.stats[f"migrate.{used.value}"] += 1
        return used

    def crash(self, task: int, *more: int) -> list[int]:
        """Kill ``task`` and ``more`` at once (a correlated failure: each loses its state,
        copies and inbox), restart them empty and restore what they owned or were
        moving (a group with an active replica is promoted on it). Returns the
        restored groups."""
        dead = {task, *more}
        for ch in [ch for ch in self.channels if ch[1] in dead]:
            self.stats["lost_in_flight"] += len(self.channels.pop(ch))
        control = self.control
        lost = sorted({g for d in dead for g in control.lost_key_groups(d)})
        restores = {g: self.restore_target(g, dead) for g in lost}
        from_store = {g for g in lost if self.from_store(g, dead)}
        holders = {}
        skip = dead if len(dead) < len(control.tasks) else ()  # else all restart empty
        for g in range(control.num_key_groups):
            owner = restores.get(g, control.owner(g))
            if control.holders[g] in (*dead, owner):
                holders[g] = next_task(control.tasks, owner, skip=skip)
        plan = control.recover(
            dead,
            restores=restores,
            holders=holders,
            now=self.now,
            from_store=from_store,
            restarted=True,  # the simulator restarts them at once, below
        )
        self._send_all(plan.sends)
        self.stats["durable_restores"] += len(from_store)
        for d in dead:
            self.writers[d] = CheckpointHolder()  # its pending writes died with it
            self.coordinators[d] = self._new_task(d, owned=False, floor=plan.stale_through)
            self.latest[d] = LatestValues()
        for t, c in self.coordinators.items():
            if t not in dead:
                for d in sorted(dead):
                    self.perform(t, c.peer_down(d))
        self.stats["crashes"] += len(dead)
        self.stats["promoted"] += len(plan.promoted)
        return list(plan.restored)

    def replicate(self, key_group: int, replica: int) -> None:
        """Start an active replica of ``key_group`` on ``replica`` (its holder)."""
        self._send_all(self.control.replicate(key_group, replica, now=self.now))

    def drop_replica(self, key_group: int) -> None:
        self._send_all(self.control.drop_replica(key_group))

    # -- inspection ----------------------------------------------------------------
    def coverage(self, task: int, key_group: int) -> dict[str, int] | None:
        """Watermarks of the live state, else of the held copy, of ``key_group`` on ``task``."""
        c = self.coordinators[task]
        state = c.state(key_group)
        if state is not None:
            return dict(state.applied)
        copy = c.held.get(key_group)
        return None if copy is None else dict(copy.watermarks)

    def trimmed(self, key_group: int) -> dict[str, int]:
        """Highest trim watermark per source over all emitters (the ``Trim`` messages
        delivered to them)."""
        return dict(self._trims.get(key_group, {}))

    def survives(self, dead: int | Collection[int]) -> bool:
        """God's view: can every group the ``dead`` tasks are involved in be restored by
        :meth:`restore_target` without losing a trimmed tuple?"""
        dead = {dead} if isinstance(dead, int) else set(dead)
        if not set(self.tasks) - dead:
            return False
        for g in range(self.num_key_groups):
            if not any(self.involved(g, d) for d in dead):
                continue
            try:
                target = self.restore_target(g, dead)
            except RuntimeError:
                return False
            stored = self.store.get(g)
            have = (
                (dict(stored.watermarks) if stored is not None else {})
                if self.from_store(g, dead)
                else self.coverage(target, g) or {}
            )
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


def deliver_runs_drawn(c: Cluster, data: Any, channel: tuple[int, int]) -> list[DataRun]:
    """Deliver ``channel``'s next data as one tuple of data runs (``Cluster.deliver_runs``)
    of a size ``data`` (Hypothesis's ``st.data()``) draws, repeating up to 3 of the data
    it delivered last."""
    from hypothesis import strategies as st

    size = data.draw(st.integers(1, c.data_ahead(channel)), label="run size")
    echo = data.draw(st.integers(0, min(3, c.echoable(channel))), label="echo")
    return c.deliver_runs(channel, size, echo)


def deliver_drawn(c: Cluster, data: Any) -> None:
    """Deliver a channel's next message, or (drawn) its next data as a tuple of data runs
    (:func:`deliver_runs_drawn`); channel and choices drawn by ``data``."""
    from hypothesis import strategies as st

    channel = data.draw(st.sampled_from(c.pending()), label="channel")
    if c.data_ahead(channel) and data.draw(st.booleans(), label="as runs"):
        deliver_runs_drawn(c, data, channel)
    else:
        c.deliver(channel)
