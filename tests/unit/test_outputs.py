"""``elastorm.core.outputs.LatestValues``: key -> current value updates across a migration."""

from __future__ import annotations

from sim import CONTROLLER, Cluster

from elastorm.core.actions import Applied, MigrationDone, Role
from elastorm.core.keygroups import key_group
from elastorm.core.messages import DataTuple, Protocol
from elastorm.core.outputs import LatestValues
from elastorm.core.state import KeyGroupState, fold

G = 2
KEY0 = next(f"k{i}" for i in range(100) if key_group(f"k{i}", G) == 0)


def sum_count(current, value):
    total, count = current if current is not None else (0, 0)
    return total + value, count + 1


def drain(c: Cluster, *channels) -> None:
    for ch in channels:
        while c.channels.get(ch):
            c.deliver(ch)


def best(c: Cluster, key: str):
    """What a sink keeping the update that reflects the most tuples ends with."""
    values = [v for _, k, v in c.outputs if k == key]
    return max(values, key=lambda v: v[1])


def test_direct_target_sends_a_key_it_replayed_quietly_after_sending_it() -> None:
    """The interleaving of issue 3 in the simulator (the cluster run lost a flight)."""
    c = Cluster(num_key_groups=G, tasks=[0, 1, 2], emitters=[10, 11], step=fold(sum_count))
    c.emit(10, KEY0, 1)
    c.run_until_quiet()
    assert c.migrate(0, 2, Protocol.DIRECT) is Protocol.DIRECT
    drain(c, (CONTROLLER, 0))  # the source ships a full checkpoint to 2
    c.emit(11, KEY0, 2)  # after the checkpoint: only in emitter 11's buffer
    drain(c, (11, 0), (0, 2), (2, 0))  # applied by the source; checkpoint held and acked
    drain(c, (0, 10), (10, 2))  # emitter 10 replays (nothing) and redirects first
    c.emit(10, KEY0, 4)
    drain(c, (10, 2))  # the target applies the new tuple with outputs on: (5, 2)
    assert [(t, v) for t, k, v in c.outputs if k == KEY0] == [(0, (1, 1)), (0, (3, 2)), (2, (5, 2))]
    c.run_until_quiet()  # emitter 11's toState: the target replays 2 quietly
    assert not c.moving and c.coordinators[2].state(0).get(KEY0) == (7, 3)
    assert best(c, KEY0) == (7, 3)


def test_cpal_target_sends_nothing_new_when_nothing_was_quiet() -> None:
    latest = LatestValues()
    state = KeyGroupState(0, step=fold(sum_count))
    item = DataTuple(source="u", seq=1, key=KEY0, value=3, ts=0.0)
    latest.applied(Applied(key_group=0, item=item, result=state.apply(item), emit_output=True))
    assert latest.take() == {KEY0: (3, 1)} and not latest
    done = MigrationDone(key_group=0, epoch=1, protocol=Protocol.CPAL, role=Role.TARGET)
    latest.reported(done, state)
    assert latest.take() == {}


def test_quiet_keys_are_sent_once_at_takeover_and_restore_sends_every_key() -> None:
    latest = LatestValues()
    state = KeyGroupState(0, step=fold(sum_count))
    for seq, key in enumerate((KEY0, "other"), start=1):
        item = DataTuple(source="u", seq=seq, key=key, value=seq, ts=0.0)
        quiet = Applied(key_group=0, item=item, result=state.apply(item), emit_output=False)
        latest.applied(quiet)
    assert not latest  # quiet: no output yet
    source_done = MigrationDone(key_group=0, epoch=1, protocol=Protocol.CPA, role=Role.SOURCE)
    latest.reported(source_done, state)
    assert not latest  # only taking a group over sends
    target_done = MigrationDone(key_group=0, epoch=1, protocol=Protocol.CPA, role=Role.TARGET)
    latest.reported(target_done, state)
    assert latest.take() == {KEY0: (1, 1), "other": (2, 1)}
    latest.reported(target_done, state)
    assert not latest
    restored = MigrationDone(key_group=0, epoch=2, protocol=Protocol.RESTORE, role=Role.TARGET)
    latest.reported(restored, state)
    assert latest.take() == {KEY0: (1, 1), "other": (2, 1)}
