"""The user's keyed bolt, and the router that feeds it from a plain upstream.

A :class:`KeyedBolt` is what a user writes: ``process_keyed(key, values)``, the
per-key states it declares (``ValueState``, ``MapState``) and ``self.emit``.
elastorm keeps the state in key groups (``elastorm.core.state``), checkpoints it
and migrates it; the bolt never sees any of that.

Output Fidelity (Madsen & Zhou 2015, section 5): what ``process_keyed`` emits is
held until the core says the tuple's outputs are this task's to send
(``Applied.emit_output``); a tuple replayed by a migration target, whose outputs
the source already sent, emits nothing. Outputs that depend on the key's whole
state are consistent when the key has one upstream router task (the default);
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
replay changes), so a replay applies the same times. Processing-time timers are not
offered: firing on a wall-clock tick writes state outside any tuple's step, which a
replay, a quiet migration target or an active replica would not repeat.

A :class:`KeyRouter` is added by :class:`elastorm.storm.topology.ElasticTopology`
for every keyed bolt fed by ordinary components: it reads the key field of each
input tuple and sends the tuple through an ``Emitter`` (routing table, sequence
numbers, the output buffer that migrations replay).
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from streamparse import Bolt, Stream

from elastorm.config import TopologyConfig
from elastorm.core.actions import Applied, Send
from elastorm.core.errors import MigrationProtocolError
from elastorm.core.keyed_state import (
    TTL_TAG,
    WINDOW_TAG,
    KeyState,
    StateAccessError,
    WindowState,
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
from elastorm.core.messages import CheckpointAck
from elastorm.core.migration.table import Phase
from elastorm.core.once import first_application, output_id
from elastorm.core.outputs import next_output
from elastorm.core.state import KeyGroupState
from elastorm.core.timers import GroupTimers, watermark_of
from elastorm.storm.elastic import (
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
    ttl_states: tuple = ()  # its states with a ttl
    lateness: float = 0.0  # elastorm.allowed_lateness_secs

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
        cls.ttl_states = ttl_states(cls)

    def initialize(self, conf, context):
        self._outputs: list[tuple[list, str | None]] | None = None
        self._owed: dict[int, set[str]] = {}  # key group -> keys last sent tentative
        # key group -> [(source, seq, outputs)] applied as its replica, not yet covered
        # by a checkpoint of the owner's
        self._shadow: dict[int, list[tuple[str, int, list]]] = {}
        self.lateness = TopologyConfig.from_conf(conf).allowed_lateness_secs
        self.setup_keyed(conf, context, self._step)

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
        """An event-time timer of ``key`` at ``time`` fired (the watermark reached it):
        the states are ``key``'s, ``self.timers.now`` is ``time``, emits are outputs of
        the tuple that moved the watermark. A timer registered here at or below the
        watermark fires in the same step (as in Flink): registering ``time`` again
        here would never end. The default does nothing."""

    @property
    def timers(self) -> TimerHandle:
        """The current key's timers, in :meth:`process_keyed` and :meth:`on_timer`."""
        state = self.current_key_state
        if state is None or state.timers is None:
            raise StateAccessError(
                "timers are per key and count event time: use self.timers in "
                "process_keyed or on_timer of a bolt that defines event_time"
            )
        return TimerHandle(state)

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
            if self.timed:
                assert machine.state is not None
                timers, now = GroupTimers(machine.state), self.event_time(key, values)
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
            if timers.advance(now, self.lateness):
                self.tentative = machine.tentative
                record = self._fire(machine.state, timers, key, record)
                self.tentative = False
            timers.commit()
        self._outputs = None
        return record, outputs

    def _fire(self, group: KeyGroupState, timers: GroupTimers, key: str, record: Any) -> Any:
        """Fire every timer of ``group`` the watermark passed, in ``(time, key, tag)``
        order, each on its key's latest record; write the records of other keys back to
        the group (its active fragment: changed for the next checkpoint); return
        ``key``'s (the tuple's own, which the core stores). A callback that raises is
        logged and its key's record left as it was (timers it registered before raising
        stay). A record no timer changed is not written. O(timers fired x their work)."""
        latest: dict[str, Any] = {key: record}
        read: dict[str, Any] = {}  # other keys' records as the group had them
        while (due := timers.pop_due()) is not None:
            time, k, tag = due
            if k not in latest:
                latest[k] = read[k] = group.get(k)
            before = latest[k]
            state = self.current_key_state = KeyState(k, before, timers=timers, now=time)
            try:
                self._dispatch(state, time, tag)
                latest[k] = state.record()
            except Exception:
                self.failed += 1
                log.exception("timer %r of key %r at %r failed", tag, k, time)
                latest[k] = before
            finally:
                self.current_key_state = None
        for k in sorted(read):
            if latest[k] is not read[k]:
                group.put(k, latest[k])
        return latest[key]

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
            self.receive_elastorm(tup)
        except ValueError as exc:  # a malformed protocol tuple: say so, keep going
            log.error("malformed elastorm tuple on %s from task %s: %s", tup.stream, tup.task, exc)

    def process_tick(self, tup):
        self.tick_keyed()
        self.rectify()

    def on_applied(self, applied: Applied) -> None:
        outputs = applied.result
        if outputs and self.identified:
            outputs = self._numbered(applied)
        if applied.emit_output:
            for values, stream in outputs:
                super().emit(values, stream=stream)
            if applied.tentative and outputs:
                self._owed.setdefault(applied.key_group, set()).add(applied.item.key)
        elif outputs and self.coordinator.phase(applied.key_group) is Phase.REPLICA:
            item = applied.item
            self._shadow.setdefault(applied.key_group, []).append((item.source, item.seq, outputs))

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
                        super().emit(values, stream=stream)

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


class TimerHandle:
    """The current key's event-time timers (PyFlink's ``ctx.timer_service()``)."""

    __slots__ = ("_state",)

    def __init__(self, state: KeyState) -> None:
        self._state = state

    @property
    def now(self) -> Any:
        """The event time of the tuple being applied (in ``on_timer``: the timer's)."""
        return self._state.now

    def watermark(self) -> Any:
        """The key group's watermark (``None`` before its first event time)."""
        return self._state.watermark

    def register_event_time(self, time: float) -> None:
        """Call :meth:`KeyedBolt.on_timer` for this key once the watermark reaches
        ``time`` (once per distinct time)."""
        assert self._state.timers is not None
        self._state.timers.register(time, self._state.key)

    def delete_event_time(self, time: float) -> None:
        """Cancel this key's timer at ``time``, if any."""
        assert self._state.timers is not None
        self._state.timers.delete(time, self._state.key)


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

    outputs = [MESSAGE_STREAM]
    unkeyed = 0  # tuples whose key could not be selected

    def initialize(self, conf, context):
        self.setup_emitting(conf, context)
        keys = conf.get(ROUTER_KEYS)
        if isinstance(keys, str):
            keys = json.loads(keys)
        self.selectors: Mapping[str, Selector] = resolve_selectors(keys or {})

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
            self.replay_done()
            return
        self.emit_keyed(key, tup.values, time.time())
        self.replay_done()

    def process_tick(self, tup):
        self.tick_emitting()
