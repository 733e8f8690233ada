"""Keyed outputs into a keyed bolt are applied once (``elastorm.core.once``).

Chaos ``chained/lose-1`` (a per-letter count of word counts) found 46 of 4,000
updates applied twice after a kill -9 of a first-stage task: the restored group sent
its outputs since its last checkpoint again, with the same ids, and the router in
front of the second stage numbered them afresh. These tests replay that: the same
upstream outputs arrive again under new router sequence numbers.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from streamparse import Bolt
from test_keyed_api import _bolt as keyed_bolt
from test_keyed_api import _Tup

from elastorm import KeyedBolt, ValueState
from elastorm.core.messages import Data, DataTuple
from elastorm.core.once import ONCE, first_application, output_id
from elastorm.core.state import KeyGroupState


class Letters(KeyedBolt):
    """A non-idempotent count: +1 per update received."""

    outputs = ["letter", "updates"]
    updates = ValueState(default=0)

    def process_keyed(self, key, values):
        self.updates.update(self.updates.value() + 1)
        self.emit([key, self.updates.value()])


def _bolt(monkeypatch) -> Letters:
    return keyed_bolt(monkeypatch, Letters)


def _tup(seq: int, values: list) -> _Tup:
    return _Tup(Data(key_group=0, item=DataTuple("r:1", seq, values[0][0], values, 0.0)))


def _upstream(word: str, group: int, seq: int, kind: str = "final") -> list:
    """An output of the first stage (``output_id_fields(["word", "count"])``)."""
    return [word, seq, group, "words_router:5", seq, kind]


def test_an_upstream_output_sent_again_under_a_new_router_sequence_is_applied_once(
    monkeypatch,
) -> None:
    bolt = _bolt(monkeypatch)
    out: list = []
    monkeypatch.setattr(Bolt, "emit", lambda self, v, stream=None, **kw: out.append(v))
    first = [_upstream("storm", 7, s) for s in (1, 2, 3)]
    # The upstream group restored from its checkpoint after output 1 sends 2 and 3 again
    # (same ids), then its new output 4; the router numbers all of them afresh.
    again = [_upstream("storm", 7, s) for s in (2, 3, 4)]
    for seq, values in enumerate([*first, *again], start=1):
        bolt.process(_tup(seq, values))
    assert bolt.coordinator.state(0).get("s") == {"updates": 4}
    assert out == [["s", 1], ["s", 2], ["s", 3], ["s", 4]]
    assert bolt.repeats == 2


def test_outputs_without_an_id_are_applied_every_time(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)
    monkeypatch.setattr(Bolt, "emit", lambda self, v, stream=None, **kw: None)
    rectified = ["storm", 3, 7, "", 0, "rectified"]
    for seq, values in enumerate([["storm", 1], ["storm", 1], rectified, rectified], start=1):
        bolt.process(_tup(seq, values))
    assert bolt.coordinator.state(0).get("s") == {"updates": 4}
    assert bolt.repeats == 0


def test_the_applied_ids_travel_with_the_group_state(monkeypatch) -> None:
    # A checkpoint (or a migration, or a restore) carries the record: the group
    # rebuilt from its entries skips what the old owner applied.
    bolt = _bolt(monkeypatch)
    monkeypatch.setattr(Bolt, "emit", lambda self, v, stream=None, **kw: None)
    for seq in (1, 2):
        bolt.process(_tup(seq, _upstream("storm", 7, seq)))
    entries = bolt.coordinator.state(0).items()
    assert entries[f"{ONCE}7|words_router:5"] == [2, ""]
    copy = KeyGroupState(0, master=dict(entries))
    assert not first_application(copy, (7, "words_router:5", 2))
    assert first_application(copy, (7, "words_router:5", 3))


@given(
    st.lists(st.integers(min_value=1, max_value=40), max_size=120),
    st.sampled_from(["final", "tentative"]),
)
def test_each_id_is_first_applied_exactly_once_in_any_order(seqs, kind) -> None:
    group = KeyGroupState(0)
    firsts = [s for s in seqs if first_application(group, output_id(_upstream("w", 2, s, kind)))]
    assert sorted(firsts) == sorted(set(seqs))
