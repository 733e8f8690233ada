"""Full GC collections on elastorm's schedule (``elastorm.storm.pygc``): the automatic
full ones made rare, one run from the tick when due, and 0 keeps Python's schedule."""

from __future__ import annotations

import gc

import pytest

from elastorm.config import TopologyConfig
from elastorm.storm import pygc


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_a_full_collection_runs_from_the_tick_when_due(thresholds) -> None:
    young, middle, _ = gc.get_threshold()
    runs: list[int] = []
    schedule = pygc.FullCollections(60.0, now=100.0, collect=lambda: runs.append(1) or 0)
    assert gc.get_threshold() == (young, middle, pygc.BACKSTOP)
    schedule.tick(159.9)
    assert runs == []
    schedule.tick(160.0)
    schedule.tick(200.0)  # the next one is due 60 s after the last
    assert runs == [1]
    schedule.tick(220.0)
    assert schedule.runs == 2


def test_zero_keeps_pythons_schedule(thresholds) -> None:
    before = gc.get_threshold()
    runs: list[int] = []
    schedule = pygc.FullCollections(0.0, now=0.0, collect=lambda: runs.append(1) or 0)
    schedule.tick(10**6)
    assert gc.get_threshold() == before and runs == []


def test_the_option_is_declared_with_its_check() -> None:
    assert TopologyConfig().gc_full_every_secs == 60.0
    assert TopologyConfig.overrides(gc_full_every_secs=0) == {"elastorm.gc.full_every_secs": 0}
    with pytest.raises(ValueError, match="elastorm.gc.full_every_secs"):
        TopologyConfig.overrides(gc_full_every_secs=-1)
