"""Event time in a keyed bolt: the group's watermark and timers, state TTL, windows."""

from __future__ import annotations

import pytest
from streamparse import Bolt
from test_keyed_api import _bolt as keyed_bolt
from test_keyed_api import _Tup

from elastorm import (
    KeyedBolt,
    MapState,
    SessionWindow,
    SlidingWindow,
    TumblingWindow,
    ValueState,
    Window,
    WindowState,
)
from elastorm.core.keyed_state import CLEANUP, KeyState, StateAccessError
from elastorm.core.messages import Data, DataTuple
from elastorm.core.state import KeyGroupState
from elastorm.core.timers import TIMERS, GroupTimers, watermark_of
from elastorm.core.windows import merge_windows

# -- assigners -------------------------------------------------------------------


def test_tumbling_and_sliding_windows_contain_their_time() -> None:
    assert TumblingWindow(10).assign(0) == [Window(0, 10)]
    assert TumblingWindow(10).assign(-1) == [Window(-10, 0)]
    assert SlidingWindow(10, 5).assign(10) == [Window(5, 15), Window(10, 20)]
    assert SlidingWindow(10, 3).assign(10) == [Window(3, 13), Window(6, 16), Window(9, 19)]
    with pytest.raises(ValueError, match="size must be > 0"):
        TumblingWindow(0)
    with pytest.raises(ValueError, match="slide must be > 0"):
        SlidingWindow(10, 0)


def test_session_merging_bridges_and_touches() -> None:
    assert merge_windows([], Window(1, 3)) == (Window(1, 3), [])
    assert merge_windows([Window(3, 5)], Window(1, 3)) == (Window(1, 5), [Window(3, 5)])
    assert merge_windows([Window(5, 6)], Window(1, 3)) == (Window(1, 3), [])
    with pytest.raises(ValueError, match="needs merge"):
        WindowState(SessionWindow(5), lambda a, v: a + v, initial=0)


# -- the group's clock -----------------------------------------------------------


def test_group_timers_fire_in_order_and_commit_only_when_changed() -> None:
    group = KeyGroupState(0)
    timers = GroupTimers(group)
    timers.register(5, "b")
    timers.register(5, "a")
    timers.register(5, "a")  # once per distinct timer
    timers.register(9, "a", "ttl")
    timers.delete(9, "a")  # another tag: not that one
    assert timers.pending() == [(5, "a", ""), (5, "b", ""), (9, "a", "ttl")]
    assert timers.pop_due() is None  # no watermark yet
    assert timers.advance(7, 1) and not timers.advance(7, 1) and not timers.advance(3, 0)
    assert timers.watermark == 6
    assert [timers.pop_due(), timers.pop_due(), timers.pop_due()] == [
        (5, "a", ""),
        (5, "b", ""),
        None,
    ]
    assert group.get(TIMERS) is None  # nothing written before commit
    timers.commit()
    assert group.get(TIMERS) == {"watermark": 6, "timers": [[9, "a", "ttl"]]}
    assert TIMERS in group.active and watermark_of(group) == 6
    again = GroupTimers(group)
    again.commit()  # unchanged: nothing rewritten
    assert watermark_of(KeyGroupState(1)) is None


# -- a bolt with event time ---------------------------------------------------------


def _count(acc: int, value: int) -> int:
    return acc + value


class Clocked(KeyedBolt):
    """Counts per tumbling window of 10; ``values = [word, time, timer or None]``."""

    outputs = ["what", "key", "a", "b"]
    tumbling = WindowState(TumblingWindow(10), _count, initial=0)
    sessions = WindowState(SessionWindow(4), _count, initial=0, merge=_count, fire="on_session")
    last = ValueState(default="none", ttl=20)
    seen = MapState(ttl=20)

    def event_time(self, key, values):
        return values[1]

    def process_keyed(self, key, values):
        if values[0] == "boom":
            self.timers.register_event_time(0)
            raise RuntimeError("user code failed")
        late = not self.tumbling.add(1)
        self.sessions.add(1)
        self.last.update(values[1])
        self.seen.put(str(values[1]), 1)
        if values[2] is not None:
            self.timers.register_event_time(values[2])
        if late:
            self.emit(["late", key, values[1], self.timers.watermark()])

    def on_window(self, key, window, count):
        self.emit(["window", key, [window.start, window.end], count])

    def on_session(self, key, window, count):
        self.emit(["session", key, [window.start, window.end], count])

    def on_timer(self, key, time):
        self.emit(["timer", key, time, self.last.value()])


def _bolt(monkeypatch, cls=Clocked, lateness=0.0):
    return keyed_bolt(monkeypatch, cls, elastorm__allowed_lateness_secs=lateness)


def _run(bolt, monkeypatch, events) -> list:
    out: list = []
    monkeypatch.setattr(Bolt, "emit", lambda self, values, stream=None, **kw: out.append(values))
    for seq, (key, t, timer) in enumerate(events, start=1):
        item = DataTuple("r:1", seq, key, [key, t, timer], 0.0)
        bolt.process(_Tup(Data(key_group=0, item=item)))
    return out


def test_windows_fire_when_the_watermark_passes_their_end(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    out = _run(bolt, monkeypatch, [("a", 1, None), ("b", 3, None), ("a", 9, None), ("b", 12, None)])
    # t=12 moves the watermark to 12: [0, 10) fires for a and b, in key order; the
    # sessions [1, 5) of a and [3, 7) of b too ([9, 13) of a and b's [12, 16) stay).
    assert out == [
        ["session", "a", [1, 5], 1],
        ["session", "b", [3, 7], 1],
        ["window", "a", [0, 10], 2],
        ["window", "b", [0, 10], 1],
    ]
    group = bolt.coordinator.state(0)
    # a's record (another key than the tuple's) was written to the active fragment
    assert group.active["a"]["sessions"] == [[9, 13, 1]] and "tumbling" not in group.active["a"]


def test_a_late_event_is_kept_nowhere_and_the_watermark_never_goes_back(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    out = _run(bolt, monkeypatch, [("a", 15, None), ("a", 5, None)])
    assert out == [["late", "a", 5, 15]]
    assert watermark_of(bolt.coordinator.state(0)) == 15


def test_lateness_holds_the_watermark_back(monkeypatch) -> None:
    bolt = _bolt(monkeypatch, lateness=5.0)
    out = _run(
        bolt, monkeypatch, [("a", 8, None), ("a", 12, None), ("a", 5, None), ("a", 15, None)]
    )
    # 12 moved the watermark to 7 only, so 5 was on time; 15 moves it to 10
    assert out == [["window", "a", [0, 10], 2]]


def test_user_timers_fire_once_with_the_keys_state(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    out = _run(
        bolt,
        monkeypatch,
        [("a", 1, 6), ("a", 2, 6), ("b", 3, 4), ("c", 4, None), ("c", 7, None), ("c", 8, None)],
    )
    timers = [o for o in out if o[0] == "timer"]
    # watermark 4 (c's tuple) fires b's timer; 7 fires a's (once though registered twice)
    assert timers == [["timer", "b", 4, 3], ["timer", "a", 6, 2]]


def test_ttl_values_expire_in_event_time_and_are_swept(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    out = _run(bolt, monkeypatch, [("a", 1, 30), ("b", 40, None)])
    group = bolt.coordinator.state(0)
    # At watermark 40, a's sweep (21) fired before its timer (30), which read the
    # default; its windows fired too, so nothing of a is left.
    assert ["timer", "a", 30, "none"] in out
    assert group.get("a") is None
    assert group.get("b")["last"] == [40, 60] and group.get("b")[CLEANUP] == 60


def test_ttl_reads_the_default_once_expired(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    out = _run(bolt, monkeypatch, [("a", 1, 25), ("b", 22, None), ("b", 30, None)])
    # at watermark 22 a's value (expires 21) is gone; its timer at 25 reads the default
    assert ["timer", "a", 25, "none"] in out


def test_timers_and_ttl_need_event_time(monkeypatch) -> None:
    class Untimed(KeyedBolt):
        outputs = ["x"]
        last = ValueState(ttl=5)

        def process_keyed(self, key, values):
            if values[0] == "timer":
                self.timers.register_event_time(3)
            self.last.update(1)

    bolt = _bolt(monkeypatch, Untimed)
    assert not Untimed.timed and Untimed.ttl_states == (Untimed.last,)
    _run(bolt, monkeypatch, [("a", 1, None), ("timer", 1, None)])
    assert bolt.failed == 2  # both raised StateAccessError, logged, dropped
    with pytest.raises(StateAccessError, match="event_time"):
        bolt.current_key_state = None
        bolt.timers  # noqa: B018


def test_a_failing_tuple_registers_no_timer(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    _run(bolt, monkeypatch, [("boom", 1, None), ("a", 2, None)])
    group = bolt.coordinator.state(0)
    assert bolt.failed == 1
    assert [0, "boom", ""] not in group.get(TIMERS)["timers"]
    assert watermark_of(group) == 2


def test_map_state_entries_expire_one_by_one() -> None:
    class Holder:
        seen = MapState(ttl=10)
        current_key_state = None

    group = KeyGroupState(0)
    timers = GroupTimers(group)
    h = Holder()
    h.current_key_state = KeyState("k", None, timers=timers, now=1)
    h.seen.put("old", "x")
    h.current_key_state.now = 6
    h.seen.put("new", "y")
    record = h.current_key_state.record()
    assert record["seen"] == {"old": ["x", 11], "new": ["y", 16]} and record[CLEANUP] == 11
    assert timers.pending() == [(11, "k", "ttl")]  # one sweep timer, at the earliest
    timers.advance(11, 0)
    h.current_key_state = KeyState("k", record, timers=timers, now=11)
    assert dict(h.seen.items()) == {"new": "y"} and not h.seen.contains("old")
    assert h.current_key_state.record()["seen"] == {"new": ["y", 16]}  # dropped on read
    assert record["seen"] == {"old": ["x", 11], "new": ["y", 16]}  # copied, not changed
