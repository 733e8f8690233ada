"""The user's keyed bolt, and the router that feeds it from a plain upstream.

A :class:`KeyedBolt` is what a user writes: ``process_keyed(key, values)``, the
per-key states it declares (``ValueState``, ``MapState``) and ``self.emit``.
elastorm keeps the state in key groups (``elastorm.core.state``), checkpoints it
and migrates it; the bolt never sees any of that.

Output Fidelity (Madsen & Zhou 2015, section 5): what ``process_keyed`` emits is
held until the core says the tuple's outputs are this task's to send
(``Applied.emit_output``); a tuple replayed by a migration target, whose outputs
the source already sent, emits nothing, but its outputs on streams whose consumers
confirm are kept as if sent (the source may die before they are confirmed).
Outputs that depend on the key's whole state are consistent when the key has one
upstream router task (the default);
with several, a CPA target may apply two routers' tuples in another order than
the source did (see ``elastorm.core.outputs``).

Active replicas (Su & Zhou 2016): a replica applies the owner's input with its
outputs suppressed. It keeps those outputs until the owner's next checkpoint covers
their tuples (the owner sent them by then); when it is promoted (the owner died)
it sends the ones still kept first, so outputs the owner never sent are not lost
(a receiver may see some twice and must drop repeats, as after any restore).

Tentative outputs (Su & Zhou 2016): while the key's group is being restored, or
state upstream of it is, ``self.tentative`` is True inside :meth:`process_keyed`:
the output may miss tuples that recovery has not replayed yet, and the bolt can say
so in what it emits. Once the group's outputs are final again, the bolt's
:meth:`rectify_keyed` runs for each key whose last outputs were tentative, to send
their final values.

Stable output ids: an output stream declared with ``output_id_fields(fields)``
carries each output's id after its own fields (``elastorm.storm.elastic.OUTPUT_ID``):
the key group, the input source whose tuple caused it, and the output's sequence
per (key group, stream, source), counted in the group's state
(``core.outputs.next_output``) so that a replay, a migration target, a restored
group or a promoted replica gives the same output the same id. Then the kind:
``final``, ``tentative``, or ``rectified`` for what :meth:`rectify_keyed` emits (those
have no input, so their sequence is 0: not de-duplicated). ``elastorm.sinks``
commits each id once. Streams declared without those fields are sent as before.

Event time, timers, TTL and windows (``elastorm.core.timers``, ``core.keyed_state``,
``core.windows``): a bolt that defines :meth:`KeyedBolt.event_time` (the event's time,
read from the tuple's values, as Flink's ``TimestampAssigner``) has a watermark per key
group, and ``self.timers`` in :meth:`process_keyed` registers event-time timers on the
current key; :meth:`on_timer` runs when the watermark passes one, inside the step of
the tuple that moved it, so its emits are that tuple's outputs (held, numbered and
replayed like the tuple's own). The time comes from the values, not from the data
message's ``ts`` (the router's wall clock when it routed the tuple, which a spout's
replay changes), so a replay applies the same times.

Processing-time timers (``self.timers.register_processing_time``, PyFlink's
``register_processing_time_timer``): kept in the same reserved entry of the group's
state, fired on the owner's first tick at or after their wall-clock time, by the
same :meth:`on_timer` (``self.timers.domain`` says which clock). A tick is no
tuple: a replay does not repeat it, so they are at least once across a restore or a
move from an older checkpoint (as in Flink), and their outputs carry an id with no
source (sequence 0: not de-duplicated). A bolt that defines neither ``event_time``
nor ``on_timer`` pays nothing for any of this, per tuple or per tick.

A :class:`KeyRouter` is added by :class:`elastorm.storm.topology.ElasticTopology`
for every keyed bolt fed by ordinary components: it reads the key field of each
input tuple and sends the tuple through an ``Emitter`` (routing table, sequence
numbers, the output buffer that migrations replay).
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from streamparse import Bolt, Stream

from elastorm.config import TopologyConfig
from elastorm.core.actions import Applied, MigrationDone, Role, Send
from elastorm.core.errors import MigrationProtocolError
from elastorm.core.keyed_state import (
    TTL_TAG,
    WINDOW_TAG,
    KeyState,
    StateAccessError,
    WindowState,
    declared_states,
    readable_record,
    ttl_states,
)
from elastorm.core.keygroups import key_group
from elastorm.core.keys import (
    KeyFunction,
    KeySelectorError,
    Selector,
    select_key,
    split_path,
)
from elastorm.core.messages import CheckpointAck, Trim
from elastorm.core.migration.table import Phase
from elastorm.core.once import first_application, output_id
from elastorm.core.outbox import (
    PENDING,
    Outbox,
    Receipts,
    Unreleased,
    confirmation,
    confirmed_inputs,
    confirmed_keys,
    consumers_by_stream,
)
from elastorm.core.outputs import next_output
from elastorm.core.state import KeyGroupState
from elastorm.core.timers import (
    GroupTimers,
    IdleWatch,
    Timer,
    idle_advance,
    processing_due,
    watermark_of,
)
from elastorm.storm.elastic import (
    COMMITTED,
    COMMITTED_STREAM,
    MESSAGE_STREAM,
    OUTPUT_ID,
    RELAY_STREAM,
    REPORT_STREAM,
    STREAM,
    KeyedEmitting,
    KeyedOperator,
    output_id_fields,
)

log = logging.getLogger(__name__)

__all__ = ["KeyRouter", "KeyedBolt", "output_id_fields"]

ROUTER_KEYS = "elastorm.router.keys"
"""Component conf of a router: ``{"<component>:<stream>": key selector}``, a selector in
its conf form (``elastorm.core.keys``): the key field's index, a list of field indexes,
or a key function's dotted path ``"package.module:function"``."""


def resolve_key_function(path: str) -> KeyFunction:
    """The function a dotted path ``"package.module:function"`` names, imported; one-line
    ``KeySelectorError`` if it does not import or is not a function."""
    module, name = split_path(path)
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise KeySelectorError(
            f"key function {path}: module {module} does not import ({exc})"
        ) from None
    except AttributeError:
        raise KeySelectorError(f"key function {path}: module {module} has no {name}") from None
    if not callable(fn):
        raise KeySelectorError(f"key function {path} is not callable")
    return fn


def resolve_selectors(conf_form: Mapping[str, Any]) -> dict[str, Selector]:
    """A router's ``{"<component>:<stream>": selector}``, dotted paths imported (once, at
    initialize; the conf's JSON gives a list for a field list, an int for one field)."""
    return {
        name: resolve_key_function(sel) if isinstance(sel, str) else sel
        for name, sel in conf_form.items()
    }


class KeyedBolt(KeyedOperator, Bolt):
    """Subclass it and write :meth:`process_keyed`; declare per-key states on the class.

    ``outputs`` are the bolt's own streams, as for any streamparse bolt; elastorm
    adds its streams to them.
    """

    outputs: list = []
    current_key_state: KeyState | None = None
    failed = 0  # tuples whose process_keyed raised
    repeats = 0  # upstream keyed outputs skipped as applied before (core.once)
    tentative = False  # inside process_keyed: whether this tuple's outputs are tentative
    identified: frozenset[str] = frozenset()  # streams declared with output_id_fields
    _rectifying: int | None = None  # inside rectify_keyed: the key's group
    timed = False  # the class defines event_time (a watermark per key group, timers)
    processing_timers = False  # the class defines on_timer (it may set processing-time timers)
    uses_timers = False  # either: each tuple's step reads the group's clock
    declared: tuple = ()  # its declared states
    ttl_states: tuple = ()  # its states with a ttl
    lateness: float = 0.0  # elastorm.allowed_lateness_secs
    idle_timeout: float = 0.0  # elastorm.idle_timeout_secs
    wall_clock: Callable[[], float] = staticmethod(time.time)  # processing time

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Add elastorm's relay and report streams to the subclass's own ``outputs``;
        note which of its streams carry output ids (``output_id_fields``)."""
        super().__init_subclass__(**kwargs)
        own = [s for s in cls.outputs if s is not RELAY_STREAM and s is not REPORT_STREAM]
        cls.outputs = [*own, RELAY_STREAM, REPORT_STREAM]
        fields = {s.name: list(s.fields) for s in own if isinstance(s, Stream)}
        plain = [s for s in own if isinstance(s, str)]
        if plain:
            fields["default"] = plain
        n = len(OUTPUT_ID)
        cls.identified = frozenset(name for name, f in fields.items() if f[-n:] == OUTPUT_ID)
        cls.timed = cls.event_time is not KeyedBolt.event_time
        cls.processing_timers = cls.on_timer is not KeyedBolt.on_timer
        cls.uses_timers = cls.timed or cls.processing_timers
        cls.declared = declared_states(cls)
        cls.ttl_states = ttl_states(cls)

    def initialize(self, conf, context):
        self._outputs: list[tuple[list, str | None]] | None = None
        self._owed: dict[int, set[str]] = {}  # key group -> keys last sent tentative
        # key group -> [(source, seq, outputs)] applied as its replica, not yet covered
        # by a checkpoint of the owner's
        self._shadow: dict[int, list[tuple[str, int, list]]] = {}
        config = TopologyConfig.from_conf(conf)
        self.lateness = config.allowed_lateness_secs
        self.idle_timeout = config.idle_timeout_secs
        self._idle: IdleWatch = {}  # key group -> (watermark, since when), for idleness
        # outputs kept until every consumer that confirms confirmed them (core.outbox)
        self._consumers = consumers_by_stream(config.confirmed_outputs, context["componentid"])
        self._outbox = Outbox(config.unconfirmed_resend_secs) if self._consumers else None
        # outputs held until a copy any restore starts from covers their inputs
        self._unreleased = (
            Unreleased() if self._outbox is not None and config.release_outputs_on_copy else None
        )
        # one log line per period while outputs are resent, or held outputs stall
        self._resend_log = _Every(config.unconfirmed_resend_secs)
        self._stall_log = _Every(config.stall_secs)  # held outputs waiting longer: reported
        self.setup_keyed(conf, context, self._step)
        if self._outbox is not None:  # each copy of a group carries its unconfirmed ones
            self.coordinator.pending_outputs = self._pending

    def process_keyed(self, key: str, values: list) -> None:
        """One input tuple of ``key``; ``values`` are the tuple's values as sent."""
        raise NotImplementedError

    def event_time(self, key: str, values: list) -> float:
        """The event time of a tuple, from its values (e.g. ``values[2]``, a timestamp
        the spout emits). Define it to get a watermark per key group, event-time timers
        (``self.timers``), state TTL and windows; it must be a pure function of the
        values, so that a replay gives the same time."""
        raise NotImplementedError

    def on_timer(self, key: str, time: float) -> None:
        """A timer of ``key`` at ``time`` fired; the states are ``key``'s.

        ``self.timers.domain`` says which: ``"event"`` (the watermark reached it;
        ``self.timers.now`` is ``time``; emits are outputs of the tuple that moved the
        watermark) or ``"processing"`` (a tick at or after wall-clock ``time``;
        ``self.timers.now`` is the group's watermark; emits are sent at once). A timer
        registered here at or below the watermark (or the wall clock) fires in the
        same loop (as in Flink): registering ``time`` again here would never end.
        Define it to use timers; the default does nothing."""

    @property
    def timers(self) -> TimerHandle:
        """The current key's timers, in :meth:`process_keyed` and :meth:`on_timer`."""
        state = self.current_key_state
        if state is None or state.timers is None:
            raise StateAccessError(
                "timers are per key: use self.timers in process_keyed or on_timer of a "
                "bolt that defines on_timer (processing time) or event_time (event time)"
            )
        return TimerHandle(state, self.wall_clock, self.timed)

    def rectify_keyed(self, key: str) -> None:
        """``key``'s last outputs were tentative and its group's outputs are final now:
        emit the final ones (the states read the key's current values; a write here
        is not kept). The default emits nothing."""

    def emit(self, tup, stream=None, **kwargs):
        """Inside :meth:`process_keyed`: an output of the tuple (sent if it is this task's
        to send); elsewhere, an ordinary emit (on a stream with output ids: unnumbered,
        ``rectified`` inside :meth:`rectify_keyed`, else ``final`` of no key group)."""
        if self._outputs is not None:
            self._outputs.append((list(tup), stream))
            return None
        if (stream or "default") in self.identified:
            group = self._rectifying
            kind = "final" if group is None else "rectified"
            tup = [*tup, -1 if group is None else group, "", 0, kind]
        return super().emit(tup, stream=stream, **kwargs)

    def query_view(self, key: str, state: KeyGroupState) -> Any:
        """What ``elastorm state`` shows of ``key``: its values as the states read them,
        TTL values with their expiry, no reserved field (``readable_record``)."""
        return readable_record(state.get(key), self.declared, watermark_of(state))

    def _numbered(self, applied: Applied) -> list:
        """``applied``'s outputs, those on streams with output ids given their id
        (``next_output``: counted whether or not this task sends them, so every task
        that applies the tuple counts alike). O(outputs)."""
        g, source = applied.key_group, applied.item.source
        state = self.coordinator.state(g)
        kind = "tentative" if applied.tentative else "final"
        out = []
        for values, stream in applied.result:
            name = stream or "default"
            if name in self.identified:
                seq = 0 if state is None else next_output(state, name, source)
                values = [*values, g, source, seq, kind]
            out.append((values, stream))
        return out

    def _step(self, key: str, current: Any, values: Any) -> tuple[Any, Any]:
        """The core's step: run ``process_keyed`` on the key's record, collect outputs;
        for a bolt with event time, then move the group's watermark and fire the
        timers it passed (:meth:`_fire`). A tuple that is an upstream keyed bolt's
        output already applied by this group (its id, ``elastorm.core.once``) is
        skipped: keyed outputs into a keyed bolt are applied exactly once."""
        coordinator = self.coordinator
        machine = coordinator.machine(key_group(key, coordinator.num_key_groups))
        ident = output_id(values) if type(values) is list else None
        if ident is not None and machine.state is not None:
            if not first_application(machine.state, ident):
                self.repeats += 1  # an upstream keyed bolt's output applied before
                return current, []
        timers = now = None
        outputs = self._outputs = []
        self.tentative = machine.tentative
        try:
            if self.uses_timers:
                assert machine.state is not None
                timers = GroupTimers(machine.state)
                if self.timed:
                    now = self.event_time(key, values)
            state = self.current_key_state = KeyState(key, current, timers=timers, now=now)
            self.process_keyed(key, values)
        except Exception:
            # The user's code failed on this tuple: the key keeps its state, the tuple
            # is counted and logged, processing goes on (no poison-pill restart loop).
            self.failed += 1
            log.exception("process_keyed failed for key %r (tuple dropped): %r", key, values)
            self._outputs = None
            return current, []
        finally:
            self.current_key_state = None
            self.tentative = False
        record = state.record()
        if timers is not None:
            assert machine.state is not None
            if self.timed and timers.advance(now, self.lateness):
                self.tentative = machine.tentative
                latest = self._fire(machine.state, timers, {key: record}, _event_due(timers))
                record = latest[key]
                self.tentative = False
            timers.commit()
        self._outputs = None
        return record, outputs

    def _fire(
        self,
        group: KeyGroupState,
        timers: GroupTimers,
        latest: dict[str, Any],
        due: Callable[[], tuple[Any, str, str, str] | None],
    ) -> dict[str, Any]:
        """Fire every timer ``due`` gives (``(time, key, tag, domain)``, in firing
        order), each on its key's latest record; ``latest`` holds the records the
        caller keeps (a tuple's own key, which the core stores); write the others'
        back to the group (its active fragment: changed for the next checkpoint).
        Returns ``latest``. A callback that raises is logged and its key's record left
        as it was (timers it registered before raising stay). A record no timer
        changed is not written. O(timers fired x their work)."""
        read: dict[str, Any] = {}  # other keys' records as the group had them
        while (fired := due()) is not None:
            time, k, tag, domain = fired
            if k not in latest:
                latest[k] = read[k] = group.get(k)
            before = latest[k]
            now = time if domain == "event" else timers.watermark
            state = self.current_key_state = KeyState(
                k, before, timers=timers, now=now, domain=domain
            )
            try:
                self._dispatch(state, time, tag)
                latest[k] = state.record()
            except Exception:
                self.failed += 1
                log.exception("%s timer %r of key %r at %r failed", domain, tag, k, time)
                latest[k] = before
            finally:
                self.current_key_state = None
        for k in sorted(read):
            if latest[k] is not read[k]:
                group.put(k, latest[k])
        return latest

    def fire_on_tick(self, now: float) -> None:
        """At a tick, wall clock ``now``: in every group this task owns (``ACTIVE``:
        never a migration's end or a replica), move idle groups' watermarks up
        (``core.timers.idle_advance``, if ``elastorm.idle_timeout_secs`` is on) and
        fire the processing-time timers due, then the event-time ones the watermark
        passed. O(groups owned) per tick, plus the timers fired."""
        coordinator = self.coordinator
        groups = {g: coordinator.state(g) for g in coordinator.owned()}
        owned = {g: state for g, state in groups.items() if state is not None}
        up: dict[int, Any] = {}
        if self.timed and self.idle_timeout > 0:
            marks = {g: watermark_of(state) for g, state in owned.items()}
            self._idle, up = idle_advance(self._idle, marks, now, self.idle_timeout)
        for g, state in owned.items():
            if g in up or (self.processing_timers and processing_due(state, now)):
                self._fire_group(g, state, now, up.get(g))

    def _fire_group(self, g: int, group: KeyGroupState, now: float, mark: Any) -> None:
        """One owned group's tick: its watermark up to ``mark`` (if not ``None``), its
        timers due fired, their records and the clock written to the group's state,
        their outputs sent (on streams with output ids: no source, sequence 0)."""
        timers = GroupTimers(group)
        if mark is not None:
            timers.advance_to(mark)
        tentative = self.tentative = self.coordinator.machine(g).tentative
        outputs = self._outputs = []
        try:
            fired = self._fire(group, timers, {}, _tick_due(timers, now))
            timers.commit()
        finally:
            self._outputs = None
            self.tentative = False
        kind = "tentative" if tentative else "final"
        for values, stream in outputs:
            if (stream or "default") in self.identified:
                values = [*values, g, "", 0, kind]
            super().emit(values, stream=stream)
        if tentative and outputs:
            self._owed.setdefault(g, set()).update(fired)

    def _dispatch(self, state: KeyState, time: Any, tag: str) -> None:
        """Run one fired timer: the user's :meth:`on_timer`, a TTL sweep, or a window."""
        if tag == "":
            self.on_timer(state.key, time)
        elif tag == TTL_TAG:
            state.sweep(list(self.ttl_states))
        elif tag.startswith(WINDOW_TAG):
            decl = getattr(type(self), tag[len(WINDOW_TAG) :])
            assert isinstance(decl, WindowState)
            for window, acc in decl.fired(state, time):
                getattr(self, decl.fire)(state.key, window, acc)
        else:
            raise ValueError(f"unknown timer tag {tag!r}")

    def process(self, tup):
        try:
            if tup.stream == COMMITTED:
                if self._outbox is not None:
                    self._outbox.confirmed(tup.component, confirmed_keys(tup.values[0]))
                return
            self.receive_elastorm(tup)
        except ValueError as exc:  # a malformed protocol tuple: say so, keep going
            log.error("malformed elastorm tuple on %s from task %s: %s", tup.stream, tup.task, exc)

    def process_tick(self, tup):
        self.tick_keyed()
        if self._outbox:
            self.resend_unconfirmed(time.monotonic())
        if self._unreleased:
            self.report_held(time.monotonic())
        if self.processing_timers or (self.timed and self.idle_timeout > 0):
            self.fire_on_tick(self.wall_clock())
        self.rectify()

    def on_taken_over(self, key_group: int) -> None:
        """Send again, at the next tick, the outputs the group's copy says no consumer
        had confirmed (``core.outbox.PENDING``): their producer may be dead, and a
        restore replays only the tuples after its copy. Consumers drop what they have."""
        state = self.coordinator.state(key_group)
        entry = None if state is None else state.get(PENDING)
        if self._outbox is None or not entry:
            return
        taken = self._outbox.adopt(entry, lambda s: self._consumers.get(s, ()), time.monotonic())
        if taken:  # a recovery: said where the operator looks, as the resends are
            log.warning(
                "key group %s: %d outputs its copy says were never confirmed: sending them "
                "again", key_group, taken,
            )  # fmt: skip

    def _pending(self, key_group: int) -> dict[str, list]:
        """What a copy of ``key_group`` taken now carries in ``PENDING``: its outputs no
        consumer confirmed and, when outputs wait for a copy, those held (the copy
        covers their inputs, so no restore from it makes them again)."""
        assert self._outbox is not None
        if self._unreleased is None:
            return self._outbox.pending(key_group)
        return {**self._unreleased.pending(key_group), **self._outbox.pending(key_group)}

    def _hold_or_send(self, applied: Applied, values: list, stream: str | None) -> bool:
        """Hold ``values`` until a copy covers ``applied``'s input, if outputs wait for
        a copy and its stream's consumers confirm (``elastorm.release_outputs_on_copy``);
        whether it was held."""
        name = stream or "default"
        if self._unreleased is None or name not in self._consumers or applied.tentative:
            return False
        item = applied.item
        self._unreleased.hold(
            applied.key_group, item.source, item.seq, name, values, time.monotonic()
        )
        return True

    def _release_covered(self, actions: list) -> None:
        """Send the held outputs a trim of their group covers (a ``Trim`` to upstream
        is the group's copies' common point); forget those of a group this task handed
        over (``MigrationDone`` as a move's source: the target has them from the copy or
        makes them again)."""
        unreleased = self._unreleased
        assert unreleased is not None
        for a in actions:
            if isinstance(a, Send) and type(a.message) is Trim:
                g, marks = a.message.key_group, a.message.watermarks
                for name, values in unreleased.release(g, marks, time.monotonic()):
                    self._send(values, None if name == "default" else name)
            elif isinstance(a, MigrationDone) and a.role is Role.SOURCE:
                unreleased.drop(a.key_group)

    def report_held(self, now: float) -> None:
        """Report, once per ``elastorm.stall_secs``, the key groups whose outputs have
        waited longer than that for a copy to cover their inputs (no trim came: no
        holder acknowledged a checkpoint, or the durable writer is behind)."""
        assert self._unreleased is not None
        stalled = self._unreleased.stalled(now, self._stall_log.secs)
        if stalled and self._stall_log.ready(now):
            log.error(
                "outputs held for a copy of their key group for over %.0f s "
                "(elastorm.release_outputs_on_copy; no trim came: is a holder placed and "
                "acknowledging checkpoints?): key groups %s, %d outputs held",
                self._stall_log.secs,
                {g: round(s) for g, s in stalled.items()},
                len(self._unreleased),
            )

    def resend_unconfirmed(self, now: float) -> None:
        """Send again the outputs a consumer did not confirm within
        ``elastorm.unconfirmed_resend_secs`` (its worker died with them in flight;
        ``core.outbox``)."""
        outbox = self._outbox
        assert outbox is not None
        waited = outbox.oldest_age(now)
        due = outbox.due(now)
        for stream, values in due:
            super().emit(values, stream=stream)
        if due and self._resend_log.ready(now):
            log.warning(
                "outputs no consumer confirmed to this task (the oldest for %.0f s: lost "
                "with a consumer, or a move's source sent them): sending them again (%d "
                "now, %d kept, %d sent again in all)",
                waited, len(due), len(outbox), outbox.resent,
            )  # fmt: skip

    def _send(self, values: list, stream: str | None) -> None:
        """Emit an output; one on a stream whose consumers confirm is kept until they do."""
        super().emit(values, stream=stream)
        self._keep(values, stream)

    def _keep(self, values: list, stream: str | None) -> None:
        """Keep an output sent now until the consumers of its stream confirm it."""
        if self._outbox is not None:
            consumers = self._consumers.get(stream or "default")
            if consumers:
                self._outbox.sent(stream or "default", values, time.monotonic(), consumers)

    def on_applied(self, applied: Applied) -> None:
        outputs = applied.result
        if outputs and self.identified:
            outputs = self._numbered(applied)
        if applied.emit_output:
            for values, stream in outputs:
                if not self._hold_or_send(applied, values, stream):
                    self._send(values, stream)
            if applied.tentative and outputs:
                self._owed.setdefault(applied.key_group, set()).add(applied.item.key)
        elif outputs and self.coordinator.phase(applied.key_group) is Phase.REPLICA:
            item = applied.item
            self._shadow.setdefault(applied.key_group, []).append((item.source, item.seq, outputs))
        elif outputs:
            # A CPA or CPAL target's quiet replay: the move's source sent these, but it
            # may die before a consumer confirms them (to it): kept here as if sent, so
            # what stays unconfirmed is sent again; consumers drop what they have.
            # Held instead when outputs wait for a copy: the source never sent them.
            for values, stream in outputs:
                if not self._hold_or_send(applied, values, stream):
                    self._keep(values, stream)

    def perform(self, actions: list) -> None:
        # A replica's phase changes only on control messages, whose actions are none,
        # or not all Applied, or (a promotion's replay) outputs of a shadowed group.
        shadow = self._shadow
        if shadow and (
            not actions
            or any(
                not isinstance(a, Applied) or (a.emit_output and a.key_group in shadow)
                for a in actions
            )
        ):
            self._settle_shadow(actions)
        super().perform(actions)
        if self._unreleased is not None:
            self._release_covered(actions)

    def _settle_shadow(self, actions: list) -> None:
        """Forget a replica's kept outputs that the owner's checkpoint covers (its ack
        carries the watermarks); send a promoted replica's remaining ones before any
        output of its own; drop them when it stopped being a replica otherwise
        (dropped, or a migration target: the source sent them). O(kept outputs)."""
        for a in actions:
            if isinstance(a, Send) and isinstance(a.message, CheckpointAck):
                kept = self._shadow.get(a.message.key_group)
                if kept:
                    marks = a.message.watermarks
                    kept[:] = [k for k in kept if k[1] > marks.get(k[0], 0)]
        for g in sorted(self._shadow):
            machine = self.coordinator.machine(g)
            if machine.phase is Phase.REPLICA:
                continue
            kept = self._shadow.pop(g)
            if (
                machine.protocol is not None
                and machine.protocol.restores
                and machine.phase
                in (
                    Phase.REPLAYING,
                    Phase.ACTIVE,
                )
            ):
                for _, _, outputs in kept:
                    for values, stream in outputs:
                        self._send(values, stream)

    def rectify(self) -> None:
        """:meth:`rectify_keyed` for each key last sent tentative whose group's outputs
        are final now, if this task still owns the group (a group that moved away
        meanwhile is not rectified here). O(keys owed)."""
        for g in sorted(self._owed):
            machine = self.coordinator.machine(g)
            if machine.tentative:
                continue
            keys = self._owed.pop(g)
            if machine.phase is not Phase.ACTIVE or machine.state is None:
                continue
            mark = watermark_of(machine.state)
            for key in sorted(keys):
                self.current_key_state = KeyState(key, machine.state.get(key), watermark=mark)
                self._rectifying = g
                try:
                    self.rectify_keyed(key)
                except Exception:
                    log.exception("rectify_keyed failed for key %r", key)
                finally:
                    self.current_key_state = None
                    self._rectifying = None


def _event_due(timers: GroupTimers) -> Callable[[], tuple[Any, str, str, str] | None]:
    """The event-time timers the watermark passed, one at a time (a tuple's step)."""

    def due() -> tuple[Any, str, str, str] | None:
        fired = timers.pop_due()
        return None if fired is None else (*fired, "event")

    return due


def _tick_due(timers: GroupTimers, now: float) -> Callable[[], tuple[Any, str, str, str] | None]:
    """At a tick: the processing-time timers due at ``now``, then the event-time ones
    the watermark passed (an idle group's move, or a callback's registration)."""

    def due() -> tuple[Any, str, str, str] | None:
        fired: Timer | None = timers.pop_due_processing(now)
        if fired is not None:
            return (*fired, "processing")
        fired = timers.pop_due()
        return None if fired is None else (*fired, "event")

    return due


class _Every:
    """True at most once per ``secs`` (from the first time asked): one log line per
    period, not per tick, while a condition lasts."""

    def __init__(self, secs: float) -> None:
        self.secs, self.last = secs, -math.inf

    def ready(self, now: float) -> bool:
        if now - self.last < self.secs:
            return False
        self.last = now
        return True


class TimerHandle:
    """The current key's timers (PyFlink's ``ctx.timer_service()``)."""

    __slots__ = ("_state", "_clock", "_event_time")

    def __init__(self, state: KeyState, clock: Callable[[], float], event_time: bool) -> None:
        self._state = state
        self._clock = clock
        self._event_time = event_time

    @property
    def now(self) -> Any:
        """The event time of the tuple being applied (in ``on_timer``: the event-time
        timer's time, or the watermark for a processing-time timer)."""
        return self._state.now

    @property
    def domain(self) -> str:
        """Which timer fired, in ``on_timer``: ``"event"`` or ``"processing"`` (PyFlink's
        ``ctx.time_domain()``); ``"event"`` in ``process_keyed``."""
        return self._state.domain

    def watermark(self) -> Any:
        """The key group's watermark (``None`` before its first event time)."""
        return self._state.watermark

    def processing_time(self) -> float:
        """The task's wall clock, seconds since the epoch (PyFlink's
        ``current_processing_time``, which is in milliseconds)."""
        return self._clock()

    def _timers(self, what: str) -> GroupTimers:
        timers = self._state.timers
        if timers is None or (what == "event" and not self._event_time):
            raise StateAccessError(
                "event-time timers count the tuples' event time: define the bolt's "
                "event_time(key, values)"
            )
        return timers

    def register_event_time(self, time: float) -> None:
        """Call :meth:`KeyedBolt.on_timer` for this key once the watermark reaches
        ``time`` (once per distinct time)."""
        self._timers("event").register(time, self._state.key)

    def delete_event_time(self, time: float) -> None:
        """Cancel this key's event-time timer at ``time``, if any."""
        self._timers("event").delete(time, self._state.key)

    def register_processing_time(self, time: float) -> None:
        """Call :meth:`KeyedBolt.on_timer` for this key on the first tick at or after
        wall-clock ``time`` (seconds since the epoch; once per distinct time). The
        timer is in the key group's state: it moves, restores and is replicated
        with it, and fires where the group is owned then."""
        self._timers("processing").register_processing(time, self._state.key)

    def delete_processing_time(self, time: float) -> None:
        """Cancel this key's processing-time timer at ``time``, if any."""
        self._timers("processing").delete_processing(time, self._state.key)


class KeyRouter(KeyedEmitting, Bolt):
    """Routes the tuples of plain upstreams to a keyed bolt's key-group owners.

    Its component conf (``elastorm.router.keys``) gives the key selector of each input
    stream (a field, fields or a function: ``elastorm.core.keys.select_key``); the
    tuple's values travel as the data message's value. A tuple whose key cannot be
    selected (the function raised, a field is missing) is logged and counted
    (``unkeyed``), as a failed ``process_keyed`` is, never a crash. Fed by a
    replayable spout, it recovers by replay like a hand-written emitter
    (``elastorm.core.replay``): the wiring subscribes it to the spout's rewind stream
    and records it in ``elastorm.replay_sources``.
    """

    outputs = [MESSAGE_STREAM, COMMITTED_STREAM]
    unkeyed = 0  # tuples whose key could not be selected

    def initialize(self, conf, context):
        self.setup_emitting(conf, context)
        keys = conf.get(ROUTER_KEYS)
        if isinstance(keys, str):
            keys = json.loads(keys)
        self.selectors: Mapping[str, Selector] = resolve_selectors(keys or {})
        # a keyed bolt's outputs routed here: confirmed once the keyed bolt fed
        # checkpointed them (its trim), so the sender forgets them (core.outbox)
        confirming = confirmed_inputs(
            TopologyConfig.from_conf(conf).confirmed_outputs, context["componentid"]
        )
        self._confirming = confirming
        self.receipts = Receipts() if confirming else None

    def process(self, tup):
        if tup.stream == STREAM:
            try:
                for action in self.receive_elastorm(tup):
                    log.warning("router: %s", action)
            except (ValueError, MigrationProtocolError) as exc:
                log.error("router: bad control tuple from task %s: %s", tup.task, exc)
            return
        tup = self.replay_admit(tup)  # behind a replayable spout: rewinds, replays
        if tup is None:
            return
        selector = self.selectors.get(f"{tup.component}:{tup.stream}")
        if selector is None:
            log.error(
                "router: no key selector for %s:%s (values %r); tuple dropped",
                tup.component,
                tup.stream,
                tup.values,
            )
            return
        try:
            key = select_key(selector, tup.values)
        except Exception:
            # The user's key function (or a short tuple) failed on this tuple: counted
            # and logged, processing goes on (no poison-pill restart loop).
            self.unkeyed += 1
            where = f"{tup.component}:{tup.stream}"
            log.exception(
                "router: no key for %s (tuple dropped, %d so far): %r",
                where,
                self.unkeyed,
                tup.values,
            )
            self._confirm_dropped(tup)
            self.replay_done()
            return
        if self.receipts is not None and (tup.component, tup.stream) in self._confirming:
            self.receipts.arrived(tup.values, tup.task, tup.stream)
        self.emit_keyed(key, tup.values, time.time())
        self.replay_done()

    def _send_keyed(self, emitter, key, value, ts, carry, stream) -> tuple[int, int]:
        numbered = super()._send_keyed(emitter, key, value, ts, carry, stream)
        if self.receipts is not None:
            self.receipts.numbered(value, *numbered)
        return numbered

    def on_trim(self, operator: str, key_group: int, upto: int) -> None:
        """Also tell the senders of the keyed outputs the trim covers (``Receipts``)."""
        super().on_trim(operator, key_group, upto)
        if self.receipts is not None:
            for task, keys in self.receipts.trimmed(key_group, upto).items():
                self.emit([confirmation(keys)], stream=COMMITTED, direct_task=task)

    def _confirm_dropped(self, tup) -> None:
        """A keyed output that will never be routed is confirmed at once (else its
        sender would send it again and again)."""
        if self.receipts is not None and (tup.component, tup.stream) in self._confirming:
            self.receipts.arrived(tup.values, tup.task, tup.stream)
            origin = self.receipts.dropped(tup.values)
            if origin is not None:
                task, key = origin
                self.emit([confirmation([key])], stream=COMMITTED, direct_task=task)

    def process_tick(self, tup):
        self.tick_emitting()
