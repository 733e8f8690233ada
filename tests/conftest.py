"""Test-wide settings."""

from hypothesis import settings

# The CI machines are shared and noisy (2 cores): a per-example deadline would make
# property tests fail on load, not on bugs. Each test still sets its own example count.
settings.register_profile("elastorm", deadline=None)
settings.load_profile("elastorm")
