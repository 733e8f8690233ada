"""The shape of the single-machine cluster the integration tests share (see conftest)."""

from __future__ import annotations

from elastorm.runtime.cluster import up

SUPERVISORS = 2
SLOTS = 6  # one worker per executor for the crash tests (10 executors)


def cluster_up(cfg) -> dict:
    """Start the shared cluster (idempotent), also for a test that restarts it."""
    return up(cfg, supervisors=SUPERVISORS, slots=SLOTS)
