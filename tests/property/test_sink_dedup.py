"""The sinks' de-duplication (``elastorm.sinks.commits``) against plain sets.

Any delivery of a keyed bolt's outputs (any order, any repeats, in batches of which
some fail and are delivered again, the marks stored as a table row between batches)
writes every id exactly once; ``Committed`` is the set of sequences it stands for."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from elastorm.sinks.commits import Committed, Output, plan

CHANNELS = [("counts", "default", g, src) for g in (0, 1) for src in ("r:1", "r:2")]


def _output(channel, seq: int, kind: str = "final") -> Output:
    component, stream, group, source = channel
    return Output(
        component=component,
        stream=stream,
        key_group=group,
        source=source,
        seq=seq,
        kind=kind,
        values=(f"{group}/{source}/{seq}",),
    )


@st.composite
def deliveries(draw):
    """(every id, the deliveries in order, batch sizes, which batches fail)."""
    sizes = draw(st.lists(st.integers(0, 6), min_size=len(CHANNELS), max_size=len(CHANNELS)))
    ids = [(ch, seq) for ch, n in zip(CHANNELS, sizes, strict=True) for seq in range(1, n + 1)]
    assume(ids)
    repeats = draw(st.lists(st.sampled_from(ids), max_size=12))
    order = draw(st.permutations(ids + repeats))
    batches = draw(st.lists(st.integers(1, 5), min_size=1, max_size=len(order)))
    fails = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return ids, order, batches, fails


@settings(max_examples=300, deadline=None)
@given(deliveries())
def test_any_delivery_with_repeats_and_failed_batches_writes_each_id_once(case) -> None:
    ids, order, batch_sizes, fails = case
    table: dict = {}  # channel -> (mark, holes), as the marks table stores them
    written: list = []
    queue = [_output(ch, seq) for ch, seq in order]
    attempt = 0
    while queue:
        size = batch_sizes[attempt % len(batch_sizes)]
        fail = fails[attempt % len(fails)] and attempt < 2 * len(fails)  # retries end
        batch, queue = queue[:size], queue[size:]
        committed = {ch: Committed.decode(*row) for ch, row in table.items()}
        done = plan(committed, batch)
        assert len(done.write) + len(done.duplicates) == len(batch)
        if fail:
            queue += batch  # rolled back: delivered again later
        else:
            written.extend(done.write)
            for ch, c in done.marks.items():
                table[ch] = (c.mark, c.encode_holes())
        attempt += 1
    got = [(o.channel, o.seq) for o in written]
    assert sorted(got) == sorted(ids)  # every id, none twice
    for ch in CHANNELS:
        n = max((seq for c, seq in ids if c == ch), default=0)
        if n:
            assert table[ch] == (n, "")  # every sequence in: no holes left


@given(st.lists(st.sampled_from(CHANNELS), max_size=10))
def test_outputs_without_an_id_are_always_written(channels) -> None:
    outs = [_output(ch, 0, "rectified") for ch in channels]
    done = plan({ch: Committed([(1, 5)]) for ch in CHANNELS}, outs + outs)
    assert list(done.write) == outs + outs and not done.duplicates and not done.marks


class CommittedSet(RuleBasedStateMachine):
    """``Committed`` after any additions is the set of what was added."""

    def __init__(self) -> None:
        super().__init__()
        self.committed = Committed()
        self.model: set[int] = set()

    @rule(seq=st.integers(1, 40))
    def add(self, seq: int) -> None:
        self.committed = self.committed.add(seq)
        self.model.add(seq)

    @invariant()
    def is_the_model(self) -> None:
        c, model = self.committed, self.model
        assert {s for s in range(1, 42) if s in c} == model
        assert c.mark == max(model, default=0)
        holes = {s for lo, hi in c.holes for s in range(lo, hi + 1)}
        assert holes == set(range(1, c.mark + 1)) - model
        assert Committed.decode(c.mark, c.encode_holes()) == c
        for (_, hi), (lo, _) in zip(c.ranges, c.ranges[1:], strict=False):
            assert lo > hi + 1  # disjoint, never adjacent (merged)


TestCommittedSet = CommittedSet.TestCase
