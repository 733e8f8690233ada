"""Data runs on the emitting side: many ``Data`` for one task in one Storm tuple.

Issue 34, stage 1 (``docs/history/2026-12-01-router-hop-design``): Storm's per-tuple
work, not bytes, is what the pipe and the JVM cost, so an emitter hands the wire
one tuple per destination task per flush instead of one per data tuple. Numbering,
buffering, trims and resends stay per tuple (``Emitter``); only the transport
changes. The adapter decides when to flush (``storm.elastic.RunOutbox``); this
builder only groups, with no I/O and no clock.
"""

from __future__ import annotations

from elastorm.core.messages import DataRun, DataTuple


class RunBuilder:
    """Collects data tuples per destination task into :class:`DataRun` s.

    A tuple continues the latest run of its lane (task, key group, source) when its
    sequence follows that run's last; any other starts a new run (a gap, a resend of
    older tuples), so every run's sequences are consecutive and each lane's tuples
    keep the order they were added in.

    >>> from elastorm.core.messages import DataTuple
    >>> b = RunBuilder()
    >>> for seq in (1, 2, 4):
    ...     _ = b.add(7, 0, DataTuple("u", seq, "k", seq, 0.0))
    >>> [(r.first, r.last) for r in b.take()[7]]
    [(1, 2), (4, 4)]
    """

    def __init__(self) -> None:
        self._runs: dict[int, list[list]] = {}  # task -> its runs, [g, source, first, items]
        self._open: dict[tuple[int, int, str], list] = {}  # lane -> its latest run
        self.held = 0  # tuples held since the last take

    def add(self, to_task: int, key_group: int, item: DataTuple) -> int:
        """Hold ``item`` of ``key_group`` for ``to_task``; returns the tuples held."""
        source, seq = item.source, item.seq
        lane = (to_task, key_group, source)
        run = self._open.get(lane)
        entry = [item[2], item[3], item[4]]  # [key, value, ts]: the wire's form already
        if run is not None and run[2] + len(run[3]) == seq:
            run[3].append(entry)
        else:
            run = self._open[lane] = [key_group, source, seq, [entry]]
            self._runs.setdefault(to_task, []).append(run)
        self.held += 1
        return self.held

    def take(self) -> dict[int, list[DataRun]]:
        """Every task's runs held so far, in the order their lanes began; empties the
        builder (so a flush that re-enters it finds nothing)."""
        runs, self._runs, self._open, self.held = self._runs, {}, {}, 0
        return {task: [DataRun.trusted(*run) for run in held] for task, held in runs.items()}
