"""Routing table: key group -> owning task, with an epoch (Madsen & Zhou 2015, section 3).

An immutable value. The controller keeps the authoritative copy (in ZooKeeper);
each upstream emitter keeps its own and changes it only when a migration command
tells it to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Move:
    """Key group ``key_group`` goes from task ``source`` to task ``target``."""

    key_group: int
    source: int
    target: int

    def __post_init__(self) -> None:
        if self.key_group < 0:
            raise ValueError(f"key_group must be >= 0, got {self.key_group}")
        if self.source == self.target:
            raise ValueError(f"move of group {self.key_group} has source == target")


@dataclass(frozen=True, kw_only=True)
class RoutingTable:
    """``owners[g]`` is the task owning key group ``g``, ``0 <= g < len(owners)``.

    Every key group has exactly one owner by construction; ``epoch >= 0`` grows
    with every change.
    """

    epoch: int
    owners: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.owners, tuple):
            raise TypeError("owners must be a tuple")
        if self.epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {self.epoch}")
        if not self.owners:
            raise ValueError("a routing table needs at least one key group")
        for g, task in enumerate(self.owners):
            if not isinstance(task, int) or task < 0:
                raise ValueError(f"key group {g}: owner must be a task id >= 0, got {task!r}")

    @classmethod
    def round_robin(cls, num_key_groups: int, tasks: Iterable[int], *, epoch: int = 0):
        """Spread ``num_key_groups`` groups over ``tasks`` (sorted) in turn."""
        ordered = sorted(set(tasks))
        if not ordered:
            raise ValueError("round_robin needs at least one task")
        if num_key_groups < 1:
            raise ValueError(f"num_key_groups must be >= 1, got {num_key_groups}")
        owners = tuple(ordered[g % len(ordered)] for g in range(num_key_groups))
        return cls(epoch=epoch, owners=owners)

    @classmethod
    def from_mapping(cls, owners: Mapping[int, int], num_key_groups: int, *, epoch: int = 0):
        """Build from ``{key_group: task}``; every group in ``range(num_key_groups)``
        must appear, and no other."""
        expected = set(range(num_key_groups))
        got = set(owners)
        if got != expected:
            missing = sorted(expected - got)
            extra = sorted(got - expected)
            raise ValueError(f"groups not owned: {missing}; groups out of range: {extra}")
        return cls(epoch=epoch, owners=tuple(owners[g] for g in range(num_key_groups)))

    @property
    def num_key_groups(self) -> int:
        return len(self.owners)

    def owner(self, key_group: int) -> int:
        """The task owning ``key_group``; raises ``IndexError`` when out of range."""
        if not 0 <= key_group < len(self.owners):
            raise IndexError(f"key group {key_group} not in [0, {len(self.owners)})")
        return self.owners[key_group]

    def key_groups_of(self, task: int) -> tuple[int, ...]:
        """The groups ``task`` owns, ascending."""
        return tuple(g for g, t in enumerate(self.owners) if t == task)

    def diff(self, other: RoutingTable) -> tuple[Move, ...]:
        """Moves that turn ``self`` into ``other``, ordered by key group."""
        if other.num_key_groups != self.num_key_groups:
            raise ValueError("cannot diff tables with different numbers of key groups")
        return tuple(
            Move(key_group=g, source=a, target=b)
            for g, (a, b) in enumerate(zip(self.owners, other.owners, strict=True))
            if a != b
        )

    def with_moves(self, moves: Mapping[int, int], *, epoch: int | None = None) -> RoutingTable:
        """A new table with ``{key_group: new_owner}`` applied.

        The epoch becomes ``epoch`` if given (it must be ``> self.epoch``), else
        ``self.epoch + 1``.
        """
        new_epoch = self.epoch + 1 if epoch is None else epoch
        if new_epoch <= self.epoch:
            raise ValueError(f"new epoch {new_epoch} must exceed {self.epoch}")
        owners = list(self.owners)
        for g, task in moves.items():
            if not 0 <= g < len(owners):
                raise IndexError(f"key group {g} not in [0, {len(owners)})")
            owners[g] = task
        return RoutingTable(epoch=new_epoch, owners=tuple(owners))
