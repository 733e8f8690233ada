"""Savepoints (``elastorm.storm.savepoint``): a drained job's key groups, written by one
topology's tasks and restored by another's, whatever the new placement."""

from __future__ import annotations

import json

import pytest

from elastorm.core.keygroups import key_group
from elastorm.core.messages import Data, DataTuple
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.storm.savepoint import group_path, restore_savepoint, write_savepoint

G = 4


def _fed(task: int, owned: list[int], keys: list[str]) -> TaskCoordinator:
    coord = TaskCoordinator(task=task, num_key_groups=G, upstreams=[9], owned=owned)
    seq: dict[int, int] = {}
    for key in keys:
        g = key_group(key, G)
        if g in owned:
            seq[g] = seq.get(g, 0) + 1
            item = DataTuple(source="e:9", seq=seq[g], key=key, value=1, ts=0.0)
            coord.receive(9, Data(key_group=g, item=item))
    return coord


def test_two_tasks_save_and_three_restore_every_group_exactly(tmp_path):
    keys = [f"k{i % 37}" for i in range(500)]
    old = [_fed(1, [0, 2], keys), _fed(2, [1, 3], keys)]
    for coord in old:
        coord.checkpoint(0)  # a checkpoint in flight or done changes nothing saved
    written = [write_savepoint(str(tmp_path), "counter", c) for c in old]
    assert written == [[0, 2], [1, 3]]
    new = [
        TaskCoordinator(task=t, num_key_groups=G, upstreams=[9], owned=gs)
        for t, gs in ((5, [0]), (6, [1, 2]), (7, [3]))
    ]
    restored = [restore_savepoint(str(tmp_path), "counter", c) for c in new]
    assert restored == [[0], [1, 2], [3]]
    total = sum(sum(c.state(g).items().values()) for c in new for g in c.owned())
    assert total == len(keys)
    expect = {k: keys.count(k) for k in set(keys)}
    got = {k: v for c in new for g in c.owned() for k, v in c.state(g).items().items()}
    assert got == expect
    # New sequences start at 1 on the new topology's channels and are applied.
    g = key_group("k1", G)
    owner = next(c for c in new if g in c.owned())
    item = DataTuple(source="e:9", seq=1, key="k1", value=1, ts=0.0)
    owner.receive(9, Data(key_group=g, item=item))
    assert owner.state(g).get("k1") == expect["k1"] + 1


def test_a_group_without_a_file_starts_empty_and_a_bad_file_is_refused(tmp_path):
    coord = TaskCoordinator(task=1, num_key_groups=G, upstreams=[9], owned=[0, 1])
    path = group_path(str(tmp_path), "counter", 1)
    (tmp_path / "counter").mkdir()
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"something": 1}, f)
    with pytest.raises(ValueError, match="not a savepoint"):
        restore_savepoint(str(tmp_path), "counter", coord)
    assert restore_savepoint(str(tmp_path / "none"), "counter", coord) == []
    assert coord.state(0).items() == {}
