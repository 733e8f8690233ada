"""Storm side of recovery by replay (``elastorm.core.replay``): the replayable spout.

A spout that mixes in :class:`ReplayableSpout` promises that its first output field
is a position that grows with every tuple, and that it can emit again, in the
same order, every tuple from any position on. ``ElasticTopology`` then subscribes
the emitters it feeds to its rewind stream and records them in
``elastorm.replay_sources``; a restarted emitter resumes from its restart point
and asks the spout to replay (``elastorm.zk.replay``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from streamparse import Stream

from elastorm.config import TopologyConfig
from elastorm.core.replay import ALL, replay_start
from elastorm.storm.wire import CheckedEncoding

log = logging.getLogger(__name__)

REWIND_STREAM = "elastorm_rewind"
REWIND = Stream(fields=["tokens"], name=REWIND_STREAM)
"""Spout -> every emitter task it feeds (all grouping): the restarts a rewind serves;
the replay follows it on the data stream, in order."""


def _tasks_of(context: Mapping[str, Any], component: str) -> list[int]:
    return sorted(int(t) for t, c in context["task->component"].items() if c == component)


class ReplayableSpout(CheckedEncoding):
    """Mixin for a spout that can replay from a position (see the module docstring).

    Call :meth:`setup_replay` from ``initialize``: it returns the position to start
    at (0 on a first start; on a restart, the oldest one an emitter still needs).
    Call :meth:`poll_rewind` at the top of ``next_tuple``: when it returns a
    position, seek back to it before emitting anything else.
    """

    _rewinds = None  # the RewindBoard once set up (None: nothing to replay for)

    def setup_replay(self, conf: Mapping[str, Any], context: Mapping[str, Any]) -> int:
        from elastorm.zk.replay import RewindBoard, spout_start

        component, task = context["componentid"], int(context["taskid"])
        self.replay_upstream = f"{component}:{task}"
        config = TopologyConfig.from_conf(conf)
        emitters = {
            name: _tasks_of(context, name)
            for name, sources in config.replay_sources.items()
            if component in sources
        }
        if not emitters:  # feeds no emitter that recovers by replay: nothing to track
            return 0
        incarnation, points, served = spout_start(conf, component, task, emitters)
        self._rewinds = RewindBoard(conf, component)
        self._rewinds.start()
        self._served = served
        self._greet = incarnation > 1  # a restarted spout serves every waiting emitter
        if incarnation == 1:
            return 0
        start = replay_start(points, self.replay_upstream)
        log.warning("spout task %s restarted (incarnation %d): from %d", task, incarnation, start)
        return start

    def poll_rewind(self, position: int) -> int | None:
        """The position to seek back to, if a restarted emitter asked for a replay
        (``position`` is where the spout is now); emits the rewind marker first."""
        if self._rewinds is None:
            return None
        if self._greet:
            self._greet = False
            self.emit([[ALL]], stream=REWIND_STREAM)
        requests = self._rewinds.requests()
        fresh = {r.token: r for r in requests.values() if r.token not in self._served}
        if not fresh:
            return None
        self._served.update(fresh)
        start = min(r.start(self.replay_upstream) for r in fresh.values())
        self.emit([sorted(fresh)], stream=REWIND_STREAM)
        log.warning("rewind for %s: from %d (was at %d)", sorted(fresh), start, position)
        return min(start, position)
