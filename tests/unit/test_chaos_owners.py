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

from owners import Claim, _claims, two_owners  # noqa: E402


def _record(task: int, groups: tuple[int, ...], epoch: int) -> bytes:
    identity = TaskIdentity(task_id=task, operator="sum_delays", node_id="n", host="h", pid=1)
    return encode_task(
        TaskRecord(identity=identity, heartbeat=Heartbeat(key_groups=groups, epoch=epoch))
    )


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
    return {c for zk in samples for c in _claims(zk, "t")}


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
