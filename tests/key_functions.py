"""Key functions for the key selector tests: top level of a module that is not the
topology's, as a user's would be (``src/bolts/keys.py``)."""

from __future__ import annotations


def first_letter(values: list) -> str:
    """The first letter of the tuple's first value."""
    return str(values[0])[:1]


def length(values: list) -> int:
    """The first value's length (not a str: the router str()s it)."""
    return len(str(values[0]))


def picky(values: list) -> str:
    """Refuses the word 'boom', as a user's function might fail on a bad tuple."""
    if values[0] == "boom":
        raise ValueError("no key for boom")
    return str(values[0])


class Holder:
    """A method is not a top-level function: refused."""

    @staticmethod
    def method(values: list) -> str:
        return str(values[0])
