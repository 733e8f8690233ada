"""The sans-IO state machines behind the ZooKeeper adapters (h11's ``_state.py`` style).

* A task's registration: :class:`PublisherState` under ``PUBLISHER_TRANSITIONS``,
  fed by ``elastorm.zk.heartbeat.HeartbeatPublisher``.
* A controller's leadership: :class:`StoreStatus` under ``STORE_TRANSITIONS``, fed by
  ``elastorm.zk.store.ControllerStore``.

Each table is ``(state, input) -> next state``, as data; only :meth:`Machine.feed`
changes a state. The adapters do the ZooKeeper calls and feed what they saw (or were
told) as an input; a pair missing from the table raises
:class:`~elastorm.core.errors.StateTransitionError` and leaves the state as it was.
``docs/protocols.md`` shows both tables (checked against them by
``tests/unit/test_protocol_tables.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Generic, TypeVar

from elastorm.core.errors import StateTransitionError

S = TypeVar("S", bound=Enum)
I = TypeVar("I", bound=Enum)  # noqa: E741 - the input, as in (state, input)


class Machine(Generic[S, I]):
    """A state that only its table changes: ``feed(input)`` moves it to
    ``table[(state, input)]``.

    >>> m = RegistrationMachine()
    >>> m.feed(PublisherInput.REGISTERED)
    <PublisherState.REGISTERED: 'registered'>
    """

    name: str
    table: Mapping[tuple[S, I], S]

    def __init__(self, initial: S) -> None:
        self._current = initial

    @property
    def state(self) -> S:
        """The current state (never changed but by :meth:`feed`)."""
        return self._current

    def feed(self, given: I) -> S:
        """Apply input ``given`` and return the new state; raise
        ``StateTransitionError`` (state unchanged) if the table has no such row."""
        nxt = self.table.get((self._current, given))
        if nxt is None:
            raise StateTransitionError(
                f"{self.name}: input {given.value} not allowed in state {self._current.value}"
            )
        self._current = nxt
        return nxt


# -- a task's registration (its heartbeat znode) -------------------------------------


class PublisherState(Enum):
    """Where the task's registration stands.

    * ``STARTING``: not registered yet (not connected, or a previous incarnation's
      znode is still there until its session expires);
    * ``REGISTERED``: the znode exists in the current session and is refreshed;
    * ``DISCONNECTED``: ZooKeeper unreachable; the session (and znode) may still live;
    * ``EXPIRED``: the session ended, so the znode is gone and the controller may have
      declared this task dead and restored its key groups elsewhere; the publisher
      registers again as soon as it can (then ``REGISTERED``) unless it was fenced;
    * ``FENCED``: after an expiry, ``fences/<operator>-<task>`` named the znode this
      process had registered: the controller declared it lost, so its state is stale
      and someone else owns its key groups. It never registers again; the task must stop;
    * ``STOPPED``: ``stop()`` was called.
    """

    STARTING = "starting"
    FENCED = "fenced"
    REGISTERED = "registered"
    DISCONNECTED = "disconnected"
    EXPIRED = "expired"
    STOPPED = "stopped"


class PublisherInput(Enum):
    """What the heartbeat publisher saw or was told."""

    REGISTERED = "registered"  # its znode was created or refreshed in the current session
    UNREACHABLE = "unreachable"  # a step found ZooKeeper unreachable
    SESSION_ENDED = "session_ended"  # the session expired (LOST, or a new session id)
    HELD_ELSEWHERE = "held_elsewhere"  # the znode is another session's (an earlier life)
    FENCED = "fenced"  # declared lost: its fence names our znode, or the liveness link said
    STOP = "stop"  # stop() was called


_PS, _PI = PublisherState, PublisherInput
_STEPPING = (_PS.STARTING, _PS.REGISTERED, _PS.DISCONNECTED, _PS.EXPIRED)
"""States in which the publisher's loop still steps (registers, refreshes, watches)."""

PUBLISHER_TRANSITIONS: dict[tuple[PublisherState, PublisherInput], PublisherState] = {
    **{(s, _PI.REGISTERED): _PS.REGISTERED for s in _STEPPING},
    **{(s, _PI.UNREACHABLE): s for s in _STEPPING if s is not _PS.REGISTERED},
    (_PS.REGISTERED, _PI.UNREACHABLE): _PS.DISCONNECTED,  # the session (and znode) may live
    **{(s, _PI.SESSION_ENDED): _PS.EXPIRED for s in _STEPPING},
    **{(s, _PI.HELD_ELSEWHERE): _PS.STARTING for s in _STEPPING},  # wait for it to expire
    # Told from any thread at any time; FENCED and STOPPED take nothing else.
    **{(s, _PI.FENCED): _PS.FENCED for s in PublisherState},
    **{(s, _PI.STOP): _PS.STOPPED for s in PublisherState},
}
"""``(state, input) -> state`` of a task's registration."""


class RegistrationMachine(Machine[PublisherState, PublisherInput]):
    """A task's registration, from ``STARTING``."""

    name = "heartbeat publisher"
    table = PUBLISHER_TRANSITIONS

    def __init__(self) -> None:
        super().__init__(PublisherState.STARTING)


# -- a controller's leadership (its store of decisions) ------------------------------


class StoreStatus(Enum):
    """``STARTING``: decisions not loaded yet. ``STANDBY``: another controller leads.
    ``ONLINE``: leader, connected, writes go through. ``OFFLINE``: ZooKeeper
    unreachable (or the lead being re-taken): decisions held in memory.
    ``CONFLICT``: deposed, or our znodes were changed by someone else: this
    controller must stop deciding (restart it to reload). ``CLOSED``: stopped."""

    STARTING = "starting"
    STANDBY = "standby"
    ONLINE = "online"
    OFFLINE = "offline"
    CONFLICT = "conflict"
    CLOSED = "closed"


class StoreInput(Enum):
    """What the controller's store saw or was told."""

    LEADING = "leading"  # it holds the lead and has its decisions loaded
    UNREACHABLE = "unreachable"  # a step found ZooKeeper unreachable
    LEAD_LOST = "lead_lost"  # its leader znode is not of the current session: re-take it
    ANOTHER_LEADS = "another_leads"  # another controller's leader znode
    CONFLICT = "conflict"  # deposed, or its znodes were changed or unreadable
    CLOSE = "close"  # stop() was called


_SS, _SI = StoreStatus, StoreInput
_DECIDING = (_SS.STARTING, _SS.STANDBY, _SS.ONLINE, _SS.OFFLINE)
"""States in which the store's loop still steps."""

STORE_TRANSITIONS: dict[tuple[StoreStatus, StoreInput], StoreStatus] = {
    **{(s, _SI.LEADING): _SS.ONLINE for s in _DECIDING},
    **{(s, _SI.UNREACHABLE): s for s in _DECIDING if s is not _SS.ONLINE},
    (_SS.ONLINE, _SI.UNREACHABLE): _SS.OFFLINE,  # decisions held in memory
    **{(s, _SI.LEAD_LOST): s for s in _DECIDING if s is not _SS.ONLINE},
    (_SS.ONLINE, _SI.LEAD_LOST): _SS.OFFLINE,
    # Only a controller that never led stands by: one that led is deposed (CONFLICT).
    **{(s, _SI.ANOTHER_LEADS): _SS.STANDBY for s in (_SS.STARTING, _SS.STANDBY)},
    **{(s, _SI.CONFLICT): _SS.CONFLICT for s in _DECIDING},
    **{(s, _SI.CLOSE): _SS.CLOSED for s in _DECIDING},
    # CONFLICT holds until the controller restarts, CLOSED for good: both absorb the
    # rest (a step that was under way when they came still feeds its inputs).
    **{(_SS.CONFLICT, i): _SS.CLOSED if i is _SI.CLOSE else _SS.CONFLICT for i in StoreInput},
    **{(_SS.CLOSED, i): _SS.CLOSED for i in StoreInput},
}
"""``(status, input) -> status`` of a controller's leadership."""


class LeadershipMachine(Machine[StoreStatus, StoreInput]):
    """A controller's leadership, from ``STARTING``."""

    name = "controller store"
    table = STORE_TRANSITIONS

    def __init__(self) -> None:
        super().__init__(StoreStatus.STARTING)
