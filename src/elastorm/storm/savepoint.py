"""Savepoints: a stopped topology's keyed state on disk, for a new topology to start from.

This is the stop-and-restart way to rescale (Flink's stop-with-savepoint, then a
restart at the new parallelism), which ``bench/rescale_bench.py`` measures against
elastorm's live rescale. Each keyed task writes the state of every key group it owns
to ``<directory>/<operator>/group-<g>.json``; a task of the new topology (conf
``elastorm.restore_from``) starts each key group it owns from that file.

The state's values travel, and its output counters (``core.outputs.next_output``),
so the new topology's outputs get ids above those a sink has committed; the new
topology's emitters start new sequences, so the watermarks start empty. The savepoint must
therefore be taken once the job has *drained* (its input stopped and every tuple sent
folded in), as a stop-with-savepoint does; a savepoint of a running job would lose
the tuples in flight.
"""

from __future__ import annotations

import json
import os

from elastorm.core.buffers import SequenceCounters
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.files import write_json_atomic


def group_path(directory: str, operator: str, key_group: int) -> str:
    """Where key group ``key_group`` of ``operator`` is saved."""
    return os.path.join(directory, operator, f"group-{key_group}.json")


def write_savepoint(directory: str, operator: str, coordinator: TaskCoordinator) -> list[int]:
    """Write every key group ``coordinator`` owns; returns them. Each file is written
    whole or not at all (``write_json_atomic``)."""
    os.makedirs(os.path.join(directory, operator), exist_ok=True)
    written = []
    for g in coordinator.owned():
        state = coordinator.state(g)
        assert state is not None, f"owned key group {g} without state"
        counters = [[ch, group, n] for (ch, group), n in sorted(state.out_seq.snapshot().items())]
        write_json_atomic(
            group_path(directory, operator, g), {"items": state.items(), "out_seq": counters}
        )
        written.append(g)
    return written


def restore_savepoint(directory: str, operator: str, coordinator: TaskCoordinator) -> list[int]:
    """Start every owned key group that has a file in ``directory`` from it (the group's
    master state; its first checkpoint is then a full one); returns those groups.

    Raises ``ValueError`` on a file that is not a savepoint: starting empty instead
    would lose the state silently.
    """
    restored = []
    for g in coordinator.owned():
        path = group_path(directory, operator, g)
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        except FileNotFoundError:
            continue
        items = saved.get("items") if isinstance(saved, dict) else None
        if not isinstance(items, dict):
            raise ValueError(f"{path}: not a savepoint of a key group (no 'items' object)")
        state = coordinator.state(g)
        assert state is not None, f"owned key group {g} without state"
        state.master = items
        state.out_seq = SequenceCounters(
            {(str(ch), int(group)): int(n) for ch, group, n in saved.get("out_seq", ())}
        )
        state.needs_full = True
        restored.append(g)
    return restored
