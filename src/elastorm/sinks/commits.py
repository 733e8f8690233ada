"""Which outputs a sink commits: the pure de-duplication behind ``elastorm.sinks``.

Every output of a keyed bolt on a stream declared with ``output_id_fields`` has a
stable id (``elastorm.storm.keyed_bolt``): the keyed bolt's component and stream, the
key group, the input source whose tuple caused it, and its sequence per
``(key group, stream, source)``: 1, 2, 3, ... with no gaps, the same whichever task
sends it (``core.outputs.next_output``). A :data:`Channel` is that id without its
sequence. A sink keeps, per channel, the set of sequences it has committed
(:class:`Committed`) in the same transaction as the rows, and writes an output only
if its id is not in it (Flink's ``TwoPhaseCommitSinkFunction`` idea, with the ids as
the commit record: a replay, a fenced owner's late output or a retried transaction
finds its id there and is dropped).

Outputs of one channel arrive mostly in order, but not always: a migration target
may send its first outputs before the source's last ones arrive (two channels of
Storm), and two sink tasks may commit the same channel. So the committed set is not
only a high-water mark (``mark``, the highest committed): it also keeps the
``holes`` below the mark, sequences not committed yet. Holes are few and short (a
reorder window) and are kept as ranges.

Outputs with sequence 0 (``rectified`` ones, or emits outside ``process_keyed``) have
no id: they are written every time they arrive (at least once), with their kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elastorm.core.committed import Committed
from elastorm.core.outputs import OUTPUT_KINDS

__all__ = ["Channel", "Committed", "Output", "Plan", "plan"]

Channel = tuple[str, str, int, str]
"""``(component, stream, key group, source)``: whose outputs one sequence numbers."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Output:
    """One output of a keyed bolt as a sink receives it: the bolt's own ``values``, its
    id (``channel`` and ``seq``; ``seq`` 0: none) and its ``kind``."""

    component: str
    stream: str
    key_group: int
    source: str
    seq: int
    kind: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if type(self.key_group) is not int or self.key_group < -1:
            raise ValueError(f"key group must be an int >= -1, got {self.key_group!r}")
        if type(self.seq) is not int or self.seq < 0:
            raise ValueError(f"output sequence must be an int >= 0, got {self.seq!r}")
        if self.seq and not (isinstance(self.source, str) and self.source):
            raise ValueError(f"a numbered output needs its source, got {self.source!r}")
        if self.kind not in OUTPUT_KINDS:
            raise ValueError(f"kind must be one of {OUTPUT_KINDS}, got {self.kind!r}")

    @property
    def channel(self) -> Channel:
        return (self.component, self.stream, self.key_group, self.source)

    @property
    def tentative(self) -> bool:
        return self.kind == "tentative"


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What one transaction of a sink does: ``write`` these outputs (in arrival order),
    store the ``marks`` of the channels they change; ``duplicates`` are dropped."""

    write: tuple[Output, ...]
    marks: Mapping[Channel, Committed]
    duplicates: tuple[Output, ...]


def plan(committed: Mapping[Channel, Committed], outputs: Iterable[Output]) -> Plan:
    """The outputs of a batch to write, given what the sink has ``committed``: each id
    not committed yet, once (a repeat inside the batch is a duplicate too), and every
    output without an id. Pure; O(outputs x ranges of their channel).

    >>> out = lambda seq: Output(component="counts", stream="default", key_group=0,
    ...     source="router:3", seq=seq, kind="final", values=("storm", seq))
    >>> p = plan({}, [out(1), out(2), out(1)])
    >>> [o.seq for o in p.write], [o.seq for o in p.duplicates], p.marks
    ([1, 2], [1], {('counts', 'default', 0, 'router:3'): Committed([(1, 2)])})
    """
    marks: dict[Channel, Committed] = {}
    write: list[Output] = []
    duplicates: list[Output] = []
    for out in outputs:
        if out.seq == 0:
            write.append(out)
            continue
        channel = out.channel
        have = marks.get(channel) or committed.get(channel) or Committed()
        if out.seq in have:
            duplicates.append(out)
            continue
        marks[channel] = have.add(out.seq)
        write.append(out)
    return Plan(write=tuple(write), marks=marks, duplicates=tuple(duplicates))
