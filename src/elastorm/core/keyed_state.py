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
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from elastorm.core.errors import ElastormError

Record = dict[str, Any]


class StateAccessError(ElastormError):
    """A state handle used outside the processing of a keyed tuple."""


class KeyState:
    """One key's record while one tuple is applied (copy on first write)."""

    __slots__ = ("key", "_record", "_copied", "_maps_copied")

    def __init__(self, key: str, record: Record | None) -> None:
        self.key = key
        self._record: Record = record if record is not None else {}
        self._copied = False
        self._maps_copied: set[str] = set()

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

    def __init__(self) -> None:
        self.name = ""

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


class ValueState(_Declared):
    """One value per key (PyFlink's ``ValueState``): ``value()``, ``update(v)``, ``clear()``.

    ``default`` is what ``value()`` returns for a key that has none (copied, so a
    mutable default is never shared between keys).
    """

    def __init__(self, default: Any = None) -> None:
        super().__init__()
        self.default = default
        self.handle = ValueHandle


class MapState(_Declared):
    """A map per key (PyFlink's ``MapState``): ``get``, ``put``, ``remove``, ``contains``,
    ``keys``, ``values``, ``items``, ``is_empty``, ``clear``; map keys are strings."""

    def __init__(self) -> None:
        super().__init__()
        self.handle = MapHandle


class ValueHandle:
    """A :class:`ValueState` bound to the current key."""

    __slots__ = ("_decl", "_state")

    def __init__(self, decl: ValueState, state: KeyState) -> None:
        self._decl, self._state = decl, state

    def value(self) -> Any:
        missing = self._decl
        got = self._state.get(self._decl.name, missing)
        return copy.copy(self._decl.default) if got is missing else got

    def update(self, value: Any) -> None:
        self._state.set(self._decl.name, value)

    def clear(self) -> None:
        self._state.delete(self._decl.name)


class MapHandle:
    """A :class:`MapState` bound to the current key."""

    __slots__ = ("_decl", "_state")

    def __init__(self, decl: MapState, state: KeyState) -> None:
        self._decl, self._state = decl, state

    def _read(self) -> dict[str, Any]:
        return self._state.map_for_read(self._decl.name)

    def get(self, key: str, default: Any = None) -> Any:
        return self._read().get(key, default)

    def contains(self, key: str) -> bool:
        return key in self._read()

    def put(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(
                f"MapState {self._decl.name!r}: keys must be str (checkpoints are JSON), "
                f"got {type(key).__name__} {key!r}"
            )
        self._state.map_for_write(self._decl.name)[key] = value

    def remove(self, key: str) -> None:
        if key in self._read():
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
