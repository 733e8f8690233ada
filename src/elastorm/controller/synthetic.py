"""Seeded synthetic clusters for tests, benchmarks and simulations (no I/O).

Key-group loads follow one latent trend per operator plus noise, so key groups
of one operator correlate positively and operators may be set against each
other (``anti_pairs``) the way Madsen & Zhou 2015, section 7.2 (the experiment in which
load shifts between nodes: checkpoint allocation and load balancing), sets operator 1
against operator 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elastorm.controller.correlation import CorrelationFactors, factors_from_loads
from elastorm.controller.model import ClusterView, KeyGroupId, KeyGroupInfo, NodeInfo


@dataclass(frozen=True, kw_only=True, slots=True)
class SyntheticCluster:
    """A generated cluster view, its load history and the correlation factors."""

    view: ClusterView
    history: np.ndarray  # windows x K, columns in view.key_groups order
    correlation: CorrelationFactors


def synthetic_cluster(
    seed: int,
    *,
    nodes: int,
    key_groups: int,
    operators: int = 4,
    zones: int = 0,
    windows: int = 32,
    noise: float = 1.0,
    anti_pairs: int = 0,
    idle_nodes: int = 0,
) -> SyntheticCluster:
    """A random cluster: ``key_groups`` spread round-robin over the active nodes.

    ``zones=0`` leaves every node its own zone; ``idle_nodes`` of the ``nodes``
    own nothing. The first ``anti_pairs`` operator pairs (0,1), (2,3), ... get
    opposite trends (correlation near -1 between their key groups). Current load
    of a key group = its last window, shifted to be positive.

    >>> c = synthetic_cluster(1, nodes=4, key_groups=8)
    >>> len(c.view.key_groups), c.history.shape
    (8, (32, 8))
    """
    rng = np.random.default_rng(seed)
    active = max(1, nodes - idle_nodes)
    node_ids = [f"n{i:05d}" for i in range(nodes)]
    node_list = [
        NodeInfo(node_id=nid, zone=(f"z{i % zones}" if zones else None))
        for i, nid in enumerate(node_ids)
    ]
    trend = rng.normal(size=(windows, operators))
    for p in range(min(anti_pairs, operators // 2)):
        trend[:, 2 * p + 1] = -trend[:, 2 * p]
    ids = [KeyGroupId(f"op{k % operators}", k // operators) for k in range(key_groups)]
    ops = np.arange(key_groups) % operators
    history = trend[:, ops] + rng.normal(scale=noise, size=(windows, key_groups))
    history = history - history.min() + 0.1
    scale = rng.uniform(0.5, 1.5, size=key_groups)
    history = history * scale / history.mean()
    load = history[-1]
    infos = [
        KeyGroupInfo(
            key_group=kg,
            owner=node_ids[k % active],
            load=float(load[k]),
            checkpoint_size=float(rng.integers(1, 100)),
            replay_size=float(rng.integers(0, 10)),
        )
        for k, kg in enumerate(ids)
    ]
    view = ClusterView(nodes=node_list, key_groups=infos)
    pos = {kg: i for i, kg in enumerate(ids)}
    order = [pos[k.key_group] for k in view.key_groups]
    hist = history[:, order]
    sorted_ids = [k.key_group for k in view.key_groups]
    return SyntheticCluster(
        view=view, history=hist, correlation=factors_from_loads(sorted_ids, hist)
    )
