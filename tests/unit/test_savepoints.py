"""Savepoints (``elastorm.durable.savepoint``, ``elastorm.storm.savepoint``,
``elastorm.runtime.restore``): which sets a savepoint takes, which restart points it
keeps, retention never deleting what it names, the restore of a new submission (state,
output counters, watermarks, checkpoint ids after the copies'), where the sources resume,
and the refusal of a changed key-group count."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_durable_format import OP, checkpoints, write_all
from test_durable_writer import wait_until

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
)
from elastorm.durable.submissions import (
    SubmissionRecord,
    SubmissionView,
    latest_view,
    load_for_restore,
    open_view,
    record_submission,
    save,
)
from elastorm.durable.writer import DurableWriter, retire, write_checkpoint
from elastorm.errors import UserError
from elastorm.runtime.restore import restore_options
from elastorm.storm.savepoint import first_epoch, restore_keyed, restored_points, savepoint_of

GROUPS = 4
OLD, NEW = "t-1-100", "t-2-200"  # two submissions (Storm ids) of one topology name


def _store(tmp_path) -> SubmissionView:
    """Submission OLD with ``OP``'s group 3 written (three checkpoints), the others empty."""
    root = LocalStore(tmp_path)
    record_submission(root, SubmissionRecord(storm_id=OLD, started_at=100.0))
    view = SubmissionView(root, OLD)
    record_operator(view.store, OP, GROUPS)
    write_all(view.store, checkpoints([{"a": 1}, {"b": 2}, {"a": 5}]))
    return view


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
    sp, dropped = save(store, name="before-upgrade", now=100.0, points={"up-1": point})
    assert dropped == []
    assert sp.key_groups == {OP: GROUPS} and list(sp.sets[OP]) == [3]
    assert sp.sets[OP][3].watermarks == {"up-1": 3}
    assert sp.sets[OP][3].submission == OLD
    assert load(store.root, "before-upgrade") == sp == decode(encode(sp))
    assert sp.first_epoch() == sp.sets[OP][3].checkpoint[0] + 1
    with pytest.raises(SavepointError, match="no savepoint 'other'.*before-upgrade"):
        load(store.root, "other")


def test_a_corrupt_savepoint_file_is_detected(tmp_path):
    root = _store(tmp_path).root
    save(SubmissionView(root, OLD), name="sp", now=1.0, points={})
    data = bytearray(root.get("savepoints/sp.json"))
    data[-2] ^= 0xFF
    root.put("savepoints/sp.json", bytes(data))
    with pytest.raises(CorruptFile):
        load(root, "sp")


def test_a_store_without_operators_is_refused(tmp_path):
    with pytest.raises(SavepointError, match="no keyed operator"):
        save(SubmissionView(LocalStore(tmp_path), OLD), name="sp", now=1.0, points={})


def test_a_restart_point_the_sets_do_not_cover_is_dropped(tmp_path):
    store = _store(tmp_path)
    ahead = RestartPoint(positions={"s:1": 9}, counters={OP: {3: 4}})  # the set has 3
    elsewhere = RestartPoint(positions={"s:1": 2}, counters={OP: {0: 1}})  # group 0: no set
    sp, dropped = save(store, name="sp", now=1.0, points={"up-1": ahead, "x:2": elsewhere})
    assert dropped == ["up-1", "x:2"] and sp.points == {}


@given(
    counters=st.dictionaries(st.integers(0, 5), st.integers(0, 20), max_size=6),
    marks=st.dictionaries(st.integers(0, 5), st.integers(0, 20), max_size=6),
)
def test_covered_iff_every_counted_group_reflects_it(counters, marks):
    point = RestartPoint(counters={OP: counters})
    sets = {
        OP: {
            g: GroupSet(
                submission=OLD,
                manifest=file_name("manifest", (0, 1)),
                files=(),
                watermarks={"e:1": m},
            )
            for g, m in marks.items()
        }
    }
    want = all(seq <= marks.get(g, 0) for g, seq in counters.items())
    kept, dropped = consistent_points({"e:1": point}, sets)
    assert covered("e:1", point, {OP: {g: s.watermarks for g, s in sets[OP].items()}}) is want
    assert (kept == {"e:1": point}) is want and (dropped == ["e:1"]) is (not want)


def test_a_changed_key_group_count_is_refused_with_the_way_out(tmp_path):
    sp, _ = save(_store(tmp_path), name="sp", now=1.0, points={})
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
    view = _store(tmp_path)
    store = view.store
    sp, _ = save(view, name="keep", now=1.0, points={})
    pinned = pinned_files([sp], OLD, OP, 3)
    assert view.pins(OP, 3) == pinned and not pinned_files([sp], NEW, OP, 3)
    assert pinned and pinned == {sp.sets[OP][3].manifest, *sp.sets[OP][3].files}
    # More checkpoints, each a new base: retention would delete the saved set.
    policy = Policy(compact_deltas=1, retain=0)
    from elastorm.durable.restore import load_latest

    current = load_latest(store, OP, 3).manifest
    more = checkpoints([{"a": 1}, {"b": 2}, {"a": 5}, {"c": 1}, {"d": 1}, {"e": 1}])[3:]
    for delta in more:
        current = write_checkpoint(store, policy, OP, current, delta)
        retire(store, OP, [current], view.pins)
    left = set(store.list(group_dir(OP, 3)))
    assert pinned <= left
    assert len(left) > len(pinned) >= 2  # the newest set is there too
    # without the savepoint the same retention deletes them
    view.root.delete("savepoints/keep.json")
    current = write_checkpoint(store, policy, OP, current, checkpoints([{"z": 1}] * 7)[6])
    retire(store, OP, [current], view.pins)
    assert not pinned & set(store.list(group_dir(OP, 3)))


def test_a_new_submission_starts_from_the_savepoint(tmp_path):
    root = _store(tmp_path).root
    sp, _ = save(SubmissionView(root, OLD), name="sp", now=1.0, points={})
    config = TopologyConfig(key_groups=GROUPS, restore_from="sp")  # all sparse submit needs
    assert savepoint_of(root, config) == sp
    new = TaskCoordinator(task=2, num_key_groups=GROUPS, upstreams=[9], owned=[1, 3])
    assert restore_keyed(root, sp, OP, new, epoch=first_epoch(sp)) == [3]
    state = new.state(3)
    assert state.items() == {"a": 6, "b": 2}
    assert dict(state.applied) == {"up-1": 3}  # upstream replays are dropped up to here
    assert state.checkpoint > sp.sets[OP][3].checkpoint  # its files sort after the set's
    assert new.state(1).items() == {} and new.state(1).checkpoint[0] == sp.first_epoch()


def test_the_output_counters_continue_after_a_restore(tmp_path):
    view = SubmissionView(LocalStore(tmp_path), OLD)
    record_operator(view.store, OP, GROUPS)
    old = TaskCoordinator(task=1, num_key_groups=GROUPS, upstreams=[9], owned=[0])
    old.state(0).update("a", 1)
    old.state(0).out_seq.next("default<r:1", 0)
    old.state(0).out_seq.next("default<r:1", 0)
    write_checkpoint(view.store, Policy(), OP, None, old.state(0).begin_checkpoint(full=True))
    sp, _ = save(view, name="sp", now=1.0, points={})
    new = TaskCoordinator(task=2, num_key_groups=GROUPS, upstreams=[9], owned=[0])
    restore_keyed(view.root, sp, OP, new, epoch=sp.first_epoch())
    assert new.state(0).out_seq.last("default<r:1", 0) == 2


def test_the_task_refuses_a_changed_key_group_count(tmp_path):
    store = _store(tmp_path)
    sp, _ = save(store, name="sp", now=1.0, points={})
    new = TaskCoordinator(task=2, num_key_groups=GROUPS + 1, upstreams=[9], owned=[3])
    with pytest.raises(ConfigError, match="cannot change across a restore"):
        restore_keyed(store.root, sp, OP, new, epoch=sp.first_epoch())


def test_a_component_refuses_latest_unresolved_saying_what_to_do(tmp_path):
    store = _store(tmp_path).root
    assert savepoint_of(store, TopologyConfig()) is None
    with pytest.raises(ConfigError) as refused:
        savepoint_of(store, TopologyConfig(restore_from="latest"))
    assert "elastorm savepoint --topology" in str(refused.value)
    assert "-o elastorm.restore_from=<savepoint name>" in str(refused.value)
    with pytest.raises(ConfigError, match="durable tier"):
        savepoint_of(None, TopologyConfig(restore_from="sp"))


def test_a_component_refuses_a_savepoint_that_does_not_exist(tmp_path):
    store = _store(tmp_path).root
    with pytest.raises(ConfigError, match="elastorm.restore_from = 'nope'"):
        savepoint_of(store, TopologyConfig(restore_from="nope"))


def test_a_spout_resumes_at_the_oldest_position_its_emitters_need():
    points = {
        "router:4": RestartPoint(positions={"lines:1": 90}),
        "router:5": RestartPoint(positions={"lines:1": 41, "lines:2": 7}),
    }
    sp = Savepoint(name="sp", taken_at=0.0, key_groups={}, sets={}, points=points)
    assert replay_start(restored_points(sp, {"router": [4, 5]}), "lines:1") == 42
    assert replay_start(restored_points(sp, {"router": [4, 5]}), "lines:2") == 0  # 4 has none
    assert replay_start(restored_points(sp, {"router": [4, 5, 6]}), "lines:1") == 0  # 6 new


def test_restore_options_passes_the_name_and_refuses_at_submit(tmp_path):
    sp, _ = save(_store(tmp_path), name="sp", now=1.0, points={})
    uri = {"elastorm.durable.uri": f"file://{tmp_path.parent}"}
    topology = tmp_path.name  # the store of a topology is <uri>/<topology>
    base = {**uri, "elastorm.key_groups": GROUPS}
    assert restore_options(base, topology=topology, zookeeper="-", home="/") == base
    out = restore_options(
        {**base, "elastorm.restore_from": "sp"}, topology=topology, zookeeper="-", home="/"
    )
    assert out == {**base, "elastorm.restore_from": sp.name}  # nothing else is needed
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


# -- one directory per submission (issue 29's corruption hole) ---------------------------


def _new_submission(root, *, restored_from=None, started_at=200.0) -> SubmissionView:
    """Submission NEW of the same name, recorded as its first keyed task does."""
    record = SubmissionRecord(storm_id=NEW, started_at=started_at, restored_from=restored_from)
    record_submission(root, record)
    view = open_view(root, NEW)
    record_operator(view.store, OP, GROUPS)
    return view


def test_each_submission_writes_in_its_own_directory(tmp_path):
    old = _store(tmp_path)
    before = {
        n: old.root.get(f"{OLD}/{group_dir(OP, 3)}/{n}") for n in old.store.list(group_dir(OP, 3))
    }
    new = _new_submission(old.root)  # not restored: it starts clean, epochs from 0 again
    writer = DurableWriter(new.store, pins=new.pins)
    writer.offer(OP, checkpoints([{"z": 9}])[0])
    wait_until(writer.drained)
    writer.close()
    assert new.store.uri == f"{old.root.uri}/{NEW}"
    assert new.store.list(group_dir(OP, 3)) == [
        file_name("base", (0, 1)),
        file_name("manifest", (0, 1)),
    ]
    after = {
        n: old.root.get(f"{OLD}/{group_dir(OP, 3)}/{n}") for n in old.store.list(group_dir(OP, 3))
    }
    assert after == before  # the old submission's files: not touched, not joined
    assert new.load(OP, 3).entries == {"z": 9}  # never the old submission's state
    assert old.root.list(f"{OLD}/operators") == [f"{OP}.json"]


def test_latest_is_the_newest_submissions_sets_not_an_older_ones_higher_epochs(tmp_path):
    root = LocalStore(tmp_path)
    record_submission(root, SubmissionRecord(storm_id=OLD, started_at=100.0))
    old = SubmissionView(root, OLD)
    record_operator(old.store, OP, GROUPS)
    high = [
        replace(d, checkpoint=(9, d.checkpoint[1]), base=d.base and (9, d.base[1]))
        for d in checkpoints([{"a": 1}, {"a": 2}])
    ]
    write_all(old.store, high)  # epoch 9: sorts after anything a fresh start numbers
    new = _new_submission(root)
    write_all(new.store, checkpoints([{"b": 1}]))  # epoch 0
    view = latest_view(root)
    assert view is not None and view.storm_id == NEW
    assert view.newest_sets(OP, range(GROUPS)) == {3: (0, 1)}
    sp, _ = save(view, name="l", now=1.0, points={})
    assert sp.sets[OP][3].submission == NEW and sp.sets[OP][3].checkpoint == (0, 1)
    # a submission that never wrote a set is passed over: the newest one that has some
    record_submission(root, SubmissionRecord(storm_id="t-3-300", started_at=300.0))
    assert latest_view(root).storm_id == NEW


@given(starts=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=5, unique=True))
def test_latest_picks_the_most_recently_started_submission_with_sets(tmp_path_factory, starts):
    assume(len(starts) > 1)
    root = LocalStore(tmp_path_factory.mktemp("root"))
    for i, started in enumerate(starts):
        record_submission(root, SubmissionRecord(storm_id=f"t-{i}-1", started_at=started))
        view = SubmissionView(root, f"t-{i}-1")
        record_operator(view.store, OP, GROUPS)
        write_all(view.store, checkpoints([{"k": i}] * (len(starts) - i)))  # older: more
    newest = max(range(len(starts)), key=lambda i: starts[i])
    assert latest_view(root).load(OP, 3).entries == {"k": newest * (len(starts) - newest)}


def test_a_restore_reads_the_old_submissions_files_and_writes_its_own(tmp_path):
    old = _store(tmp_path)
    sp, _ = save(old, name="sp", now=1.0, points={})
    old_files = old.store.list(group_dir(OP, 3))
    new = _new_submission(old.root, restored_from="sp")
    assert new.base == sp
    # before its first durable write, what it has of group 3 is the savepoint's set
    assert new.newest_sets(OP, [3, 1]) == {3: sp.sets[OP][3].checkpoint}
    assert new.load(OP, 3).entries == {"a": 6, "b": 2}
    loaded = load_for_restore(new, OP, 3, 7)
    assert (
        dict(loaded.entries) == {"a": 6, "b": 2} and loaded.checkpoint == sp.sets[OP][3].checkpoint
    )
    assert latest_view(old.root).storm_id == NEW  # restored, its base counts as its sets
    coordinator = TaskCoordinator(task=2, num_key_groups=GROUPS, upstreams=[9], owned=[3])
    restore_keyed(new.root, sp, OP, coordinator, epoch=first_epoch(sp))
    coordinator.state(3).update("a", 1)
    writer = DurableWriter(new.store, pins=new.pins)
    writer.offer(OP, coordinator.state(3).begin_checkpoint(full=True))
    wait_until(writer.drained)
    writer.close()
    assert old.store.list(group_dir(OP, 3)) == old_files  # read, never written
    (own,) = new.newest_sets(OP, [3]).values()
    assert own > sp.sets[OP][3].checkpoint and own[0] == first_epoch(sp)
    assert new.load(OP, 3).entries == {"a": 7, "b": 2}
    again, _ = save(new, name="sp2", now=2.0, points={})
    assert again.sets[OP][3].submission == NEW
