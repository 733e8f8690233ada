"""An emitter rebuilt by replay from its restart point sends exactly what it sent
before, numbered the same (``elastorm.core.replay``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from elastorm.core.buffers import SequenceCounters
from elastorm.core.migration.emitter import Emitter
from elastorm.core.replay import ReplayTracker, RestartPoint, replay_start
from elastorm.core.routing import RoutingTable

GROUPS = 4
OP = "op2"
SPOUT = "spout:1"
SOURCE = "op1:5"


def _key(position: int) -> str:
    return f"k{(position * 7919) % 23}"


def _emitter(point: RestartPoint) -> Emitter:
    emitter = Emitter(task=5, routing=RoutingTable.round_robin(GROUPS, [1, 2]), source=SOURCE)
    counters = point.counters.get(OP, {})
    emitter.counters = SequenceCounters({(SOURCE, g): seq for g, seq in counters.items()})
    return emitter


def _run(emitter, tracker, positions, sent):
    for position in positions:
        if not tracker.admit(SPOUT, position):
            continue
        for action in emitter.emit(_key(position), position, 0.0):
            item = action.message.item
            sent[(action.message.key_group, item.seq)] = (item.key, item.value)
        tracker.processed(lambda: {OP: emitter.counters.of_source(SOURCE)})


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=400),
    trims=st.lists(st.tuples(st.integers(0, 400), st.integers(0, GROUPS - 1)), max_size=30),
    every=st.integers(min_value=1, max_value=50),
)
def test_replay_from_the_durable_point_rebuilds_every_untrimmed_tuple_identically(
    total, trims, every
) -> None:
    first = ReplayTracker(every=every)
    emitter = _emitter(RestartPoint())
    sent: dict[tuple[int, int], tuple] = {}
    done = 0
    for upto_position, g in sorted(trims):  # trims arrive as the stream goes on
        _run(emitter, first, range(done, min(total, upto_position)), sent)
        done = max(done, min(total, upto_position))
        seq = emitter.counters.last(SOURCE, g)
        first.trimmed(OP, g, seq)
        emitter.buffer.trim(g, {SOURCE: seq})
    _run(emitter, first, range(done, total), sent)
    point = first.durable()
    untrimmed = {(g, item.seq) for g in range(GROUPS) for item in emitter.buffer.replay(g)}

    # The emitter dies; it comes back from its restart point, and the source replays.
    again = ReplayTracker(start=point, every=every)
    rebuilt = _emitter(point)
    resent: dict[tuple[int, int], tuple] = {}
    _run(rebuilt, again, range(replay_start([point], SPOUT), total), resent)

    assert untrimmed <= resent.keys()  # everything a restore could still need
    assert all(sent[k] == v for k, v in resent.items())  # numbered as before
    assert {(g, i.seq) for g in range(GROUPS) for i in rebuilt.buffer.replay(g)} >= untrimmed


def test_a_restarted_emitter_admits_nothing_before_its_rewind_marker() -> None:
    tracker = ReplayTracker(start=RestartPoint(positions={SPOUT: 9}), awaiting="5#2")
    assert not tracker.admit(SPOUT, 40)  # sent before the rewind: may skip 10..39
    assert not tracker.rewound(["4#3"])
    assert tracker.rewound(["4#3", "5#2"])
    assert not tracker.admit(SPOUT, 9) and tracker.admit(SPOUT, 10)
    assert not tracker.admit(SPOUT, 10) and tracker.dropped == 3


def test_the_durable_point_waits_for_every_group_to_be_trimmed() -> None:
    tracker = ReplayTracker(every=1)
    counters = {OP: {0: 1}}
    assert tracker.admit(SPOUT, 0)
    tracker.processed(lambda: counters)
    counters = {OP: {0: 1, 1: 1}}
    assert tracker.admit(SPOUT, 1)
    tracker.processed(lambda: counters)
    assert tracker.durable() == RestartPoint()
    tracker.trimmed(OP, 1, 1)
    assert tracker.durable() == RestartPoint()  # group 0's tuple is not covered yet
    tracker.trimmed(OP, 0, 1)
    assert tracker.durable().positions == {SPOUT: 1}
    assert replay_start([tracker.durable()], SPOUT) == 2
