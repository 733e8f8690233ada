"""The chaos harness's two-owners check (``bench/owners.py``) on fabricated traces:
it must flag a key group claimed by two tasks at one routing epoch, and only that."""

from __future__ import annotations

import sys
from pathlib import Path

from kazoo.exceptions import NoNodeError

from elastorm.controller.model import Heartbeat, TaskIdentity, TaskRecord
from elastorm.zk.codec import encode_task
from elastorm.zk.layout import ZnodeLayout

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from owners import Claim, _claims, stale_owners, two_owners  # noqa: E402


def _record(task: int, groups: tuple[int, ...], epoch: int, at: float = 0.0) -> bytes:
    identity = TaskIdentity(task_id=task, operator="sum_delays", node_id="n", host="h", pid=1)
    heartbeat = Heartbeat(key_groups=groups, epoch=epoch)
    return encode_task(TaskRecord(identity=identity, heartbeat=heartbeat, time=at))


class FakeZk:
    """The two kazoo calls ``_claims`` makes, over a dict of task znodes; ``gone`` are
    listed but vanish before they are read (a task leaving mid-sample)."""

    def __init__(self, tasks: dict[int, bytes], gone: tuple[int, ...] = ()) -> None:
        self.tasks, self.gone = tasks, gone
        self.base = ZnodeLayout("t").tasks

    def get_children(self, path: str) -> list[str]:
        assert path == self.base
        return [str(t) for t in [*self.tasks, *self.gone]]

    def get(self, path: str) -> tuple[bytes, None]:
        task = int(path.rsplit("/", 1)[1])
        if task not in self.tasks:
            raise NoNodeError(path)
        return self.tasks[task], None


def _trace(*samples: FakeZk) -> set[Claim]:
    return {c for zk in samples for c, _ in _claims(zk, "t")}


def _times(*samples: FakeZk) -> dict[Claim, tuple[float, float]]:
    """Each claim's first and last publish times, as ``OwnerSampler`` keeps them."""
    seen: dict[Claim, tuple[float, float]] = {}
    for zk in samples:
        for claim, at in _claims(zk, "t"):
            first, last = seen.get(claim, (at, at))
            seen[claim] = (min(first, at), max(last, at))
    return seen


def test_a_handover_across_epochs_is_not_two_owners():
    # Group 3 moves from task 1 (epoch 5) to task 2 (epoch 6); for one sample both
    # heartbeats name it (task 1's is older), and task 1's later ones do not.
    trace = _trace(
        FakeZk({1: _record(1, (3, 4), 5), 2: _record(2, (), 5)}),
        FakeZk({1: _record(1, (3, 4), 5), 2: _record(2, (3,), 6)}),
        FakeZk({1: _record(1, (4,), 6), 2: _record(2, (3,), 6)}, gone=(9,)),
    )
    assert Claim(task=2, operator="sum_delays", group=3, epoch=6) in trace
    assert two_owners(trace) == []


def test_two_tasks_claiming_a_group_at_one_epoch_are_reported():
    # A restarted task takes its old groups while another was given group 3 at the same
    # epoch (the audit's "restart while ZooKeeper is down" fault).
    trace = _trace(
        FakeZk({1: _record(1, (3,), 7), 2: _record(2, (5,), 7)}),
        FakeZk({2: _record(2, (5,), 7), 4: _record(4, (3, 5), 7)}),
    )
    assert two_owners(trace) == [
        {"operator": "sum_delays", "group": 3, "epoch": 7, "tasks": [1, 4]},
        {"operator": "sum_delays", "group": 5, "epoch": 7, "tasks": [2, 4]},
    ]


def test_claims_in_samples_never_taken_together_still_count():
    # The two claims are seconds apart, never in one sample: same epoch, two owners.
    first = _trace(FakeZk({1: _record(1, (0,), 2)}))
    later = _trace(FakeZk({3: _record(3, (0,), 2)}))
    assert [c["tasks"] for c in two_owners(first | later)] == [[1, 3]]


def test_an_old_owner_still_publishing_its_group_long_after_the_handover_is_stale():
    # Task 1 froze owning group 2 at epoch 4; group 2 was restored on task 3 (epoch 5)
    # at t=100. Task 1 came back unfenced: at t=130 it still claims group 2.
    before = FakeZk({1: _record(1, (2,), 4, at=99.0), 3: _record(3, (), 4, at=99.5)})
    handed = FakeZk({1: _record(1, (2,), 4, at=99.0), 3: _record(3, (2,), 5, at=100.0)})
    back = FakeZk({1: _record(1, (2,), 4, at=130.0), 3: _record(3, (2,), 5, at=130.0)})
    assert two_owners(_times(before, handed, back)) == []
    assert stale_owners(_times(before, handed, back)) == [
        {"operator": "sum_delays", "group": 2, "task": 1, "epoch": 4, "newer": 3,
         "seconds": 30.0}
    ]  # fmt: skip
    # A dead owner's znode outlives it (same publish time): not stale; nor is a live
    # old owner whose next heartbeat, 2 s later, has let the group go.
    gone = FakeZk({1: _record(1, (2,), 4, at=99.0), 3: _record(3, (2,), 5, at=104.0)})
    tick = FakeZk({1: _record(1, (2,), 4, at=102.0), 3: _record(3, (2,), 5, at=102.0)})
    assert stale_owners(_times(before, handed, gone)) == []
    assert stale_owners(_times(before, handed, tick)) == []


def test_a_cpa_source_working_through_its_queue_is_stale_only_once_the_move_is_done():
    # join/cpal-source at 20d59b4: the target (task 3) owned group 2 at epoch 5 from
    # t=100; the source (task 1), 14.7 s behind, claimed it at epoch 4 until t=114.7,
    # applying what was sent to it before the switch, while the controller still waited
    # for its MigrationDone (to t=114.5). Not stale; claiming on past that is.
    handed = FakeZk({1: _record(1, (2,), 4, at=99.0), 3: _record(3, (2,), 5, at=100.0)})
    lagging = FakeZk({1: _record(1, (2,), 4, at=114.7), 3: _record(3, (2,), 5, at=114.7)})
    waited = {(1, "sum_delays", 2): (99.5, 114.5)}
    assert stale_owners(_times(handed, lagging)) != []  # what failed the run
    assert stale_owners(_times(handed, lagging), handing=waited) == []
    on = FakeZk({1: _record(1, (2,), 4, at=121.0), 3: _record(3, (2,), 5, at=121.0)})
    assert stale_owners(_times(handed, lagging, on), handing=waited) == [
        {"operator": "sum_delays", "group": 2, "task": 1, "epoch": 4, "newer": 3,
         "seconds": 6.5}
    ]  # fmt: skip


def test_stale_outputs_count_only_the_cut_off_incarnation_after_its_restore() -> None:
    from owners import stale_outputs

    arrivals = {
        "op2": {
            "7.1": {"90": [5, 5], "100": [1, 1], "131": [4, 2], "133": [1, 0]},
            "7.2": {"160": [3, 3]},  # Storm restarted it: not the cut-off owner
            "5.1": {"131": [8, 8]},  # the new owner
        },
        "op3": {"7.1": {"132": [2, 2]}},
    }
    got = stale_outputs(arrivals, {"op2": ["7.1"], "op3": ["7.1"]}, 100.4)
    assert got == {"updates": 7, "replaced": 4, "in_restore_second": 1, "last_after": 32.6}
    none = stale_outputs(arrivals, {"op2": ["9.1"]}, 100.4)
    assert none == {"updates": 0, "replaced": 0, "in_restore_second": 0, "last_after": None}
