"""Storm's daemons and workers ride out a ZooKeeper outage of a minute or more instead
of halting (chaos ``join/zk-stop``, session 33: with Storm's 5 retries a worker halted
9 s into a 10-18 s outage, taking the spout, routers, sink and a controller with it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from elastorm.runtime.cluster import base_conf
from elastorm.runtime.config import load_config

PROJECT = Path(__file__).resolve().parents[2]


def _retry_window_secs(conf: dict) -> float:
    """How long Curator keeps retrying a ZooKeeper call under Storm's
    ``StormBoundedExponentialBackoffRetry`` (jitter left out, each attempt's own time
    too: a lower bound of the outage a daemon outlives). Below a threshold the sleep is
    ``interval + 2**retry`` ms (the exponent in milliseconds: 5 retries at Storm's
    defaults are about 5 s, and the worker halted 9 s in); above it, it grows linearly
    to ``ceiling``."""
    times = conf.get("storm.zookeeper.retry.times", 5)
    base = conf.get("storm.zookeeper.retry.interval", 1000)
    ceiling = conf.get("storm.zookeeper.retry.intervalceiling.millis", 30000)
    threshold = 1
    while (1 << (threshold + 1)) < (ceiling - base) // 2:
        threshold += 1
    step = max(1, (ceiling - (1 << threshold)) // (times - threshold)) if times > threshold else 1
    linear = base + (1 << threshold)
    sleeps = [
        base + (1 << n) if n < threshold else min(ceiling, linear + step * (n - threshold))
        for n in range(times)
    ]
    return sum(sleeps) / 1000


def test_storm_outlives_a_zookeeper_outage_of_a_minute(tmp_path: Path) -> None:
    cfg = dataclasses.replace(load_config(PROJECT), home=tmp_path / "home")
    assert _retry_window_secs(base_conf(cfg, 16727)) >= 60
    assert _retry_window_secs({}) < 10  # Storm's defaults, which halted a worker at 9 s
