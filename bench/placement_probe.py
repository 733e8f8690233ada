"""Failures, joins and leaves against a checkpoint placement (shared by the benches).

Every answer comes from the project's own planners: the placements of
``elastorm.controller.allocation`` and the recovery plan of
``elastorm.controller.recovery.plan_recovery`` (restore on the live holder, then
re-place with the same policy), applied to a :class:`ClusterView` whose checkpoints
are the placement under test. Nothing here decides for the runtime.

* **usable**: share of the failed nodes' key groups that have a live holder (restored
  from memory; the rest would need the durable tier);
* **spread**: how many groups each surviving holder restores (the most any one holder
  restores, and how many holders share the work);
* **moves**: checkpoints whose holder changes when a node joins, or goes down, and the
  policy is applied again the way the controller applies it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from elastorm.controller.allocation import (
    AllocationSpec,
    baseline_allocation,
    correlated_allocation,
    even_allocation,
    moves_between,
    peer_ring,
    reoptimize,
    ring_allocation,
)
from elastorm.controller.correlation import Correlation
from elastorm.controller.model import Allocation, ClusterView, NodeId, NodeInfo
from elastorm.controller.recovery import plan_recovery

POLICIES = ("baseline", "even", "correlated", "ring")


def policy(name: str, seed: int = 0) -> Callable[..., Allocation]:
    """The allocation function of strategy ``name`` taking ``(spec, keep=...)``."""
    if name == "even":
        return lambda spec, keep=None: even_allocation(spec, seed=seed, keep=keep)
    return {
        "baseline": baseline_allocation,
        "correlated": correlated_allocation,
        "ring": ring_allocation,
    }[name]


@dataclass(frozen=True)
class FailureStats:
    """One scenario over its trials (pooled)."""

    scenario: str
    trials: int
    groups: int  # key groups owned by the failed nodes, summed over trials
    usable: float  # share restorable from a live holder
    max_per_holder: float  # mean over trials of the most groups one holder restores
    holders: float  # mean over trials of how many holders restore something
    replaced: float  # mean checkpoints re-placed by phase 2


def fail(
    view: ClusterView,
    failed: Sequence[NodeId],
    name: str,
    correlation: Correlation | None,
) -> tuple[int, int, Counter, int]:
    """``plan_recovery`` of ``failed`` with the policy ``name`` re-placing: groups lost
    with the nodes, groups restored from a holder, restores per holder, re-placements."""
    owned = sum(len(view.owned_by(n)) for n in failed)
    plan = plan_recovery(view, failed, correlation=correlation, allocate=policy(name))
    per = Counter(m.target for m in plan.restores)
    return owned, len(plan.restores), per, len(plan.checkpoint_moves)


def failure_stats(
    view: ClusterView,
    scenario: str,
    trials: Iterable[Sequence[NodeId]],
    name: str,
    correlation: Correlation | None,
) -> FailureStats:
    """Pool :func:`fail` over ``trials`` (each a set of nodes failing together)."""
    owned = restored = 0
    most, holders, replaced = [], [], []
    n = 0
    for failed in trials:
        o, r, per, rp = fail(view, failed, name, correlation)
        owned, restored, n = owned + o, restored + r, n + 1
        most.append(max(per.values(), default=0))
        holders.append(len(per))
        replaced.append(rp)
    return FailureStats(
        scenario=scenario,
        trials=n,
        groups=owned,
        usable=restored / owned if owned else float("nan"),
        max_per_holder=statistics.fmean(most) if most else float("nan"),
        holders=statistics.fmean(holders) if holders else float("nan"),
        replaced=statistics.fmean(replaced) if replaced else float("nan"),
    )


def scenarios(
    view: ClusterView, *, seed: int, samples: int, every: int = 1
) -> list[tuple[str, list[list[str]]]]:
    """The failure sets: one node; two at random (``samples`` pairs); two ring
    neighbours; two id neighbours (a rack the placement was not told about); every
    other node of the ring (Kumbhare et al. 2015's best case, ``n r / (r + 1)`` with
    ``r = 1``); each declared zone. ``every``: per-node scenarios start at every
    ``every``-th node only (large clusters)."""
    nodes = list(view.node_ids())
    ring = list(peer_ring(nodes))
    n = len(nodes)
    rng = np.random.default_rng(seed)
    pairs = [sorted(rng.choice(nodes, size=2, replace=False).tolist()) for _ in range(samples)]
    out = [
        ("1 node", [[nodes[i]] for i in range(0, n, every)]),
        ("2 at random", pairs),
        ("2 ring neighbours", [[ring[i], ring[(i + 1) % n]] for i in range(0, n, every)]),
        ("2 id neighbours", [[nodes[i], nodes[(i + 1) % n]] for i in range(0, n, every)]),
        ("every 2nd on the ring", [ring[0::2], ring[1::2]]),
    ]
    zones = sorted({x.zone for x in view.nodes if x.zone is not None})
    if zones:
        out.append(("a zone", [[x.node_id for x in view.nodes if x.zone == z] for z in zones]))
    return out


def with_checkpoints(view: ClusterView, alloc: Allocation) -> ClusterView:
    """``view`` with ``alloc`` as its checkpoint holders."""
    return ClusterView(
        nodes=view.nodes, key_groups=view.key_groups, checkpoints=alloc, now=view.now
    )


@dataclass(frozen=True)
class ChurnStats:
    """Checkpoints moved by one node joining / one node going down (means over trials)."""

    join: float
    join_runtime: float  # the runtime's path: Algorithm 3 re-optimises (theta 0)
    down: float
    held_by_down: float  # what the node going down held (the least any policy must move)
    cps: int


def churn(
    spec: AllocationSpec,
    alloc: Allocation,
    name: str,
    *,
    trials: Sequence[NodeId],
    joiner: str,
    seed: int = 0,
) -> ChurnStats:
    """Apply the policy (``seed``: even's, the same as ``alloc``'s) again after
    ``joiner`` joins (owning nothing), and after each of ``trials`` goes down; count
    the checkpoints whose holder changes."""
    fn = policy(name, seed)
    view = spec.view

    def spec_with(nodes: list[NodeInfo]) -> AllocationSpec:
        v = ClusterView(nodes=nodes, key_groups=view.key_groups, checkpoints=alloc, now=view.now)
        return AllocationSpec(view=v, correlation=spec.correlation, epsilon=spec.epsilon)

    joined = spec_with([*view.nodes, NodeInfo(node_id=joiner)])
    join = len(moves_between(alloc, fn(joined)))
    join_rt = len(reoptimize(joined, alloc, theta=0.0)[1]) if name == "correlated" else join
    downs, held = [], []
    for x in trials:
        nodes = [
            NodeInfo(node_id=n.node_id, zone=n.zone, down=n.down or n.node_id == x)
            for n in view.nodes
        ]
        downs.append(len(moves_between(alloc, fn(spec_with(nodes)))))
        held.append(sum(x in hs for _, hs in alloc.entries))
    return ChurnStats(
        join=join,
        join_runtime=join_rt,
        down=statistics.fmean(downs),
        held_by_down=statistics.fmean(held),
        cps=len(alloc),
    )


def failure_table(rows: Sequence[tuple[str, str, FailureStats]]) -> str:
    """Markdown: one line per (setting, policy, scenario)."""
    lines = [
        "| setting | placement | failure | trials | groups lost with the nodes |"
        " usable (restored from a holder) | most groups one holder restores |"
        " holders restoring | checkpoints re-placed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, name, s in rows:
        lines.append(
            f"| {setting} | {name} | {s.scenario} | {s.trials} | {s.groups} |"
            f" {100 * s.usable:.1f}% | {s.max_per_holder:.1f} | {s.holders:.1f} |"
            f" {s.replaced:.1f} |"
        )
    return "\n".join(lines)


def churn_table(rows: Sequence[tuple[str, str, ChurnStats]]) -> str:
    """Markdown: one line per (setting, policy)."""
    lines = [
        "| setting | placement | checkpoints | a node joins: moved (runtime path) |"
        " a node goes down: moved | of which it held |",
        "|---|---|---|---|---|---|",
    ]
    for setting, name, c in rows:
        rt = f" ({c.join_runtime:.0f})" if c.join_runtime != c.join else ""
        lines.append(
            f"| {setting} | {name} | {c.cps} | {c.join:.0f}{rt} = {100 * c.join / c.cps:.1f}% |"
            f" {c.down:.1f} = {100 * c.down / c.cps:.1f}% | {c.held_by_down:.1f} |"
        )
    return "\n".join(lines)
