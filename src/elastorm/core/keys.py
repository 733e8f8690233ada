"""Key selectors: which key a tuple has, from its values (pure).

Modelled on Flink's ``KeySelector`` and ``KeyGroupRangeAssignment``: the one
decision, :func:`select_key`, is a tiny pure function; the router that calls it per
tuple (``elastorm.storm.keyed_bolt.KeyRouter``) and the wiring that builds the
selector at submit (``elastorm.storm.topology``) only translate.

A selector is one of three forms, each what ``keyed(...)`` was given:

* ``keyed("word")``, one field: the key is ``str(value)`` of that field
  (the selector is the field's index, an ``int``);
* ``keyed(["airline", "year"])``, a field list: the key is :func:`field_list_key`
  of those fields' values, the compact JSON array of them, e.g. ``'["AA",2013]'``
  (the selector is a ``list`` of indexes);
* ``keyed(my_key)``, a function ``f(values) -> key`` defined at the top level of an
  importable module: given the tuple's values (a list, in the stream's field order),
  it returns the key; a result that is not a ``str`` is ``str()``-ed, as a single
  field's value is (the selector is the resolved function; its conf form is the
  dotted path ``"package.module:function"``, :func:`function_path`).

A key is always a ``str``; its key group is ``elastorm.core.keygroups.key_group``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from elastorm.core.errors import ElastormError

KeyFunction = Callable[[list], Any]
Selector = int | list[int] | KeyFunction
"""A resolved selector: a field index, a list of field indexes, or a key function."""


class KeySelectorError(ElastormError):
    """A key selector that cannot be used; the message says why and the fix."""


def field_list_key(values: Sequence[Any]) -> str:
    """The key of a field-list selector: the compact JSON array of ``values``.

    Injective over tuples of JSON values (strings, numbers, booleans, null, lists and
    string-keyed objects): distinct tuples give distinct keys, since JSON quotes every
    string (``["a,b"]`` vs ``["a","b"]``, ``[1]`` vs ``["1"]``) and the array's length is
    in its brackets. Stable across processes: objects' keys are sorted, no whitespace,
    non-ASCII kept as UTF-8. Raises ``TypeError`` for a value JSON cannot hold.

    >>> field_list_key(["AA", 2013])
    '["AA",2013]'
    """
    return json.dumps(list(values), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def select_key(selector: Selector, values: Sequence[Any]) -> str:
    """The key of a tuple with ``values`` under ``selector`` (the module doc's forms).

    O(fields) for the field forms; a function's own cost otherwise. Raises
    ``IndexError`` for a field index past the values, ``TypeError`` for a field-list
    value JSON cannot hold, and whatever a key function raises: the caller counts and
    logs the tuple (a bad tuple never stops the task).

    >>> select_key(0, ["hello", 3]), select_key([1, 0], ["hello", 3])
    ('hello', '[3,"hello"]')
    """
    if isinstance(selector, bool):
        raise KeySelectorError(f"a key selector is not a bool: {selector!r}")
    if isinstance(selector, int):
        return str(values[selector])
    if isinstance(selector, list):
        return field_list_key([values[i] for i in selector])
    key = selector(list(values))
    return key if isinstance(key, str) else str(key)


def function_path(fn: Any) -> str:
    """``fn``'s dotted path ``"package.module:function"``, by which a worker imports it.

    Only a function defined at the top level of a module has one: a lambda, a nested
    function, a method or a callable object is refused with ``KeySelectorError`` (one
    line: why, and the fix), and so is a function of ``__main__``. Whether the path
    imports is the caller's to check (it is an import, not a pure step).
    """
    name = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    fix = (
        "define the key function with def at the top level of a module your workers "
        "import (e.g. src/bolts/keys.py) and pass it, or pass its path 'package.module:name'"
    )
    if not callable(fn) or not isinstance(name, str) or not isinstance(module, str):
        raise KeySelectorError(f"key selector {fn!r} is not a function; {fix}")
    if name == "<lambda>":
        raise KeySelectorError(f"key selector is a lambda, which a worker cannot import; {fix}")
    if "." in name or "<" in name:
        raise KeySelectorError(
            f"key selector {name} is not at the top level of module {module} "
            f"(nested function or method), so a worker cannot import it; {fix}"
        )
    if module == "__main__":
        raise KeySelectorError(
            f"key selector {name} is defined in __main__, which a worker cannot import; {fix}"
        )
    return f"{module}:{name}"


def split_path(path: str) -> tuple[str, str]:
    """``("package.module", "function")`` of a dotted path ``"package.module:function"``;
    ``KeySelectorError`` if it has not that form."""
    module, sep, name = path.partition(":") if isinstance(path, str) else ("", "", "")
    if (
        not sep
        or not module
        or not name.isidentifier()
        or not all(part.isidentifier() for part in module.split("."))
    ):
        raise KeySelectorError(
            f"key function path {path!r} is not of the form 'package.module:function'"
        )
    return module, name
