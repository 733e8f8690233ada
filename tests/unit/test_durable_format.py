"""The durable tier's format, file:// store and reader (Kwon et al. 2008's checkpoints in a DFS).

Round trips, base + deltas == the state, compaction, retention, manifest atomicity (a
crash between a file and its manifest leaves the previous set readable) and damage
detection (a truncated or corrupt file: an older set is used, loudly).
"""

from __future__ import annotations

import logging

import pytest

from elastorm.config import DURABLE_SCHEMES, ConfigError, TopologyConfig
from elastorm.core.messages import CheckpointDelta
from elastorm.core.state import KeyGroupState
from elastorm.durable.format import (
    CorruptFile,
    Manifest,
    Policy,
    decode_checkpoint,
    decode_manifest,
    encode_checkpoint,
    encode_manifest,
    file_name,
    frame,
    group_dir,
    parse_name,
    rebuild,
    unframe,
)
from elastorm.durable.local import LocalStore
from elastorm.durable.restore import load_latest
from elastorm.durable.store import BACKENDS, DurableStore, open_store, resolve_uri
from elastorm.durable.writer import ChainBroken, no_pins, write_checkpoint

OP = "counter"


def checkpoints(updates: list[dict[str, int]], *, group: int = 3) -> list[CheckpointDelta]:
    """The checkpoints a live key group takes, one after each batch of ``updates``."""
    state = KeyGroupState(group)
    out = []
    seq = 0
    for batch in updates:
        for key, value in batch.items():
            seq += 1
            state.update(key, value)
            state.applied["up-1"] = seq
        delta = state.begin_checkpoint()
        state.finish_checkpoint()
        out.append(delta)
    return out


def write_all(store, deltas, policy=None) -> list[Manifest]:
    policy = policy or Policy()
    sets, current = [], None
    for delta in deltas:
        current = write_checkpoint(store, policy, OP, current, delta)
        sets.append(current)
    return sets


def test_frame_detects_truncation_and_corruption():
    data = frame(b"hello")
    assert unframe(data) == b"hello"
    with pytest.raises(CorruptFile, match="truncated"):
        unframe(data[:-1])
    with pytest.raises(CorruptFile, match="CRC"):
        unframe(data[:-1] + b"X")
    with pytest.raises(CorruptFile, match="header"):
        unframe(b"junk")


def test_checkpoint_and_manifest_round_trip():
    delta = checkpoints([{"a": 1, "b": 2}])[0]
    assert decode_checkpoint(encode_checkpoint(delta)) == delta
    data = encode_checkpoint(delta)
    from elastorm.durable.format import first_manifest

    m = first_manifest(3, "base-0000000000-0000000001.ckpt", data, {"up-1": 2})
    assert decode_manifest(encode_manifest(m)) == m
    assert m.name == "manifest-0000000000-0000000001.json"


def test_names_sort_in_checkpoint_order_and_parse_back():
    ids = [(0, 9), (0, 10), (1, 1), (12, 3)]
    names = [file_name("delta", c) for c in ids]
    assert sorted(names) == names
    assert [parse_name(n) for n in names] == [("delta", c) for c in ids]
    assert parse_name("manifest-0000000000-0000000001.ckpt") is None
    assert parse_name(".base-0000000000-0000000001.ckpt.tmp-1") is None


def test_base_plus_deltas_equal_the_state(tmp_path):
    store = LocalStore(tmp_path)
    updates = [{"a": 1}, {"b": 5}, {"a": 2, "c": 7}, {}]
    deltas = checkpoints(updates)
    sets = write_all(store, deltas)
    assert sets[-1].files[0].startswith("base-") and sets[-1].deltas == 3
    found = load_latest(store, OP, 3)
    assert found is not None and found.skipped == 0
    assert found.copy.entries == {"a": 3, "b": 5, "c": 7}
    assert found.copy.watermarks == {"up-1": 4}
    assert found.copy.checkpoint == deltas[-1].checkpoint


def test_compaction_writes_a_new_base_after_k_deltas(tmp_path):
    store = LocalStore(tmp_path)
    policy = Policy(compact_deltas=2, retain=10)
    sets = write_all(store, checkpoints([{"k": i} for i in range(1, 7)]), policy)
    assert [m.deltas for m in sets] == [0, 1, 2, 0, 1, 2]
    assert load_latest(store, OP, 3).copy.entries == {"k": 21}
    # A new base carries the whole group, not just the last delta's keys.
    assert decode_checkpoint(store.get(f"{group_dir(OP, 3)}/{sets[3].files[0]}")).full


def test_compaction_by_bytes(tmp_path):
    store = LocalStore(tmp_path)
    sets = write_all(
        store, checkpoints([{"k": 1}, {"k": 2}, {"k": 3}]), Policy(compact_bytes=1, retain=5)
    )
    assert [m.deltas for m in sets] == [0, 1, 0]


def test_retention_keeps_the_newest_set_and_m_older(tmp_path):
    store = LocalStore(tmp_path)
    from elastorm.durable.writer import retire

    policy = Policy(compact_deltas=2, retain=1)
    sets = write_all(store, checkpoints([{"k": i} for i in range(1, 8)]), policy)
    retire(store, OP, [sets[-1], sets[-2]], no_pins)
    names = store.list(group_dir(OP, 3))
    manifests = [n for n in names if n.startswith("manifest-")]
    assert manifests == [sets[-2].name, sets[-1].name]
    needed = set(sets[-1].files) | set(sets[-2].files)
    assert {n for n in names if not n.startswith("manifest-")} == needed
    assert load_latest(store, OP, 3).copy.entries == {"k": 28}


def test_a_crash_between_file_and_manifest_leaves_the_previous_set(tmp_path):
    class CrashBeforeManifest(LocalStore):
        def put(self, path, data):
            if "/manifest-" in path:
                raise OSError("power cut")
            super().put(path, data)

    store = LocalStore(tmp_path)
    deltas = checkpoints([{"a": 1}, {"a": 2}])
    first = write_checkpoint(store, Policy(), OP, None, deltas[0])
    with pytest.raises(OSError):
        write_checkpoint(CrashBeforeManifest(tmp_path), Policy(), OP, first, deltas[1])
    assert any(n.startswith("delta-") for n in store.list(group_dir(OP, 3)))  # the orphan
    found = load_latest(store, OP, 3)
    assert found.copy.entries == {"a": 1} and found.manifest == first


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_a_damaged_set_falls_back_to_an_older_one_loudly(tmp_path, caplog, damage):
    store = LocalStore(tmp_path)
    sets = write_all(store, checkpoints([{"a": 1}, {"a": 2}, {"a": 4}]), Policy(retain=5))
    victim = tmp_path / group_dir(OP, 3) / sets[-1].files[-1]
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-3])
    elif damage == "flip":
        data = bytearray(victim.read_bytes())
        data[-2] ^= 0x01
        victim.write_bytes(bytes(data))
    else:
        victim.unlink()
    seen = []
    with caplog.at_level(logging.ERROR, logger="elastorm.durable.restore"):
        found = load_latest(store, OP, 3, on_damage=seen.append)
    assert found.copy.entries == {"a": 3} and found.manifest == sets[-2]
    assert found.skipped == 1 and len(seen) == 1
    assert any(r.levelno == logging.ERROR for r in caplog.records)


def test_nothing_stored_is_none(tmp_path):
    assert load_latest(LocalStore(tmp_path), OP, 0) is None


def test_a_delta_that_does_not_follow_is_refused(tmp_path):
    store = LocalStore(tmp_path)
    deltas = checkpoints([{"a": 1}, {"a": 2}, {"a": 3}])
    first = write_checkpoint(store, Policy(), OP, None, deltas[0])
    with pytest.raises(ChainBroken):
        write_checkpoint(store, Policy(), OP, first, deltas[2])
    with pytest.raises(ChainBroken):
        write_checkpoint(store, Policy(), OP, None, deltas[1])


def test_rebuild_refuses_a_chain_without_its_base():
    deltas = checkpoints([{"a": 1}, {"a": 2}])
    with pytest.raises(CorruptFile):
        rebuild(deltas[1:])
    assert rebuild(deltas).entries == {"a": 3}


def test_local_store_is_a_durable_store(tmp_path):
    store = open_store(f"file://{tmp_path}/t")
    assert isinstance(store, DurableStore)
    store.put("op/g00001/x", b"1")
    store.put("op/g00001/x", b"2")
    assert store.get("op/g00001/x") == b"2"
    assert store.list("op/g00001") == ["x"] and store.list("nope") == []
    store.delete("op/g00001/x")
    store.delete("op/g00001/x")
    with pytest.raises(FileNotFoundError):
        store.get("op/g00001/x")
    with pytest.raises(ValueError):
        store.put("../escape", b"")


def test_resolve_uri_and_options():
    assert resolve_uri("none", home="/h", topology="t") is None
    assert resolve_uri("file://", home="/h/", topology="t") == "file:///h/durable/t"
    assert resolve_uri("hdfs://nn:9870/e/", home="/h", topology="t") == "hdfs://nn:9870/e/t"
    assert set(BACKENDS) == set(DURABLE_SCHEMES)
    config = TopologyConfig.from_conf({"elastorm.durable.every": "3"})
    assert config.durable.every == 3 and config.durable.uri == "file://"
    assert TopologyConfig.from_conf({"elastorm.durable.uri": "none"}).durable.uri == "none"
    with pytest.raises(ConfigError, match="elastorm.durable.uri"):
        TopologyConfig.from_conf({"elastorm.durable.uri": "s3://bucket"})
    with pytest.raises(ConfigError, match="did you mean elastorm.durable.every"):
        TopologyConfig.from_conf({"elastorm.durable.evry": 2})
