"""Processing-time timers against a reference model, through ticks, checkpoints,
migrations and restores.

The model is a plain fold: each tuple counts one for its key and registers (or
deletes) a timer of its key; each tick at wall-clock ``now`` fires every pending timer
with ``time <= now`` in ``(time, key)`` order, each emitting its key's count since its
last firing and resetting it. A migration hands the group over at its current state
(a checkpoint taken at the handover, then ticks while no one owns it: nothing fires,
and the target fires what came due, once). A restore starts from the last checkpoint
and replays the tuples since, but no tick: the timers fired after that checkpoint
fire again (at least once, as in Flink), which the model says exactly: it rolls back
to its own snapshot at that checkpoint and replays the same tuples."""

from __future__ import annotations

from unittest import mock

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from streamparse import Bolt
from test_timers_windows_props import _checkpoint, new_bolt

from elastorm import KeyedBolt, ValueState
from elastorm.core.checkpoint import CheckpointHolder, checkpoint_to_state
from elastorm.core.messages import DataTuple
from elastorm.core.migration.table import Phase


class Reminders(KeyedBolt):
    """``values = [key, at]``: a processing-time timer at ``at``, or (``None``) delete
    the key's last one; a timer emits the key's tuples since its last firing."""

    outputs = ["key", "time", "n"]
    count = ValueState(default=0)
    last = ValueState()

    def process_keyed(self, key, values):
        self.count.update(self.count.value() + 1)
        at = values[1]
        if at is not None:
            self.timers.register_processing_time(at)
            self.last.update(at)
        elif self.last.value() is not None:
            self.timers.delete_processing_time(self.last.value())

    def on_timer(self, key, time):
        self.emit([key, time, self.count.value()])
        self.count.clear()


class Model:
    """The reference: pending timers, each key's count and last timer."""

    def __init__(self) -> None:
        self.pending: set[tuple[int, str]] = set()
        self.count: dict[str, int] = {}
        self.last: dict[str, int] = {}

    def copy(self) -> Model:
        m = Model()
        m.pending, m.count, m.last = set(self.pending), dict(self.count), dict(self.last)
        return m

    def event(self, key: str, at: int | None) -> None:
        self.count[key] = self.count.get(key, 0) + 1
        if at is not None:
            self.pending.add((at, key))
            self.last[key] = at
        elif key in self.last:
            self.pending.discard((self.last[key], key))

    def tick(self, now: int) -> list[list]:
        out = []
        for time, key in sorted(p for p in self.pending if p[0] <= now):
            self.pending.discard((time, key))
            out.append([key, time, self.count.pop(key, 0)])
        return out


class ProcessingTimersThroughMoves(RuleBasedStateMachine):
    """Tuples, ticks, checkpoints, migrations and restores of one key group; the
    invariant: every tick fired the model's timers, with the model's counts."""

    @initialize()
    def setup(self):
        self.bolt = new_bolt(Reminders, 0.0)
        self.holder = CheckpointHolder()
        self.events: list[tuple[str, int | None]] = []
        self.now = 0
        self.model = Model()
        self.snapshot = (Model(), 0)  # the model at the held checkpoint, tuples then
        self.fired: list[list] = []
        self.expected: list[list] = []

    def _apply(self, seq: int) -> None:
        key, at = self.events[seq - 1]
        self.bolt.coordinator.state(0).apply(DataTuple("r:1", seq, key, [key, at], 0.0))

    @rule(key=st.sampled_from("abc"), ahead=st.one_of(st.none(), st.integers(-1, 6)))
    def event(self, key, ahead):
        at = None if ahead is None else self.now + ahead
        self.events.append((key, at))
        self._apply(len(self.events))
        self.model.event(key, at)

    @rule(step=st.integers(0, 4))
    def tick(self, step):
        self.now += step
        out: list = []
        emit = lambda _, values, stream=None, **kw: out.append(values)  # noqa: E731
        with mock.patch.object(Bolt, "emit", emit):
            self.bolt.fire_on_tick(self.now)
        self.fired += out
        self.expected += self.model.tick(self.now)

    @rule()
    def checkpoint(self):
        _checkpoint(self.bolt, self.holder)
        self.snapshot = (self.model.copy(), len(self.events))

    @rule(ticks=st.lists(st.integers(0, 4), max_size=3))
    def migrate(self, ticks):
        """Hand the group over at its current state; the wall clock goes on while the
        source no longer owns it and the target does not yet."""
        self.checkpoint()
        source = self.bolt
        source.coordinator.machine(0).phase = Phase.DRAINING
        for step in ticks:
            self.now += step
            with mock.patch.object(Bolt, "emit", lambda *a, **kw: self.fired.append(["moving"])):
                source.fire_on_tick(self.now)
        self._restore()

    @rule()
    def restore(self):
        """The owner died: a fresh bolt from the held checkpoint replays every tuple
        since (ticks are not replayed)."""
        model, since = self.snapshot
        self._restore()
        self.model = model.copy()
        for key, at in self.events[since:]:
            self.model.event(key, at)

    def _restore(self) -> None:
        """A fresh bolt from the held copy (taken: the holder starts over, so the next
        restore without a checkpoint between replays every tuple into an empty group)."""
        self.bolt = new_bolt(Reminders, 0.0)
        if self.holder.get(0) is not None:
            machine = self.bolt.coordinator.machine(0)
            machine.state = checkpoint_to_state(self.holder.take(0), epoch=1, step=self.bolt._step)
        self.snapshot = (Model(), 0)
        done = self.bolt.coordinator.state(0).applied.get("r:1", 0)
        for seq in range(done + 1, len(self.events) + 1):
            self._apply(seq)

    @invariant()
    def fired_the_models_timers(self):
        assert self.fired == self.expected
        assert self.bolt.failed == 0


ProcessingTimersThroughMoves.TestCase.settings = settings(
    max_examples=25, stateful_step_count=25, deadline=None
)
test_processing_timers_through_moves = ProcessingTimersThroughMoves.TestCase
