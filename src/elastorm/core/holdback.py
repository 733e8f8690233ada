"""An emitter's bound on what it keeps, without starving the trims that free it.

An emitter keeps every tuple it sent until a held checkpoint covers it (its output
buffer, ``elastorm.core.buffers``; upstream backup, Madsen & Zhou 2015, section 4).
If checkpoints stop (a holder is gone) that buffer would grow without end, so it
is bounded (``elastorm.max_buffered``). *How* the emitter waits at the bound
matters, because the ``Trim`` that frees the buffer comes in on the same FIFO
input as the data it holds back: Storm's executor receive queue (32,768 tuples by
default, ``topology.executor.receive.buffer.size``) shared by all its upstreams.
The first design paused 1 ms per input tuple at the bound, so a trim behind N data
tuples was seen only after N pauses: 33 s behind a full queue, the 40 s stall
measured at saturation (docs/benchmarks.md).

Here the emitter *reads ahead*: at the bound it keeps reading at full speed and
**parks** each input's emit, in order, instead of sending it; control messages are
handled as they arrive, so a trim behind N data tuples is seen after N reads, not
N pauses. Parked emits go out, oldest first, as soon as the buffer has room again.
Only when the parked emits reach their own bound (``elastorm.max_parked``: a whole
input queue was read and still no trim came, i.e. checkpoints really stopped) does
the emitter pause per tuple again, which holds its input through Storm's
backpressure. Memory then stays at ``max_buffered + max_parked`` tuples plus one
per pause: the bound keeps its purpose.

Reading ahead is not enough on its own: checkpoints come every
``elastorm.checkpoint_interval_secs`` (5 s), so an emitter at R tuples/s holds about
R x (interval + the trim's round trip) tuples, which at saturation on a quiet machine
(40-60k tuples/s per router) is past the 200,000 bound within a second of each
checkpoint, and the parked emits reach ``max_parked`` long before the next trim: the
emitter then pauses per tuple behind a full input queue, and the trim arrives 40 s
later (measured: docs/benchmarks.md, session 11). So the emitter also asks for
checkpoints by *volume*: once ``checkpoint_request_at`` tuples of one key group
wait, it sends the group's owner one ``CheckpointRequest``; the owner checkpoints at
once (unless a checkpoint is already unacknowledged), and the trim comes one round
trip later, while the buffer is still about half full. The bound is then reached only
when trims really stop (a lost holder), which is what it is for.

Options weighed, and why these:

* a pause per *batch* of tuples instead of per tuple: reading ahead without
  parking is no bound at all; with parking it is this design;
* asking for a checkpoint early at a high-water mark, alone: makes the bound rarer,
  but once it is reached the trim still comes behind the queue: hence both;
* a bound in seconds of input: bounds memory only as long as the rate is steady;
* reading ahead for trims (this): needs nothing new on the wire, keeps the buffer
  at or below its bound, and the stall is gone whenever a trim is on its way.

Parking reorders an emitter's inputs only across channels: control from the relay
or the controller is handled before data of the upstream that arrived earlier,
which is an interleaving Storm could have delivered anyway (FIFO holds per channel
only); the parked data keep their own order. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


def checkpoint_request_at(max_buffered: int, key_groups: int) -> int:
    """Tuples of one key group an emitter keeps before it asks the group's owner for a
    checkpoint: half the buffer's bound shared over the groups (0, never, when the
    buffer is unbounded). Checkpoints of a group then come at least every
    ``max_buffered / (2 * key_groups)`` of its tuples, so a trim is on its way while
    the buffer still has room. O(1).

    >>> checkpoint_request_at(200_000, 20)
    5000
    >>> checkpoint_request_at(0, 20)
    0
    """
    if max_buffered <= 0:
        return 0
    return max(1, max_buffered // (2 * max(1, key_groups)))


class Admission(Enum):
    """What an emitter does with one emit (:meth:`HoldBack.admit`)."""

    SEND = "send"  # nothing parked and the buffer has room: send it now
    PARK = "park"  # parked behind the full buffer: read on (trims may be behind)
    SLOW = "slow"  # parked, and the parked emits are over their bound: pause, then read on


class HoldBack(Generic[T]):
    """The bound on one emitter's output buffer, and the emits parked behind it.

    ``max_buffered`` = 0: no bound (every emit is sent). ``max_parked`` = 0: no
    read-ahead (the first design: a pause per tuple at the bound). Items are opaque
    (the adapter's emit arguments). O(1) per call.

    >>> hold = HoldBack(max_buffered=2, max_parked=1)
    >>> hold.admit("a", buffered=1)
    <Admission.SEND: 'send'>
    >>> hold.admit("b", buffered=2), hold.admit("c", buffered=2)
    (<Admission.PARK: 'park'>, <Admission.SLOW: 'slow'>)
    >>> hold.release(buffered=2) is None, hold.release(buffered=0), hold.parked
    (True, 'b', 1)
    """

    __slots__ = ("max_buffered", "max_parked", "_parked", "slowed", "parked_total")

    def __init__(self, *, max_buffered: int, max_parked: int) -> None:
        if max_buffered < 0 or max_parked < 0:
            raise ValueError(f"bounds must be >= 0, not {max_buffered}, {max_parked}")
        self.max_buffered = max_buffered
        self.max_parked = max_parked
        self._parked: deque[T] = deque()
        self.slowed = 0  # emits after which the emitter paused
        self.parked_total = 0  # emits ever parked

    @property
    def parked(self) -> int:
        return len(self._parked)

    def admit(self, item: T, buffered: int) -> Admission:
        """Decide on ``item`` with ``buffered`` tuples in the output buffer. Unless
        the answer is ``SEND``, the item is parked here, behind any parked before."""
        if not self._parked and (not self.max_buffered or buffered < self.max_buffered):
            return Admission.SEND
        self._parked.append(item)
        self.parked_total += 1
        if len(self._parked) > self.max_parked:
            self.slowed += 1
            return Admission.SLOW
        return Admission.PARK

    def release(self, buffered: int) -> T | None:
        """The oldest parked item if the buffer (``buffered`` tuples) has room for
        it, else ``None``. Call again after sending it: each send fills the buffer."""
        if self._parked and (not self.max_buffered or buffered < self.max_buffered):
            return self._parked.popleft()
        return None
