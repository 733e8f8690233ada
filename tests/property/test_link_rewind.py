"""Property: over a lossy spout -> emitter wire, link numbers and rewinds make every
row reach its emitter task exactly once, in order (``elastorm.core.replay``).

A model spout (``Links`` picks the task of each row and numbers each link; a rewind
request is served as ``ReplayableSpout.poll_rewind`` does: the marker to every task,
then a seek back) feeds two emitter tasks (``ReplayTracker``) over FIFO links. The
wire loses a random choice of data tuples *and* markers; Hypothesis interleaves
emits, deliveries, the spout's polls and the emitters' ticks (which ask again after
``retry_after`` without a marker). Then everything runs to quiescence with a
loss-free wire. Every task must have admitted exactly the rows that are its own,
each once, in increasing order.
"""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st
from property_scale import examples

from elastorm.core.replay import Links, ReplayTracker, RewindAsk

TASKS = (3, 4)
SPOUT = "spout:9"
RETRY_AFTER = 3.0


class Model:
    """The spout, the two links and the emitters; ``lose`` decides each message's fate."""

    def __init__(self, rows: int, lose) -> None:
        self.rows = rows
        self.lose = lose
        self.links = Links(TASKS)
        self.position = 0  # the spout's next row
        self.served: set[str] = set()
        self.requests: dict[int, RewindAsk] = {}  # rewinds/<spout>/<task>: the newest
        self.wire = {t: deque() for t in TASKS}
        self.trackers = {t: ReplayTracker(token=f"{t}#1", retry_after=RETRY_AFTER) for t in TASKS}
        self.admitted: dict[int, list[int]] = {t: [] for t in TASKS}
        self.now = 0.0

    def emit(self) -> None:
        if self.position >= self.rows:
            return
        link, task = self.links.next(self.position)
        if not self.lose():
            self.wire[task].append(("data", self.position, link))
        self.position += 1

    def poll(self) -> None:
        fresh = {a.token: a for a in self.requests.values() if a.token not in self.served}
        if not fresh:
            return
        self.served.update(fresh)
        start = min(a.positions.get(SPOUT, -1) + 1 for a in fresh.values())
        self.marker(sorted(fresh))
        self.position = min(start, self.position)

    def marker(self, tokens: list[str]) -> None:
        """To every task (all grouping), with the link numbers sent so far; no tokens:
        the spout's probe."""
        sent = dict(self.links.sent())
        for t in TASKS:
            if not self.lose():
                self.wire[t].append(("marker", tokens, sent[t]))

    def deliver(self, task: int) -> None:
        if not self.wire[task]:
            return
        message = self.wire[task].popleft()
        tracker = self.trackers[task]
        if message[0] == "marker":
            tracker.rewound(message[1], SPOUT, sent=message[2])
        elif tracker.admit(SPOUT, message[1], link=message[2]):
            self.admitted[task].append(message[1])
        self.take(task)

    def take(self, task: int) -> None:
        for ask in self.trackers[task].rewind_asks(self.now):
            self.requests[task] = ask

    def tick(self) -> None:
        self.now += 1.0
        for t in TASKS:
            self.take(t)

    def quiet(self) -> bool:
        return (
            self.position >= self.rows
            and not any(self.wire.values())
            and not any(t.link_waits() for t in self.trackers.values())
        )


STEPS = st.lists(st.sampled_from(["emit", "emit", "deliver3", "deliver4", "poll", "probe", "tick"]))


@settings(max_examples=examples(300), deadline=None)
@given(
    rows=st.integers(min_value=1, max_value=60),
    steps=STEPS,
    losses=st.lists(st.booleans(), max_size=80),
)
def test_every_row_reaches_its_task_once_and_in_order(rows, steps, losses) -> None:
    fates = iter(losses)
    model = Model(rows, lambda: next(fates, False))
    for step in steps:
        if step == "emit":
            model.emit()
        elif step == "poll":
            model.poll()
        elif step == "tick":
            model.tick()
        elif step == "probe":
            model.marker([])
        else:
            model.deliver(int(step[-1]))
    # Then on, a wire that loses nothing, until nothing moves (the probes included):
    # the losses not drawn yet must not fall here, or the drain could end with a row
    # and the one probe that would reveal it both lost (the spout probes for ever).
    model.lose = lambda: False
    for _ in range(20 * rows + 200):
        model.emit()
        model.poll()
        model.marker([])
        for t in TASKS:
            while model.wire[t]:
                model.deliver(t)
        model.tick()
        if model.quiet():
            break
    assert model.quiet()
    for i, t in enumerate(TASKS):
        assert model.admitted[t] == list(range(i, rows, len(TASKS)))


def test_without_the_link_check_a_lost_row_is_never_admitted() -> None:
    """The model's control: the same loss with the emitters told no link numbers."""
    fates = iter([False, True])
    model = Model(4, lambda: next(fates, False))
    for _ in range(4):
        model.emit()
    for t in TASKS:  # delivered as before the link check existed
        while model.wire[t]:
            _, position, _ = model.wire[t].popleft()
            if model.trackers[t].admit(SPOUT, position):
                model.admitted[t].append(position)
    assert model.admitted[TASKS[1]] == [3]  # row 1 is gone for good


def test_a_burst_costs_one_rewind_per_task_that_lost_tuples() -> None:
    """The loss seen on the cluster: one burst of consecutive tuples."""
    fates = iter([False] * 10 + [True] * 7)
    model = Model(40, lambda: next(fates, False))
    for _ in range(20):
        model.emit()
    for t in TASKS:
        while model.wire[t]:
            model.deliver(t)
    assert sorted(model.requests) == list(TASKS)  # both lost some (rows 10..16)
    while not model.quiet():
        model.emit()
        model.poll()
        for t in TASKS:
            while model.wire[t]:
                model.deliver(t)
        model.tick()
    assert all(t.link_asks == 1 for t in model.trackers.values())
    assert sum(t.link_lost for t in model.trackers.values()) == 7
    for i, t in enumerate(TASKS):
        assert model.admitted[t] == list(range(i, 40, len(TASKS)))
