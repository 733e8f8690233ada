"""Savepoints (``elastorm.durable.savepoint``, ``elastorm.storm.savepoint``,
``elastorm.runtime.restore``): which sets a savepoint takes, which restart points it
keeps, retention never deleting what it names, the restore of a new submission (state,
output counters, watermarks, checkpoint ids after the copies'), where the sources resume,
and the refusal of a changed key-group count."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_durable_format import OP, checkpoints, write_all

from elastorm.config import ConfigError, TopologyConfig
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.replay import RestartPoint, replay_start
from elastorm.durable.format import CorruptFile, Policy, file_name, group_dir, to_delete
from elastorm.durable.local import LocalStore
from elastorm.durable.savepoint import (
    GroupSet,
    Savepoint,
    SavepointError,
    consistent_points,
    covered,
    decode,
    encode,
    load,
    newest_manifests,
    pinned_files,
    record_operator,
    refusal,
    take,
)
from elastorm.durable.writer import retire, write_checkpoint
from elastorm.errors import UserError
from elastorm.runtime.restore import restore_options
from elastorm.storm.savepoint import restore_keyed, restored_points, savepoint_of

GROUPS = 4


def _store(tmp_path) -> LocalStore:
    """A store with ``OP``'s group 3 written (three checkpoints) and the others empty."""
    store = LocalStore(tmp_path)
    record_operator(store, OP, GROUPS)
    write_all(store, checkpoints([{"a": 1}, {"b": 2}, {"a": 5}]))
    return store


def test_newest_manifest_per_group_ignores_other_files():
    names = {
        0: [file_name("manifest", (1, 4)), file_name("manifest", (2, 0)), "base-x"],
        1: [file_name("base", (0, 1))],
        2: [],
    }
    assert newest_manifests(names) == {0: file_name("manifest", (2, 0))}


def test_take_records_the_newest_set_and_round_trips(tmp_path):
    store = _store(tmp_path)
    point = RestartPoint(positions={"spout:1": 41}, counters={OP: {3: 3}})
    sp, dropped = take(store, name="before-upgrade", now=100.0, points={"up-1": point})
    assert dropped == []
    assert sp.key_groups == {OP: GROUPS} and list(sp.sets[OP]) == [3]
    assert sp.sets[OP][3].watermarks == {"up-1": 3}
    assert load(store, "before-upgrade") == sp == decode(encode(sp))
    assert sp.first_epoch() == sp.sets[OP][3].checkpoint[0] + 1
    with pytest.raises(SavepointError, match="no savepoint 'other'.*before-upgrade"):
        load(store, "other")


def test_a_corrupt_savepoint_file_is_detected(tmp_path):
    store = _store(tmp_path)
    take(store, name="sp", now=1.0, points={})
    data = bytearray(store.get("savepoints/sp.json"))
    data[-2] ^= 0xFF
    store.put("savepoints/sp.json", bytes(data))
    with pytest.raises(CorruptFile):
        load(store, "sp")


def test_a_store_without_operators_is_refused(tmp_path):
    with pytest.raises(SavepointError, match="no keyed operator"):
        take(LocalStore(tmp_path), name="sp", now=1.0, points={})


def test_a_restart_point_the_sets_do_not_cover_is_dropped(tmp_path):
    store = _store(tmp_path)
    ahead = RestartPoint(positions={"s:1": 9}, counters={OP: {3: 4}})  # the set has 3
    elsewhere = RestartPoint(positions={"s:1": 2}, counters={OP: {0: 1}})  # group 0: no set
    sp, dropped = take(store, name="sp", now=1.0, points={"up-1": ahead, "x:2": elsewhere})
    assert dropped == ["up-1", "x:2"] and sp.points == {}


@given(
    counters=st.dictionaries(st.integers(0, 5), st.integers(0, 20), max_size=6),
    marks=st.dictionaries(st.integers(0, 5), st.integers(0, 20), max_size=6),
)
def test_covered_iff_every_counted_group_reflects_it(counters, marks):
    point = RestartPoint(counters={OP: counters})
    sets = {
        OP: {
            g: GroupSet(manifest=file_name("manifest", (0, 1)), files=(), watermarks={"e:1": m})
            for g, m in marks.items()
        }
    }
    want = all(seq <= marks.get(g, 0) for g, seq in counters.items())
    kept, dropped = consistent_points({"e:1": point}, sets)
    assert covered("e:1", point, {OP: {g: s.watermarks for g, s in sets[OP].items()}}) is want
    assert (kept == {"e:1": point}) is want and (dropped == ["e:1"]) is (not want)


def test_a_changed_key_group_count_is_refused_with_the_way_out(tmp_path):
    sp, _ = take(_store(tmp_path), name="sp", now=1.0, points={})
    assert refusal(sp, OP, GROUPS) is None
    assert refusal(sp, "unknown-operator", 7) is None  # new operator: starts empty
    why = refusal(sp, OP, GROUPS * 2)
    assert why is not None and f"elastorm.key_groups={GROUPS}" in why and str(GROUPS * 2) in why


@given(pin=st.sets(st.integers(0, 7)))
def test_retention_never_deletes_a_pinned_file(pin):
    names = [file_name(k, (0, n)) for n in range(8) for k in ("base", "manifest")]
    from elastorm.durable.format import Manifest

    kept = [
        Manifest(
            key_group=0,
            checkpoint=(0, 7),
            files=(file_name("base", (0, 7)),),
            sizes=(1,),
            crcs=(0,),
            watermarks={},
        )
    ]
    pinned = frozenset(names[i] for i in pin)
    assume(pinned)
    plain = to_delete(names, kept)
    assert to_delete(names, kept, pinned) == [n for n in plain if n not in pinned]


def test_the_writer_keeps_every_file_a_savepoint_names(tmp_path):
    store = _store(tmp_path)
    sp, _ = take(store, name="keep", now=1.0, points={})
    pinned = pinned_files([sp], OP, 3)
    assert pinned and pinned == {sp.sets[OP][3].manifest, *sp.sets[OP][3].files}
    # More checkpoints, each a new base: retention would delete the saved set.
    policy = Policy(compact_deltas=1, retain=0)
    from elastorm.durable.restore import load_latest

    current = load_latest(store, OP, 3).manifest
    more = checkpoints([{"a": 1}, {"b": 2}, {"a": 5}, {"c": 1}, {"d": 1}, {"e": 1}])[3:]
    for delta in more:
        current = write_checkpoint(store, policy, OP, current, delta)
        retire(store, OP, [current])
    left = set(store.list(group_dir(OP, 3)))
    assert pinned <= left
    assert len(left) > len(pinned) >= 2  # the newest set is there too
    # without the savepoint the same retention deletes them
    store.delete("savepoints/keep.json")
    current = write_checkpoint(store, policy, OP, current, checkpoints([{"z": 1}] * 7)[6])
    retire(store, OP, [current])
    assert not pinned & set(store.list(group_dir(OP, 3)))


def test_a_new_submission_starts_from_the_savepoint(tmp_path):
    store = _store(tmp_path)
    sp, _ = take(store, name="sp", now=1.0, points={})
    config = TopologyConfig(key_groups=GROUPS, restore_from="sp", restore_epoch=sp.first_epoch())
    assert savepoint_of(store, config) == sp
    new = TaskCoordinator(task=2, num_key_groups=GROUPS, upstreams=[9], owned=[1, 3])
    assert restore_keyed(store, sp, OP, new, epoch=sp.first_epoch()) == [3]
    state = new.state(3)
    assert state.items() == {"a": 6, "b": 2}
    assert dict(state.applied) == {"up-1": 3}  # upstream replays are dropped up to here
    assert state.checkpoint > sp.sets[OP][3].checkpoint  # its files sort after the set's
    assert new.state(1).items() == {} and new.state(1).checkpoint[0] == sp.first_epoch()


def test_the_output_counters_continue_after_a_restore(tmp_path):
    store = LocalStore(tmp_path)
    record_operator(store, OP, GROUPS)
    old = TaskCoordinator(task=1, num_key_groups=GROUPS, upstreams=[9], owned=[0])
    old.state(0).update("a", 1)
    old.state(0).out_seq.next("default<r:1", 0)
    old.state(0).out_seq.next("default<r:1", 0)
    write_checkpoint(store, Policy(), OP, None, old.state(0).begin_checkpoint(full=True))
    sp, _ = take(store, name="sp", now=1.0, points={})
    new = TaskCoordinator(task=2, num_key_groups=GROUPS, upstreams=[9], owned=[0])
    restore_keyed(store, sp, OP, new, epoch=sp.first_epoch())
    assert new.state(0).out_seq.last("default<r:1", 0) == 2


def test_the_task_refuses_a_changed_key_group_count(tmp_path):
    store = _store(tmp_path)
    sp, _ = take(store, name="sp", now=1.0, points={})
    new = TaskCoordinator(task=2, num_key_groups=GROUPS + 1, upstreams=[9], owned=[3])
    with pytest.raises(ConfigError, match="cannot change across a restore"):
        restore_keyed(store, sp, OP, new, epoch=sp.first_epoch())


def test_a_component_refuses_latest_unresolved_and_a_low_epoch(tmp_path):
    store = _store(tmp_path)
    sp, _ = take(store, name="sp", now=1.0, points={})
    assert savepoint_of(store, TopologyConfig()) is None
    with pytest.raises(ConfigError, match="resolved at submit"):
        savepoint_of(store, TopologyConfig(restore_from="latest"))
    with pytest.raises(ConfigError, match="restore_epoch"):
        savepoint_of(store, TopologyConfig(restore_from="sp", restore_epoch=0))
    with pytest.raises(ConfigError, match="durable tier"):
        savepoint_of(None, TopologyConfig(restore_from="sp"))


def test_a_spout_resumes_at_the_oldest_position_its_emitters_need():
    points = {
        "router:4": RestartPoint(positions={"lines:1": 90}),
        "router:5": RestartPoint(positions={"lines:1": 41, "lines:2": 7}),
    }
    sp = Savepoint(name="sp", taken_at=0.0, key_groups={}, sets={}, points=points)
    assert replay_start(restored_points(sp, {"router": [4, 5]}), "lines:1") == 42
    assert replay_start(restored_points(sp, {"router": [4, 5]}), "lines:2") == 0  # 4 has none
    assert replay_start(restored_points(sp, {"router": [4, 5, 6]}), "lines:1") == 0  # 6 new


def test_restore_options_sets_the_epoch_and_refuses_at_submit(tmp_path):
    store = _store(tmp_path)
    sp, _ = take(store, name="sp", now=1.0, points={})
    uri = {"elastorm.durable.uri": f"file://{tmp_path.parent}"}
    topology = tmp_path.name  # the store of a topology is <uri>/<topology>
    base = {**uri, "elastorm.key_groups": GROUPS}
    assert restore_options(base, topology=topology, zookeeper="-", home="/") == base
    out = restore_options(
        {**base, "elastorm.restore_from": "sp"}, topology=topology, zookeeper="-", home="/"
    )
    assert out["elastorm.restore_epoch"] == sp.first_epoch()
    with pytest.raises(UserError, match="cannot change across a restore"):
        restore_options(
            {**base, "elastorm.key_groups": 8, "elastorm.restore_from": "sp"},
            topology=topology, zookeeper="-", home="/",
        )  # fmt: skip
    with pytest.raises(UserError, match="no savepoint 'nope'"):
        restore_options(
            {**base, "elastorm.restore_from": "nope"}, topology=topology, zookeeper="-", home="/"
        )
    with pytest.raises(UserError, match="no durable store"):
        restore_options(
            {**base, "elastorm.restore_from": "sp"}, topology="other", zookeeper="-", home="/"
        )
