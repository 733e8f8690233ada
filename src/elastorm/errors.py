"""Errors a user can fix: printed as a single line by the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class UserError(Exception):
    """Bad config, missing setup, unreachable service: say what and how to fix it."""


@contextmanager
def as_user_error(*errors: type[Exception]) -> Iterator[None]:
    """Re-raise any of ``errors`` as a ``UserError`` with its message and no traceback:
    a command's one line for a value the user chose that the model refuses."""
    try:
        yield
    except errors as exc:
        raise UserError(str(exc)) from None
