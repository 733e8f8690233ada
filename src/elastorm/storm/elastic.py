"""Storm adapters for elastorm's core: emitters, keyed operators and the controller.

Thin on purpose (DESIGN: adapters translate, they decide nothing). Tuples become
``receive(...)`` calls on the sans-IO machines of ``elastorm``; the actions they
return become emits:

* one direct stream, ``elastorm``, carries every protocol message between a pair
  of tasks (data, toState, toCheckpoint, syncGroup, checkpoints, acks, trims,
  processedAllReplay, commands), so control stays FIFO with data on each channel;
  each tuple names its original sender;
* an emitter whose rows also feed plainly grouped operators may instead *carry*
  its data messages on its own output stream (``carrier_fields``): the row's
  fields plus ``elastorm`` and ``elastorm_task``, which ``by_task()`` (the JVM
  ``TaskFieldGrouping``) routes to the task the routing table chose. One emit
  then serves both subscribers; Storm keeps each task pair's tuples in order
  across streams, so data stays FIFO with the control on ``elastorm``;
* what a keyed task sends (checkpoints to holders, acks, trims and
  processedAllReplay back upstream) goes through a relay bolt (``elastorm_relay``)
  first: those edges close cycles, and a cycle of bounded queues deadlocks under
  Storm's backpressure (op1 blocked on a full op2 while op2 blocks on a full op1;
  seen at full speed). The relay's queue only holds that low-volume traffic, so
  the keyed tasks never block on it;
* keyed tasks report to the controller on ``elastorm_reports`` (checkpoint stored,
  migration done, aborted, holder lost);
* the controller (one task, ``elastorm.storm.controller_bolt.MigrationControllerBolt``)
  reads migration requests from ZooKeeper, orders them through
  ``elastorm.core.control.MigrationController`` and sends the commands on
  ``elastorm``.

Component names come from class attributes, so one topology can wire several
keyed operators. Conf keys: ``elastorm.key_groups`` (default 20),
``elastorm.checkpoint_interval_secs`` (default 5).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from streamparse import Grouping, Stream

from elastorm.config import ConfigError, TopologyConfig
from elastorm.core.actions import (
    Action,
    Applied,
    LoadDurable,
    MigrationDone,
    Rejected,
    Role,
    Send,
    TaskStarted,
    TuplesStalled,
    encode_report,
)
from elastorm.core.buffers import SequenceCounters
from elastorm.core.chaos import wire_loss_on
from elastorm.core.control import initial_holders
from elastorm.core.errors import MigrationProtocolError
from elastorm.core.holdback import Admission, HoldBack, checkpoint_request_at
from elastorm.core.keygroups import key_group
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
    decode_runs,
    encode_runs,
    from_json,
    is_runs,
    to_json,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.emitter import Emitter
from elastorm.core.migration.pause import PauseMeter
from elastorm.core.migration.runs import RunBuilder
from elastorm.core.migration.table import TRANSITIONS, Phase
from elastorm.core.queries import answer
from elastorm.core.replay import ReplayTracker, RestartPoint, emitter_source
from elastorm.core.routing import RoutingTable
from elastorm.core.state import KeyGroupState, Step
from elastorm.durable.submissions import SubmissionView, load_for_restore
from elastorm.durable.writer import DurableWriter, start_writer
from elastorm.storm.load import (
    LoadMeter,
    resident_bytes,
    start_heartbeats,
    start_liveness,
    start_queries,
)
from elastorm.storm.pygc import full_collections
from elastorm.storm.replay import LINK_FIELDS, REWIND_STREAM
from elastorm.storm.savepoint import (
    durable_savepoint,
    durable_view,
    first_epoch,
    record_start,
    restore_keyed,
)
from elastorm.storm.wire import BatchingSerializer, CheckedEncoding, use_elastorm_wire

log = logging.getLogger(__name__)

_MACHINE_EVENTS = frozenset(event for _, event in TRANSITIONS)
"""Messages a key group's machine handles (``core.migration.table``)."""

STREAM = "elastorm"
REPORTS = "elastorm_reports"
MESSAGE_FIELDS = ["message", "sender"]
RELAY = "elastorm_relay"
CONTROLLER_SENDER = -1  # how the machines see the controller's channel
FENCED_EXIT = 75  # exit status of a keyed task that found itself declared lost
_SEND = Admission.SEND  # (a module global: an Enum member's lookup costs on the per-tuple path)
HOLD_BACK_SECS = 0.001  # an emitter's pause per tuple once its parked emits are over their bound

CONTROLLER_COMPONENT = "controller"  # the component ids elastorm adds to a topology
RELAY_COMPONENT = "relay"
OPERATORS_KEY = TopologyConfig.key("operators")  # set by the wiring

MESSAGE_STREAM = Stream(fields=MESSAGE_FIELDS, name=STREAM, direct=True)
CARRIED = ["elastorm", "elastorm_task"]  # appended to a carrier stream's own fields
OUTPUT_ID = ["elastorm_group", "elastorm_source", "elastorm_seq", "elastorm_kind"]
"""Appended to a keyed bolt's output stream declared with :func:`output_id_fields`:
the output's stable id (key group, input source, output sequence) and its kind
(``core.outputs.OUTPUT_KINDS``); ``elastorm.sinks`` commits each id once."""
COMMITTED = "elastorm_committed"
"""The direct stream on which a sink (or the router before a second keyed bolt) tells
each keyed task the output ids it committed (or that bolt checkpointed;
``core.outbox``): one field, a list of ``[stream, key group, source, seq]``."""
COMMITTED_STREAM = Stream(fields=["committed"], name=COMMITTED, direct=True)
TASK_GROUPING = "elastorm.jvm.TaskFieldGrouping"  # jvm/multilang, in every topology jar
RELAY_CLASS = "elastorm.jvm.RelayBolt"  # jvm/multilang: the relay (docs/elastic.md)
REPORT_STREAM = Stream(fields=["report"], name=REPORTS)
RELAY_STREAM = Stream(fields=["to_task", "message", "sender"], name=RELAY)


def to_wire(message: Message) -> str | list:
    """A protocol message as the message field of an ``elastorm`` tuple.

    A ``Data`` (one per tuple) is its flat list ``[key_group, source, seq, key,
    value, ts]``, encoded once with the multilang message around it (no JSON text
    inside JSON); every other message is its JSON text (``to_json``), opaque to the
    JVM (a checkpoint or a toState can be large and is rare).
    """
    if type(message) is Data:
        return [message.key_group, *message.item]
    return to_json(message)


def from_wire(value: str | list) -> Message:
    """Inverse of :func:`to_wire`; ``ValueError`` on anything malformed."""
    return from_json(value)


def carrier_fields(fields: Iterable[str]) -> list[str]:
    """The fields of a stream that carries data messages after its own ``fields``."""
    return [*fields, *CARRIED]


def output_id_fields(fields: Iterable[str]) -> list[str]:
    """The fields of a keyed bolt's output stream whose tuples carry their stable id
    after the bolt's own ``fields`` (:data:`OUTPUT_ID`), as a sink needs them.

    >>> output_id_fields(["word", "count"])[2:]
    ['elastorm_group', 'elastorm_source', 'elastorm_seq', 'elastorm_kind']
    """
    return [*fields, *OUTPUT_ID]


def by_task() -> Grouping:
    """How a keyed operator subscribes to a carrier stream: to the ``elastorm_task`` named."""
    return Grouping.custom_object(TASK_GROUPING, [CARRIED[1]])


def tasks_of(context: Mapping[str, Any], components: str | Iterable[str]) -> list[int]:
    """Sorted task ids of ``components`` from a Storm topology context."""
    names = {components} if isinstance(components, str) else set(components)
    return sorted(int(t) for t, c in context["task->component"].items() if c in names)


def operators_of(config: TopologyConfig) -> dict[str, tuple[str, ...]]:
    """``elastorm.operators``: each keyed operator and the components that emit to it
    (``elastorm.storm.topology`` writes it).

    Raises ``ConfigError`` when it is missing: a controller or an emitter without
    operators would do nothing, silently.

    >>> operators_of(TopologyConfig(operators={"op2": ["op1"]}))
    {'op2': ('op1',)}
    """
    if not config.operators:
        raise ConfigError(
            f"{OPERATORS_KEY} is not set: declare the topology as an elastorm "
            "ElasticTopology (keyed inputs marked with keyed())"
        )
    return dict(config.operators)


class _Sending(CheckedEncoding):
    """Mixin: perform ``Send`` actions as direct emits on the ``elastorm`` stream, and
    take the controller's commands from this task's ZooKeeper mailbox
    (``elastorm.zk.commands``) after each tuple: commands never queue behind data."""

    _commands: Any = None  # this task's CommandInbox (topologies with a controller)

    def _senders(self, conf: Mapping[str, Any], context: Mapping[str, Any]) -> None:
        self._task = int(context["taskid"])
        if self._commands is None and tasks_of(context, CONTROLLER_COMPONENT):
            from elastorm.zk.commands import CommandInbox

            self._commands = CommandInbox.of(conf, self._task)

    def sender_of(self, tup) -> int:
        if tup.stream != STREAM:  # carried: the emitting task itself
            return int(tup.task)
        return int(tup.values[1])

    def send(self, action: Send) -> None:
        self.emit([to_wire(action.message), self._task], stream=STREAM, direct_task=action.to_task)

    def _run(self) -> None:
        """pystorm's step (one input), then the commands read meanwhile."""
        super()._run()
        if self._commands:
            self.take_commands()

    def take_commands(self) -> None:
        """Handle the controller's commands read since the last call, in order."""
        for message in self._commands.take():
            try:
                self.receive_command(message)
            except (ValueError, MigrationProtocolError) as exc:
                self.command_failed(message, f"{type(exc).__name__}: {exc}")

    def receive_command(self, message: Message) -> None:
        """One command of the controller (sender ``CONTROLLER_SENDER``)."""
        raise NotImplementedError

    def command_failed(self, message: Message, reason: str) -> None:
        """A command of the controller was refused or malformed; override to count it."""
        log.error(
            "task %s: command %s from the controller not carried out: %s",
            self._task, type(message).__name__, reason,
        )  # fmt: skip


def start_durable(
    view: SubmissionView | None, config: TopologyConfig, context: Mapping[str, Any]
) -> DurableWriter | None:
    """This task process's durable writer (``elastorm.durable.*``) into its submission's
    directory, or ``None`` when off; its Peace slot (if scheduled) among every keyed
    operator's tasks."""
    return start_writer(
        config.durable,
        view,
        task=int(context["taskid"]),
        tasks=tasks_of(context, tuple(config.operators)),
        period_secs=config.checkpoint_interval_secs * config.durable.every,
    )


def initial_routing(
    config: TopologyConfig, operator: str, tasks: Iterable[int], *, epoch: int
) -> RoutingTable:
    """``operator``'s routing table at start, computed alike by every task and the controller,
    in routing epoch ``epoch`` (``storm.savepoint.first_epoch``).

    Round robin over its tasks, or, if ``elastorm.initial_nodes`` names the
    operator (``{operator: [node index, ...]}``, node ``i`` = the operator's
    ``i``-th task by id), over the tasks on those nodes only (Madsen & Zhou 2015,
    section 7.2, the load-shift experiment, starts each operator on one node).
    """
    ordered = sorted(tasks)
    chosen = ordered
    wanted = config.initial_nodes.get(operator)
    if wanted is not None:
        if max(wanted) >= len(ordered):
            raise ConfigError(
                f"{TopologyConfig.key('initial_nodes')}[{operator}] = {list(wanted)!r}: "
                f"need node indices in [0, {len(ordered)})"
            )
        chosen = [ordered[i] for i in wanted]
    return RoutingTable.round_robin(config.key_groups, chosen, epoch=epoch)


def task_zones(config: TopologyConfig, tasks: Iterable[int]) -> list[str]:
    """The fault zone of each task of a keyed operator, by id: node ``i``'s zone from
    ``elastorm.fault_zones``, else the node itself (one zone per node)."""
    from elastorm.controller.model import node_name

    names = [node_name(i) for i in range(len(set(tasks)))]
    return [config.fault_zones.get(n, n) for n in names]


class RunOutbox:
    """An emitter's data tuples held as runs (``core.migration.runs``), sent as one
    ``elastorm`` tuple per destination task (``send(task, runs)``) when ``batch_size``
    are held or :meth:`flush` is called (issue 34, stage 1).

    The emitting adapter flushes it before any other emit, so each channel keeps its
    order (a control message never overtakes the data before it), and on ticks; the
    multilang serializer flushes it as a :class:`~elastorm.storm.wire.Held` whenever
    its batch goes or before it would block on a read.
    """

    def __init__(
        self,
        batch_size: int,
        send: Callable[[int, list[DataRun]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.batch_size = batch_size
        self._send = send
        self.clock = clock
        self.runs = RunBuilder()
        self._since = 0.0
        self.sent = 0  # elastorm tuples of runs sent

    @property
    def held(self) -> int:
        """Data tuples held now."""
        return self.runs.held

    def add(self, to_task: int, data: Data) -> None:
        """Hold ``data`` for ``to_task``; send everything once ``batch_size`` are held."""
        runs = self.runs
        if not runs.held:
            self._since = self.clock()
        if runs.add(to_task, data.key_group, data.item) >= self.batch_size:
            self.flush()

    def held_since(self) -> float | None:
        """When the oldest held tuple came (None: none held)."""
        return self._since if self.runs.held else None

    def flush(self) -> None:
        """Send what is held, one tuple per task (emptied first: a flush may re-enter)."""
        if self.runs.held:
            for task, runs in self.runs.take().items():
                self.sent += 1
                self._send(task, runs)


class KeyedEmitting(_Sending):
    """Mixin for a spout or bolt that feeds keyed operators (those that name its
    component in ``elastorm.operators``).

    One :class:`Emitter` per keyed operator (``self.emitters``; ``self.emitter`` is
    the first). Call :meth:`setup_emitting` from ``initialize``,
    :meth:`emit_keyed` instead of a grouped emit, and :meth:`receive_elastorm` for
    tuples on the ``elastorm`` stream (trims, processedAllReplay, the controller's
    commands), which go to the emitter of the operator they concern.

    With ``elastorm.data.batch_size`` > 1 (and elastorm's multilang wire), data
    messages go out as runs (:class:`RunOutbox`, ``self._runs``).
    """

    _runs: RunOutbox | None = None

    def setup_emitting(self, conf: Mapping[str, Any], context: Mapping[str, Any]) -> None:
        use_elastorm_wire(self, conf)
        self._senders(conf, context)
        task = int(context["taskid"])
        component = context["componentid"]
        config = TopologyConfig.from_conf(conf)
        serializer = getattr(self, "serializer", None)
        if config.data_batch_size > 1 and isinstance(serializer, BatchingSerializer):
            self._runs = serializer.ahead = RunOutbox(config.data_batch_size, self._send_runs)
        elif config.data_batch_size > 1:
            log.warning(
                "emitter task %s: %s = %d ignored: data runs need elastorm's batched "
                "multilang wire; one Storm tuple per data tuple",
                task, TopologyConfig.key("data_batch_size"), config.data_batch_size,
            )  # fmt: skip
        operators = [op for op, ems in operators_of(config).items() if component in ems]
        if not operators:
            raise ValueError(f"{OPERATORS_KEY} names no keyed operator fed by {component}")
        sources = config.replay_sources.get(component, ())
        from elastorm.zk.replay import emitter_start

        # Every start is counted: a restart reads the routing tables in force, and an
        # emitter that cannot replay numbers under a new source name (emitter_source).
        start = emitter_start(conf, component, task, operators, sources)
        point = start.point if sources and start.point else RestartPoint()
        # A first start restored from a savepoint resumes from the point it recorded
        # (from the source's start without one): the replay is numbered as before.
        saved = durable_savepoint(conf, config)
        epoch = first_epoch(saved)
        restored = start.incarnation == 1 and saved is not None
        if restored and sources:
            point = (saved.point_of(component, task) if saved else None) or RestartPoint()
        source = emitter_source(
            component, task, start.incarnation, replayed=bool(sources),
            restored=epoch if restored else 0,
        )  # fmt: skip
        if start.incarnation > 1 and not sources:
            log.warning(
                "emitter task %s restarted (incarnation %d) with nothing to replay from: "
                "numbering as %s; what it had not sent before is lost (at most once)",
                task, start.incarnation, source,
            )  # fmt: skip
        self.emitters: dict[str, Emitter] = {}
        self._operator_of: dict[int, str] = {}
        for op in operators:
            tasks = tasks_of(context, op)
            self._operator_of.update(dict.fromkeys(tasks, op))
            routing = start.routing.get(op) or initial_routing(config, op, tasks, epoch=epoch)
            emitter = self.emitters[op] = Emitter(
                task=task,
                routing=routing,
                source=source,
                request_at=checkpoint_request_at(config.max_buffered, routing.num_key_groups),
                probe_after=config.resend_after_secs,
            )
            resumed = point.counters.get(op, {})
            emitter.counters = SequenceCounters({(source, g): n for g, n in resumed.items()})
        if start.incarnation > 1:
            self._announce_restart(context)
        self._first = operators[0]
        self.emitter = self.emitters[self._first]
        self._full_gc = full_collections(config.gc_full_every_secs, time.monotonic())
        self._holds = {
            op: HoldBack(max_buffered=config.max_buffered, max_parked=config.max_parked)
            for op in operators
        }
        self._parked_since: dict[str, float] = {}  # operators whose buffer is full: since when
        self._wire_loss = wire_loss_on(config, "emitter")
        if self._wire_loss is not None:
            log.warning(
                "emitter task %s: fault injection on: losing %d data messages on the wire",
                task, config.chaos_drop_tuples,
            )  # fmt: skip
        self.replay: ReplayTracker | None = None
        self.resumed_state = point.state  # the bolt's own part of its restart point
        self._linked_sources: frozenset[str] = frozenset()
        if sources:
            restarted = start.incarnation > 1
            token = f"{task}#{start.incarnation}"
            self.replay = ReplayTracker(
                start=point,
                awaiting=token if restarted else None,
                token=token,
                retry_after=config.stall_secs,
                sources=sorted(sources),
            )
            self._replay_sources = frozenset(sources)
            from elastorm.zk.replay import RestartPointWriter, RewindAsker

            self._restart_points = RestartPointWriter(conf, component, task)
            self._restart_points.start()
            self._linked_sources = frozenset(
                s for s, e in config.replay_links.items() if e == component and s in sources
            )
            if self._linked_sources or restarted:  # lossy links; a restart's marker lost
                self._rewind_asker = RewindAsker(conf, component, task)
                self._rewind_asker.start()
            if restarted:
                log.warning(
                    "emitter task %s restarted (incarnation %d): resuming after %s, "
                    "waiting for the replay", task, start.incarnation, dict(point.positions),
                )  # fmt: skip

    def send(self, action: Send) -> None:
        """A data message joins the runs (when on); anything else is emitted (after
        them: :meth:`emit`)."""
        if self._runs is not None and type(action.message) is Data:
            self._runs.add(action.to_task, action.message)
        else:
            super().send(action)

    def emit(self, *args: Any, **kwargs: Any) -> Any:
        """pystorm's emit, after the held runs: no emit overtakes the data before it."""
        runs = self._runs
        if runs is not None and runs.held:
            runs.flush()
        return super().emit(*args, **kwargs)  # type: ignore[misc]

    def _send_runs(self, task: int, runs: list[DataRun]) -> None:
        """One ``elastorm`` tuple holding ``runs`` for ``task`` (``RunOutbox``)."""
        super().emit([encode_runs(runs), self._task], stream=STREAM, direct_task=task)  # type: ignore[misc]

    def _announce_restart(self, context: Mapping[str, Any]) -> None:
        """Tell every task of each operator this emitter feeds the routing epoch it read
        (``UpstreamRestarted``): no migration ordered by then waits for this life, which
        ignores their commands and replays what the earlier one had buffered."""
        for op, emitter in self.emitters.items():
            notice = UpstreamRestarted(key_group=0, epoch=emitter.routing.epoch)
            for t in tasks_of(context, op):
                self.send(Send(to_task=t, message=notice))

    def replay_admit(self, tup):
        """The input to process, or None. None for a rewind marker (handled here) and,
        behind a replayable spout, for a tuple this emitter already processed or one
        sent before the replay it waits for. A tuple from a linked spout
        (``elastorm.replay_links``) has its link number checked (a skip asks for a
        rewind) and comes back without the link fields."""
        replay = self.replay
        if replay is None:
            return tup
        if tup.stream == REWIND_STREAM:
            tokens, links = tup.values
            sent = None
            if tup.component in self._linked_sources:
                sent = next((n for t, n in links if t == self._task), None)
            if replay.rewound(tokens, f"{tup.component}:{tup.task}", sent):
                log.warning(
                    "emitter task %s: replay from %s:%s begins (marker %s)",
                    self._task, tup.component, tup.task, tokens,
                )  # fmt: skip
            if replay.asking:
                self._ask_rewinds(time.monotonic())
            return None
        component = tup.component
        if component not in self._replay_sources:
            return tup
        if component in self._linked_sources:
            values = tup.values
            admitted = replay.admit(f"{component}:{tup.task}", values[0], values[-2])
            if replay.asking:
                self._ask_rewinds(time.monotonic())
            return tup._replace(values=values[: -len(LINK_FIELDS)]) if admitted else None
        return tup if replay.admit(f"{component}:{tup.task}", tup.values[0]) else None

    def _ask_rewinds(self, now: float) -> None:
        """Hand the tracker's rewind requests (lossy links) to the ZooKeeper writer."""
        for ask in self.replay.rewind_asks(now):
            if ask.missing:
                log.error(
                    "emitter task %s: %d tuples from %s lost on the wire (link numbers "
                    "skipped): admitting nothing more from it, asking for a rewind from "
                    "%d (%s)", self._task, ask.missing, ask.upstream,
                    ask.positions.get(ask.upstream, -1) + 1, ask.token,
                )  # fmt: skip
            else:
                log.error(
                    "emitter task %s: no rewind marker from %s yet: asking again (%s)",
                    self._task, ask.upstream, ask.token,
                )  # fmt: skip
            self._rewind_asker.ask(ask)

    def replay_done(self) -> None:
        """After an admitted input was fully handled (its emits sent). While emits
        are parked no restart point is taken: its counters would not count them yet,
        and a crash after it became durable would lose them."""
        if self.replay is not None and not self._parked_since:
            self.replay.processed(self._replay_counters, self.replay_state)

    def replay_state(self) -> Mapping[str, Any]:
        """What else of this bolt's is a function of its inputs, to resume from
        (``resumed_state`` after a restart); override it. JSON-able."""
        return {}

    def tick_emitting(self) -> None:
        """Call on every tick: probe idle lanes (``Emitter.on_tick``), publish the
        newest durable restart point (never blocks) and run a full GC collection if
        one is due (``pygc``)."""
        now = time.monotonic()
        for emitter in self.emitters.values():
            for action in emitter.on_tick(now):
                self.send(action)
        if self.replay is not None:
            self._restart_points.offer(self.replay.durable())
            if self._linked_sources or self.replay.awaiting is not None:
                self._ask_rewinds(now)
        if self._runs is not None:
            self._runs.flush()
        self._full_gc.tick(time.monotonic())

    def _held_back(self, operator: str, admission: Admission) -> None:
        """Apply a ``HoldBack`` verdict other than ``SEND`` (``elastorm.core.holdback``):
        the emit is parked there; log the episode's start, and pause on ``SLOW``
        (Storm's backpressure then holds this bolt's input)."""
        hold, emitter = self._holds[operator], self.emitters[operator]
        if operator not in self._parked_since:
            self._parked_since[operator] = time.monotonic()
            log.error(
                "emitter task %s: %d tuples wait for a checkpoint to trim them (bound %d, "
                "elastorm.max_buffered): parking emits, reading on for the trim",
                self._task, len(emitter.buffer), hold.max_buffered,
            )  # fmt: skip
        if admission is Admission.SLOW:
            if hold.parked == hold.max_parked + 1:  # once per episode
                log.error(
                    "emitter task %s: %d emits parked (bound %d, elastorm.max_parked) and "
                    "no trim yet: slowing down to %.0f tuples/s until one comes",
                    self._task, hold.parked, hold.max_parked, 1 / HOLD_BACK_SECS,
                )  # fmt: skip
            self.hold_back_sleep(HOLD_BACK_SECS)

    hold_back_sleep = staticmethod(time.sleep)

    def _release(self, operator: str) -> None:
        """Send the parked emits of ``operator`` that its buffer has room for again."""
        hold, emitter = self._holds[operator], self.emitters[operator]
        if self._runs is not None:  # what was sent before the parked ones goes first
            self._runs.flush()
        while (item := hold.release(len(emitter.buffer))) is not None:
            self._send_keyed(emitter, *item)
        if not hold.parked:
            since = self._parked_since.pop(operator)
            log.warning(
                "emitter task %s: output buffer below its bound again (%d tuples), parked "
                "emits sent after %.1f s", self._task, len(emitter.buffer),
                time.monotonic() - since,
            )  # fmt: skip

    def emitter_health(self) -> dict[str, Any]:
        """Tuples buffered for replay, emits parked now and ever behind a full buffer,
        how often it slowed down, tuples resent for gaps downstream (and, under fault
        injection, data messages lost on purpose) and, behind a replayable spout,
        inputs dropped as replays, restart points written and whether it waits for a
        rewind."""
        holds = self._holds.values()
        health: dict[str, Any] = {
            "buffered": sum(len(e.buffer) for e in self.emitters.values()),
            "parked": sum(h.parked for h in holds),
            "parked_total": sum(h.parked_total for h in holds),
            "held_back": sum(h.slowed for h in holds),
            "resent": sum(e.stats["resent"] for e in self.emitters.values()),
            "probes": sum(e.stats["probes"] for e in self.emitters.values()),
        }
        if self._runs is not None:
            health["run_tuples"] = self._runs.sent
        if self._wire_loss is not None:
            health["wire_lost"] = self._wire_loss.lost
        if self.replay is not None:
            health |= {
                "replay_dropped": self.replay.dropped,
                "restart_points_written": self._restart_points.writes,
                "awaiting_rewind": self.replay.awaiting is not None,
            }
            if self._linked_sources:
                health |= {
                    "link_lost": self.replay.link_lost,
                    "link_rewinds": self.replay.link_asks,
                    "link_waits": self.replay.link_waits(),
                }
        return health

    def _replay_counters(self) -> dict[str, dict[int, int]]:
        return {op: e.counters.of_source(e.source) for op, e in self.emitters.items()}

    def emit_keyed(
        self,
        key: str,
        value: Any,
        ts: float,
        operator: str | None = None,
        *,
        carry: list | None = None,
        stream: str = "default",
    ) -> None:
        """Send one tuple to its key group's owner.

        With ``carry`` (the values of ``stream``, declared with ``carrier_fields``),
        the first data message rides on that emit, so the stream's other
        subscribers get the row in the same tuple; any further copy (a CPAL
        target's) goes on ``elastorm`` as usual.
        """
        op = self._first if operator is None else operator
        emitter = self.emitters[op]
        if op in self._parked_since:
            self._release(op)
        admission = self._holds[op].admit((key, value, ts, carry, stream), len(emitter.buffer))
        if admission is _SEND:
            self._send_keyed(emitter, key, value, ts, carry, stream)
        else:
            self._held_back(op, admission)

    def _send_keyed(
        self, emitter: Emitter, key: str, value: Any, ts: float, carry: list | None, stream: str
    ) -> tuple[int, int]:
        """Number and buffer one tuple (``Emitter.emit``) and emit it, carried or direct;
        returns its ``(key group, sequence)``.

        Under fault injection (``WireLoss``) a lost tuple is buffered but its data
        messages are never sent; a carried row still reaches the stream's other
        subscribers, with no task named for the keyed one."""
        actions = emitter.emit(key, value, ts)
        data = actions[0].message  # the tuple's Data; any checkpoint request follows it
        numbered = data.key_group, data.item.seq
        if self._wire_loss is not None and self._wire_loss.lose():
            if carry is not None:
                self.emit([*carry, None, None], stream=stream)
            return numbered
        if carry is not None:
            first = actions[0]
            self.emit([*carry, to_wire(first.message), first.to_task], stream=stream)
            actions = actions[1:]
        for action in actions:
            self.send(action)
        return numbered

    def on_trim(self, operator: str, key_group: int, upto: int) -> None:
        """``operator``'s ``key_group`` checkpointed this emitter's tuples through ``upto``
        (its buffer dropped them): a replay need not reach back that far."""
        if self.replay is not None:
            self.replay.trimmed(operator, key_group, upto)

    def _emitter_for(self, sender: int, message: Message) -> Emitter:
        """The emitter a message concerns: by its keyed sender, else by the task it names."""
        task = sender
        if sender == CONTROLLER_SENDER:
            task = getattr(message, "target", None)
            for name in ("task", "replica"):  # PeerDown, DropReplica
                if task is None:
                    task = getattr(message, name, None)
        op = self._operator_of.get(task) if task is not None else None
        if op is None:
            if len(self.emitters) == 1:
                return self.emitter
            raise ValueError(f"cannot tell which keyed operator {type(message).__name__} is for")
        return self.emitters[op]

    def receive_elastorm(self, tup) -> list[Action]:
        """Handle one ``elastorm`` tuple; returns the non-``Send`` actions (rejections)."""
        return self._receive_from(self.sender_of(tup), from_wire(tup.values[0]))

    def receive_command(self, message: Message) -> None:
        for action in self._receive_from(CONTROLLER_SENDER, message):
            self.command_failed(message, str(action))

    def _receive_from(self, sender: int, message: Message) -> list[Action]:
        emitter = self._emitter_for(sender, message)
        actions = emitter.receive(sender, message)
        op = next(op for op, e in self.emitters.items() if e is emitter)
        if isinstance(message, Trim):
            self.on_trim(op, message.key_group, message.watermarks.get(emitter.source, 0))
        rest = []
        for action in actions:
            if isinstance(action, Send):
                self.send(action)
            else:
                rest.append(action)
        if op in self._parked_since:  # a trim may have made room: parked emits go first
            self._release(op)
        return rest


@contextmanager
def recording_start(conf: Mapping[str, Any], context: Mapping[str, Any]) -> Iterator[None]:
    """Around a bolt's start: an exception is counted, with its one-line reason, in the
    topology's ``failures/<component>-<task>`` (``elastorm status`` shows it), then
    re-raised, so Storm still restarts the task."""
    try:
        yield
    except Exception as exc:
        from elastorm.zk.problems import record_start_failure

        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        record_start_failure(
            conf, context["componentid"], int(context["taskid"]), reason, time.time()
        )
        raise


class CommitsOutputs:
    """Marker of a bolt that commits keyed bolts' outputs by id and confirms them on
    :data:`COMMITTED_STREAM` (``elastorm.sinks.Sink``): ``ElasticTopology`` wires that
    stream back to the keyed bolts it reads and names their streams in
    ``elastorm.confirmed_outputs``."""


class KeyedOperator(_Sending):
    """Mixin for a bolt whose state lives in key groups (a ``TaskCoordinator``).

    ``elastorm.operators`` names the components feeding it. Subclasses implement
    :meth:`on_applied` (the tuple's effect on the state: emit outputs) and may
    override :meth:`on_rejected`. Call :meth:`setup_keyed` from ``initialize``,
    :meth:`receive_elastorm` for ``elastorm`` tuples and :meth:`tick_keyed` on
    ticks (checkpoints).
    """

    clock: Callable[[], float] = staticmethod(time.monotonic)
    durable: DurableWriter | None = None  # the process's durable writer (setup_keyed)
    queries: Any = None  # the task's state query inbox (elastorm.zk.queries), if any
    _loads_waiting = False  # a store read for a DURABLE restore is in ``_loads``
    _component: str = ""

    def setup_keyed(self, conf: Mapping[str, Any], context: Mapping[str, Any], step: Step) -> None:
        """Start the task's key groups (see :meth:`_setup_keyed`); a failure is recorded
        in the topology's ZooKeeper before it ends the task (:func:`recording_start`)."""
        with recording_start(conf, context):
            self._setup_keyed(conf, context, step)

    def _setup_keyed(self, conf: Mapping[str, Any], context: Mapping[str, Any], step: Step) -> None:
        from elastorm.controller.model import node_name
        from elastorm.zk.requests import task_start

        use_elastorm_wire(self, conf)
        self._senders(conf, context)
        task = int(context["taskid"])
        component = context["componentid"]
        tasks = tasks_of(context, component)
        config = TopologyConfig.from_conf(conf)
        # This submission's durable directory (None: tier off), and the savepoint it
        # starts from (its base).
        self.view = view = durable_view(conf, config)
        saved = view.base if view is not None else None
        routing = initial_routing(config, component, tasks, epoch=first_epoch(saved))
        holders = initial_holders(routing, tasks, task_zones(config, tasks))
        incarnation, epoch = task_start(conf, component, task, component)
        self.incarnation = incarnation
        restarted = incarnation > 1
        # A restarted task lost its state, copies and inbox: it owns nothing until the
        # controller restores its groups elsewhere, and ignores commands it missed.
        owned = () if restarted else routing.key_groups_of(task)
        if restarted:
            log.warning("task %s restarted (incarnation %d): starting empty", task, incarnation)
        self._started = TaskStarted(task=task, restarted=restarted, stale_through=epoch)
        interval = config.checkpoint_interval_secs
        self._component = component
        self.durable = start_durable(view, config, context)
        self._retry_max_secs = config.durable.retry_max_secs
        self._loads: queue.SimpleQueue[DurableLoaded] = queue.SimpleQueue()
        self.coordinator = TaskCoordinator(
            task=task,
            num_key_groups=routing.num_key_groups,
            upstreams=tasks_of(context, config.operators.get(component, ())),
            step=step,
            owned=owned,
            holders={g: holders[g] for g in owned},
            checkpoint_interval=interval if interval > 0 else None,
            stale_through=epoch if restarted else -1,
            stall_after=config.stall_secs,
            resend_after=config.resend_after_secs,
            durable_trim=self.durable is not None,
        )
        if view is not None and not restarted:
            try:  # what a savepoint lists; the store being down must not stop the task
                record_start(view, config, component, routing.num_key_groups)
            except OSError as exc:  # StoreError included
                log.error("submission of %s not recorded in the store: %s", component, exc)
        if saved is not None and view is not None and not restarted:
            for g in restore_keyed(
                view.root, saved, component, self.coordinator, epoch=routing.epoch
            ):
                self.on_taken_over(g)
        self.node = node_name(tasks.index(task))
        self.load_meter = LoadMeter(external=config.external_load.get(self.node, 0.0))
        self._full_gc = full_collections(config.gc_full_every_secs, time.monotonic())
        self.heartbeats = None
        self._last_heartbeat = None  # before the publisher's thread can ask for it
        if config.heartbeats:
            self.heartbeats = start_heartbeats(conf, task, component, self.node, self._heartbeat)
        if self.heartbeats is not None and config.controller.liveness_connections:
            start_liveness(self.heartbeats, task)
        # State queries (``elastorm state``) come on the heartbeats' ZooKeeper client.
        self.queries = None if self.heartbeats is None else start_queries(self.heartbeats, task)
        # Key groups this task took over: when (wall clock), and when it first applied a
        # tuple of each afterwards (how long the group's output stopped, seen from here).
        self._taking: dict[int, float] = {}
        self.takeovers: dict[int, tuple[float, float]] = {}
        self.pauses = PauseMeter()  # each takeover's pause, reported with MigrationDone

    def receive_elastorm(self, tup) -> None:
        began = time.monotonic()
        field = tup.values[0] if tup.stream == STREAM else tup.values[-2]
        if is_runs(field):
            self._receive_runs(self.sender_of(tup), decode_runs(field), began)
            return
        self._receive_then_durable(self.sender_of(tup), from_wire(field), began)

    def _receive_runs(self, sender: int, runs: list[DataRun], began: float) -> None:
        """Data runs from task ``sender`` (``TaskCoordinator.receive_run``), each run's
        actions performed before the next; then the durable tier's news, as for any
        message."""
        receive_run, perform = self.coordinator.receive_run, self.perform
        for run in runs:
            try:
                actions = receive_run(sender, run)
            except MigrationProtocolError as exc:
                self._broke_protocol(run, exc)
                continue
            perform(actions)
        self.load_meter.worked(time.monotonic() - began)
        self._durable_news()

    def receive_command(self, message: Message) -> None:
        self._receive_then_durable(CONTROLLER_SENDER, message, time.monotonic())

    def _receive_then_durable(self, sender: int, message: Message, began: float) -> None:
        self._receive(sender, message, began)
        self._durable_news()

    def _durable_news(self) -> None:
        """What the durable tier did goes in at once, not at the next tick: the owners'
        trims wait for it (two attribute reads per tuple otherwise)."""
        if self._loads_waiting or (self.durable is not None and self.durable.news):
            self.durable_progress()

    def _receive(self, sender: int, message: Message, began: float) -> None:
        """``message`` from task ``sender`` (this task itself for its durable tier's) to
        the coordinator; the actions performed, the pause timed."""
        before = self._phase_of(message)
        try:
            actions = self.coordinator.receive(sender, message)
        except MigrationProtocolError as exc:
            self._broke_protocol(message, exc)
            return
        if before is not None:
            actions = self._with_pause(message.key_group, before, began, actions)
        self.perform(actions)
        self.load_meter.worked(time.monotonic() - began)

    def _broke_protocol(self, message: Message, exc: MigrationProtocolError) -> None:
        """Log and hand on a message that broke its group's protocol: the group's
        machine stays FAILED; the controller decides what next."""
        log.error("key group %s: %s (hint: %s)", message.key_group, exc, exc.hint.value)
        self.on_protocol_error(message, exc)

    def _phase_of(self, message: Message) -> Phase | None:
        """The phase of the group a control message goes to its machine for (the ones
        that can change it; not per tuple, and no machine created for anything else)."""
        name = type(message).__name__
        if name == "Data" or name not in _MACHINE_EVENTS:
            return None
        if 0 <= message.key_group < self.coordinator.num_key_groups:
            return self.coordinator.phase(message.key_group)
        return None

    def _with_pause(
        self, key_group: int, before: Phase, began: float, actions: list[Action]
    ) -> list[Action]:
        """Time the group's phases (``PauseMeter``) and put the measured pause into the
        target's ``MigrationDone``, so it reaches the controller with the completion."""
        after = self.coordinator.phase(key_group)
        if after is before:
            return actions
        self.pauses.observe(key_group, before, after, began=began, ended=time.monotonic())
        return [
            replace(a, pause=self.pauses.take(key_group))
            if isinstance(a, MigrationDone) and a.role is Role.TARGET
            else a
            for a in actions
        ]

    def send(self, action: Send) -> None:
        """Through the relay (see the module docstring): a keyed task must never block."""
        self.emit([action.to_task, to_wire(action.message), self._task], stream=RELAY)

    def tick_keyed(self) -> None:
        self.stop_if_fenced()
        if self._started is not None:  # tell the controller we are here (once)
            self.emit([json.dumps(encode_report(self._started))], stream=REPORTS)
            self._started = None
        self.perform(self.coordinator.on_tick(self.clock()))
        if self.durable is not None:  # a broken durable chain restarts from a full checkpoint
            for operator, g in sorted(self.durable.wants_full()):
                if operator == self._component and g in self.coordinator.owned():
                    self.perform(self.coordinator.checkpoint(g, full=True))
        self.durable_progress()
        if self.queries is not None:
            self.answer_queries()
        self._full_gc.tick(time.monotonic())
        self._last_heartbeat = self.measure()
        if self.heartbeats is not None:
            self.heartbeats.publish_now()

    def query_view(self, key: str, state: KeyGroupState) -> Any:
        """What a state query shows of ``key``'s record in ``state`` (``None``: absent);
        a hand-written operator's record as its step keeps it."""
        return state.get(key)

    def answer_queries(self) -> None:
        """Answer the state queries that came since the last tick (``core.queries.answer``:
        only an ``ACTIVE`` owner answers from its state). Reads the key's record, never
        writes it, and creates no key group machine. O(queries)."""
        assert self.queries is not None
        coordinator = self.coordinator
        for path, query in self.queries.take():
            try:
                g = key_group(query.key, coordinator.num_key_groups)
                phase = coordinator.peek_phase(g)
                state = coordinator.state(g) if phase is Phase.ACTIVE else None
                reply = answer(
                    query,
                    operator=self._component,
                    task=coordinator.task,
                    num_key_groups=coordinator.num_key_groups,
                    phase=phase,
                    record=None if state is None else self.query_view(query.key, state),
                )
            except Exception:  # a read must never stop the task: the asker times out
                log.exception("state query %s not answered", path)
                continue
            self.queries.reply(path, query, reply)

    def durable_progress(self) -> None:
        """Hand the coordinator what the durable tier did since the last tick: each
        group's newest durable checkpoint (``DurableWritten``: trims may go that far
        now) and each store copy read for a DURABLE restore (``DurableLoaded``)."""
        task = self.coordinator.task
        written = self.durable.written() if self.durable is not None else {}
        for (operator, g), (checkpoint, marks) in sorted(written.items()):
            if operator == self._component:
                done = DurableWritten(key_group=g, checkpoint=checkpoint, watermarks=marks)
                self._receive(task, done, time.monotonic())
        self._loads_waiting = False
        while True:
            try:
                loaded = self._loads.get_nowait()
            except queue.Empty:
                return
            self._receive(task, loaded, time.monotonic())

    def load_durable(self, load: LoadDurable) -> None:
        """Read the group's copy from the store on a thread of its own (the task never
        blocks on the store); the next tick hands it to the coordinator."""
        if self.durable is None:  # misconfigured: the controller has the tier on, we not
            log.error(
                "durable restore of %s/%d ordered, but the durable tier is off here: it "
                "starts empty, its state is lost",
                self._component,
                load.key_group,
            )
            none = DurableLoaded.missing(load.key_group, load.epoch)
            self._loads.put(none)
            self._loads_waiting = True
            return
        view, operator, put = self.view, self._component, self._loads.put
        assert view is not None  # self.durable is set
        retry = self._retry_max_secs

        def read() -> None:
            put(load_for_restore(view, operator, load.key_group, load.epoch, retry_max_secs=retry))
            self._loads_waiting = True

        threading.Thread(
            target=read, name=f"elastorm-restore-{load.key_group}", daemon=True
        ).start()

    def heartbeat_health(self) -> dict[str, int] | None:
        """The heartbeat publisher's counts (``HeartbeatPublisher.health``) for the
        task's counters file; ``None`` without heartbeats."""
        return None if self.heartbeats is None else self.heartbeats.health()

    def stop_if_fenced(self) -> None:
        """Fail-stop: a task the controller declared lost (it was cut off for longer
        than its session) holds stale state, and its key groups have been restored
        elsewhere. It must not act on them again: exit, so Storm restarts it empty."""
        from elastorm.zk.heartbeat import PublisherState

        if self.heartbeats is not None and self.heartbeats.state() is PublisherState.FENCED:
            log.error(
                "task %s was declared lost by the controller while cut off; exiting so "
                "Storm restarts it empty (its key groups are restored elsewhere)",
                self.coordinator.task,
            )
            logging.shutdown()
            os._exit(FENCED_EXIT)

    def measure(self):
        """This interval's ``Heartbeat`` (loads, owned groups, held checkpoints, the
        durable writer's numbers)."""
        from elastorm.zk.codec import Heartbeat

        sample = self.load_meter.sample()
        owned = self.coordinator.owned()
        shadowed = set(self.coordinator.replicas())  # an active replica's input is not load
        rates = tuple((g, r) for g, r in sample.rates.items() if g not in shadowed)
        sizes = []
        for g in owned:
            state = self.coordinator.state(g)
            sizes.append((g, float(len(state)) if state is not None else 0.0))
        return Heartbeat(
            key_groups=owned,
            checkpoints=tuple(self.coordinator.held),
            input_rates=rates,
            queue_length=sample.queue,
            cpu=sample.cpu,
            memory=resident_bytes(),
            latency=sample.latency,
            service_time=sample.service,
            state_sizes=tuple(sizes),
            epoch=max(self.coordinator.owned_epoch(), 0),
            durable=self.durable_beat(owned),
        )

    def durable_beat(self, owned: Iterable[int]):
        """The durable writer's counts and how far each of ``owned`` trails in the store
        (``DurableHealth``, for the heartbeat: the dashboard shows it); None when off."""
        from elastorm.controller.model import DurableHealth

        if self.durable is None:
            return None
        mine = set(owned)
        lag = {
            g: x for (op, g), x in self.durable.lag().items() if op == self._component and g in mine
        }
        return DurableHealth.of(self.durable.health(), lag)

    def _heartbeat(self):
        """Called on the publisher's thread: the last measured heartbeat (immutable)."""
        from elastorm.zk.codec import Heartbeat

        return self._last_heartbeat or Heartbeat(key_groups=self.coordinator.owned())

    def durable_health(self) -> dict[str, Any] | None:
        """The durable writer's counts and per-group lag (checkpoints, seconds) for the
        task's counters file; ``None`` with the durable tier off."""
        if self.durable is None:
            return None
        lag = {str(g): [n, round(s, 3)] for (_, g), (n, s) in self.durable.lag().items()}
        return {**self.durable.health(), "lag": lag}

    def perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                if self.durable is not None and type(action.message) is CheckpointDelta:
                    self.durable.offer(self._component, action.message)  # never waits
                self.send(action)
            elif isinstance(action, Applied):
                self.load_meter.applied(action.key_group, action.item.ts)
                if self._taking and action.key_group in self._taking:
                    taken = self._taking.pop(action.key_group)
                    self.takeovers[action.key_group] = (taken, time.time())
                self.on_applied(action)
            elif isinstance(action, Rejected):
                self.on_rejected(action)
            elif isinstance(action, LoadDurable):
                self.load_durable(action)
            else:  # a report for the controller
                if isinstance(action, TuplesStalled):
                    log.error(
                        "key group %s: %d tuples of %s have waited %.0f s for sequence %d, "
                        "which never arrived (lost on the way?)",
                        action.key_group,
                        action.parked,
                        action.source,
                        action.seconds,
                        action.awaited,
                    )
                if (
                    isinstance(action, MigrationDone)
                    and action.role is Role.TARGET
                    and action.protocol is not Protocol.REPLICATE  # shadowing, not owning
                ):
                    self._taking[action.key_group] = time.time()
                    self.on_taken_over(action.key_group)
                self.on_report(action)
                self.emit([json.dumps(encode_report(action))], stream=REPORTS)

    def on_applied(self, applied: Applied) -> None:
        raise NotImplementedError

    def on_rejected(self, rejected: Rejected) -> None:
        log.warning("rejected from task %s: %s", rejected.sender, rejected.reason)

    def on_report(self, report) -> None:
        """Called with each report before it goes to the controller."""

    def on_taken_over(self, key_group: int) -> None:
        """Called when this task starts owning ``key_group`` from a copy or a move (a
        restore, a promotion, a move's target, a savepoint at start)."""

    def on_protocol_error(self, message: Message, exc: MigrationProtocolError) -> None:
        """Called when a message broke its key group's protocol."""
