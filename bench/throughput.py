"""Per-task throughput and latency of a keyed count bolt on a real local Storm.

Usage::

    .venv/bin/python bench/throughput.py [--repeats R] [--variants plain,elastic,...]
        [--warmup S] [--window S] [--json FILE]

Variants (each a whole topology on a fresh LocalCluster, run in turn within each
repeat so machine noise hits them alike):

* ``plain``: plain streamparse, as a streamparse user has it today: spout ->
  fields grouping -> one ``PlainCounter`` task, Storm's own multilang
  ``JsonSerializer``, pystorm JSON, one ``ack`` per tuple;
* ``elastorm_plain``: the same topology on elastorm's multilang wire (the
  serializer of ``config.json``; the spout and the counter call
  ``use_elastorm_wire``: batched emits, and with ``topology.acker.executors`` = 0,
  as ``ElasticTopology`` sets it, no acks);
* ``elastic``: ``topologies/throughput_elastic.py``: one ``KeyedCounter`` task on
  20 key groups fed through a ``KeyRouter``, checkpoints every 5 s, the relay and
  the controller beside it, data sent as runs (``elastorm.data.batch_size`` = 100,
  issue 34; every other ``elastic_*`` variant but ``elastic_itemwise`` and
  ``elastic_unbatched`` too);
* ``elastic_itemwise``: the same with ``elastorm.data.batch_size`` = 1, one Storm
  tuple per data tuple (the option's default, and ``elastic`` before issue 34);
* ``elastic_unbatched``: the same with ``elastorm.multilang.batch_size`` = 1 (no
  batches either way; acks still off);
* ``elastic_json``: ``topologies/throughput_elastic_json.py``, the elastic job
  with ``elastorm.multilang.encoding`` = json (msgpack by default) on both ends of
  every pipe. (In the raw files of 2026-11-24 before the default changed,
  ``elastic`` ran JSON and ``elastic_msgpack`` msgpack.)
* ``elastic_nodurable``: the elastic job with ``elastorm.durable.uri`` = none (no
  durable checkpoint tier; on by default, ``file://``): what the tier costs;
* ``elastic_pygc``: the elastic job with ``elastorm.gc.full_every_secs`` = 0,
  Python's own schedule of full GC collections (``elastorm.storm.pygc``);
* ``elastic_nopark``: the elastic job with ``elastorm.max_parked`` = 0: at a full
  output buffer the router pauses 1 ms per tuple instead of reading ahead for the
  trim (``elastorm.core.holdback``), the design that stalled for 40 s;
* ``pyflink``, ``pyflink_thread``: not Storm: the same keyed count in PyFlink's
  Python DataStream API (``bench/pyflink/keyed_sum.py``: a Python map makes the
  ``(key, stamp)`` pairs, ``key_by``, a ``KeyedProcessFunction`` counts in
  ``ValueState``; parallelism 1), on a local Flink mini-cluster in PyFlink's own
  virtualenv (``apache-flink`` from PyPI, built under ``.elastorm/pyflink-venv``
  on first use), in PyFlink's process mode (Beam workers, the default) or thread
  mode (``python.execution-mode: thread``). Its CPU is that of the job's process
  tree (the client, the Flink JVM, the Python workers).
* ``bytewax``: not Storm either: the same keyed count in Bytewax 0.21
  (``bench/bytewax/keyed_sum.py``: a paced Python source, ``key_on``, a
  ``stateful_flat_map`` counting per key; one worker) in its own virtualenv
  (``.elastorm/bytewax-venv``, the side-by-side's pin); its CPU is its one process.

Each run has three phases. **Saturation**: the spout emits as fast as Storm lets
it (backpressure bounds the queues); after ``--warmup`` s the counter task's
tuples are counted over ``--window`` s: that is the per-task throughput, and
the CPU each process used in that window (``/proc``: the LocalRunner JVM and
each Python component) per 1,000 tuples. Then the spout pauses (1 tuple/s) for
``--settle`` s to drain the backlog, and is throttled to **50%** and **90%** of
that rate (``throughput-control.json``), and after ``--settle`` s the end-to-end
latency (counter's clock minus the spout's stamp, same machine) is read over
``--window`` s: p50 / p99 from the counter's histogram (0.1 ms buckets below 10 ms, 1 ms below
100 ms, 10 ms above).

The burst saturation is what queues full of backlog let through for one window, not a
rate the job holds. So between the saturation and the latency phases a binary search
of ``--search`` paced windows between 50% and 100% of the burst finds the **sustained**
rate: the highest paced rate a whole window held (its rate within 3% of the target) with
its p50 flat (the window's second half's p50 at most 1.5x its first half's, plus 1 ms:
no queue building up); each window starts from a drained backlog. The 50% and 90%
phases are then of the sustained rate (of the burst if no step held).

``--profile DIR`` also samples every Python process of each Storm variant with
``py-spy`` during its saturation window and writes each one's collapsed stacks and its
functions by own time there (a separate run: the sampler takes CPU from the job).
All figures are printed as ratios to the first variant measured in the same repeat.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from flights_throughput import read_procs, with_descendants  # noqa: E402

from demos.options import ThroughputOptions  # noqa: E402
from demos.throughput_control import CONTROL_FILE  # noqa: E402
from elastorm.config import DurableConfig, TopologyConfig  # noqa: E402
from elastorm.errors import UserError  # noqa: E402
from elastorm.files import write_json_atomic  # noqa: E402
from elastorm.runtime.config import load_config  # noqa: E402
from elastorm.runtime.outcome import Outcome  # noqa: E402
from elastorm.runtime.run import run_topology  # noqa: E402

STARTUP_SECS = 180.0
#: The sampler of ``--profile`` (the ``dev`` extra installs it beside this interpreter).
PY_SPY = str(Path(sys.executable).with_name("py-spy"))
#: A paced window holds its target if its rate is within this share of it ...
HELD_RATE = 0.97
#: ... and its second half's p50 at most this many times its first half's, plus 1 ms.
FLAT_P50 = 1.5
STOCK_STORM_JSON = "org.apache.storm.multilang.JsonSerializer"
PHASES = ("at_50", "at_90")  # the latency phases, at 50% and 90% of saturation

RUNS = TopologyConfig.overrides(data_batch_size=100)
"""The elastic job's data runs (issue 34, stage 1): up to 100 data tuples per flush."""

VARIANTS = {
    # name: (topology, extra topology options)
    "plain": ("throughput_plain", {"topology.multilang.serializer": STOCK_STORM_JSON}),
    "elastorm_plain": ("throughput_plain", {"topology.acker.executors": 0}),
    "elastic": ("throughput_elastic", RUNS),
    # the elastic job with one Storm tuple per data tuple (elastorm.data.batch_size = 1,
    # the default until a chaos round validates runs): what data runs do
    "elastic_itemwise": ("throughput_elastic", TopologyConfig.overrides(data_batch_size=1)),
    # the elastic job with batches of one (acks still off): what batching does (data
    # runs need the batches, so none either)
    "elastic_unbatched": ("throughput_elastic", TopologyConfig.overrides(multilang_batch_size=1)),
    # the elastic job with JSON on the wire instead of msgpack (the default)
    "elastic_json": ("throughput_elastic_json", RUNS),
    # the elastic job with Python's own GC schedule (full collections every few
    # seconds over the router's buffer; elastorm.storm.pygc), as before issue 15's p99 fix
    "elastic_pygc": (
        "throughput_elastic",
        {**RUNS, **TopologyConfig.overrides(gc_full_every_secs=0)},
    ),
    # the elastic job without read-ahead at a full output buffer (a pause per tuple,
    # elastorm.core.holdback's first design), as before the fix of the 40 s stall
    "elastic_nopark": ("throughput_elastic", {**RUNS, **TopologyConfig.overrides(max_parked=0)}),
    # the elastic job without the durable tier (issue 29: what the tier costs)
    "elastic_nodurable": ("throughput_elastic", {**RUNS, **DurableConfig.overrides(uri="none")}),
}
# name: PyFlink's python.execution-mode
PYFLINK_VARIANTS = {"pyflink": "process", "pyflink_thread": "thread"}
PYFLINK_JOB = ROOT / "bench" / "pyflink" / "keyed_sum.py"
BYTEWAX_JOB = ROOT / "bench" / "bytewax" / "keyed_sum.py"
BYTEWAX_REQUIREMENTS = ROOT / "bench" / "side_by_side" / "bytewax-requirements.txt"
#: The variants that are not Storm: the Python peers, each a process tree of its own.
PEERS = (*PYFLINK_VARIANTS, "bytewax")


class CpuSnapshot:
    """CPU seconds of the LocalRunner JVM of this project and its descendants, by kind."""

    def __init__(self, project: str) -> None:
        self.project = project.encode()
        self.tick = os.sysconf("SC_CLK_TCK")

    def take(self) -> dict[int, tuple[str, float]]:
        procs = read_procs(self.tick)
        runners = {
            pid
            for pid, (_, _, cmd) in procs.items()
            if b"LocalRunner" in cmd and self.project in cmd
        }
        mine = with_descendants(procs, runners)
        return {pid: (kind(procs[pid][2]), procs[pid][1]) for pid in mine}


class TreeCpu(CpuSnapshot):
    """CPU seconds of one process and its descendants (a Python peer's job), by kind."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.tick = os.sysconf("SC_CLK_TCK")

    def take(self) -> dict[int, tuple[str, float]]:
        procs = read_procs(self.tick)
        mine = with_descendants(procs, {self.root})
        return {pid: (pyflink_kind(procs[pid][2]), procs[pid][1]) for pid in mine}


def kind(cmdline: bytes) -> str:
    """``jvm``, or the component class a ``streamparse_run`` process runs."""
    args = cmdline.rstrip(b"\0").split(b"\0")
    if b"java" in args[0]:
        return "jvm"
    return args[-1].decode(errors="replace").rsplit(".", 1)[-1]


def pyflink_kind(cmdline: bytes) -> str:
    """``jvm``, ``pyflink_client`` (the job's own script), ``pyflink_worker`` or
    ``bytewax`` (its one process runs the whole dataflow)."""
    args = cmdline.rstrip(b"\0").split(b"\0")
    if b"java" in args[0]:
        return "jvm"
    if b"bytewax.run" in args:
        return "bytewax"
    return "pyflink_client" if str(PYFLINK_JOB).encode() in args else "pyflink_worker"


def cpu_by_kind(before: dict, after: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, (k, seconds) in after.items():
        out[k] = out.get(k, 0.0) + seconds - before.get(pid, (k, 0.0))[1]
    return out


def held(phase: dict, target: float) -> bool:
    """Whether a paced window held ``target``: its rate within 3% of it and its p50
    flat (no queue building up over the window).

    >>> held({"rate": 990.0, "p50_halves_ms": [2.0, 2.5]}, 1000.0)
    True
    >>> held({"rate": 990.0, "p50_halves_ms": [2.0, 40.0]}, 1000.0)
    False
    >>> held({"rate": 900.0, "p50_halves_ms": [2.0, 2.0]}, 1000.0)
    False
    """
    first, second = phase["p50_halves_ms"]
    if first is None or second is None or phase["rate"] < HELD_RATE * target:
        return False
    return second <= FLAT_P50 * first + 1.0


def top_functions(raw: Path, n: int = 25) -> str:
    r"""A ``py-spy --format raw`` file (collapsed stacks: ``frame;frame;... count``) as
    the ``n`` functions with the most samples on top of the stack (own time) and their
    share.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "s.txt"
    >>> _ = f.write_text("main;a 3\nmain;a;b 1\n")
    >>> print(top_functions(f))
    samples 4
     75.0%  a
     25.0%  b
    """
    own: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        own[leaf] = own.get(leaf, 0) + int(count)
    total = sum(own.values()) or 1
    lines = [f"samples {sum(own.values())}"]
    for name, count in sorted(own.items(), key=lambda kv: -kv[1])[:n]:
        lines.append(f"{100 * count / total:5.1f}%  {name}")
    return "\n".join(lines)


def percentile(histogram: dict[str, int], q: float) -> float | None:
    """The ``q`` quantile of a counter's histogram (keys: bucket upper edges in ms)."""
    total = sum(histogram.values())
    if total == 0:
        return None
    want, seen = q * total, 0
    for edge in sorted(histogram, key=float):
        seen += histogram[edge]
        if seen >= want:
            return float(edge)
    return None


class ThroughputDriver:
    """Runs the three phases against one submitted topology (``run_topology``'s driver)."""

    sections = (ThroughputOptions,)
    topology: str = ""  # set by run_topology before submitting
    zk_hosts: str = ""

    def __init__(self, name: str, args, cpu: CpuSnapshot, label: str = "") -> None:
        self.name = name
        self.label = label or name  # the variant, in profile file names
        self.args = args
        self.cpu = cpu
        self.tasks = 2 if name.startswith("throughput_elastic") else 1  # + the idle holder
        self.result: dict = {}

    def options(self, output_dir: str) -> dict[str, object]:
        return TopologyConfig.overrides(output_dir=output_dir) | ThroughputOptions.overrides(
            rate=0.0, batch=self.args.batch
        )

    def _read(self, output_dir: str) -> dict | None:
        """The counter tasks' files summed (an elastic run has an idle holder task)."""
        files = glob.glob(os.path.join(output_dir, "throughput-[0-9]*.json"))
        if len(files) < self.tasks:
            return None
        total: dict = {"at": 0.0, "tuples": 0, "histogram": {}, "worst": {}}
        try:
            parts = [json.loads(Path(f).read_text()) for f in files]
        except ValueError:
            return None
        for part in parts:
            total["at"] = max(total["at"], part["at"]) if part["tuples"] else total["at"]
            total["tuples"] += part["tuples"]
            for b, n in part["histogram"].items():
                total["histogram"][b] = total["histogram"].get(b, 0) + n
            for s, ms in part.get("worst", {}).items():
                total["worst"][s] = max(ms, total["worst"].get(s, 0.0))
        if total["at"] == 0.0:
            total["at"] = max(p["at"] for p in parts)
        return total

    def _fresh(self, output_dir: str, after: float, timeout: float = 30.0) -> dict:
        """The counter's next file written after ``after`` (wall clock)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = self._read(output_dir)
            if got is not None and got["at"] > after:
                return got
            time.sleep(0.1)
        raise RuntimeError(f"the counter wrote no file for {timeout:.0f} s")

    def _window(self, output_dir: str, seconds: float) -> tuple[dict, dict, dict, dict, dict]:
        """The counter's files at the start, the middle and the end of a window of
        ``seconds``, and the CPU snapshots at its start and end."""
        start = self._fresh(output_dir, time.time())
        cpu0 = self.cpu.take()
        time.sleep(seconds / 2)
        mid = self._fresh(output_dir, time.time())
        time.sleep(seconds / 2)
        end = self._fresh(output_dir, time.time())
        cpu1 = self.cpu.take()
        return start, mid, end, cpu0, cpu1

    @staticmethod
    def _stats(start: dict, end: dict) -> dict:
        tuples = end["tuples"] - start["tuples"]
        hist = {b: n - start["histogram"].get(b, 0) for b, n in end["histogram"].items()}
        return {
            "tuples": tuples,
            "seconds": round(end["at"] - start["at"], 3),
            "rate": tuples / (end["at"] - start["at"]),
            "p50_ms": percentile(hist, 0.50),
            "p99_ms": percentile(hist, 0.99),
            # the highest latency of each whole second inside the window (placing a tail)
            "worst_by_second": {
                s: ms for s, ms in end["worst"].items() if start["at"] < int(s) < end["at"] - 1
            },
        }

    def _pace(self, output_dir: str, rate: float) -> None:
        write_json_atomic(os.path.join(output_dir, CONTROL_FILE), {"rate": rate})

    def _paced(self, output_dir: str, rate: float) -> dict:
        """One window at ``rate`` after ``--settle`` s, from a drained backlog."""
        self._pace(output_dir, 1.0)
        time.sleep(self.args.settle)
        self._pace(output_dir, rate)
        time.sleep(self.args.settle)
        start, mid, end, _, _ = self._window(output_dir, self.args.window)
        phase = self._stats(start, end)
        first, second = self._stats(start, mid), self._stats(mid, end)
        phase["p50_halves_ms"] = [first["p50_ms"], second["p50_ms"]]
        phase["target_rate"] = rate
        phase["held"] = held(phase, rate)
        return phase

    def wait(self, output_dir: str, timeout: float, progress) -> None:
        a = self.args
        self._pace(output_dir, 0.0)
        # The counter is up: five Python processes to start, slow on a busy machine.
        self._fresh(output_dir, 0, timeout=STARTUP_SECS)
        time.sleep(a.warmup)
        with self.profiler(a.window):
            start, _, end, cpu0, cpu1 = self._window(output_dir, a.window)
        sat = self._stats(start, end)
        cpu = cpu_by_kind(cpu0, cpu1)
        sat["cpu_ms_per_ktuple"] = {
            k: round(1e6 * s / max(sat["tuples"], 1), 2) for k, s in sorted(cpu.items())
        }
        sat["cpu_ms_per_ktuple_all"] = round(1e6 * sum(cpu.values()) / max(sat["tuples"], 1), 2)
        self.result = {"saturation": sat}
        progress(f"burst saturation {sat['rate']:,.0f}/s")
        lo, hi, steps = 0.5, 1.0, []
        for _ in range(a.search):
            share = (lo + hi) / 2
            step = self._paced(output_dir, round(share * sat["rate"], 1))
            steps.append(step)
            lo, hi = (share, hi) if step["held"] else (lo, share)
            progress(
                f"paced {step['target_rate']:,.0f}/s: {step['rate']:,.0f}/s, p50 halves "
                f"{step['p50_halves_ms']} ms, {'held' if step['held'] else 'not held'}"
            )
        kept = [s for s in steps if s["held"]]
        sustained = max((s["rate"] for s in kept), default=None)
        self.result["search"] = steps
        self.result["sustained_rate"] = sustained
        base = sustained or sat["rate"]
        fixed = [float(r) for r in a.rates.split(",")] if a.rates else [None, None]
        for share, fixed_rate in zip((0.5, 0.9), fixed, strict=True):
            rate = fixed_rate or round(share * base, 1)
            self.result[f"at_{int(share * 100)}"] = self._paced(output_dir, rate)
        self._pace(output_dir, 1.0)

    @contextmanager
    def profiler(self, seconds: float) -> Iterator[None]:
        """``py-spy`` on every Python process of the job for ``seconds`` (``--profile``)."""
        if not self.args.profile:
            yield
            return
        out = Path(self.args.profile)
        out.mkdir(parents=True, exist_ok=True)
        procs = [(pid, k) for pid, (k, _) in self.cpu.take().items() if k not in ("jvm", "java")]
        spies = []
        for pid, k in procs:
            path = out / f"{self.label}-{k}-{pid}.txt"
            cmd = [PY_SPY, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                   "--rate", "200", "--format", "raw", "--nonblocking",
                   "--output", str(path)]  # fmt: skip
            spies.append(
                (path, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            )
        try:
            yield
        finally:
            for path, spy in spies:
                spy.wait(seconds + 30)
                if path.exists():
                    path.with_suffix(".top.txt").write_text(top_functions(path))

    def outcome(self, output_dir: str) -> Outcome:
        return Outcome(summary=json.dumps(self.result), ok=bool(self.result), facts={})


def _venv_builder():
    """``bench/pyflink/venv.py``, loaded by path (a ``pyflink`` folder on ``sys.path``
    would shadow the real package): it builds the peers' virtualenvs."""
    spec = importlib.util.spec_from_file_location("pyflink_venv", PYFLINK_JOB.parent / "venv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peer_python(v: str) -> Path:
    """The interpreter of peer ``v``'s own virtualenv, built on first use: PyFlink's, or
    Bytewax's (the side-by-side's pin)."""
    builder = _venv_builder()
    if v == "bytewax":
        return builder.built(ROOT / ".elastorm" / "bytewax-venv", BYTEWAX_REQUIREMENTS)
    return builder.python()


def run_peer(v: str, args, run_dir: Path) -> dict:
    """One run of the keyed count on a Python peer (PyFlink in either mode, Bytewax),
    through the same three phases as a Storm variant; the job is killed after."""
    out = run_dir / f"{v}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True)
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    if v == "bytewax":
        cmd = [str(peer_python(v)), "-m", "bytewax.run", f"{BYTEWAX_JOB}:flow"]
        env |= {"KEYED_SUM_OUT": str(out)}
    else:
        cmd = [str(peer_python(v)), str(PYFLINK_JOB), str(out), "--mode", PYFLINK_VARIANTS[v]]
    log = open(out / "job.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    driver = ThroughputDriver(v, args, TreeCpu(proc.pid), label=v)
    try:
        driver.wait(str(out), 600, lambda text: print(f"  {v}: {text}", flush=True))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    return driver.result


def run_variant(v: str, args, cfg, cpu: CpuSnapshot, extra: dict) -> dict:
    """One run of variant ``v``: a Storm topology on a fresh LocalCluster, or PyFlink."""
    if v in PEERS:
        return run_peer(v, args, cfg.home / "runs")
    topology, options = VARIANTS[v]
    driver = ThroughputDriver(topology, args, cpu, label=v)
    run_topology(cfg, "local", driver, timeout=600, extra_options=options | extra)
    return driver.result


def describe(r: dict) -> str:
    """One run's line: saturation rate and CPU, latency at saturation, 50% and 90%."""
    s = r["saturation"]
    return (
        f"burst saturation {fmt(s['rate'])} tuples/s/task, "
        f"sustained {fmt(r.get('sustained_rate'))}, "
        f"CPU {s['cpu_ms_per_ktuple_all']} ms per 1k tuples {s['cpu_ms_per_ktuple']}; "
        f"latency p50/p99 ms: sat {fmt(s['p50_ms'], '.1f')}/{fmt(s['p99_ms'], '.1f')}, "
        + ", ".join(
            f"{p} ({fmt(r[p]['rate'])}/s) {fmt(r[p]['p50_ms'], '.1f')}/{fmt(r[p]['p99_ms'], '.1f')}"
            for p in ("at_50", "at_90")
        )
    )


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def fmt(x, spec=",.0f"):
    return "-" if x is None else format(x, spec)


def summarize(results: dict[str, dict[int, dict]], variants: list[str]) -> None:
    """Print each variant's medians and its ratios to the first variant of the same repeat."""
    base = variants[0]
    print(f"\nmedians over the runs that completed; ratios to {base} of the same repeat")
    for v in variants:
        runs = list(results[v].values())
        if not runs:
            print(f"{v:15s} no run completed")
            continue
        rates = [r["saturation"]["rate"] for r in runs]
        held = [r.get("sustained_rate") for r in runs]
        cpus = [r["saturation"]["cpu_ms_per_ktuple_all"] for r in runs]
        pairs = [(r, results[base][i]) for i, r in results[v].items() if i in results[base]]
        pairs = [(r, b) for r, b in pairs if b["saturation"]["rate"]]
        ratios = [r["saturation"]["rate"] / b["saturation"]["rate"] for r, b in pairs]
        sustained = [
            r["sustained_rate"] / b["sustained_rate"]
            for r, b in pairs
            if r.get("sustained_rate") and b.get("sustained_rate")
        ]
        cpu_ratios = [
            r["saturation"]["cpu_ms_per_ktuple_all"] / b["saturation"]["cpu_ms_per_ktuple_all"]
            for r, b in pairs
        ]
        lat = {p: (_median_ms(runs, p, "p50_ms"), _median_ms(runs, p, "p99_ms")) for p in PHASES}
        print(
            f"{v:15s} {statistics.median(rates):>9,.0f} tuples/s/task "
            f"(x{_median(ratios)}; runs {', '.join(f'{x:,.0f}' for x in rates)}), "
            f"sustained {', '.join(fmt(x) for x in held)} (x{_median(sustained)}), "
            f"CPU {statistics.median(cpus):.0f} ms/1k tuples (x{_median(cpu_ratios)}), "
            f"p50/p99 at 50%: {lat['at_50'][0]}/{lat['at_50'][1]} ms, "
            f"at 90%: {lat['at_90'][0]}/{lat['at_90'][1]} ms"
        )
    for line in targets(results):
        print(line)


def _sustained(r: dict) -> float | None:
    return r.get("sustained_rate")


def targets(results: dict[str, dict[int, dict]]) -> list[str]:
    """Issue 34's targets, one line per repeat that ran the variants each needs:
    elastic against elastorm_plain (sustained rate >= 0.8x, CPU per tuple <= 1.3x),
    against the best Python peer by sustained rate (>= 3x the rate, no more CPU), and
    its p99 at 50% of its sustained rate (<= 20 ms)."""
    lines = []
    for i, e in sorted(results.get("elastic", {}).items()):
        out = [f"repeat {i + 1}:"]
        cpu = e["saturation"]["cpu_ms_per_ktuple_all"]
        wire = results.get("elastorm_plain", {}).get(i)
        if wire and _sustained(e) and _sustained(wire):
            out.append(
                f"against elastorm_plain {_sustained(e) / _sustained(wire):.2f}x the sustained "
                f"rate (>= 0.8), {cpu / wire['saturation']['cpu_ms_per_ktuple_all']:.2f}x "
                "the CPU per tuple (<= 1.3);"
            )
        peers = [(results[v][i], v) for v in PEERS if i in results.get(v, {})]
        peers = [(r, v) for r, v in peers if _sustained(r)]
        if peers and _sustained(e):
            best, name = max(peers, key=lambda rv: _sustained(rv[0]))
            out.append(
                f"against {name} (the faster peer) {_sustained(e) / _sustained(best):.2f}x the "
                f"rate (>= 3), {cpu / best['saturation']['cpu_ms_per_ktuple_all']:.2f}x the "
                "CPU per tuple (<= 1);"
            )
        out.append(f"p99 at 50% {fmt(e['at_50']['p99_ms'], '.1f')} ms (<= 20)")
        lines.append(" ".join(out))
    return lines


def _median_ms(runs: list[dict], phase: str, key: str) -> str:
    """The median of a latency over the runs that measured one (a phase with no
    tuples, inside a stall, has none), as text."""
    values = [r[phase][key] for r in runs if r[phase][key] is not None]
    return f"{statistics.median(values):.1f}" if values else "-"


def from_json(path: str) -> tuple[dict[str, dict[int, dict]], list[str]]:
    """The results of a ``--json`` file, by variant and repeat, variants in first-seen order."""
    results: dict[str, dict[int, dict]] = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        results.setdefault(r["variant"], {})[r["repeat"] - 1] = r
    return results, list(results)


#: The default variants: the issue-34 comparison, one after another in one invocation.
DEFAULT_VARIANTS = "plain,elastorm_plain,elastic,elastic_itemwise,pyflink_thread,bytewax"


def argument_parser() -> argparse.ArgumentParser:
    """This bench's options (``bench/hot_path_guard.py`` runs it with its own)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant (2)")
    parser.add_argument(
        "--variants", default=DEFAULT_VARIANTS,
        help=f"comma-separated, first is the baseline ({DEFAULT_VARIANTS}; from "
        f"{','.join([*VARIANTS, *PEERS])})",
    )  # fmt: skip
    parser.add_argument("--warmup", type=float, default=10.0, help="s before measuring (10)")
    parser.add_argument("--window", type=float, default=15.0, help="s per measured window (15)")
    parser.add_argument("--settle", type=float, default=6.0, help="s after a rate change (6)")
    parser.add_argument(
        "--search", type=int, default=3,
        help="paced windows searching the sustained rate between 50%% and 100%% of the burst (3)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", default=None, metavar="DIR",
        help="sample each Python process with py-spy in the saturation window, into DIR",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=100, help="tuples per spout call (100)")
    parser.add_argument(
        "--rates", default=None, metavar="LOW,HIGH",
        help="measure latency at these two rates (tuples/s) instead of 50%%/90%% of saturation",
    )  # fmt: skip
    parser.add_argument(
        "--storm-option", action="append", default=[], metavar="VARIANT:KEY=VALUE",
        help="extra topology option for one variant (repeatable; VALUE as JSON if it parses)",
    )  # fmt: skip
    parser.add_argument("--json", default=None, help="append every result to this JSONL file")
    parser.add_argument(
        "--summary-of", default=None, metavar="FILE",
        help="run nothing: print the summary of the results in this --json file",
    )  # fmt: skip
    return parser


def main() -> int:
    args = argument_parser().parse_args()
    if args.summary_of:
        summarize(*from_json(args.summary_of))
        return 0
    variants = args.variants.split(",")
    extra: dict[str, dict] = {v: {} for v in variants}
    for text in args.storm_option:
        variant, _, kv = text.partition(":")
        key, _, raw = kv.partition("=")
        try:
            extra[variant][key] = json.loads(raw)
        except ValueError:
            extra[variant][key] = raw
    cfg = load_config()
    cpu = CpuSnapshot(str(cfg.project))
    # variant -> repeat -> result; a run that fails (a service not up in time on a
    # loaded machine) is reported and left out, the others still run
    results: dict[str, dict[int, dict]] = {v: {} for v in variants}
    for i in range(args.repeats):
        for v in variants:
            load = os.getloadavg()[0]
            try:
                result = run_variant(v, args, cfg, cpu, extra[v])
            except (UserError, RuntimeError) as exc:
                print(f"[{v} #{i + 1}] FAILED: {exc}; load {load:.1f}", flush=True)
                continue
            r = result | {"variant": v, "repeat": i + 1, "load_before": load}
            results[v][i] = r
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
            print(f"[{v} #{i + 1}] {describe(r)}; load {load:.1f}", flush=True)
    summarize(results, variants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
