"""Full collections of Python's cyclic garbage collector on elastorm's schedule.

Why (issue 15, the p99 at 50% of saturation): an emitter keeps every tuple it
sent until a checkpoint covers it, a few seconds of its input (at 10,000 tuples/s
and checkpoints every 5 s, 50,000 to 100,000 tuples, each a named tuple holding
the input's values list: two objects the collector tracks). Python runs a full
collection whenever a quarter more objects have survived into its oldest
generation, here every few seconds, and a full collection traverses all of them:
about 70 ms of CPU per collection on this project's machines with 50,000 buffered
tuples (``bench/gc_pause.py``), during which the component reads nothing and
every tuple behind it waits. Reference counting frees the buffered tuples when
a trim drops them; the cyclic collector is only needed for garbage in cycles,
which the data path does not make.

So a component that keeps tuples or state (an emitter, a keyed task) makes the
automatic full collections rare (:data:`BACKSTOP`) and runs one itself every
``elastorm.gc.full_every_secs`` seconds, from its tick: young collections still
run as usual (they only look at new objects, well under a millisecond), and the
full one happens once a minute instead of every few seconds. 0 keeps Python's own
schedule.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

# Python's threshold for its oldest generation counts collections of the middle one
# (10 by default); at 1,000 an automatic full collection still comes, minutes apart
# at the rates measured, should a component not call tick().
BACKSTOP = 1000


class FullCollections:
    """One process's schedule of full collections (:func:`full_collections`)."""

    def __init__(
        self, every_secs: float, now: float, collect: Callable[[], int] = gc.collect
    ) -> None:
        self.every = every_secs
        self.last = now
        self.collect = collect
        self.runs = 0  # full collections run by the schedule
        if every_secs > 0:
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, BACKSTOP)

    def tick(self, now: float) -> None:
        """Run a full collection if one is due (call on the component's tick)."""
        if self.every > 0 and now - self.last >= self.every:
            self.collect()
            self.runs += 1
            self.last = now


_process: FullCollections | None = None


def full_collections(every_secs: float, now: float) -> FullCollections:
    """This process's schedule, made on the first call (a component that is both an
    emitter and a keyed task sets it up twice; the collector is per process)."""
    global _process
    if _process is None:
        _process = FullCollections(every_secs, now)
    return _process
