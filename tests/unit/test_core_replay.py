"""An emitter rebuilt by replay from its restart point sends exactly what it sent
before, numbered the same (``elastorm.core.replay``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastorm.core.buffers import SequenceCounters
from elastorm.core.migration.emitter import Emitter
from elastorm.core.replay import (
    ALL,
    Links,
    ReplayTracker,
    RestartPoint,
    RewindAsk,
    replay_start,
)
from elastorm.core.routing import RoutingTable

GROUPS = 4
OP = "op2"
SPOUT = "spout:1"
OTHER = "spout:2"
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


# -- links: a tuple lost between the spout and a live emitter (issue 14) ---------------


def test_links_pick_the_task_by_position_and_number_each_link() -> None:
    links = Links([6, 5])
    assert [links.next(p) for p in (0, 1, 2, 3, 0)] == [(1, 5), (1, 6), (2, 5), (2, 6), (3, 5)]
    with pytest.raises(ValueError, match="at least one"):
        Links([])


def test_a_skipped_link_number_asks_for_exactly_one_rewind() -> None:
    tracker = ReplayTracker(token="5#1")
    assert tracker.admit(SPOUT, 0, link=1) and tracker.admit(SPOUT, 2, link=2)
    assert not tracker.asking
    assert not tracker.admit(SPOUT, 6, link=4)  # link 3 (row 4) was lost on the wire
    assert tracker.asking
    (ask,) = tracker.rewind_asks(now=100.0)
    assert ask == RewindAsk(token="5#1.1", upstream=SPOUT, positions={SPOUT: 2}, missing=1)
    assert RestartPoint(positions=ask.positions).start(SPOUT) == 3  # the spout's start
    # Nothing more from that spout task until the marker; further skips ask nothing.
    assert not tracker.admit(SPOUT, 8, link=5)
    assert not tracker.admit(SPOUT, 12, link=7)
    assert tracker.rewind_asks(now=101.0) == [] and tracker.link_waits() == [SPOUT]
    assert tracker.admit(OTHER, 1, link=1)  # another spout task's link is not held up
    assert not tracker.rewound(["5#1.1"], OTHER)  # its marker is not ours to wait for
    assert not tracker.rewound(["4#1.1"], SPOUT)  # naming another emitter's rewind
    assert tracker.rewound(["4#1.1", "5#1.1"], SPOUT)
    assert tracker.link_waits() == []
    # The replay: what was admitted is dropped as a repeat, the lost row comes in.
    admitted = [p for p, n in ((2, 8), (4, 9), (6, 10), (8, 11)) if tracker.admit(SPOUT, p, n)]
    assert admitted == [4, 6, 8]
    assert tracker.link_lost == 2 and tracker.link_asks == 1
    assert tracker.dropped == 4  # 6, 8, 12 before the marker; 2 after it


def test_a_wait_without_its_marker_asks_again_with_a_fresh_token() -> None:
    tracker = ReplayTracker(token="5#2", retry_after=30.0)
    tracker.admit(SPOUT, 0, link=1)
    tracker.admit(SPOUT, 4, link=3)
    (first,) = tracker.rewind_asks(now=10.0)
    assert tracker.rewind_asks(now=39.0) == []
    (again,) = tracker.rewind_asks(now=40.0)
    assert (again.token, again.missing, again.positions) == ("5#2.2", 0, {SPOUT: 0})
    assert tracker.rewind_asks(now=41.0) == []
    assert tracker.rewound([first.token], SPOUT)  # any token asked serves: same start
    assert tracker.admit(SPOUT, 2, link=4) and tracker.rewind_asks(now=100.0) == []


def test_a_restart_whose_marker_never_comes_asks_every_source_again() -> None:
    """Before: a restarted emitter whose rewind request or marker was lost admitted
    nothing, for good (only lossy links were asked again; issue 32's open hole)."""
    start = RestartPoint(positions={SPOUT: 9})
    tracker = ReplayTracker(
        start=start, awaiting="5#2", token="5#2", retry_after=30.0, sources=["lines", "more"]
    )
    assert tracker.rewind_asks(now=10.0) == []  # its start wrote the first request
    assert tracker.rewind_asks(now=39.0) == []
    asks = tracker.rewind_asks(now=40.0)
    assert [(a.upstream, a.token, dict(a.positions)) for a in asks] == [
        ("lines", "5#2.r1", {SPOUT: 9}),
        ("more", "5#2.r1", {SPOUT: 9}),
    ]
    assert tracker.rewind_asks(now=41.0) == [] and not tracker.admit(SPOUT, 10)
    (again, _) = tracker.rewind_asks(now=70.0)
    assert again.token == "5#2.r2" and tracker.restart_asks == 2
    assert tracker.rewound(["5#2.r1"])  # any token asked serves: the same start
    assert tracker.admit(SPOUT, 10) and tracker.rewind_asks(now=200.0) == []


def test_a_restarted_spout_numbers_its_links_from_one_again() -> None:
    tracker = ReplayTracker(token="5#1")
    assert tracker.admit(SPOUT, 0, link=1) and tracker.admit(SPOUT, 2, link=2)
    assert not tracker.rewound([ALL], SPOUT)  # not waiting: nothing to end
    assert not tracker.admit(SPOUT, 0, link=1)  # a repeat, and link 1 is what comes first
    assert not tracker.asking
    assert not tracker.admit(SPOUT, 4, link=3)  # link 2 lost right after the restart
    assert tracker.asking
    assert tracker.rewind_asks(now=0.0)[0].positions == {SPOUT: 2}


def test_a_skip_while_a_restart_waits_for_its_marker_asks_nothing() -> None:
    tracker = ReplayTracker(start=RestartPoint(positions={SPOUT: 9}), awaiting="5#2", token="5#2")
    assert not tracker.admit(SPOUT, 40, link=17)
    assert not tracker.admit(SPOUT, 44, link=19)  # the replay asked for starts at 10
    assert not tracker.asking and tracker.link_lost == 1
    assert tracker.rewound(["5#2"], SPOUT)
    assert tracker.admit(SPOUT, 10, link=20)
