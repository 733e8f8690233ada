"""Each output of an upstream keyed bolt applied once by the keyed bolt it feeds.

A keyed bolt's outputs on a stream declared with ``output_id_fields`` end with their
stable id (``elastorm.storm.keyed_bolt``): key group, source, sequence, kind. When such
a stream feeds another keyed bolt through a router, the router numbers each tuple
afresh, so the outputs a restored upstream group sends again (its replay since its
last checkpoint, the same ids) and a fenced owner's late outputs reach the second bolt
as new tuples: without this, applied twice (chaos ``chained/lose-1``: 46 of 4,000
updates at f6aa181). So the receiving key group keeps, in its own state, the
sequences it applied per upstream channel ``(key group, source)``
(:class:`~elastorm.core.committed.Committed`, one reserved entry per channel) and
skips an id it has: the record is checkpointed, migrated and restored with the
state it guards, so the rule holds across every protocol. An output reaches exactly
one key, hence one group, so the group is the right place. Outputs with sequence 0
(``rectified``) carry no id and are applied every time (at least once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastorm.core.committed import Committed
from elastorm.core.outputs import OUTPUT_KINDS
from elastorm.core.state import KeyGroupState

ONCE = "\x00elastorm.once|"
"""Prefix of the reserved state entries ``ONCE + "<key group>|<source>"``: ``[mark,
holes]`` of the upstream sequences applied (``Committed``'s encoding). NUL-led like
``core.timers.TIMERS``: no user key starts so."""


def output_id(values: Sequence[Any]) -> tuple[int, str, int] | None:
    """``(key group, source, seq)`` of the upstream output id ``values`` end with, or
    None (no id, or sequence 0). O(1).

    >>> output_id(["storm", 3, 7, "router:1", 3, "final"])
    (7, 'router:1', 3)
    >>> output_id(["storm", 3]), output_id(["w", 1, -1, "", 0, "rectified"])
    (None, None)
    """
    if len(values) < 4 or values[-1] not in OUTPUT_KINDS:  # most tuples stop here
        return None
    group, source, seq, _ = values[-4:]
    if type(seq) is not int or seq < 1:
        return None
    if type(group) is not int or type(source) is not str:
        return None
    return group, source, seq


def first_application(state: KeyGroupState, ident: tuple[int, str, int]) -> bool:
    """Record upstream output ``ident`` as applied by this group; False if it already
    was (a repeat: the caller drops the tuple). O(holes of its channel).

    >>> from elastorm.core.state import KeyGroupState
    >>> g = KeyGroupState(0, step=lambda k, c, v: (v, None))
    >>> [first_application(g, (7, "r", s)) for s in (1, 2, 1, 4, 3, 4)]
    [True, True, False, True, True, False]
    """
    group, source, seq = ident
    entry = f"{ONCE}{group}|{source}"
    raw = state.get(entry)
    taken = Committed() if raw is None else Committed.decode(raw[0], raw[1])
    if seq in taken:
        return False
    taken = taken.add(seq)
    state.put(entry, [taken.mark, taken.encode_holes()])
    return True
