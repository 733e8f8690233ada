"""Errors a user can fix: printed as a single line by the CLI."""


class UserError(Exception):
    """Bad config, missing setup, unreachable service: say what and how to fix it."""
