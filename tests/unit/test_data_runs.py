"""Data runs (issue 34, stage 1): the emitting side's ``RunBuilder`` and the keyed
side's admission of a whole run (``TaskCoordinator.receive_run``,
``KeyGroupMachine.admit_run``), each against what the run's ``Data`` one by one do."""

from __future__ import annotations

import pytest
from sim import Cluster

from elastorm.core.actions import Applied, Rejected
from elastorm.core.keygroups import key_group
from elastorm.core.messages import (
    CheckpointDelta,
    DataRun,
    DataTuple,
    Protocol,
    Resend,
    ToState,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.runs import RunBuilder
from elastorm.core.migration.table import Phase

G = 4
KEYS = {g: [k for k in (f"k{i}" for i in range(200)) if key_group(k, G) == g] for g in range(G)}
UP = 1


def run(g: int, first: int, n: int, source: str = "u") -> DataRun:
    """``n`` tuples of group ``g`` from ``source`` numbered from ``first``; value = seq."""
    keys = KEYS[g]
    items = [(keys[s % len(keys)], s, 0.0) for s in range(first, first + n)]
    return DataRun(key_group=g, source=source, first=first, items=items)


def owner(**kw) -> TaskCoordinator:
    return TaskCoordinator(task=10, num_key_groups=G, upstreams=[UP], owned=range(G), **kw)


def applied(actions) -> list[int]:
    return [a.item.seq for a in actions if isinstance(a, Applied)]


def itemwise(c: TaskCoordinator, r: DataRun) -> list:
    actions = []
    for data in r.data():
        actions += c.receive(UP, data)
    return actions


# -- RunBuilder ----------------------------------------------------------------------
def item(seq: int, source: str = "u", key: str = "k") -> DataTuple:
    return DataTuple.trusted(source, seq, key, seq, 0.0)


def test_consecutive_tuples_of_a_lane_coalesce_and_a_gap_starts_a_run() -> None:
    b = RunBuilder()
    for seq in (1, 2, 3):
        b.add(20, 0, item(seq))
    b.add(20, 1, item(1))  # another group: its own run
    b.add(21, 0, item(4))  # another task (a CPAL target's copy): its own runs
    b.add(20, 0, item(4, source="v"))  # another source
    b.add(20, 0, item(6))  # a gap after 3
    assert b.add(20, 0, item(7)) == 8
    taken = b.take()
    assert {
        t: [(r.key_group, r.source, r.first, r.last) for r in rs] for t, rs in taken.items()
    } == {
        20: [(0, "u", 1, 3), (1, "u", 1, 1), (0, "v", 4, 4), (0, "u", 6, 7)],
        21: [(0, "u", 4, 4)],
    }
    assert [i[1] for i in taken[20][0].items] == [1, 2, 3]  # (key, value, ts) each
    assert b.held == 0 and b.take() == {}


def test_a_resend_of_older_tuples_starts_a_run_and_keeps_the_lane_in_order() -> None:
    b = RunBuilder()
    for seq in (5, 3, 4, 6):
        b.add(20, 0, item(seq))
    assert [(r.first, r.last) for r in b.take()[20]] == [(5, 5), (3, 4), (6, 6)]


# -- admission ---------------------------------------------------------------------
def test_a_run_applies_like_its_data_one_by_one() -> None:
    by_run, by_data = owner(), owner()
    r = run(2, 1, 5)
    got = by_run.receive_run(UP, r)
    assert got == itemwise(by_data, r)
    assert applied(got) == [1, 2, 3, 4, 5]
    assert all(a.emit_output for a in got)
    assert by_run.state(2).applied == {"u": 5} == by_data.state(2).applied
    keys = {i[0] for i in r.items}
    assert {k: by_run.state(2).get(k) for k in keys} == {k: by_data.state(2).get(k) for k in keys}
    assert by_run.stats["in.Data"] == 5


def test_a_wholly_duplicate_run_is_dropped_and_an_overlap_starts_after_the_applied() -> None:
    c = owner()
    c.receive_run(UP, run(0, 1, 4))
    assert c.receive_run(UP, run(0, 2, 3)) == []  # 2..4: all applied already
    assert applied(c.receive_run(UP, run(0, 3, 4))) == [5, 6]  # 3..6: 3 and 4 dropped
    assert c.state(0).applied == {"u": 6}
    assert c.state(0).get(KEYS[0][5 % len(KEYS[0])]) is not None


def test_an_early_run_is_parked_then_freed_by_the_run_that_fills_the_gap() -> None:
    c = owner()
    assert c.receive_run(UP, run(1, 4, 2)) == []  # 4, 5 wait for 1..3
    (gap,) = c.machine(1).gaps()
    assert (gap.awaited, gap.parked, gap.last, gap.sender) == (1, 2, 5, UP)
    assert applied(c.receive_run(UP, run(1, 1, 3))) == [1, 2, 3, 4, 5]
    assert c.machine(1).gaps() == []


def test_an_overlapping_run_with_parked_ones_behind_it_frees_them() -> None:
    c = owner()
    c.receive_run(UP, run(1, 1, 2))
    c.receive_run(UP, run(1, 6, 1))  # parked
    assert applied(c.receive_run(UP, run(1, 2, 4))) == [3, 4, 5, 6]


def test_a_run_holding_a_parked_tuple_leaves_nothing_parked_behind() -> None:
    """Found by the stateful test: 4 parked, then a run 3..5 applied 4 itself and left
    the parked 4 behind, a gap that asked for ``Resend(first=6, last=4)``."""
    by_run, by_data = owner(), owner()
    for c in (by_run, by_data):
        c.receive_run(UP, run(1, 1, 2))
        c.receive_run(UP, run(1, 4, 1))  # parked
    got = by_run.receive_run(UP, run(1, 3, 3))
    assert got == itemwise(by_data, run(1, 3, 3))
    assert applied(got) == [3, 4, 5]
    assert by_run.machine(1).parked == 0 and by_run.machine(1).gaps() == []


def test_a_key_outside_the_group_is_refused_and_the_rest_wait_behind_it() -> None:
    by_run, by_data = owner(), owner()
    items = [(KEYS[3][0], 1, 0.0), (KEYS[0][0], 2, 0.0), (KEYS[3][1], 3, 0.0)]
    r = DataRun(key_group=3, source="u", first=1, items=items)
    got = by_run.receive_run(UP, r)
    assert got == itemwise(by_data, r)
    assert applied(got) == [1]
    (refused,) = [a for a in got if isinstance(a, Rejected)]
    assert refused.reason == "key not in the named key group" and refused.message.item.seq == 2
    assert by_run.stats["rejected"] == by_data.stats["rejected"] == 1
    assert by_run.machine(3).gaps()[0].awaited == 2  # 3 is parked behind the refused one


def test_a_failing_step_leaves_the_position_at_the_tuple_that_failed() -> None:
    def step(key, current, value):
        if value == 3:
            raise RuntimeError("user code")
        return value, value

    c = owner(step=step)
    with pytest.raises(RuntimeError):
        c.receive_run(UP, run(0, 1, 5))
    assert c.state(0).applied == {"u": 3}  # as the per-tuple path leaves it


def replaying_target() -> TaskCoordinator:
    """Task 11, a CPA target of group 0 that has one upstream's toState of two."""
    c = TaskCoordinator(task=11, num_key_groups=G, upstreams=[UP, 2])
    full = CheckpointDelta(
        key_group=0, checkpoint=(0, 1), base=None, entries={}, watermarks={}, out_seq={}
    )
    c.receive(10, full)
    c.receive(UP, ToState(key_group=0, epoch=1, protocol=Protocol.CPA, items=()))
    assert c.phase(0) is Phase.REPLAYING
    return c


def test_outside_active_a_run_takes_the_per_tuple_path() -> None:
    """A CPA target replaying (``REPLAYING``), a task without the group, a group out of
    range: the run's tuples go the way its ``Data`` go, one by one."""
    by_run, by_data = replaying_target(), replaying_target()
    r = run(0, 1, 3)
    got = by_run.receive_run(UP, r)
    assert got == itemwise(by_data, r)
    assert applied(got) == [1, 2, 3]
    assert by_run.stats["in.Data"] == 3
    other = run(1, 1, 2)  # no machine of group 1 here: refused per tuple
    got = by_run.receive_run(UP, other)
    assert got == itemwise(by_data, other)
    assert [a.reason for a in got] == ["not the owner"] * 2
    bad = DataRun(key_group=G, source="u", first=1, items=[("k", 1, 0.0)])
    assert by_run.receive_run(UP, bad) == itemwise(by_data, bad)
    assert by_run.stats == by_data.stats


def test_a_lost_run_is_a_gap_of_its_tuples_resent_one_by_one() -> None:
    """A run lost on the wire (here three tuples never delivered): the next run is
    early and parked, the owner's tick asks for the span, the emitter resends it from
    its buffer tuple by tuple, and every tuple counts once."""
    c = Cluster(num_key_groups=G, tasks=[0, 1], emitters=[10])
    g = 0
    owner_task = c.owner(g)
    for i in range(3):
        c.emit_lost(10, KEYS[g][i], 1)
    for i in range(3, 5):
        c.emit(10, KEYS[g][i], 1)
    channel = (10, owner_task)
    (early,) = c.deliver_runs(channel, 2)
    assert (early.first, early.last) == (4, 5)
    assert c.coordinators[owner_task].machine(g).gaps()[0].awaited == 1
    c.tick(10.0)  # the gap seen
    c.tick(12.0)  # resend_after (1.5 s) later: asked for
    (ask,) = [m for m in c.channels[(owner_task, 10)] if isinstance(m, Resend)]
    assert (ask.first, ask.last) == (1, 5)
    c.heal()
    state = c.coordinators[owner_task].state(g)
    assert state.applied == {"u10": 5}
    assert sum(state.get(k) for k in KEYS[g][:5]) == 5
