"""Event-time timers and windows against a reference model, through checkpoints and
restores: random event streams (out of order, some late) fire the model's windows and
timers, at the model's tuple; a group checkpointed (full and incremental, through JSON
as on the wire), restored into a fresh bolt and replayed from its checkpoint gives every
tuple the outputs it had (what a migration, a restore and the durable tier do)."""

from __future__ import annotations

import io
from collections import defaultdict
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import elastorm.zk.requests
from elastorm import (
    KeyedBolt,
    SessionWindow,
    SlidingWindow,
    TumblingWindow,
    ValueState,
    WindowState,
)
from elastorm.core.checkpoint import CheckpointHolder, checkpoint_to_state
from elastorm.core.messages import DataTuple, from_json, to_json

GAP = 4
TTL = 5


def _count(acc: int, value: int) -> int:
    return acc + value


class _Windowed(KeyedBolt):
    """``values = [key, time, timer or None]``: counts events per window; user timers,
    which emit the key's last event time while it lives (``TTL``)."""

    outputs = ["what", "key", "a", "b"]
    last = ValueState(ttl=TTL)

    def event_time(self, key, values):
        return values[1]

    def process_keyed(self, key, values):
        self.win.add(1)
        self.last.update(values[1])
        if values[2] is not None:
            self.timers.register_event_time(values[2])

    def on_window(self, key, window, count):
        self.emit(["window", key, [window.start, window.end], count])

    def on_timer(self, key, time):
        self.emit(["timer", key, time, self.last.value()])


class Tumbling(_Windowed):
    win = WindowState(TumblingWindow(5), _count, initial=0)


class Sliding(_Windowed):
    win = WindowState(SlidingWindow(6, 2), _count, initial=0)


class Sessions(_Windowed):
    win = WindowState(SessionWindow(GAP), _count, initial=0, merge=_count)


KINDS = {"tumbling": Tumbling, "sliding": Sliding, "sessions": Sessions}


def new_bolt(cls: type, lateness: float) -> KeyedBolt:
    """A bolt owning key group 0 of 1 (no ZooKeeper)."""
    with mock.patch.object(elastorm.zk.requests, "task_start", lambda *a: (1, -1)):
        bolt = cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
        bolt.initialize(
            {
                "elastorm.key_groups": 1,
                "elastorm.operators": {"c": ["r"]},
                "storm.id": "t-1-1",
                "elastorm.heartbeats": False,
                "elastorm.allowed_lateness_secs": lateness,
            },
            {"taskid": 3, "componentid": "c", "task->component": {"1": "r", "3": "c", "4": "c"}},
        )
    return bolt


def apply(bolt: KeyedBolt, seq: int, event: tuple) -> list:
    """Apply tuple ``seq`` of the stream to the bolt's group: its outputs' values."""
    key, t, timer = event
    group = bolt.coordinator.state(0)
    result = group.apply(DataTuple("r:1", seq, key, [key, t, timer], 0.0))
    return [values for values, _ in result]


# -- the reference model -----------------------------------------------------------


def sessions_of(times: list) -> list[tuple]:
    """Sessions of a key's events: ``[t, t + GAP)`` joined when they overlap or touch."""
    out: list[list] = []
    for t in sorted(times):
        if out and t <= out[-1][1]:
            out[-1][1] = max(out[-1][1], t + GAP)
            out[-1][2] += 1
        else:
            out.append([t, t + GAP, 1])
    return [tuple(s) for s in out]


def model(kind: str, lateness: float, events: list) -> list[list]:
    """Each tuple's outputs: late events dropped; on a watermark advance every due
    timer and window fires in (time, key, tag) order; a timer reads its key's last
    event time unless the watermark reached it + ``TTL``."""
    assigner = KINDS[kind].win.assigner
    mark = None
    counts: dict = defaultdict(int)  # (key, start, end) -> count (tumbling, sliding)
    pending: dict = defaultdict(list)  # key -> event times (sessions)
    timers: set = set()
    last: dict = {}  # key -> the time of its latest tuple
    outs = []
    for key, t, timer in events:
        out: list = []
        if kind == "sessions":
            if mark is None or t + GAP > mark:
                pending[key].append(t)
        else:
            for w in assigner.assign(t):
                if mark is None or w.end > mark:
                    counts[(key, w.start, w.end)] += 1
        last[key] = t
        if timer is not None:
            timers.add((timer, key))
        if mark is None or t - lateness > mark:
            mark = t - lateness
            due = [(time, k, "", None) for time, k in timers if time <= mark]
            timers -= {(time, k) for time, k, _, _ in due}
            if kind == "sessions":
                for k in list(pending):
                    fired = [s for s in sessions_of(pending[k]) if s[1] <= mark]
                    due += [(e, k, "w", (s, n)) for s, e, n in fired]
                    pending[k] = [x for x in pending[k] if not any(s <= x < e for s, e, _ in fired)]
            else:
                for (k, s, e), n in list(counts.items()):
                    if e <= mark:
                        due.append((e, k, "w", (s, n)))
                        del counts[(k, s, e)]
            for time, k, tag, win in sorted(due, key=lambda d: (d[0], d[1], d[2], d[3])):
                if tag == "":
                    alive = last[k] if last[k] + TTL > mark else None
                    out.append(["timer", k, time, alive])
                else:
                    out.append(["window", k, [win[0], time], win[1]])
        outs.append(out)
    return outs


# -- streams ----------------------------------------------------------------------

events_st = st.lists(
    st.tuples(
        st.sampled_from("abc"),
        st.integers(0, 3),  # the stream's clock advances by this
        st.integers(0, 6),  # the event is this much behind it (late beyond the lateness)
        st.one_of(st.none(), st.integers(-2, 8)),  # a timer this far from the event
    ),
    max_size=40,
)


def stream(raw: list) -> list[tuple]:
    clock, out = 0, []
    for key, step, behind, timer in raw:
        clock += step
        t = clock - behind
        out.append((key, t, None if timer is None else t + timer))
    return out


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)), lateness=st.integers(0, 3), raw=events_st)
def test_fired_windows_and_timers_are_the_models(kind, lateness, raw) -> None:
    events = stream(raw)
    bolt = new_bolt(KINDS[kind], lateness)
    got = [apply(bolt, seq, e) for seq, e in enumerate(events, start=1)]
    assert got == model(kind, lateness, events)
    assert bolt.failed == 0


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(KINDS)),
    lateness=st.integers(0, 3),
    raw=events_st,
    cuts=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_a_group_restored_from_its_checkpoints_continues_alike(kind, lateness, raw, cuts) -> None:
    events = stream(raw)
    first, second = sorted(min(c, len(events)) for c in cuts)
    whole = new_bolt(KINDS[kind], lateness)
    expected = [apply(whole, seq, e) for seq, e in enumerate(events, start=1)]
    # A full checkpoint at ``first``, an incremental one at ``second`` (each through
    # JSON, as on the wire), a fresh bolt restored from the held copy, then the rest.
    bolt = new_bolt(KINDS[kind], lateness)
    holder = CheckpointHolder()
    got = []
    for seq, e in enumerate(events[:second], start=1):
        if seq - 1 == first:
            _checkpoint(bolt, holder)
        got.append(apply(bolt, seq, e))
    if first == second:
        _checkpoint(bolt, holder)
    _checkpoint(bolt, holder)
    restored = new_bolt(KINDS[kind], lateness)
    machine = restored.coordinator.machine(0)
    machine.state = checkpoint_to_state(holder.take(0), epoch=1, step=restored._step)
    got += [apply(restored, seq, events[seq - 1]) for seq in range(second + 1, len(events) + 1)]
    assert got == expected
    # and the same state: records (windows fired or not) and the group's clock
    assert restored.coordinator.state(0).items() == whole.coordinator.state(0).items()


def _checkpoint(bolt: KeyedBolt, holder: CheckpointHolder) -> None:
    group = bolt.coordinator.state(0)
    delta = group.begin_checkpoint()
    holder.apply(from_json(to_json(delta)))
    group.finish_checkpoint()


# -- stateful: a group through checkpoints and restores ------------------------------


class TimersThroughRestores(RuleBasedStateMachine):
    """Events, checkpoints and restores (a fresh bolt from the held copy, then the
    replay of every tuple since: a RESTORE's target). The invariant: every tuple's
    outputs, whenever made, are the model's."""

    @initialize(kind=st.sampled_from(sorted(KINDS)), lateness=st.integers(0, 3))
    def setup(self, kind, lateness):
        self.kind, self.lateness = kind, lateness
        self.bolt = new_bolt(KINDS[kind], lateness)
        self.holder = CheckpointHolder()
        self.events: list[tuple] = []
        self.outputs: list[list] = []  # each tuple's outputs, as first made
        self.clock = 0
        self.mismatch: list = []

    @rule(
        key=st.sampled_from("abc"),
        step=st.integers(0, 3),
        behind=st.integers(0, 6),
        timer=st.one_of(st.none(), st.integers(-2, 8)),
    )
    def event(self, key, step, behind, timer):
        self.clock += step
        t = self.clock - behind
        self.events.append((key, t, None if timer is None else t + timer))
        self.outputs.append(apply(self.bolt, len(self.events), self.events[-1]))

    @rule()
    def checkpoint(self):
        _checkpoint(self.bolt, self.holder)

    @rule()
    def restore(self):
        before = self.bolt.coordinator.state(0).items()
        copy = self.holder.take(0) if self.holder.get(0) is not None else None
        self.bolt = new_bolt(KINDS[self.kind], self.lateness)
        if copy is not None:
            machine = self.bolt.coordinator.machine(0)
            machine.state = checkpoint_to_state(copy, epoch=1, step=self.bolt._step)
        done = self.bolt.coordinator.state(0).applied.get("r:1", 0)
        for seq in range(done + 1, len(self.events) + 1):
            again = apply(self.bolt, seq, self.events[seq - 1])
            if again != self.outputs[seq - 1]:
                self.mismatch.append((seq, again, self.outputs[seq - 1]))
        if self.bolt.coordinator.state(0).items() != before:
            self.mismatch.append(("state", before, self.bolt.coordinator.state(0).items()))

    @invariant()
    def outputs_are_the_models(self):
        assert not self.mismatch
        assert self.outputs == model(self.kind, self.lateness, self.events)


TimersThroughRestores.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
test_timers_through_restores = TimersThroughRestores.TestCase
