"""Idle key groups (``core.timers.idle_advance``, Flink's ``withIdleness``) against what
they promise, over random ticks: a watermark never goes back and only ever goes up to
the frontier (the largest watermark of the task's groups); a group whose own watermark
moved within the timeout is never moved; a group below the frontier whose own
watermark has stood still for the timeout since a tick first saw it there is moved,
at every tick until it moves again by itself."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from elastorm.core.timers import idle_advance

GROUPS = range(3)


class IdleGroups(RuleBasedStateMachine):
    """``marks`` are the groups' watermarks as a task holds them (moved by their own
    tuples, or by the ticks' advances); ``moved_at`` when each last moved by itself."""

    @initialize(timeout=st.sampled_from([1.0, 2.0, 0.0]))
    def setup(self, timeout):
        self.timeout = timeout
        self.now = 0.0
        self.marks: dict[int, float | None] = dict.fromkeys(GROUPS)
        self.moved_at: dict[int, float] = dict.fromkeys(GROUPS, 0.0)
        self.first_tick: dict[int, float | None] = dict.fromkeys(GROUPS)  # since its move
        self.seen: dict = {}
        self.wrong: list = []

    @rule(g=st.sampled_from(GROUPS), up=st.integers(1, 5))
    def own_tuple(self, g, up):
        """A tuple of group ``g`` moves its watermark (above wherever a tick put it)."""
        self.marks[g] = (self.marks[g] or 0) + up
        self.moved_at[g] = self.now
        self.first_tick[g] = None

    @rule(dt=st.sampled_from([0.5, 1.0, 2.5]))
    def wait(self, dt):
        self.now += dt

    @rule()
    def wait_the_timeout(self):
        """Exactly the timeout: the boundary, where a group becomes idle."""
        self.now += self.timeout

    @rule()
    def tick(self):
        before = dict(self.marks)
        for g in GROUPS:
            if self.first_tick[g] is None:
                self.first_tick[g] = self.now
        self.seen, up = idle_advance(self.seen, before, self.now, self.timeout)
        known = [m for m in before.values() if m is not None]
        frontier = max(known) if known else None
        for g, mark in up.items():
            if mark != frontier or before[g] is None or mark <= before[g]:
                self.wrong.append(("not up to the frontier", g, before[g], mark, frontier))
            if self.now - self.moved_at[g] < self.timeout or self.timeout <= 0:
                self.wrong.append(("moved while not idle", g, self.moved_at[g], self.now))
        for g, mark in before.items():
            # a tick saw it at its mark of its own at least the timeout ago
            first = self.first_tick[g]
            idle_long = self.timeout > 0 and first is not None and self.now - first >= self.timeout
            behind = mark is not None and frontier is not None and mark < frontier
            if idle_long and behind and g not in up:
                self.wrong.append(("idle and behind, not moved", g, mark, frontier))
        self.marks.update(up)

    @invariant()
    def as_promised(self):
        assert not self.wrong


IdleGroups.TestCase.settings = settings(max_examples=100, stateful_step_count=20, deadline=None)
test_idle_groups = IdleGroups.TestCase
