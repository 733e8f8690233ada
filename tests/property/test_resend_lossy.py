"""Property: over a lossy channel, resending makes every tuple count exactly once.

Hypothesis generates tuples from two emitters to an operator of a few key groups on
three tasks, loses a random choice of them on the wire (each is numbered and
buffered by its emitter, never delivered), delivers the rest in any interleaving
that keeps each channel FIFO (data one by one or as tuples of data runs, which come
early after a loss), with checkpoints (so trims run) and a migration by any
protocol on the way, and loses some of the keyed tasks' ``Resend`` requests too.
Then the tasks and emitters tick every ``resend_after`` seconds for a while. The
owner of every group must end with the plain fold of every tuple emitted to it, lost
or not, and no tuple's outputs may be sent twice (nor, without a migration, left
unsent).

A loss is found by the tuples behind it (a sequence gap); a loss at the end of a
lane has none until the emitter's probe re-sends the lane's newest tuple.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from property_scale import examples
from sim import Cluster, deliver_drawn

from elastorm.core.keygroups import key_group
from elastorm.core.messages import Protocol, Resend
from elastorm.core.state import fold

GROUPS = 3
TASKS = (0, 1, 2)
EMITTERS = (10, 11)
KEYS = tuple(f"k{i}" for i in range(6))
RESEND_AFTER = 1.5  # TaskCoordinator's default


def add(current: int | None, value: int) -> int:
    return (current or 0) + value


emits = st.lists(
    st.tuples(
        st.sampled_from(EMITTERS),
        st.sampled_from(KEYS),
        st.integers(1, 1_000),  # > 0: a tuple counted twice changes the total
        st.integers(0, 3).map(lambda n: n == 0),  # lost on the wire (a quarter)
    ),
    min_size=2,
    max_size=40,
)


ROUNDS = 8  # ticks, resend_after apart: a probe takes 2, a request 1-2, lost requests 1 each


@settings(max_examples=examples(300), deadline=None)
@given(script=emits, data=st.data())
def test_lost_tuples_are_resent_and_each_counts_once(script, data) -> None:
    assume(any(lost for *_, lost in script))
    c = Cluster(num_key_groups=GROUPS, tasks=TASKS, emitters=EMITTERS, step=fold(add))
    migrate_at = data.draw(st.integers(0, len(script)), label="migrate at")
    migrated = False
    for i, (emitter, key, value, lost) in enumerate(script):
        (c.emit_lost if lost else c.emit)(emitter, key, value)
        for _ in range(data.draw(st.integers(0, 3), label="deliveries")):
            if c.pending():
                deliver_drawn(c, data)  # a message, or data as runs (early ones after a loss)
        if data.draw(st.booleans(), label="checkpoint"):
            g = data.draw(st.integers(0, GROUPS - 1), label="group")
            c.checkpoint(c.owner(g), g)
        if i == migrate_at:
            movable = [g for g in range(GROUPS) if c.can_migrate(g)]
            if movable:
                g = data.draw(st.sampled_from(movable), label="moved group")
                protocol = data.draw(st.sampled_from(list(Protocol)[:3]), label="protocol")
                target = c.holders[g] if protocol is not Protocol.DIRECT else (c.owner(g) + 1) % 3
                event(f"migrate {c.migrate(g, target, protocol).value}")
                migrated = True
    lose_requests = data.draw(st.integers(0, 2), label="resend requests lost")
    for round_ in range(ROUNDS):
        c.run_until_quiet()
        c.tick(round_ * RESEND_AFTER)
        for channel in c.pending():
            if lose_requests and isinstance(c.channels[channel][0], Resend):
                c.lose(channel)
                lose_requests -= 1
    c.run_until_quiet()
    assert c.gaps() == 0
    event(f"probes: {sum(e.stats['probes'] for e in c.emitters.values()) > 0}")

    expected: dict[int, dict[str, int]] = {g: {} for g in range(GROUPS)}
    for _, key, value, _ in script:
        g = key_group(key, GROUPS)
        expected[g][key] = add(expected[g].get(key), value)
    for g in range(GROUPS):
        assert c.live_states(g) == {c.owner(g): expected[g]}, g
    outputs = Counter(
        (a.key_group, a.item.source, a.item.seq) for _, a in c.applied if a.emit_output
    )
    assert set(outputs.values()) <= {1}  # no tuple's outputs twice
    # ... nor skipped, a migration on the way or not: a move's target replays without
    # outputs what the old owner was sent, so the old owner applies, from its
    # toCheckpoint's copy of the buffer, a lost tuple and those parked behind it
    # (a join's or a window's outputs are events: skipping one loses it).
    assert sum(outputs.values()) == len(script)
    event(f"migrated: {migrated}")
    event(f"data runs: {c.stats['runs'] > 0}")
