"""The field-list key (``elastorm.core.keys.field_list_key``) is injective and stable."""

from __future__ import annotations

import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from elastorm.core.keys import field_list_key, select_key

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
tuples = st.lists(values, min_size=1, max_size=4)


def _typed(v):
    """``v`` with each scalar's type kept, so ``1``, ``1.0`` and ``True`` stay distinct
    (Python's ``==`` says they are equal, JSON and the key do not)."""
    if isinstance(v, list):
        return ("list", tuple(_typed(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, _typed(x)) for k, x in v.items())))
    if isinstance(v, float):
        return ("float", repr(v))  # -0.0 and 0.0 too: JSON writes them apart
    return (type(v).__name__, v)


@settings(max_examples=400)
@given(tuples, tuples)
def test_distinct_value_tuples_have_distinct_keys(a, b) -> None:
    assume(_typed(a) != _typed(b))
    assert field_list_key(a) != field_list_key(b)


@settings(max_examples=200)
@given(tuples)
def test_the_key_is_stable_and_reads_back_as_the_values(a) -> None:
    key = field_list_key(a)
    assert json.loads(key) == a
    assert field_list_key(json.loads(key)) == key  # the same values again: the same key
    assert select_key(list(range(len(a))), a) == key
