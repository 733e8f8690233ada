"""Processing-time timers and idle key groups: fired on the owner's tick, kept in the
key group's state, never fired where the group is not owned."""

from __future__ import annotations

import pytest
from streamparse import Bolt
from test_keyed_api import _bolt as _keyed_bolt
from test_keyed_api import _Tup

from elastorm import KeyedBolt, TumblingWindow, ValueState, WindowState, output_id_fields
from elastorm.core.checkpoint import checkpoint_to_state
from elastorm.core.keyed_state import StateAccessError
from elastorm.core.messages import Data, DataTuple
from elastorm.core.migration.table import Phase
from elastorm.core.state import KeyGroupState
from elastorm.core.timers import TIMERS, GroupTimers, idle_advance, processing_due
from elastorm.durable.format import decode_checkpoint, encode_checkpoint, rebuild


class Reminders(KeyedBolt):
    """``values = [key, at]``: a processing-time timer at ``at`` (None: delete the
    last one); the timer emits the key's tuple count and resets it."""

    outputs = ["what", "key", "time", "n"]
    count = ValueState(default=0)
    last = ValueState()

    def process_keyed(self, key, values):
        self.count.update(self.count.value() + 1)
        at = values[1]
        if at is None:
            self.timers.delete_processing_time(self.last.value())
        else:
            self.timers.register_processing_time(at)
            self.last.update(at)

    def on_timer(self, key, time):
        assert self.timers.domain == "processing" and self.timers.now is None
        self.emit(["fired", key, time, self.count.value()])
        self.count.clear()


def keyed_bolt(monkeypatch, cls, **options):
    """``test_keyed_api``'s started bolt, its durable tier off (ticks write nothing)."""
    return _keyed_bolt(monkeypatch, cls, elastorm__durable__uri="none", **options)


def _send(bolt, seq: int, key: str, values: list) -> None:
    bolt.process(_Tup(Data(key_group=0, item=DataTuple("r:1", seq, key, values, 0.0))))


@pytest.fixture
def emitted(monkeypatch) -> list:
    out: list = []
    monkeypatch.setattr(Bolt, "emit", lambda self, values, stream=None, **kw: out.append(values))
    return out


def _tick(bolt, now: float) -> None:
    bolt.wall_clock = lambda: now
    bolt.process_tick(None)


def _user_rows(out: list) -> list:
    """What the bolt's own streams got (not elastorm's reports and relay)."""
    return [v for v in out if v and v[0] in ("fired", "timer", "window")]


def test_group_timers_keep_processing_time_apart_from_event_time() -> None:
    group = KeyGroupState(0)
    timers = GroupTimers(group)
    timers.register_processing(5, "b")
    timers.register_processing(5, "a")
    timers.register_processing(5, "a")  # once per distinct timer
    timers.register(1, "a")
    timers.delete_processing(1, "a")  # an event-time timer: not this one
    assert timers.pending() == [(1, "a", "")]
    timers.commit()
    assert group.get(TIMERS)["processing"] == [[5, "a", ""], [5, "b", ""]]
    assert timers.pop_due_processing(4.9) is None
    assert timers.pop_due() is None  # no watermark: event time has not moved
    assert timers.pop_due_processing(5) == (5, "a", "")
    timers.commit()
    assert group.get(TIMERS) == {
        "watermark": None,
        "timers": [[1, "a", ""]],
        "processing": [[5, "b", ""]],
    }
    assert processing_due(group, 5) and not processing_due(group, 4)
    assert not processing_due(KeyGroupState(1), 10**9)


def test_a_clock_never_changes_an_entry_a_checkpoint_shares() -> None:
    """The entry's lists may sit in a fragment being checkpointed: a step's changes
    go to copies, even after the watermark moved first."""
    group = KeyGroupState(0)
    timers = GroupTimers(group)
    timers.register(1, "a")
    timers.register_processing(1, "a")
    timers.commit()
    group.begin_checkpoint()
    shared = group.get(TIMERS)
    again = GroupTimers(group)
    assert again.advance(3, 0) and again.pop_due() == (1, "a", "")
    assert again.pop_due_processing(2) == (1, "a", "")
    again.commit()
    assert shared == {"watermark": None, "timers": [[1, "a", ""]], "processing": [[1, "a", ""]]}
    assert group.get(TIMERS) == {"watermark": 3, "timers": [], "processing": []}


def test_processing_timers_fire_once_on_the_first_tick_at_or_after_their_time(
    monkeypatch, emitted
) -> None:
    bolt = keyed_bolt(monkeypatch, Reminders)
    assert Reminders.processing_timers and Reminders.uses_timers and not Reminders.timed
    _send(bolt, 1, "a", ["a", 10.0])
    _send(bolt, 2, "b", ["b", 12.0])
    _send(bolt, 3, "a", ["a", 10.0])  # the same timer again: one
    _tick(bolt, 9.0)
    assert _user_rows(emitted) == []
    _tick(bolt, 11.0)
    assert _user_rows(emitted) == [["fired", "a", 10.0, 2]]
    _tick(bolt, 11.5)
    _tick(bolt, 20.0)
    assert _user_rows(emitted) == [["fired", "a", 10.0, 2], ["fired", "b", 12.0, 1]]
    group = bolt.coordinator.state(0)
    assert group.get(TIMERS)["processing"] == []
    assert group.get("a") == {"last": 10.0} and "a" in group.active  # the next checkpoint's
    assert bolt.failed == 0


def test_a_deleted_processing_timer_never_fires(monkeypatch, emitted) -> None:
    bolt = keyed_bolt(monkeypatch, Reminders)
    _send(bolt, 1, "a", ["a", 10.0])
    _send(bolt, 2, "a", ["a", None])
    _tick(bolt, 100.0)
    assert _user_rows(emitted) == [] and bolt.failed == 0


@pytest.mark.parametrize("phase", [Phase.REPLICA, Phase.DRAINING, Phase.REPLAYING, Phase.SHADOW])
def test_only_the_owner_fires_and_the_new_owner_fires_what_came_due_meanwhile(
    monkeypatch, emitted, phase
) -> None:
    """A group mid-move (either end) or shadowed fires nothing; once this task owns it
    (``ACTIVE``), the timer that came due meanwhile fires, once."""
    bolt = keyed_bolt(monkeypatch, Reminders)
    _send(bolt, 1, "a", ["a", 10.0])
    machine = bolt.coordinator.machine(0)
    machine.phase = phase
    _tick(bolt, 11.0)
    assert _user_rows(emitted) == []
    machine.phase = Phase.ACTIVE
    _tick(bolt, 12.0)
    _tick(bolt, 13.0)
    assert _user_rows(emitted) == [["fired", "a", 10.0, 1]]


def test_a_bolt_without_timers_does_nothing_per_tick_or_tuple(monkeypatch, emitted) -> None:
    class Plain(KeyedBolt):
        outputs = ["key"]

        def process_keyed(self, key, values):
            self.emit([key])

    bolt = keyed_bolt(monkeypatch, Plain)
    assert not Plain.uses_timers and not Plain.processing_timers

    def no(*a):
        raise AssertionError("fire_on_tick called")

    monkeypatch.setattr(bolt, "fire_on_tick", no)
    _send(bolt, 1, "a", ["a"])
    _tick(bolt, 5.0)
    assert bolt.coordinator.state(0).get(TIMERS) is None
    with pytest.raises(StateAccessError, match="defines on_timer"):
        bolt.timers  # noqa: B018


def test_event_time_timers_need_event_time(monkeypatch, emitted) -> None:
    class Mixed(Reminders):
        def process_keyed(self, key, values):
            self.timers.register_event_time(values[1])

    bolt = keyed_bolt(monkeypatch, Mixed)
    _send(bolt, 1, "a", ["a", 10.0])
    assert bolt.failed == 1  # StateAccessError: logged, the tuple dropped


class Identified(Reminders):
    outputs = output_id_fields(["what", "key", "time", "n"])


def test_tick_outputs_carry_an_id_with_no_source(monkeypatch, emitted) -> None:
    bolt = keyed_bolt(monkeypatch, Identified)
    _send(bolt, 1, "a", ["a", 1.0])
    _tick(bolt, 2.0)
    assert _user_rows(emitted) == [["fired", "a", 1.0, 1, 0, "", 0, "final"]]


class Both(KeyedBolt):
    """Event time from ``values[1]``; tumbling windows of 10; a processing-time timer
    at ``values[2]`` that registers an event-time one at the watermark."""

    outputs = ["what", "key", "time", "n"]
    win = WindowState(TumblingWindow(10), lambda n, _: n + 1, initial=0)

    def event_time(self, key, values):
        return values[1]

    def process_keyed(self, key, values):
        self.win.add(1)
        if values[2] is not None:
            self.timers.register_processing_time(values[2])

    def on_window(self, key, window, n):
        self.emit(["window", key, window.start, n])

    def on_timer(self, key, time):
        if self.timers.domain == "processing":
            self.timers.register_event_time(self.timers.now)  # due now: same loop
        self.emit(["timer", key, time, self.timers.domain])


def test_a_processing_timer_sees_event_time_and_fires_what_it_makes_due(
    monkeypatch, emitted
) -> None:
    bolt = keyed_bolt(monkeypatch, Both)
    _send(bolt, 1, "a", ["a", 3, 50.0])
    _send(bolt, 2, "a", ["a", 7, None])
    _tick(bolt, 60.0)
    assert _user_rows(emitted) == [["timer", "a", 50.0, "processing"], ["timer", "a", 7, "event"]]


def test_an_idle_group_follows_the_frontier_and_closes_its_windows(monkeypatch, emitted) -> None:
    """Key groups 0 ("a") and 2 ("b") on this task: "a" goes on to event time 30 while
    "b" stays at 4; once b's watermark has not moved for the idle timeout, a tick
    moves it up to 30, which closes its window [0, 10)."""
    bolt = keyed_bolt(monkeypatch, Both, elastorm__key_groups=3, elastorm__idle_timeout_secs=5.0)
    assert bolt.coordinator.owned() == (0, 2)

    def send(seq: int, key: str, t: float) -> None:
        item = DataTuple("r:1", seq, key, [key, t, None], 0.0)
        bolt.process(_Tup(Data(key_group={"a": 0, "b": 2}[key], item=item)))

    send(1, "b", 4)
    send(1, "a", 5)
    _tick(bolt, 100.0)
    send(2, "a", 30)  # closes a's [0, 10)
    _tick(bolt, 104.0)
    assert _user_rows(emitted) == [["window", "a", 0, 1]]
    _tick(bolt, 105.0)  # b's watermark has stood at 4 since 100
    assert _user_rows(emitted) == [["window", "a", 0, 1], ["window", "b", 0, 1]]
    assert bolt.coordinator.state(2).get(TIMERS)["watermark"] == 30
    send(2, "b", 12)  # late now: kept nowhere
    _tick(bolt, 200.0)
    assert len(_user_rows(emitted)) == 2 and bolt.failed == 0


def test_idleness_is_off_by_default(monkeypatch, emitted) -> None:
    bolt = keyed_bolt(monkeypatch, Both, elastorm__key_groups=3)
    bolt.process(_Tup(Data(key_group=2, item=DataTuple("r:1", 1, "b", ["b", 4, None], 0.0))))
    bolt.process(_Tup(Data(key_group=0, item=DataTuple("r:1", 1, "a", ["a", 30, None], 0.0))))
    _tick(bolt, 0.0)
    _tick(bolt, 10**6)
    assert _user_rows(emitted) == [] and bolt.idle_timeout == 0.0


def test_idle_advance_waits_for_the_timeout_and_follows_the_frontier() -> None:
    seen, up = idle_advance({}, {0: 10, 1: 4, 2: None}, 0.0, 5.0)
    assert up == {}
    seen, up = idle_advance(seen, {0: 20, 1: 4, 2: None}, 4.0, 5.0)
    assert up == {}  # 1 has waited 4 s
    seen, up = idle_advance(seen, {0: 30, 1: 4, 2: None}, 5.0, 5.0)
    assert up == {1: 30} and seen[1] == (30, 0.0)  # idle since 0
    seen, up = idle_advance(seen, {0: 35, 1: 30, 2: None}, 6.0, 5.0)
    assert up == {1: 35}  # still idle: follows the frontier at once
    seen, up = idle_advance(seen, {0: 35, 1: 36, 2: None}, 7.0, 5.0)
    assert up == {} and seen[1] == (36, 7.0)  # its own tuple: active again
    assert idle_advance(seen, {0: 99, 1: 36}, 100.0, 0.0)[1] == {}  # off


def test_processing_timers_come_back_from_the_durable_tier(monkeypatch, emitted) -> None:
    """A base and a delta written as durable files, read back and rebuilt (what a
    durable restore loads): the new owner fires the timers due, once, with the states
    the old one left."""
    bolt = keyed_bolt(monkeypatch, Reminders)
    group = bolt.coordinator.state(0)
    chain = []
    _send(bolt, 1, "a", ["a", 10.0])
    chain.append(group.begin_checkpoint(full=True))
    group.finish_checkpoint()
    _send(bolt, 2, "b", ["b", 12.0])
    _send(bolt, 3, "a", ["a", 11.0])
    bolt.fire_on_tick(10.5)  # a's timer at 10 fires here, before the delta
    chain.append(group.begin_checkpoint())
    group.finish_checkpoint()
    files = [encode_checkpoint(delta) for delta in chain]
    restored = keyed_bolt(monkeypatch, Reminders)
    copy = rebuild([decode_checkpoint(data) for data in files])
    restored.coordinator.machine(0).state = checkpoint_to_state(copy, epoch=1, step=restored._step)
    _tick(restored, 20.0)
    _tick(restored, 30.0)
    assert _user_rows(emitted) == [
        ["fired", "a", 10.0, 2],
        ["fired", "a", 11.0, 0],  # the count the first firing cleared stays cleared
        ["fired", "b", 12.0, 1],
    ]
