"""``len(KeyGroupState)`` without merging its layers (heartbeats call it every tick)."""

from __future__ import annotations

from elastorm.core.messages import DataTuple
from elastorm.core.state import KeyGroupState


def test_state_length_counts_each_key_once_across_layers() -> None:
    state = KeyGroupState(0)
    for seq, key in enumerate(["a", "b", "a"], start=1):
        state.apply(DataTuple(source="s", seq=seq, key=key, value=1, ts=0.0))
    state.begin_checkpoint()  # a, b now inactive
    state.apply(DataTuple(source="s", seq=4, key="c", value=1, ts=0.0))
    state.apply(DataTuple(source="s", seq=5, key="a", value=1, ts=0.0))
    assert len(state) == 3 == len(state.items())
    state.finish_checkpoint()  # a, b in master; a, c active
    state.apply(DataTuple(source="s", seq=6, key="d", value=1, ts=0.0))
    assert len(state) == 4 == len(state.items())
