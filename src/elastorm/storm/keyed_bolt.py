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

A :class:`KeyRouter` is added by :class:`elastorm.storm.topology.ElasticTopology`
for every keyed bolt fed by ordinary components: it reads the key field of each
input tuple and sends the tuple through an ``Emitter`` (routing table, sequence
numbers, the output buffer that migrations replay).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from streamparse import Bolt

from elastorm.core.actions import Applied, Send
from elastorm.core.errors import MigrationProtocolError
from elastorm.core.keyed_state import KeyState
from elastorm.core.keygroups import key_group
from elastorm.core.messages import CheckpointAck, Protocol
from elastorm.core.migration.table import Phase
from elastorm.storm.elastic import (
    MESSAGE_STREAM,
    RELAY_STREAM,
    REPORT_STREAM,
    STREAM,
    KeyedEmitting,
    KeyedOperator,
)

log = logging.getLogger(__name__)

ROUTER_KEYS = "elastorm.router.keys"
"""Component conf of a router: ``{"<component>:<stream>": index of the key field}``."""


class KeyedBolt(KeyedOperator, Bolt):
    """Subclass it and write :meth:`process_keyed`; declare per-key states on the class.

    ``outputs`` are the bolt's own streams, as for any streamparse bolt; elastorm
    adds its streams to them.
    """

    outputs: list = []
    current_key_state: KeyState | None = None
    failed = 0  # tuples whose process_keyed raised
    tentative = False  # inside process_keyed: whether this tuple's outputs are tentative

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Add elastorm's relay and report streams to the subclass's own ``outputs``."""
        super().__init_subclass__(**kwargs)
        own = [s for s in cls.outputs if s is not RELAY_STREAM and s is not REPORT_STREAM]
        cls.outputs = [*own, RELAY_STREAM, REPORT_STREAM]

    def initialize(self, conf, context):
        self._outputs: list[tuple[list, str | None]] | None = None
        self._owed: dict[int, set[str]] = {}  # key group -> keys last sent tentative
        # key group -> [(source, seq, outputs)] applied as its replica, not yet covered
        # by a checkpoint of the owner's
        self._shadow: dict[int, list[tuple[str, int, list]]] = {}
        self.setup_keyed(conf, context, self._step)

    def process_keyed(self, key: str, values: list) -> None:
        """One input tuple of ``key``; ``values`` are the tuple's values as sent."""
        raise NotImplementedError

    def rectify_keyed(self, key: str) -> None:
        """``key``'s last outputs were tentative and its group's outputs are final now:
        emit the final ones (the states read the key's current values; a write here
        is not kept). The default emits nothing."""

    def emit(self, tup, stream=None, **kwargs):
        """Inside :meth:`process_keyed`: an output of the tuple (sent if it is this task's
        to send); elsewhere, an ordinary emit."""
        if self._outputs is not None:
            self._outputs.append((list(tup), stream))
            return None
        return super().emit(tup, stream=stream, **kwargs)

    def _step(self, key: str, current: Any, values: Any) -> tuple[Any, Any]:
        """The core's step: run ``process_keyed`` on the key's record, collect outputs."""
        state = self.current_key_state = KeyState(key, current)
        outputs = self._outputs = []
        coordinator = self.coordinator
        self.tentative = coordinator.machine(key_group(key, coordinator.num_key_groups)).tentative
        try:
            self.process_keyed(key, values)
        except Exception:
            # The user's code failed on this tuple: the key keeps its state, the tuple
            # is counted and logged, processing goes on (no poison-pill restart loop).
            self.failed += 1
            log.exception("process_keyed failed for key %r (tuple dropped): %r", key, values)
            return current, []
        finally:
            self.current_key_state = None
            self._outputs = None
            self.tentative = False
        return state.record(), outputs

    def process(self, tup):
        try:
            self.receive_elastorm(tup)
        except ValueError as exc:  # a malformed protocol tuple: say so, keep going
            log.error("malformed elastorm tuple on %s from task %s: %s", tup.stream, tup.task, exc)

    def process_tick(self, tup):
        self.tick_keyed()
        self.rectify()

    def on_applied(self, applied: Applied) -> None:
        if applied.emit_output:
            for values, stream in applied.result:
                super().emit(values, stream=stream)
            if applied.tentative and applied.result:
                self._owed.setdefault(applied.key_group, set()).add(applied.item.key)
        elif applied.result and self.coordinator.phase(applied.key_group) is Phase.REPLICA:
            item = applied.item
            self._shadow.setdefault(applied.key_group, []).append(
                (item.source, item.seq, applied.result)
            )

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
            if machine.protocol is Protocol.RESTORE and machine.phase in (
                Phase.REPLAYING,
                Phase.ACTIVE,
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
            for key in sorted(keys):
                self.current_key_state = KeyState(key, machine.state.get(key))
                try:
                    self.rectify_keyed(key)
                except Exception:
                    log.exception("rectify_keyed failed for key %r", key)
                finally:
                    self.current_key_state = None


class KeyRouter(KeyedEmitting, Bolt):
    """Routes the tuples of plain upstreams to a keyed bolt's key-group owners.

    Its component conf (``elastorm.router.keys``) names the key field of each input
    stream; the tuple's values travel as the data message's value.
    """

    outputs = [MESSAGE_STREAM]

    def initialize(self, conf, context):
        self.setup_emitting(conf, context)
        keys = conf.get(ROUTER_KEYS)
        if isinstance(keys, str):
            keys = json.loads(keys)
        self.key_index: Mapping[str, int] = dict(keys or {})

    def process(self, tup):
        if tup.stream == STREAM:
            try:
                for action in self.receive_elastorm(tup):
                    log.warning("router: %s", action)
            except (ValueError, MigrationProtocolError) as exc:
                log.error("router: bad control tuple from task %s: %s", tup.task, exc)
            return
        index = self.key_index.get(f"{tup.component}:{tup.stream}")
        if index is None or index >= len(tup.values):
            log.error(
                "router: no key field for %s:%s (values %r); tuple dropped",
                tup.component,
                tup.stream,
                tup.values,
            )
            return
        self.emit_keyed(str(tup.values[index]), tup.values, time.time())

    def process_tick(self, tup):
        self.tick_emitting()
