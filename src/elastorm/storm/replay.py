"""Storm side of recovery by replay (``elastorm.core.replay``): the replayable spout.

A spout that mixes in :class:`ReplayableSpout` promises that its first output field
is a position that grows with every tuple, and that it can emit again, in the
same order, every tuple from any position on. ``ElasticTopology`` then subscribes
the emitters it feeds to its rewind stream and records them in
``elastorm.replay_sources``; a restarted emitter resumes from its restart point
and asks the spout to replay (``elastorm.zk.replay``).

A spout may also *link* its data stream to the one emitter it feeds: it declares
the stream with :func:`linked_fields` and emits on it with
:meth:`ReplayableSpout.emit_linked`, and the emitter subscribes with ``by_task()``
(``ElasticTopology`` records the pair in ``elastorm.replay_links``). The spout then
picks each row's emitter task itself (``Links``) and numbers each link, so the
emitter sees a tuple lost on the wire and asks for a rewind (``ReplayTracker``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from streamparse import Stream

from elastorm.config import TopologyConfig
from elastorm.core.chaos import WireLoss, wire_loss_on
from elastorm.core.replay import ALL, Links, replay_start
from elastorm.storm.savepoint import durable_savepoint, restored_points
from elastorm.storm.wire import CheckedEncoding

log = logging.getLogger(__name__)

REWIND_STREAM = "elastorm_rewind"
REWIND = Stream(fields=["tokens", "links"], name=REWIND_STREAM)
"""Spout -> every emitter task it feeds (all grouping): the restarts a rewind serves
(none: a probe) and, from a linked spout, ``[[task, last link number sent], ...]``
(else empty); the replay follows it on the data stream, in order."""


LINK_FIELDS = ["elastorm_link", "elastorm_task"]
"""Appended to a linked data stream's own fields: the tuple's number on its link and
its emitter task (the field ``by_task()`` routes by)."""


def linked_fields(fields: list[str]) -> list[str]:
    """The fields of a replayable spout's data stream that is linked to its emitter."""
    return [*fields, *LINK_FIELDS]


def _tasks_of(context: Mapping[str, Any], component: str) -> list[int]:
    return sorted(int(t) for t, c in context["task->component"].items() if c == component)


class ReplayableSpout(CheckedEncoding):
    """Mixin for a spout that can replay from a position (see the module docstring).

    Call :meth:`setup_replay` from ``initialize``: it returns the position to start
    at (0 on a first start; on a restart, the oldest one an emitter still needs).
    Call :meth:`poll_rewind` at the top of ``next_tuple``: when it returns a
    position, seek back to it before emitting anything else. A linked data stream
    (:func:`linked_fields`) is emitted on with :meth:`emit_linked`.
    """

    _rewinds = None  # the RewindBoard once set up (None: nothing to replay for)
    _links: Links | None = None  # the linked emitter's tasks and link numbers
    _wire_loss: WireLoss | None = None  # fault injection on the linked emits, off
    rewinds_served = 0  # rewinds this spout task made (each one a seek back)
    rows_rewound = 0  # positions it went back over in all
    _probe_every = 1.5  # elastorm.resend_after_secs: markers at least this often
    _probe_at = 0.0

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
        linked = config.replay_links.get(component)
        if linked is not None:
            self._links = Links(_tasks_of(context, linked))
            self._probe_every = config.resend_after_secs
            self._wire_loss = wire_loss_on(config, "spout")
            if self._wire_loss is not None:
                log.warning(
                    "spout task %s: fault injection on: losing %d emits to %s on the wire",
                    task, config.chaos_drop_tuples, linked,
                )  # fmt: skip
        elif config.chaos_drop_tuples and config.chaos_drop_on == "spout":
            log.error(
                "spout task %s: elastorm.chaos.drop_on = 'spout' but this spout feeds no "
                "emitter by task (elastorm.replay_links): nothing is lost here", task,
            )  # fmt: skip
        incarnation, points, served = spout_start(conf, component, task, emitters)
        self._rewinds = RewindBoard(conf, component)
        self._rewinds.start()
        self._served = served
        self._greet = incarnation > 1  # a restarted spout serves every waiting emitter
        if incarnation == 1:
            saved = durable_savepoint(conf, config)  # None unless restored from a savepoint
            if saved is None:
                return 0
            start = replay_start(restored_points(saved, emitters), self.replay_upstream)
            log.warning(
                "spout task %s restored from savepoint %s: from %d", task, saved.name, start
            )
            return start
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
            self._marker([ALL])
        requests = self._rewinds.requests()
        fresh = {r.token: r for r in requests.values() if r.token not in self._served}
        if not fresh:
            if self._links is not None and time.monotonic() >= self._probe_at:
                self._marker([])  # a probe: a loss at the end of a link shows
            return None
        self._served.update(fresh)
        start = min(r.start(self.replay_upstream) for r in fresh.values())
        self._marker(sorted(fresh))
        log.warning("rewind for %s: from %d (was at %d)", sorted(fresh), start, position)
        self.rewinds_served += 1
        self.rows_rewound += max(0, position - start)
        return min(start, position)

    def _marker(self, tokens: list[str]) -> None:
        """Emit a rewind marker naming ``tokens``, with the link numbers sent so far."""
        links = self._links
        self.emit([tokens, [] if links is None else links.sent()], stream=REWIND_STREAM)
        self._probe_at = time.monotonic() + self._probe_every

    def emit_linked(self, values: list) -> None:
        """Emit a data tuple (position first) on the linked stream: to the emitter task
        ``Links`` picks, with its link number. Unlinked (no emitter subscribes by task),
        both fields are None and the stream's groupings decide.

        Under fault injection (``elastorm.chaos.drop_on = 'spout'``) a lost tuple is
        numbered but never emitted, as if the wire had dropped it."""
        links = self._links
        if links is None:
            self.emit([*values, None, None])
            return
        link, task = links.next(values[0])
        if self._wire_loss is not None and self._wire_loss.lose():
            return
        self.emit([*values, link, task])

    def link_health(self) -> dict[str, int]:
        """Rewinds made (and positions gone back over) and, under fault injection,
        the emits lost on purpose: for the spout's stats."""
        health = {"rewinds": self.rewinds_served, "rows_rewound": self.rows_rewound}
        if self._wire_loss is not None:
            health["wire_lost"] = self._wire_loss.lost
        return health
