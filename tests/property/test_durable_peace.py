"""Peace's write schedule (Kwon et al. 2008): feasible (capacity, one chunk per writer per
slot, every chunk once, consecutive slots) and optimal for the sum of the writers'
completions against an exhaustive search; windows and the gate agree with the slots."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from elastorm.durable.peace import (
    completion,
    peace_schedule,
    task_windows,
    until_open,
    write_windows,
)

sizes_st = st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 6), max_size=8)
capacity_st = st.integers(1, 4)


@given(sizes_st, capacity_st)
def test_schedule_is_feasible(sizes, capacity):
    schedule = peace_schedule(sizes, capacity)
    per_slot: dict[int, list[str]] = {}
    for writer, slot in schedule:
        per_slot.setdefault(slot, []).append(writer)
    assert all(len(ws) <= capacity for ws in per_slot.values())  # capacity never exceeded
    assert all(len(ws) == len(set(ws)) for ws in per_slot.values())  # one stream a writer
    slots = {w: sorted(s for x, s in schedule if x == w) for w in sizes}
    assert {w: len(s) for w, s in slots.items()} == sizes  # every chunk scheduled once
    for s in slots.values():  # consecutive: the first slot is when the writer starts
        assert s == list(range(s[0], s[0] + len(s)))
    assert schedule == sorted(schedule, key=lambda a: (a[1], a[0]))


@given(sizes_st, capacity_st)
def test_everyone_done_within_the_list_scheduling_bound(sizes, capacity):
    assume(sizes)
    done = completion(peace_schedule(sizes, capacity))
    total, longest = sum(sizes.values()), max(sizes.values())
    assert max(done.values()) <= math.ceil((total - longest) / capacity) + longest
    assert max(done.values()) >= max(math.ceil(total / capacity), longest)  # no miracle


def brute_force_sum_completion(sizes: tuple[int, ...], capacity: int) -> int:
    """The least sum of writers' completion slots over every schedule (exhaustive search:
    each slot, every set of at most ``capacity`` unfinished writers writes one chunk)."""

    @functools.cache
    def best(left: tuple[int, ...]) -> int:
        unfinished = [i for i, k in enumerate(left) if k > 0]
        if not unfinished:
            return 0
        options = []
        for n in range(1, min(capacity, len(unfinished)) + 1):
            for chosen in itertools.combinations(unfinished, n):
                after = tuple(k - (i in chosen) for i, k in enumerate(left))
                options.append(best(after))
        return len(unfinished) + min(options)  # each unfinished writer waits this slot

    return best(sizes)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from("abcde"), st.integers(1, 4), max_size=5), capacity_st)
def test_sum_of_completions_is_optimal(sizes, capacity):
    done = completion(peace_schedule(sizes, capacity))
    assert sum(done.values()) == brute_force_sum_completion(tuple(sizes.values()), capacity)


def test_example_smallest_first_and_capacity():
    schedule = peace_schedule({"a": 2, "b": 1, "c": 1}, capacity=2)
    assert schedule == [("b", 0), ("c", 0), ("a", 1), ("a", 2)]
    # 12 equal writers, 4 at once: three turns of four, in writer order
    twelve = peace_schedule(dict.fromkeys(range(12), 1), capacity=4)
    assert twelve == [(w, w // 4) for w in range(12)]


def test_refuses_bad_input():
    with pytest.raises(ValueError, match="capacity"):
        peace_schedule({"a": 1}, 0)
    with pytest.raises(ValueError, match=">= 1 chunk"):
        peace_schedule({"a": 0}, 1)
    assert peace_schedule({}, 3) == []


@given(sizes_st, capacity_st, st.floats(0.5, 100))
def test_windows_follow_the_slots(sizes, capacity, cycle):
    assume(sizes)
    schedule = peace_schedule(sizes, capacity)
    windows = write_windows(schedule, cycle_secs=cycle)
    slots = max(s for _, s in schedule) + 1
    width = cycle / slots
    for writer, (opens, closes) in windows.items():
        mine = [s for w, s in schedule if w == writer]
        assert opens == pytest.approx(min(mine) * width)
        assert closes == pytest.approx((max(mine) + 1) * width)
        assert 0 <= opens < closes <= cycle + 1e-9
    # at any moment at most ``capacity`` windows are open
    for t in range(slots):
        middle = (t + 0.5) * width
        assert sum(o <= middle < c for o, c in windows.values()) <= capacity


@given(st.integers(1, 40), st.integers(1, 5), st.floats(1, 60), st.floats(0, 1e6), st.data())
def test_gate_waits_exactly_until_the_window(tasks, capacity, cycle, now, data):
    windows = task_windows(list(range(100, 100 + tasks)), capacity=capacity, cycle_secs=cycle)
    task = data.draw(st.sampled_from(sorted(windows)))
    window = windows[task]
    wait = until_open(now, window, cycle_secs=cycle)
    assert 0 <= wait < cycle
    step = (window[1] - window[0]) / 1000
    # open now but closing within a step (a window that ends the cycle): nothing to check
    assume(wait > 0 or window[1] - now % cycle > step)
    assert until_open(now + wait + step, window, cycle_secs=cycle) == 0.0  # then it is open
    if wait > step:  # and shortly before it was closed
        assert until_open(now + wait - step, window, cycle_secs=cycle) > 0


def test_task_windows_are_the_same_for_every_task_and_take_turns():
    tasks = [7, 3, 12, 5, 9, 4]
    windows = task_windows(tasks, capacity=2, cycle_secs=6.0)
    assert windows == task_windows(sorted(tasks), capacity=2, cycle_secs=6.0)
    assert windows[3] == windows[4] == (0.0, 2.0)
    assert windows[5] == windows[7] == (2.0, 4.0)
    assert windows[9] == windows[12] == (4.0, 6.0)
