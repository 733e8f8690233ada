"""The synthetic spout of the migration benchmark (Madsen & Zhou 2015,
section 7.1: migration latency and completion time, Figs. 5-6).

Emits ``(key, stamp)`` tuples at a set rate: with probability ``hot_share`` a key
of the *hot* key group (the one the benchmark migrates), drawn uniformly from
its first ``keys`` keys, otherwise one of ``cold_keys`` keys of the other groups.
``stamp`` is the wall-clock time at which the tuple fell due at the set rate
(``Pacer.stamp``: at most a batch before its emit in steady state, long before it
when the spout was not asked for tuples): the keyed bolt measures latency from it, so
a tuple's latency includes every hop after the spout (the emitter bolt building a
replay included) and any time the job spent not reading its input.

**State size.** Raising ``keys`` first *preloads* the new keys: each new hot key
is emitted once, in order, at ``preload_rate``; then the steady mix resumes. The
hot group's state then has exactly ``keys`` distinct keys.

**Control file.** Conf (``elastorm.synthetic.*``) gives the starting values; a
driver changes them while the topology runs by writing
``<output_dir>/synthetic-control.json`` (``rate``, ``keys``, ``hot_share``, and
``checkpoint``, a counter the keyed bolt reads): the spout re-reads it when its
modification time changes, checking every ``CONTROL_POLL_SECS``. For a job resubmitted
onto a restored state (``bench/rescale_bench.py``, the stop-and-resubmit way),
``preloaded`` skips the preload of keys the state already has, and ``resume_from``
(wall-clock time the old job stopped reading) makes the new spout send, first, every
tuple that fell due since then.
"""

from __future__ import annotations

import os
import random
import time
import zlib
from collections.abc import Mapping
from typing import Any

from streamparse import Spout, Stream

from bolts.common import Counters, required_output_dir
from demos.options import SyntheticOptions
from demos.synthetic_control import CONTROL_FILE, read_control
from elastorm.config import TopologyConfig

CONTROL_POLL_SECS = 0.2
FIELDS = ["key", "stamp"]


def key_in_group(prefix: str, index: int, group: int, num_groups: int) -> str:
    """The ``index``-th key of the form ``<prefix><index>-<salt>`` in ``group``:
    the smallest salt whose key lands there (crc32 mod n, as ``elastorm.core.keygroups``)."""
    salt = 0
    while True:
        key = f"{prefix}{index}-{salt}"
        if zlib.crc32(key.encode()) % num_groups == group:
            return key
        salt += 1


class KeySpace:
    """Hot keys (all in ``hot_group``) made on demand, and a fixed set of cold keys
    spread over the other groups. Deterministic: the same arguments give the same keys."""

    def __init__(self, hot_group: int, num_groups: int, cold_keys: int) -> None:
        if not 0 <= hot_group < num_groups:
            raise ValueError(f"hot group {hot_group} not in [0, {num_groups})")
        self.hot_group = hot_group
        self.num_groups = num_groups
        self.hot: list[str] = []
        others = [g for g in range(num_groups) if g != hot_group]
        self.cold = (
            [key_in_group("c", i, others[i % len(others)], num_groups) for i in range(cold_keys)]
            if others
            else []
        )

    def ensure(self, count: int) -> list[str]:
        """The first ``count`` hot keys (made now if needed)."""
        hot = self.hot
        for i in range(len(hot), count):
            hot.append(key_in_group("h", i, self.hot_group, self.num_groups))
        return hot


class Pacer:
    """How many tuples are due at time ``now`` to hold ``rate`` since the last change.

    With ``wall`` (the wall-clock time of ``now``), :meth:`stamp` gives each tuple the
    wall-clock time at which it fell due: its arrival time in a source that queues
    what nobody reads (a Kafka topic), so a tuple sent late (the spout deactivated,
    the topology stopped) carries its wait in its latency.
    """

    __slots__ = ("rate", "since", "sent", "wall_since")

    def __init__(self, rate: float, now: float, wall: float | None = None) -> None:
        self.rate = rate
        self.since = now
        self.sent = 0
        self.wall_since = wall

    def reset(self, rate: float, now: float, wall: float | None = None) -> None:
        self.rate, self.since, self.sent, self.wall_since = rate, now, 0, wall

    def due(self, now: float) -> int:
        return max(0, int((now - self.since) * self.rate) - self.sent)

    def stamp(self, i: int) -> float:
        """Wall-clock time at which the ``i``-th tuple of the next batch fell due."""
        assert self.wall_since is not None, "a Pacer made without wall"
        return self.wall_since + (self.sent + i + 1) / self.rate


class PacedSpout(Spout):
    """A generator paced by a :class:`Pacer` that writes its counters (the synthetic,
    shift and flights-load spouts): ``setup`` reads the job's options, then the counters
    are written once. Its clocks and sleep are class attributes, so tests replace them."""

    clock = staticmethod(time.monotonic)
    wall = staticmethod(time.time)
    sleep = staticmethod(time.sleep)

    def initialize(self, storm_conf, context):
        self.output_dir = required_output_dir(storm_conf)
        self.counters = Counters.from_conf(storm_conf, context, "spout", clock=self.clock)
        self.setup(storm_conf)
        self.write_counts()

    def setup(self, storm_conf: Mapping[str, Any]) -> None:
        """The job's own state, from its options in ``storm_conf``."""
        raise NotImplementedError

    def write_counts(self) -> None:
        """Write the counters, with what this job adds to them."""
        raise NotImplementedError


class SyntheticSpout(PacedSpout):
    """Rate-limited generator; see the module docstring."""

    outputs = [Stream(fields=FIELDS)]

    def setup(self, storm_conf: Mapping[str, Any]) -> None:
        task = self.counters.task
        options = SyntheticOptions.from_conf(storm_conf)
        self.rate = options.rate
        self.keys = options.keys
        self.hot_share = options.hot_share
        self.preload_rate = options.preload_rate
        self.batch = options.batch
        self.random = random.Random(options.seed * 1000 + task)
        self.space = KeySpace(
            options.hot_group,
            TopologyConfig.from_conf(storm_conf).key_groups,
            options.cold_keys,
        )
        self.loaded = 0  # hot keys emitted at least once (preloaded)
        self.control_mtime = 0
        self.next_control = 0.0
        now = self.clock()
        self.pacer = Pacer(self.preload_rate, now, self.wall())
        self.resumed = False
        self.apply_control({}, now)

    def apply_control(self, control: Mapping[str, Any], now: float) -> None:
        self.rate = float(control.get("rate", self.rate))
        self.keys = int(control.get("keys", self.keys))
        self.hot_share = float(control.get("hot_share", self.hot_share))
        self.space.ensure(self.keys)
        # A job resubmitted onto a restored state: these hot keys are in it already.
        self.loaded = max(self.loaded, min(int(control.get("preloaded", 0)), self.keys))
        rate = self.preload_rate if self.loaded < self.keys else self.rate
        resume = control.get("resume_from")
        if resume is not None and not self.resumed:
            # Everything due since the old job stopped reading is still to be sent, and
            # each tuple carries the time it fell due (the backlog a stopped job finds).
            self.resumed = True
            behind = max(0.0, self.wall() - float(resume))
            self.pacer.reset(rate, now - behind, float(resume))
        elif rate != self.pacer.rate:
            self.pacer.reset(rate, now, self.wall())

    def poll_control(self, now: float) -> None:
        self.next_control = now + CONTROL_POLL_SECS
        try:
            mtime = os.stat(os.path.join(self.output_dir, CONTROL_FILE)).st_mtime_ns
        except OSError:
            return
        if mtime != self.control_mtime:
            self.control_mtime = mtime
            self.apply_control(read_control(self.output_dir), now)

    def next_tuple(self):
        now = self.clock()
        if now >= self.next_control:
            self.poll_control(now)
            if now >= self.counters.next_write:
                self.write_counts()
        pacer = self.pacer
        n = min(pacer.due(now), self.batch)
        if n == 0:
            self.sleep(min(0.005, 1.0 / max(pacer.rate, 1.0)))
            return
        emit = self.emit
        hot, cold, keys = self.space.hot, self.space.cold, self.keys
        preloading = self.loaded < keys
        sent = 0
        for i in range(n):
            if preloading:  # each new hot key once, in order
                key = hot[self.loaded]
                self.loaded += 1
            elif not cold or self.random.random() < self.hot_share:
                key = hot[int(self.random.random() * keys)]
            else:
                key = cold[int(self.random.random() * len(cold))]
            emit([key, pacer.stamp(i)])
            sent += 1
            if preloading and self.loaded == keys:
                break
        pacer.sent += sent
        self.counters.out["default"] += sent
        if preloading and self.loaded == keys:  # preload over: the steady rate resumes
            pacer.reset(self.rate, self.clock(), self.wall())
            self.write_counts()

    def write_counts(self) -> None:
        self.counters.extra = {
            "rate": self.rate,
            "keys": self.keys,
            "loaded": self.loaded,
            "hot_share": self.hot_share,
            "hot_group": self.space.hot_group,
        }
        self.counters.write()
