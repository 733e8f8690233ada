"""Driver of the synthetic migration benchmark (``topologies/synthetic.py``).

Runs a *plan* on the live topology: grow the hot key group's state (``keys``
steps), migrate it by a protocol after letting a chosen number of its tuples
pile up in the emitter's buffer (``migrate`` steps), or just watch (``idle``
steps, the noise floor). A migrate step:

1. asks the hot group's owner for a checkpoint (control file counter) and waits
   until it is taken; the holder's ack trims the emitter's buffer;
2. waits ``max(trim_wait, replay / hot rate)`` seconds from the checkpoint, so
   about ``replay`` tuples of the group are buffered;
3. requests the migration through ZooKeeper (CPA/CPAL to the holder, direct to
   the task that is neither owner nor holder) and waits until it is done;
4. waits ``settle`` seconds (the tail of the pause and the queues drain).

The outcome reads what the components wrote: latency buckets of the hot group's
outputs (``latency-*.jsonl``), timed protocol events (``events-*.jsonl``: the
replay size each ``Migrate`` found, handling times), and the final state totals
(which must equal the tuples emitted: exactly once through every migration).

Measures per migration (``analyse``): **pause** = highest output latency of the
group's tuples output in ``[started, started + window]`` minus the group's median
latency before (median of 100 ms bucket means over the ``before`` seconds before
``started``). Idle windows are measured the same way over the same length, so the
noise floor and a migration's pause are maxima over equally many buckets (a
longer window finds a higher maximum in noise alone); a migration that is not
done ``after`` seconds before its window ends is flagged (``covered`` False);
**completion** = ``done - started`` on the controller's clock;
**pickup** = ``started`` - the request's creation (the controller polls requests
on its 1 s tick). The same pause measured from the emitter's stamp (``hop_pause_ms``)
leaves out the tuples' wait in the emitter's queue (e.g. while it builds a toState).
A migration whose baseline exceeds ``steady_ms`` started on a backlogged group
(``steady`` False): its pause is not meaningful.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import socket
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from demos.options import EXAMPLE_SECTIONS, SyntheticOptions
from elastorm.config import TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.drivers import DriverArgs
from elastorm.runtime.outcome import Outcome, Progress

if TYPE_CHECKING:
    from elastorm.runtime.provision import NodeProvisioner

OPERATOR = "counter"
BUCKET_SECS = 0.1  # bolts.synthetic.BUCKET_SECS (not imported: no streamparse here)


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a plan: ``kind`` is ``keys``, ``migrate``, ``idle``, ``scale`` (to
    ``nodes`` nodes, through ``elastorm.runtime.scale``: needs the driver's
    ``provisioner``), ``rebalance`` (start nodes up to ``nodes``, then Storm's
    ``rebalance`` onto ``nodes`` workers waiting ``wait`` s, then watch ``seconds``) or
    ``resubmit`` (start nodes up to ``nodes``, stop the job with a savepoint, submit it
    again on ``nodes`` nodes from the savepoint, watch ``seconds`` from its first
    output: Flink's way; needs the driver's ``provisioner``, ``killer`` and
    ``resubmitter``) or ``ramp`` (change the input rate linearly to ``rate`` over
    ``seconds``, sampling the controller's node count every ``sample`` s)."""

    kind: str
    protocol: str = ""
    replay: int = 0  # migrate: hot tuples to let pile up in the buffer
    keys: int = 0  # keys: the hot group's state size to reach
    seconds: float = 2.0  # idle: the window watched
    nodes: int = 0  # scale, rebalance: nodes wanted
    wait: int = 30  # rebalance: Storm's wait_secs (its default: the message timeout)
    rate: float = 0.0  # ramp: the input rate to reach
    sample: float = 2.0  # ramp: seconds between samples of the node count
    tag: str = ""

    def __post_init__(self) -> None:
        kinds = ("keys", "migrate", "idle", "scale", "rebalance", "resubmit", "ramp")
        if self.kind not in kinds:
            raise ValueError(f"unknown step kind {self.kind!r}")
        if self.kind == "migrate" and self.protocol not in ("direct", "cpa", "cpal"):
            raise ValueError(f"unknown protocol {self.protocol!r}")


@dataclass
class Settings:
    rate: float = 1500.0  # steady tuples/s from the spout
    hot_share: float = 0.6  # share of them in the hot group
    keys: int = 1000  # initial state size of the hot group
    preload_rate: float = 3000.0
    hot_group: int = 7
    checkpoint_interval: float = 5.0  # cold groups
    warmup: float = 4.0
    trim_wait: float = 1.0
    settle: float = 2.5
    before: float = 5.0
    after: float = 1.0  # a pause window must reach this far past the migration's done
    window: float = 2.5  # every pause window, idle or migration: [started, started + window]
    steady_ms: float = 50.0  # a baseline above this: the group was backlogged, no pause
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hot_rate(self) -> float:
        return self.rate * self.hot_share


@contextmanager
def private_zookeeper(cfg, name: str = "zookeeper-migration-bench") -> Iterator[Any]:
    """A ZooKeeper server of our own for one LocalCluster run; yields a config using it.

    The project's server is shared: another engineer's ``elastorm cluster down``
    stops it, which takes a LocalCluster that uses it down mid-run.
    """
    from elastorm.runtime import services

    with socket.socket() as sock:
        sock.bind((services.LOOPBACK, 0))
        port = sock.getsockname()[1]
    data = cfg.home / name
    shutil.rmtree(data, ignore_errors=True)
    daemon = services.zookeeper_daemon(cfg, name=name, port=port, data_dir=data)
    pid = services.start(cfg, daemon)
    try:
        services.wait_until(
            lambda: services.zookeeper_ok(port), name, 30, pid, cfg.logs / f"{name}.log"
        )
        yield dataclasses.replace(cfg, zookeeper_port=port)
    finally:
        services.stop(cfg, name)


# -- analysis (pure) ------------------------------------------------------------------
def merge_buckets(rows: Iterable[list[float]]) -> dict[int, list[float]]:
    """Rows ``[bucket, max, count, sum, hop max, hop sum]`` from every task, merged
    per bucket into ``[max, count, sum, hop max, hop sum]``."""
    merged: dict[int, list[float]] = {}
    for b, top, count, total, hop_top, hop_total in rows:
        have = merged.get(int(b))
        if have is None:
            merged[int(b)] = [top, count, total, hop_top, hop_total]
        else:
            have[0] = max(have[0], top)
            have[1] += count
            have[2] += total
            have[3] = max(have[3], hop_top)
            have[4] += hop_total
    return merged


def pause_of(
    buckets: dict[int, list[float]],
    started: float,
    end: float,
    *,
    width: float = BUCKET_SECS,
    before: float = 5.0,
) -> dict[str, float | None]:
    """Baseline (median bucket mean before ``started``), max over the window
    ``[started, end]`` and pause, in ms; the same measured from the emitter's stamp
    (``hop_``: without the emitter's queue)."""
    lo, hi = int(started / width), int(end / width)
    first = int((started - before) / width)
    prior = [v for b, v in buckets.items() if first <= b < lo and v[1] > 0]
    window = [v for b, v in buckets.items() if lo <= b <= hi and v[1] > 0]
    out: dict[str, float | None] = {"outputs": sum(v[1] for v in window)}
    for prefix, top_at, sum_at in (("", 0, 2), ("hop_", 3, 4)):
        baseline = statistics.median(v[sum_at] / v[1] for v in prior) if prior else None
        top = max(v[top_at] for v in window) if window else None
        out[f"{prefix}baseline_ms"] = baseline
        out[f"{prefix}window_max_ms"] = top
        out[f"{prefix}pause_ms"] = None if baseline is None or top is None else top - baseline
    return out


def first_output(pattern: str, seen: dict[str, int], since: float = 0.0) -> float | None:
    """The earliest second of output from ``since`` on in what the counters appended to
    their output logs (``pattern``) after the sizes in ``seen`` (flushed on their 1 s
    tick: a stopped job's last outputs may be appended after ``seen`` was taken), or
    None."""
    seconds = []
    for path in glob.glob(pattern):
        with open(path, encoding="utf-8") as f:
            f.seek(seen.get(path, 0))
            for line in f:
                if line.endswith("\n"):
                    seconds += [sec for sec, _, _ in json.loads(line)["lat"] if sec >= since]
    return float(min(seconds)) if seconds else None


def read_jsonl(pattern: str) -> list[Any]:
    rows = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def analyse(output_dir: str, records: list[dict[str, Any]], settings: Settings) -> None:
    """Add pause, completion and the replay actually found to each record, in place."""
    buckets = merge_buckets(read_jsonl(os.path.join(output_dir, "latency-*.jsonl")))
    events = read_jsonl(os.path.join(output_dir, "events-*.jsonl"))
    migrates = {e["epoch"]: e for e in events if e["type"] == "Migrate" and "epoch" in e}
    for r in records:
        end = r["started"] + settings.window
        r.update(pause_of(buckets, r["started"], end, before=settings.before))
        r["window_s"] = settings.window
        base = r["baseline_ms"]
        r["steady"] = base is not None and base <= settings.steady_ms
        if r["kind"] != "migrate":
            continue
        r["covered"] = r["done"] + settings.after <= end
        r["completion_ms"] = round((r["done"] - r["started"]) * 1000, 1)
        r["pickup_ms"] = round((r["started"] - r["submitted"]) * 1000, 1)
        found = migrates.get(r["epoch"])
        r["replayed"] = found["replayed"] if found else None
        r["emitter_ms"] = found["ms"] if found else None
        lo, hi = r["started"] - 0.5, r["done"] + 0.5
        r["events"] = [
            {k: e[k] for k in ("task", "type", "ms") if k in e}
            | {"t": round(e["at"] - r["started"], 3)}
            for e in events
            if lo <= e["at"] <= hi and e["type"] != "checkpoint_taken"
        ]


# -- the driver ------------------------------------------------------------------------
class SyntheticDriver:
    """Runs ``plan`` on the synthetic topology and measures each migration."""

    name = "synthetic"
    sections = EXAMPLE_SECTIONS
    topology: str = ""  # set by runtime.run
    zk_hosts: str = ""

    def __init__(self, plan: Iterable[Step], settings: Settings | None = None) -> None:
        self.plan = list(plan)
        self.settings = settings or Settings()
        self.records: list[dict[str, Any]] = []
        self.control: dict[str, Any] = {}
        self.final: dict[str, Any] = {}
        self.output_dir = ""
        self._client = None
        self._tasks = 3  # keyed tasks whose totals the final check needs (see wait)
        # For ``scale`` steps: who starts and stops nodes, and (optionally) a reader of
        # Nimbus's executor assignments recorded after each step.
        self.provisioner = None
        self.assignments: Callable[[], dict[str, Any]] | None = None
        self.rebalancer: Callable[[int, int], None] | None = None  # (wait_secs, workers)
        # For ``resubmit`` steps: kill a topology by name; submit one (name, options).
        self.killer: Callable[[str], None] | None = None
        self.resubmitter: Callable[[str, dict[str, object]], None] | None = None
        self.savepointer: Callable[[str, str], None] | None = None  # (topology, name)
        self.submitted: dict[str, object] = {}  # the options of the first submit
        self.emitted_before = 0  # tuples the spouts of stopped topologies emitted

    def options(self, output_dir: str) -> dict[str, object]:
        from demos.synthetic_control import write_control

        s = self.settings
        self.output_dir = output_dir
        self.control = {"rate": s.rate, "keys": s.keys, "hot_share": s.hot_share, "checkpoint": 0}
        write_control(output_dir, self.control)
        self.submitted = (
            TopologyConfig.overrides(
                output_dir=output_dir, key_groups=20, checkpoint_interval_secs=s.checkpoint_interval
            )
            | SyntheticOptions.overrides(
                rate=s.rate,
                keys=s.keys,
                hot_share=s.hot_share,
                hot_group=s.hot_group,
                preload_rate=s.preload_rate,
            )
            | s.extra
        )
        return self.submitted

    # -- files ------------------------------------------------------------------
    def _counts(self, component: str) -> list[dict[str, Any]]:
        out = []
        for path in sorted(
            glob.glob(os.path.join(self.output_dir, "counts", f"{component}-*.json"))
        ):
            try:
                with open(path, encoding="utf-8") as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                pass
        return out

    def _set(self, **changes: Any) -> None:
        from demos.synthetic_control import write_control

        self.control.update(changes)
        write_control(self.output_dir, self.control)

    def _until(self, what: str, check, timeout: float, step: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                raise UserError(f"synthetic run: {what} not seen after {timeout:.0f} s")
            time.sleep(step)

    def _loaded(self, keys: int) -> bool:
        spouts = self._counts("generator")
        return bool(spouts) and spouts[0]["extra"].get("loaded", 0) >= keys

    def _status(self, timeout: float) -> dict[str, Any]:
        """The controller's routing status; an empty znode (the controller creates it,
        then writes it) reads as not there yet."""
        from elastorm.zk.layout import ZnodeLayout
        from elastorm.zk.requests import read_status

        def attempt() -> dict[str, Any] | None:
            try:
                return read_status(self._client, ZnodeLayout(self.topology), OPERATOR)
            except ValueError:
                return None

        return self._until("the controller's status", attempt, timeout, step=0.2)

    def _checkpoint_taken(self, request: int) -> float | None:
        for e in read_jsonl(os.path.join(self.output_dir, "events-*.jsonl")):
            if e["type"] == "checkpoint_taken" and e.get("request", 0) >= request:
                return e["at"]
        return None

    # -- steps ------------------------------------------------------------------
    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        from elastorm.runtime.migrate import connect

        s = self.settings
        self._client = connect(self.zk_hosts)
        # Workers start in minutes, not seconds, on a crowded machine.
        self._tasks = len(self._status(timeout=min(timeout, 300))["tasks"])
        self._until("the initial preload", lambda: self._loaded(s.keys), timeout)
        time.sleep(s.warmup)
        for i, step in enumerate(self.plan):
            progress(f"step {i + 1}/{len(self.plan)}: {step}")
            if step.kind == "keys":
                self._set(keys=step.keys)
                self._until(
                    f"preload to {step.keys} keys", lambda k=step.keys: self._loaded(k), 300
                )
                time.sleep(s.settle)
            elif step.kind == "idle":
                started = time.time()
                time.sleep(step.seconds)
                self.records.append(
                    {
                        "kind": "idle",
                        "tag": step.tag,
                        "keys": self.control["keys"],
                        "started": started,
                        "done": time.time(),
                        "load": os.getloadavg()[0],
                    }
                )
                time.sleep(max(0.0, s.window - step.seconds) + 0.2)  # the window, then a gap
            elif step.kind == "rebalance":
                self.records.append(self._rebalance(step))
            elif step.kind == "resubmit":
                self.records.append(self._resubmit(step, timeout))
            elif step.kind == "ramp":
                self.records.append(self._ramp(step))
            elif step.kind == "scale":
                self.records.append(self._scale(step, timeout))
                time.sleep(s.settle)
            else:
                self.records.append(self._migrate(step))
                time.sleep(s.settle)
        self._set(rate=0.0)
        time.sleep(3.0)
        self._set(final=True)
        asked = time.time()
        self.final = self._until(
            "final state totals",
            lambda: self._final_totals(asked),
            30,
            step=0.5,
        )

    def _final_totals(self, asked: float) -> dict[str, Any] | None:
        counters = [c for c in self._counts(OPERATOR) if c["written_at"] > asked + 1.0]
        spouts = self._counts("generator")
        if (
            len(counters) < self._tasks
            or not spouts
            or any("state_total" not in c["extra"] for c in counters)
        ):
            return None
        return {
            "emitted": self.emitted_before + spouts[0]["out"]["default"],
            "state_total": sum(c["extra"]["state_total"] for c in counters),
            "hot_keys": [c["extra"]["hot_keys"] for c in counters if c["extra"]["hot_keys"]],
            "emitter": self._counts("emitter")[0]["extra"].get("stats", {}),
        }

    def _scale(self, step: Step, timeout: float) -> dict[str, Any]:
        """Scale to ``step.nodes`` and wait until exactly the wanted nodes own key groups;
        records the owners per node and Nimbus's executor assignments before and after."""
        from elastorm.runtime.scale import carry_out, plan_scale
        from elastorm.zk.layout import ZnodeLayout

        if self.provisioner is None:
            raise UserError("a scale step needs the driver's provisioner")
        layout = ZnodeLayout(self.topology)
        before = self._assignment()
        submitted = time.time()
        change = plan_scale(self._client, layout, step.nodes, self.provisioner)
        done = carry_out(self._client, layout, change, self.provisioner, timeout)
        settled = done.settled
        owners = self._status(timeout=10)["owners"]
        if self.assignments:  # the scheduler re-places within nimbus.monitor.freq.secs
            time.sleep(12.0)
        return {
            "kind": "scale",
            "tag": step.tag,
            "nodes": step.nodes,
            "keys": self.control["keys"],
            "started_nodes": list(change.start),
            "drained": list(change.drain),
            "owned": settled.owned,
            "owners": owners,  # key group -> task, when settled
            "binding": list(settled.binding),
            "submitted": submitted,
            "started": done.applied_at,
            "done": done.settled_at,
            "assignment_before": before,
            "assignment_after": self._assignment(),
            "load": os.getloadavg()[0],
        }

    def _assignment(self) -> dict[str, Any] | None:
        """Nimbus's executor assignments now (None: the driver was given no way to ask)."""
        return self.assignments() if self.assignments else None

    @staticmethod
    def _start_missing(provisioner: NodeProvisioner, nodes: int) -> tuple[str, ...]:
        """Start spare nodes until ``nodes`` run (Storm's and Flink's ways to use a new
        node both start it first); the nodes started."""
        started = provisioner.spare(max(0, nodes - len(provisioner.live())))
        provisioner.start(started, 120)
        return started

    def _rebalance(self, step: Step) -> dict[str, Any]:
        """Storm's way to use a new node: start it, ``rebalance``, watch ``seconds``."""
        if self.provisioner is None or self.rebalancer is None:
            raise UserError("a rebalance step needs the driver's provisioner and rebalancer")
        started_nodes = self._start_missing(self.provisioner, step.nodes)
        before = self._assignment()
        started = time.time()
        self.rebalancer(step.wait, step.nodes)
        time.sleep(step.seconds)
        return {
            "kind": "rebalance",
            "tag": step.tag,
            "nodes": step.nodes,
            "wait": step.wait,
            "keys": self.control["keys"],
            "started_nodes": list(started_nodes),
            "submitted": started,
            "started": started,
            "done": time.time(),
            "assignment_before": before,
            "assignment_after": self._assignment(),
            "load": os.getloadavg()[0],
        }

    def _resubmit(self, step: Step, timeout: float) -> dict[str, Any]:
        """Flink's way to use a new node: start it; stop the job with a savepoint (stop
        reading the input, drain, wait for every key group's durable copy to catch up,
        take a savepoint, ``elastorm savepoint``); kill the topology; submit it again,
        same name, on ``nodes`` nodes from the savepoint (``elastorm.restore_from``);
        watch ``seconds`` from its first output.

        The input keeps falling due while the job is down, as in a topic nobody reads:
        the new spout sends that backlog first, each tuple stamped when it fell due
        (``resume_from``), so the downtime shows in the latencies."""
        if None in (self.provisioner, self.killer, self.resubmitter, self.savepointer):
            raise UserError(
                "a resubmit step needs the driver's provisioner, killer, resubmitter, savepointer"
            )
        started_nodes = self._start_missing(self.provisioner, step.nodes)
        before = self._assignment()
        started = time.time()
        self._set(rate=0.0, final=True)  # stop reading the input; counters report totals

        def drained_totals() -> dict[str, Any] | None:
            totals = self._final_totals(started)
            spouts = self._counts("generator")  # written since the spout stopped sending
            if not totals or not spouts or spouts[0]["written_at"] <= started + 1.0:
                return None
            return totals if totals["emitted"] == totals["state_total"] else None

        drained = self._until("the job drained (totals = tuples emitted)", drained_totals, 120)

        def durable_caught_up() -> bool:
            # every counter task's groups durable up to their newest checkpoint, in
            # counters written a checkpoint interval after the drain
            counts = self._counts(OPERATOR)
            since = drained_at + 2 * self.settings.checkpoint_interval
            return len(counts) >= self._tasks and all(
                c["written_at"] > since
                and all(
                    n == 0 for n, _ in (c["extra"].get("durable") or {}).get("lag", {}).values()
                )
                for c in counts
            )

        drained_at = time.time()
        self._until("every key group's durable copy at its newest checkpoint",
                    durable_caught_up, 120, step=0.5)  # fmt: skip
        savepoint = f"resubmit-{int(drained_at)}"
        self.savepointer(self.topology, savepoint)
        saved = time.time()
        self.emitted_before = drained["emitted"]
        old = self.topology
        self.killer(old)
        killed = time.time()
        self._set(
            rate=self.settings.rate,
            final=False,
            preloaded=self.control["keys"],
            resume_from=started,
        )
        options = self.submitted | TopologyConfig.overrides(
            restore_from=savepoint, initial_nodes={OPERATOR: list(range(step.nodes))}
        )
        pattern = os.path.join(self.output_dir, "outputs-*.jsonl")
        seen = {path: os.path.getsize(path) for path in glob.glob(pattern)}
        self.resubmitter(self.topology, options)
        submitted = time.time()
        first = self._until(
            "the resubmitted job's first output",
            lambda: first_output(pattern, seen, submitted),
            timeout,
            step=0.5,
        )
        time.sleep(max(0.0, first + step.seconds - time.time()))
        return {
            "kind": "resubmit",
            "tag": step.tag,
            "nodes": step.nodes,
            "keys": self.control["keys"],
            "started_nodes": list(started_nodes),
            "submitted": started,
            "started": started,
            "drained": drained,
            "saved": saved,
            "killed": killed,
            "resubmitted": submitted,
            "first_output": first,
            "done": time.time(),
            "topology": self.topology,
            "assignment_before": before,
            "assignment_after": self._assignment(),
            "load": os.getloadavg()[0],
        }

    def _ramp(self, step: Step) -> dict[str, Any]:
        """Change the input rate linearly to ``step.rate`` over ``step.seconds`` (the
        control file, rewritten each second); every ``step.sample`` s record the time,
        the rate, the nodes the topology is bound to and how many are active, the
        controller's wish (``want``) and whether a rescale is under way."""
        from elastorm.runtime.scale import progress
        from elastorm.zk.layout import ZnodeLayout
        from elastorm.zk.requests import ZK_ERRORS

        layout = ZnodeLayout(self.topology)
        start_rate = float(self.control["rate"])
        started = time.time()
        samples: list[list[Any]] = []
        next_sample = started
        while (now := time.time()) < started + step.seconds:
            share = (now - started) / step.seconds if step.seconds else 1.0
            rate = round(start_rate + (step.rate - start_rate) * share, 1)
            self._set(rate=rate)
            if now >= next_sample:
                next_sample = now + step.sample
                try:
                    p = progress(self._client, layout)
                except ZK_ERRORS:  # ZooKeeper away for a moment: a sample without it
                    samples.append([round(now, 2), rate, None, None, None, []])
                    continue
                busy = bool(p.draining or p.joining or p.moving or p.pending)
                samples.append([round(now, 2), rate, p.active, p.want, busy, sorted(p.owned)])
            time.sleep(min(1.0, max(0.0, next_sample - time.time())))
        self._set(rate=step.rate)
        return {
            "kind": "ramp",
            "tag": step.tag,
            "from": start_rate,
            "to": step.rate,
            "started": started,
            "done": time.time(),
            "samples": samples,
            "load": os.getloadavg()[0],
        }

    def _migrate(self, step: Step) -> dict[str, Any]:
        from elastorm.core.messages import Protocol
        from elastorm.runtime.migrate import request_migration

        s = self.settings
        request = self.control["checkpoint"] + 1
        self._set(checkpoint=request)
        taken = self._until(
            "the hot group's checkpoint", lambda: self._checkpoint_taken(request), 15
        )
        wait = max(s.trim_wait, step.replay / s.hot_rate)
        time.sleep(max(0.0, taken + wait - time.time()))
        status = self._status(timeout=10)
        g = s.hot_group
        owner, holder = status["owners"][g], status["holders"][g]
        if step.protocol == "direct":
            target: int | str = next(t for t in status["tasks"] if t not in (owner, holder))
        else:
            target = "holder"
        submitted = time.time()
        done = request_migration(
            self._client, self.topology, OPERATOR, g, target, Protocol(step.protocol)
        )
        times = done.times
        return {
            "kind": "migrate",
            "tag": step.tag,
            "protocol": step.protocol,
            "used": done.protocol_used.value if done.protocol_used else None,
            "state": done.state.value,
            "detail": done.detail,
            "epoch": done.epoch,
            "source": done.source,
            "target": done.target,
            "keys": self.control["keys"],
            "replay_asked": step.replay,
            "checkpoint_at": taken,
            "submitted": submitted,
            "started": times.get("started", submitted),
            "done": times.get("done", submitted),
            "load": os.getloadavg()[0],  # 1-min load average of this (shared) machine
        }

    # -- outcome ----------------------------------------------------------------
    def outcome(self, output_dir: str) -> Outcome:
        if self._client is not None:
            self._client.stop()
            self._client.close()
        with open(os.path.join(output_dir, "records.json"), "w", encoding="utf-8") as f:
            json.dump({"records": self.records, "final": self.final}, f)
        analyse(output_dir, self.records, self.settings)
        migrations = [r for r in self.records if r["kind"] == "migrate"]
        as_asked = all(r["state"] == "done" and r["used"] == r["protocol"] for r in migrations)
        exact = bool(self.final) and self.final["emitted"] == self.final["state_total"]
        lines = [
            f"scale   to {r['nodes']} nodes in {r['done'] - r['submitted']:.1f} s: "
            f"key groups {r['owned']}"
            for r in self.records
            if r["kind"] == "scale"
        ]
        lines += [
            f"{r['kind']:7} {r.get('protocol', ''):6} keys {r['keys']:>6} "
            f"replayed {r.get('replayed')!s:>6}  pause {_ms(r['pause_ms'])}  "
            f"completion {_ms(r.get('completion_ms'))}  pickup {_ms(r.get('pickup_ms'))}"
            for r in self.records
            if r["kind"] in ("migrate", "idle", "keys")
        ]
        lines.append(
            f"exactly once: {self.final.get('emitted')} tuples emitted, state totals "
            f"{self.final.get('state_total')}: {'OK' if exact else 'FAILED'}; "
            f"migrations {'all done as asked' if as_asked else 'NOT all done as asked'}"
        )
        return Outcome(
            summary="\n".join(lines),
            ok=exact
            and as_asked
            and len(migrations) == sum(st.kind == "migrate" for st in self.plan),
            facts={"records": self.records, "final": self.final},
        )


def _ms(value: float | None) -> str:
    return "     -" if value is None else f"{value:7.1f} ms"


# -- the rescale benchmark's sink measurements (pure) ---------------------------------------
OUTPUT_BUCKET_SECS = 0.02  # bolts.synthetic.OUTPUT_BUCKET_SECS


def output_gaps(rows: Iterable[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """The longest gap in any key group's output, and in the job's, within
    ``[start, end]`` (s), from the counters' ``outputs-*.jsonl`` rows merged across tasks
    (a key group's outputs move between tasks when it migrates).

    Three measures, all at ``OUTPUT_BUCKET_SECS`` resolution (20 ms; at the window's
    edges a gap counts from the edge):

    * ``max_group_gap_ms``: between two consecutive buckets with an output of one group.
      It is at least the group's own *input* gap, ``max_input_gap_ms`` (between two
      consecutive stamps of its tuples): a group with 30 tuples/s at random has gaps of
      a few hundred ms with nothing to output;
    * ``max_group_stall_ms``: the longest a group's output stopped *while it had input
      waiting*: for each bucket with an output, the time since the later of the group's
      previous output and the earliest stamp output in this bucket, the part of it
      inside the window (outputs outside the window count as neighbours); after a
      group's last output of all, the rest of the window. A pause of the group (a
      migration, a restart) shows here whatever the input rate; in steady state it is
      about the group's highest latency;
    * ``job_gap_ms`` and ``job_stall_ms``: the same over all groups together.

    Rows without stamps (``out`` pairs) give the gaps only.
    """
    step = OUTPUT_BUCKET_SECS
    lo, hi = int(start / step), int(end / step)
    outs: dict[int, dict[int, int]] = {}  # group -> output bucket -> earliest stamp bucket
    every: dict[int, dict[int, int]] = {}  # the same, outside the window too (stalls)
    stamps: dict[int, set[int]] = {}
    for row in rows:
        for g, b, *sb in row["out"]:
            first = sb[0] if sb else b
            got = every.setdefault(int(g), {})
            got[b] = min(first, got.get(b, first))
            if lo <= b <= hi:
                outs.setdefault(int(g), {})[b] = got[b]
        for g, sb in row.get("in", ()):
            if lo <= sb <= hi:
                stamps.setdefault(int(g), set()).add(int(sb))

    def gap(buckets: Iterable[int]) -> int:
        seq = [lo, *sorted(buckets), hi]
        return max(b - a for a, b in zip(seq, seq[1:], strict=False))

    def stall(firsts: dict[int, int]) -> int:
        worst, prev = 0, None
        for b in sorted(firsts):
            if b > lo:
                since = firsts[b] if prev is None else max(prev, firsts[b])
                worst = max(worst, min(b, hi) - max(since, lo))
            if b > hi:
                return worst
            prev = b
        return max(worst, hi - max(prev if prev is not None else lo, lo))

    worst = worst_stall = worst_input = 0
    worst_group = stall_group = None
    for g, buckets in sorted(outs.items()):
        if (got := gap(buckets)) > worst:
            worst, worst_group = got, g
        if g in stamps:
            worst_input = max(worst_input, gap(stamps[g]))
    for g, buckets in sorted(every.items()):  # a group silent all through the window too
        if (got := stall(buckets)) > worst_stall:
            worst_stall, stall_group = got, g
    job: dict[int, int] = {}
    for buckets in every.values():
        for b, sb in buckets.items():
            job[b] = min(sb, job.get(b, sb))

    def ms(buckets: int) -> int:
        return round(buckets * step * 1000)

    return {
        "max_group_gap_ms": ms(worst),
        "group": worst_group,
        "max_input_gap_ms": ms(worst_input) if stamps else None,
        "max_group_stall_ms": ms(worst_stall),
        "stall_group": stall_group,
        "job_gap_ms": ms(gap(b for b in job if lo <= b <= hi)),
        "job_stall_ms": ms(stall(job)),
        "groups": len(outs),
    }


def latency_percentiles(
    rows: Iterable[dict[str, Any]], start: float, end: float, qs: Iterable[float] = (0.5, 0.99)
) -> dict[str, float | None]:
    """End-to-end latency percentiles (ms, spout stamp to the counter's output) of the
    outputs emitted in whole seconds ``[start, end)``, from the 1 ms histograms."""
    hist: dict[int, int] = {}
    for row in rows:
        for sec, ms, n in row["lat"]:
            if start <= sec < end:
                hist[ms] = hist.get(ms, 0) + n
    total = sum(hist.values())
    out: dict[str, float | None] = {"outputs": total}
    for q in qs:
        key = f"p{round(q * 100)}_ms"
        if not total:
            out[key] = None
            continue
        need, seen = q * total, 0
        for ms in sorted(hist):
            seen += hist[ms]
            if seen >= need:
                out[key] = float(ms)
                break
    return out


def make_driver(args: DriverArgs) -> SyntheticDriver:
    """``elastorm local synthetic``: a noise-floor window, then the hot key group moved
    once by each protocol (``bench/migration_bench.py`` runs longer plans)."""
    plan = [Step(kind="idle", seconds=Settings.window, tag="idle")]
    plan += [Step(kind="migrate", protocol=p, replay=1000) for p in ("direct", "cpa", "cpal")]
    return SyntheticDriver(plan)
