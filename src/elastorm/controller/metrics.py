"""The evaluation metrics of Madsen & Zhou 2015 (section 7.3, Figures 7-9), as pure functions.

* share of migrations that were checkpoint-assisted (Figure 7);
* share of usable checkpoints (Figure 8): for each key group on an overloaded
  node, is one of its checkpoints on a node that could take the key group
  without becoming overloaded itself;
* accumulated migration latency (Figure 9): the sum of processing pauses.

The runtime measures the pauses: each migration's target times how long the group's
new tuples waited (``elastorm.core.migration.pause``) and reports it in its
``MigrationDone``; a record carries that figure, never the completion time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from elastorm.controller.adaptation import (
    Move,
    MoveReason,
    Thresholds,
    can_take_load,
    is_overloaded,
)
from elastorm.controller.model import ClusterView, ControllerModelError, KeyGroupInfo


@dataclass(frozen=True, kw_only=True, slots=True)
class MigrationRecord:
    """A finished migration, the pause it caused to its key group and its completion
    time (seconds).

    ``pause``: how long the group's new tuples waited at the target, as the target
    measured it; None when it did not report one. ``completion``: from the order to
    both ends done, an upper bound of the pause (it includes the time the messages
    queued and the source's hand-over).
    """

    move: Move
    pause: float | None
    completion: float = 0.0

    def __post_init__(self) -> None:
        for name in ("pause", "completion"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ControllerModelError(f"{self.move.key_group}: negative {name} {value}")


def checkpoint_assisted_share(moves: Iterable[Move]) -> float | None:
    """Share of migrations (recovery restores excluded) that were checkpoint-assisted.

    ``None`` when there was no migration. ``O(#moves)``.

    >>> from elastorm.controller.model import KeyGroupId
    >>> from elastorm.core.messages import Protocol
    >>> m = Move(key_group=KeyGroupId("op", 0), source="a", target="b",
    ...          protocol=Protocol.CPA, reason=MoveReason.LOAD_BALANCE)
    >>> checkpoint_assisted_share([m])
    1.0
    """
    migrations = [m for m in moves if m.reason is not MoveReason.RECOVERY]
    if not migrations:
        return None
    return sum(m.protocol.checkpoint_assisted for m in migrations) / len(migrations)


def usable_checkpoint_share(view: ClusterView, thresholds: Thresholds) -> float | None:
    """Share of key groups on overloaded nodes whose checkpoint is usable right now.

    A checkpoint is usable when the adaptation planner could migrate onto its
    holder: the holder passes Kumbhare et al. 2015's "can take load" test (queue and CPU at
    or below the low thresholds) and would stay at or below ``cpu_high`` after
    taking the key group's load. ``None`` when no key
    group sits on an overloaded node. ``O(K)``.
    """
    hot = [n for n in view.node_ids() if is_overloaded(view, n, thresholds)]
    total = usable = 0
    for n in hot:
        for kg in view.owned_by(n):
            info = view.key_group(kg)
            total += 1
            holders = view.checkpoints.holders(kg)
            usable += any(_can_absorb(view, h, info, thresholds) for h in holders)
    return usable / total if total else None


def _can_absorb(view: ClusterView, node: str, kg: KeyGroupInfo, th: Thresholds) -> bool:
    if not can_take_load(view, node, th):
        return False
    return view.utilization(node) + kg.load / view.node(node).capacity <= th.cpu_high + 1e-12


def accumulated_latency(records: Iterable[MigrationRecord]) -> float:
    """Sum of the measured pauses of all migrations (Figure 9's y-axis); a migration
    without a measured pause adds nothing (``MetricsSnapshot.unmeasured`` counts them)."""
    return float(
        sum(
            r.pause
            for r in records
            if r.move.reason is not MoveReason.RECOVERY and r.pause is not None
        )
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class MetricsSnapshot:
    """What the dashboard shows for checkpoint-assisted elasticity."""

    migrations: int
    checkpoint_assisted: int
    assisted_share: float | None
    usable_share: float | None
    accumulated_latency: float
    unmeasured: int = 0  # migrations whose target reported no pause


def snapshot(
    records: Iterable[MigrationRecord], view: ClusterView, thresholds: Thresholds
) -> MetricsSnapshot:
    """All three metrics at once, for the dashboard."""
    recs = [r for r in records if r.move.reason is not MoveReason.RECOVERY]
    return MetricsSnapshot(
        migrations=len(recs),
        checkpoint_assisted=sum(r.move.protocol.checkpoint_assisted for r in recs),
        assisted_share=checkpoint_assisted_share(r.move for r in recs),
        usable_share=usable_checkpoint_share(view, thresholds),
        accumulated_latency=accumulated_latency(recs),
        unmeasured=sum(r.pause is None for r in recs),
    )
