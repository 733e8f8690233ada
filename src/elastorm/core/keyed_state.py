"""Per-key state handles: what a user's keyed function reads and writes.

A user declares named states on the class of a keyed bolt, as PyFlink declares
``ValueStateDescriptor``/``MapStateDescriptor``::

    class CountWords(KeyedBolt):
        count = ValueState(default=0)

        def process_keyed(self, key, values):
            self.count.update(self.count.value() + 1)

While one tuple is applied, ``self.count`` is a handle on the current key's
state. Underneath, a key's value in its key group is a *record*: a plain dict
``{state name: value}`` (a :class:`MapState` is a dict inside it). Records are
never changed in place: the first write while a tuple is applied copies the
record (and a map, on its first write), because checkpoint fragments share the
previous record (``elastorm.core.state``). Cost: O(size of the record, plus the
size of each map written) per tuple that writes.

Values and map keys travel in JSON checkpoints: values must be JSON values, map
keys strings (checked on ``put``, so a key cannot change type after a migration).

**Time** (``elastorm.core.timers``): while a tuple is applied, ``KeyState.now`` is its
event time (``KeyedBolt.event_time``) and ``KeyState.watermark`` its key group's
watermark; inside an event-time timer's callback, ``now`` is the timer's time, inside
a processing-time timer's (``domain == "processing"``) the group's watermark (event
time does not move on a wall-clock tick).

**State TTL** (``ValueState(ttl=...)``, ``MapState(ttl=...)``) counts *event time*, so
that it is the same under replay, after a migration and after a restore (Flink's TTL
counts processing time and is not): a value written at event time ``now`` expires
once the group's watermark reaches ``now + ttl``. An expired value reads as absent
(the default) and is dropped from the record when read, and in any case by a sweep:
each key with TTL values has one event-time timer (tag :data:`TTL_TAG`) at its
earliest expiry, whose firing drops what expired and sets the next. A TTL value is
stored as ``[value, expires]`` (a map's entry likewise).

**Windows** (:class:`WindowState`): a key's windows and their running aggregates are a
list ``[[start, end, aggregate], ...]`` in its record; each window has an event-time
timer at its end (tag ``"w:" + state name``), whose firing hands the window to the
bolt's callback and drops it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from elastorm.core.errors import ElastormError
from elastorm.core.state import is_reserved
from elastorm.core.windows import Assigner, Window, merge_windows

if TYPE_CHECKING:
    from elastorm.core.timers import GroupTimers

Record = dict[str, Any]

TTL_TAG = "ttl"
"""The tag of a key's TTL sweep timer."""

CLEANUP = "\x00ttl"
"""Reserved record field: the time of the key's pending TTL sweep timer."""

WINDOW_TAG = "w:"
"""Prefix of a window state's timer tag (then the state's name)."""


class StateAccessError(ElastormError):
    """A state handle used outside the processing of a keyed tuple."""


class KeyState:
    """One key's record while one tuple is applied (copy on first write)."""

    __slots__ = (
        "key",
        "_record",
        "_copied",
        "_maps_copied",
        "timers",
        "now",
        "watermark",
        "domain",
    )

    def __init__(
        self,
        key: str,
        record: Record | None,
        *,
        timers: GroupTimers | None = None,
        now: Any = None,
        watermark: Any = None,
        domain: str = "event",
    ) -> None:
        self.key = key
        self._record: Record = record if record is not None else {}
        self._copied = False
        self._maps_copied: set[str] = set()
        self.timers = timers  # the group's clock; None: the bolt has no event time
        self.now = now  # the event time of the tuple (or timer) being applied
        self.watermark = timers.watermark if timers is not None else watermark
        self.domain = domain  # "processing" inside a processing-time timer's callback

    def get(self, name: str, default: Any = None) -> Any:
        return self._record.get(name, default)

    def set(self, name: str, value: Any) -> None:
        self._writable()[name] = value

    def delete(self, name: str) -> None:
        if name in self._record:
            del self._writable()[name]

    def map_for_read(self, name: str) -> dict[str, Any]:
        return self._record.get(name) or {}

    def map_for_write(self, name: str) -> dict[str, Any]:
        """``name``'s map, copied once per tuple before its first change."""
        record = self._writable()
        if name not in self._maps_copied:
            record[name] = dict(record.get(name) or {})
            self._maps_copied.add(name)
        return record[name]

    def expired(self, expires: Any) -> bool:
        """Whether a TTL value expiring at ``expires`` has (the watermark reached it)."""
        return self.watermark is not None and expires <= self.watermark

    def expiry(self, name: str, ttl: float) -> Any:
        """When a TTL value written now expires; sets the key's sweep timer to it if
        that is earlier than the one set (O(log timers))."""
        timers = self.timers
        if self.now is None or timers is None:
            raise StateAccessError(
                f"state {name!r} has a ttl, which counts event time: define the bolt's "
                "event_time(key, values)"
            )
        expires = self.now + ttl
        swept = self._record.get(CLEANUP)
        if swept is None or expires < swept:
            if swept is not None:
                timers.delete(swept, self.key, TTL_TAG)
            timers.register(expires, self.key, TTL_TAG)
            self.set(CLEANUP, expires)
        return expires

    def sweep(self, declared: list[_Declared]) -> None:
        """The key's TTL sweep timer fired: drop what expired of the ``declared``
        TTL states; set the timer to the earliest expiry left. O(TTL values of the key)."""
        self.delete(CLEANUP)
        left = [e for d in declared for e in d.sweep(self)]
        if left and self.timers is not None:
            earliest = min(left)
            self.timers.register(earliest, self.key, TTL_TAG)
            self.set(CLEANUP, earliest)

    def record(self) -> Record | None:
        """The key's record after the tuple (``None`` once every state is cleared)."""
        return self._record or None

    def _writable(self) -> Record:
        if not self._copied:
            self._record = dict(self._record)
            self._copied = True
        return self._record


class _Declared:
    """A named state declared on a class; ``instance.<name>`` gives its handle."""

    handle: type
    ttl: float | None = None

    def __init__(self) -> None:
        self.name = ""

    def sweep(self, state: KeyState) -> list[Any]:
        """Drop this state's expired TTL values from ``state``; the expiries left."""
        return []

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        current = getattr(instance, "current_key_state", None)
        if current is None:
            raise StateAccessError(
                f"state {self.name!r} is per key: use it while a keyed tuple is processed "
                "(in process_keyed), not in initialize or on ticks"
            )
        return self.handle(self, current)


def declared_states(cls: type) -> tuple[_Declared, ...]:
    """The states declared on ``cls`` (or its bases), by name."""
    found = {name: getattr(cls, name) for name in dir(cls) if not name.startswith("__")}
    return tuple(d for _, d in sorted(found.items()) if isinstance(d, _Declared))


def ttl_states(cls: type) -> tuple[_Declared, ...]:
    """The states declared on ``cls`` (or its bases) that have a ttl, by name."""
    return tuple(d for d in declared_states(cls) if d.ttl)


def readable_record(record: Any, declared: tuple[_Declared, ...], watermark: Any) -> Any:
    """What a state query shows of a key's record (``elastorm state``): the user's
    values as the states read them, never elastorm's bookkeeping.

    Reserved fields (``core.state.is_reserved``: the TTL sweep's time) are left out.
    A TTL value stored ``[value, expires]`` shows as ``{"value": v, "expires": e,
    "expires_in": e - watermark}`` (event time; ``expires_in`` is ``None`` before the
    group's first watermark), or not at all once expired, as ``value()`` reads it; a
    TTL map's entries likewise. A window state shows its open windows as
    ``[{"start": s, "end": e, "aggregate": acc}]``. Fields no declared state names (a
    hand-written step's record, a state since removed from the class) show as stored;
    a record that is not a dict is returned as it is. O(size of the record).

    >>> last = ValueState(ttl=10)
    >>> last.name = "last"
    >>> readable_record({"last": [7, 15], CLEANUP: 15}, (last,), 12)
    {'last': {'value': 7, 'expires': 15, 'expires_in': 3}}
    >>> readable_record({"last": [7, 15]}, (last,), 15)
    {}
    """
    if not isinstance(record, dict):
        return record
    by_name = {d.name: d for d in declared}
    out: dict[str, Any] = {}
    for name, stored in record.items():
        if is_reserved(name):
            continue
        decl = by_name.get(name)
        if isinstance(decl, WindowState):
            out[name] = [{"start": s, "end": e, "aggregate": acc} for s, e, acc in stored]
        elif decl is None or not decl.ttl:
            out[name] = stored
        elif isinstance(decl, MapState):
            live = {k: _expiring(v, watermark) for k, v in stored.items()}
            out[name] = {k: v for k, v in live.items() if v is not None}
        elif (shown := _expiring(stored, watermark)) is not None:
            out[name] = shown
    return out


def _expiring(stored: list, watermark: Any) -> dict[str, Any] | None:
    """A TTL value ``[value, expires]`` as a query shows it; ``None`` once expired."""
    value, expires = stored
    if watermark is not None and expires <= watermark:
        return None
    left = None if watermark is None else expires - watermark
    return {"value": value, "expires": expires, "expires_in": left}


def _ttl(ttl: float | None) -> float | None:
    if ttl is not None and not ttl > 0:
        raise ValueError(f"ttl must be > 0 (event time), got {ttl!r}")
    return ttl


class ValueState(_Declared):
    """One value per key (PyFlink's ``ValueState``): ``value()``, ``update(v)``, ``clear()``.

    ``default`` is what ``value()`` returns for a key that has none (copied, so a
    mutable default is never shared between keys). ``ttl``: a value expires that long
    (event time) after its last update (see the module docstring).
    """

    def __init__(self, default: Any = None, *, ttl: float | None = None) -> None:
        super().__init__()
        self.default = default
        self.ttl = _ttl(ttl)
        self.handle = ValueHandle

    def sweep(self, state: KeyState) -> list[Any]:
        got = state.get(self.name)
        if self.ttl is None or got is None:
            return []
        if state.expired(got[1]):
            state.delete(self.name)
            return []
        return [got[1]]


class MapState(_Declared):
    """A map per key (PyFlink's ``MapState``): ``get``, ``put``, ``remove``, ``contains``,
    ``keys``, ``values``, ``items``, ``is_empty``, ``clear``; map keys are strings.
    ``ttl``: an entry expires that long (event time) after its last ``put``."""

    def __init__(self, *, ttl: float | None = None) -> None:
        super().__init__()
        self.ttl = _ttl(ttl)
        self.handle = MapHandle

    def sweep(self, state: KeyState) -> list[Any]:
        if self.ttl is None:
            return []
        entries = state.map_for_read(self.name)
        gone = [k for k, (_, expires) in entries.items() if state.expired(expires)]
        if gone:
            if len(gone) == len(entries):
                state.delete(self.name)
                return []
            writable = state.map_for_write(self.name)
            for k in gone:
                del writable[k]
        return [expires for _, expires in state.map_for_read(self.name).values()]


class ValueHandle:
    """A :class:`ValueState` bound to the current key."""

    __slots__ = ("_decl", "_state")

    def __init__(self, decl: ValueState, state: KeyState) -> None:
        self._decl, self._state = decl, state

    def value(self) -> Any:
        decl, state = self._decl, self._state
        got = state.get(decl.name, decl)
        if got is not decl and decl.ttl is not None:
            if state.expired(got[1]):
                state.delete(decl.name)
                got = decl
            else:
                got = got[0]
        return copy.copy(decl.default) if got is decl else got

    def update(self, value: Any) -> None:
        decl, state = self._decl, self._state
        if decl.ttl is not None:
            value = [value, state.expiry(decl.name, decl.ttl)]
        state.set(decl.name, value)

    def clear(self) -> None:
        self._state.delete(self._decl.name)


class MapHandle:
    """A :class:`MapState` bound to the current key."""

    __slots__ = ("_decl", "_state")

    def __init__(self, decl: MapState, state: KeyState) -> None:
        self._decl, self._state = decl, state

    def _read(self) -> dict[str, Any]:
        """The live map: with a ttl, its unexpired values (expired ones dropped)."""
        decl, state = self._decl, self._state
        entries = state.map_for_read(decl.name)
        if decl.ttl is None or not entries:
            return entries
        live = {k: v for k, (v, expires) in entries.items() if not state.expired(expires)}
        if len(live) < len(entries):
            decl.sweep(state)
        return live

    def get(self, key: str, default: Any = None) -> Any:
        return self._read().get(key, default)

    def contains(self, key: str) -> bool:
        return key in self._read()

    def put(self, key: str, value: Any) -> None:
        decl, state = self._decl, self._state
        if not isinstance(key, str):
            raise TypeError(
                f"MapState {decl.name!r}: keys must be str (checkpoints are JSON), "
                f"got {type(key).__name__} {key!r}"
            )
        if decl.ttl is not None:
            value = [value, state.expiry(decl.name, decl.ttl)]
        state.map_for_write(decl.name)[key] = value

    def remove(self, key: str) -> None:
        if key in self._state.map_for_read(self._decl.name):
            del self._state.map_for_write(self._decl.name)[key]

    def keys(self) -> Iterator[str]:
        return iter(list(self._read()))

    def values(self) -> Iterator[Any]:
        return iter(list(self._read().values()))

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(list(self._read().items()))

    def is_empty(self) -> bool:
        return not self._read()

    def clear(self) -> None:
        self._state.delete(self._decl.name)


class WindowState(_Declared):
    """A key's event-time windows and one running aggregate per window (Flink's
    ``window(...).aggregate(...)`` on a keyed stream).

    ``add(value)`` in ``process_keyed`` puts the value in every window of the current
    event time (``assigner``: :class:`~elastorm.core.windows.TumblingWindow`,
    ``SlidingWindow`` or ``SessionWindow``): ``acc = aggregate(acc, value)``, starting
    from a copy of ``initial``. Once the group's watermark reaches a window's end, the
    bolt's method named ``fire`` is called as ``fire(key, window, acc)`` (its emits are
    outputs of the tuple that moved the watermark) and the window is dropped. An event
    older than the watermark whose windows have all fired is late: ``add`` returns
    False and keeps nothing. Sessions merge: ``merge(acc1, acc2)`` joins the aggregates
    of the sessions an event bridges (required for ``SessionWindow``).

    Cost per ``add``: O(windows of the key) plus a timer registration
    (``elastorm.core.timers``).
    """

    def __init__(
        self,
        assigner: Assigner,
        aggregate: Callable[[Any, Any], Any],
        *,
        initial: Any = None,
        merge: Callable[[Any, Any], Any] | None = None,
        fire: str = "on_window",
    ) -> None:
        super().__init__()
        if assigner.merging and merge is None:
            raise ValueError("a WindowState over sessions needs merge(acc1, acc2)")
        self.assigner, self.aggregate, self.initial = assigner, aggregate, initial
        self.merge, self.fire = merge, fire
        self.handle = WindowHandle

    @property
    def tag(self) -> str:
        return WINDOW_TAG + self.name

    def fired(self, state: KeyState, end: Any) -> list[tuple[Window, Any]]:
        """The windows of ``state``'s key ending at ``end`` (its timer fired), removed
        from its record, with their aggregates."""
        entries = state.get(self.name) or []
        due = [(Window(s, e), acc) for s, e, acc in entries if e == end]
        if due:
            left = [entry for entry in entries if entry[1] != end]
            if left:
                state.set(self.name, left)
            else:
                state.delete(self.name)
        return due


class WindowHandle:
    """A :class:`WindowState` bound to the current key."""

    __slots__ = ("_decl", "_state")

    def __init__(self, decl: WindowState, state: KeyState) -> None:
        self._decl, self._state = decl, state

    def windows(self) -> list[tuple[Window, Any]]:
        """The key's windows not fired yet, by start, with their aggregates."""
        return [(Window(s, e), acc) for s, e, acc in self._state.get(self._decl.name) or []]

    def add(self, value: Any) -> bool:
        """Add ``value`` at the current event time; False if it is late (kept nowhere)."""
        decl, state = self._decl, self._state
        timers, now = state.timers, state.now
        if timers is None or now is None:
            raise StateAccessError(
                f"window state {decl.name!r} counts event time: define the bolt's "
                "event_time(key, values)"
            )
        mark = state.watermark
        windows = [w for w in decl.assigner.assign(now) if mark is None or w.end > mark]
        if not windows:
            return False
        entries = {Window(s, e): acc for s, e, acc in state.get(decl.name) or []}
        for w in windows:
            if decl.assigner.merging:
                w, absorbed = merge_windows(list(entries), w)
                acc = copy.copy(decl.initial)
                for i, old in enumerate(absorbed):
                    got = entries.pop(old)
                    acc = got if i == 0 else decl.merge(acc, got)  # type: ignore[misc]
                    if old.end != w.end:
                        timers.delete(old.end, state.key, decl.tag)
            else:
                acc = entries.pop(w) if w in entries else copy.copy(decl.initial)
            entries[w] = decl.aggregate(acc, value)
            timers.register(w.end, state.key, decl.tag)
        state.set(decl.name, [[w.start, w.end, acc] for w, acc in sorted(entries.items())])
        return True
