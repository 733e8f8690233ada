"""Key -> key group -> task mapping (Madsen & Zhou 2015, section 3: system model).

Modelled on Flink's ``KeyGroupRangeAssignment``: tiny pure functions over ints.
The offline Spark job computes the same numbers with Spark SQL's ``crc32``.
"""

from __future__ import annotations

import zlib


def key_group(key: str, num_key_groups: int) -> int:
    """Return the key group of ``key``: ``crc32(utf8(key)) mod num_key_groups``.

    ``0 <= key_group(key, n) < n`` for every ``n >= 1``. Deterministic across
    processes and machines (unlike the salted built-in ``hash``).

    Raises ``ValueError`` if ``num_key_groups < 1`` and ``TypeError`` if ``key``
    is not a ``str``.

    >>> key_group("N14228", 20)
    6
    """
    if not isinstance(key, str):
        raise TypeError(f"key must be str, got {type(key).__name__}")
    if num_key_groups < 1:
        raise ValueError(f"num_key_groups must be >= 1, got {num_key_groups}")
    return zlib.crc32(key.encode("utf-8")) % num_key_groups
