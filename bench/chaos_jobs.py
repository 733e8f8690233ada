"""The chaos harness's user jobs: topologies of the user project
(``tests/integration/user_project``, the tutorial's), run under the same fault drivers
as the flights job and checked at their sink's committed output against a fold of the
stream in one process.

* ``wordcount`` (``topologies/wordcount.py``): the tutorial's keyed word count into
  ``elastorm.sinks.Sink`` (SQLite). Every word's committed counts must be exactly
  ``1..n``, ``n`` its count in the stream.
* ``windows`` (``topologies/windowkinds.py``): the tutorial's windowed count with
  sliding windows and sessions added; every row of the model committed exactly once.
* ``chained`` (``topologies/chained.py``): the word counts feed a second keyed
  operator keyed by the word's first letter, which counts the updates it receives (not
  idempotent: an update applied twice counts twice) and sums their counts. Every
  letter's committed ``updates`` must be exactly ``1..N``, ``N`` the stream's words
  with that letter, and its last row's total the sum over those words of ``1..n``.

A fault driver runs on a user job by composition: ``class X(NodeLossDriver, UserJob)``
(``on_job``) puts the job's hooks (which keyed operator, its components, where task
pids and progress are read) before ``FlightsJob``'s in Python's method order, so the
fault's own code is the flights job's, unchanged.

The project is copied to ``<elastorm.home>/chaos/user_project`` with this checkout's
``config.json`` (its Nimbus, ZooKeeper and home), and submitted through the same
``run_topology`` as the flights job: the jar holds its ``src/`` and this checkout's
elastorm, and the workers run this checkout's virtualenv with the jar's resources
first on ``PYTHONPATH`` (the checkout's own ``bolts`` package would shadow the
user's). ``tests/integration/test_user_project.py`` covers installing it from a wheel.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_common import ROOT
from crash_driver import FlightsJob
from user_models import letter_rows, word_rows

from elastorm.config import TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.outcome import Outcome, Progress

USER_PROJECT = ROOT / "tests" / "integration" / "user_project"
#: Seconds the sink's committed rows must stay unchanged before a run is complete
#: (a duplicate would arrive by then).
SETTLE = 10.0
#: ``elastorm.key_groups`` of the user project's topologies (their ``config``).
KEY_GROUPS = 12


def user_stream() -> list[str]:
    """The user spout's whole stream, from the user's own module."""
    spec = importlib.util.spec_from_file_location(
        "user_words", USER_PROJECT / "src" / "spouts" / "words.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.words()


def row_balance(got: Counter, want: Counter) -> dict[str, int]:
    """``checked`` (rows the fold wants), ``lost`` (wanted, not committed) and ``twice``
    (committed beyond what the fold wants) of a sink's rows.

    >>> row_balance(Counter({("a", 1): 2, ("b", 2): 1}), Counter({("a", 1): 1, ("a", 2): 1}))
    {'checked': 2, 'lost': 1, 'twice': 2}
    """
    return {
        "checked": sum(want.values()),
        "lost": sum((want - got).values()),
        "twice": sum((got - want).values()),
    }


def settled_rows(rows: Iterable[tuple]) -> tuple[Counter, list]:
    """A sink's rows ``(*values, kind)`` with each rectification taken out: a final row
    equal to a tentative one re-sends that value (``core/outputs.py``), it is not a
    second update. Also the keys (first value) whose latest row (by the second
    value) is still tentative: never rectified.

    >>> got, open_ = settled_rows([("a", 1, "tentative"), ("a", 1, "final"), ("b", 1, "tentative")])
    >>> sorted(got.items()), open_
    ([(('a', 1), 1), (('b', 1), 1)], ['b'])
    """
    by_kind: dict[tuple, Counter] = {}
    last: dict[Any, tuple[Any, bool]] = {}
    for *values, kind in rows:
        by_kind.setdefault(tuple(values), Counter())[kind] += 1
        key, order = values[0], values[1]
        if (
            key not in last
            or order > last[key][0]
            or (order == last[key][0] and kind != "tentative")
        ):
            last[key] = (order, kind == "tentative")
    got: Counter = Counter()
    for values, kinds in by_kind.items():
        got[values[:2]] += max(
            kinds["tentative"], sum(n for k, n in kinds.items() if k != "tentative")
        )
    return got, sorted(k for k, (_, tentative) in last.items() if tentative)


def totals_off(rows: list[tuple[str, int, int]], totals: dict[str, int]) -> list[str]:
    """The letters whose row with the most updates has another total than the fold's.

    >>> totals_off([("a", 1, 1), ("a", 2, 3), ("b", 1, 2)], {"a": 3, "b": 1})
    ['b']
    """
    last: dict[str, tuple[int, int]] = {}
    for letter, updates, total in rows:
        if updates >= last.get(letter, (0, 0))[0]:
            last[letter] = (updates, total)
    return sorted(k for k in set(totals) | set(last) if last.get(k, (0, None))[1] != totals.get(k))


@dataclass(frozen=True)
class SinkRows:
    """A user job's sink table as the fold sees it."""

    table: str
    columns: tuple[str, ...]

    def read(self, path: Path) -> list[tuple]:
        """The rows committed so far (none before the sink made its table)."""
        if not path.exists():
            return []
        with sqlite3.connect(path) as db:
            try:
                return list(db.execute(f"SELECT {', '.join(self.columns)} FROM {self.table}"))
            except sqlite3.OperationalError:
                return []


def grown_since(job: Any, since: float, n: int) -> float | None:
    """Seconds from ``since`` (wall clock) until a job's count ``n`` (its sink's rows)
    exceeds what it was when first asked about ``since``; None until then."""
    at = job.__dict__.setdefault("_counted_at", {})
    if since not in at:
        at[since] = n
        return None
    return time.time() - since if n > at[since] else None


class _Polled:
    """What ``ElasticFlightsDriver.on_poll`` reads of a run: rows so far, and whether
    the input is over (here: the sink committed every row the fold wants)."""

    def __init__(self, rows: int, exhausted: bool) -> None:
        self.rows, self.exhausted = rows, exhausted

    def spout_total(self, field: str) -> int:
        return self.rows


class UserJob(FlightsJob):
    """A user topology in the fault drivers' job slot (module doc). Subclasses name the
    topology, its sink's table, its components' classes and the fold."""

    name = ""  # the topology file of the user project
    label = ""  # the job's name in the harness (``--jobs``, scenario names)
    in_user_project = True  # submitted from the user project's copy (``user_project``)
    #: The faults it runs: those whose drivers read the job only through its hooks
    #: (``crash_driver.FlightsJob``), on a topology with two tasks per keyed operator
    #: (so no two-task losses but ``all-keyed``, which kills both); the network cut
    #: reads the flights sink's senders, the HDFS ones and ``all-sup`` the flights
    #: job's own results.
    faults = (
        "lose-1", "spout", "sink", "router", "lose-1-ctl", "sup-1", "zk-stop", "freeze-10",
        "cpal-source", "cpal-target", "all-keyed",
    )  # fmt: skip
    topology = ""
    operator = "counts"
    sink: SinkRows
    #: Components a fault may kill, by role; ``router``: the router elastorm puts
    #: before the job's last keyed operator.
    components = {"spout": "words", "sink": "sink", "router": "counts_router"}

    def _total_rows(self) -> int:
        return sum(self.want().values())

    def want(self) -> Counter:
        """The rows the sink must commit, each once."""
        raise NotImplementedError

    def options(self, output_dir: str) -> dict[str, object]:
        """The sink's directory and the workers' ``PYTHONPATH``; the topology's own
        ``config`` (key groups, checkpoint interval) stays the user's."""
        self.output_dir = output_dir
        self.key_groups = KEY_GROUPS  # what the fault drivers choose groups among
        return TopologyConfig.overrides(output_dir=output_dir) | {
            "topology.environment": {"PYTHONPATH": "resources:."}
        }

    def executors(self) -> int:
        """Executors of the user topology as elastorm wires it (loaded in a process of
        its own: the user's ``bolts`` and ``spouts`` are not this checkout's)."""
        code = (
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('t', {str(self._topology_file())!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "t = next(v for v in vars(m).values() if getattr(v, 'thrift_bolts', None))\n"
            "print(sum(c.common.parallelism_hint for c in t.specs))\n"
        )
        env = os.environ | {"PYTHONPATH": str(USER_PROJECT / "src")}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return int(out.stdout.split()[-1])

    def _topology_file(self) -> Path:
        return USER_PROJECT / "topologies" / f"{self.name}.py"

    def _sink_path(self) -> Path:
        return Path(self.output_dir) / "sink.sqlite"

    def _committed(self) -> int:
        return len(self.sink.read(self._sink_path()))

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        """Until the sink committed every row the fold wants and nothing more arrived for
        ``SETTLE`` s, with every scripted fault done; ``UserError`` after ``timeout`` s."""
        wanted = self._total_rows()
        began = time.monotonic()
        last, since = -1, time.monotonic()
        while True:
            n = self._committed()
            if n != last:
                last, since = n, time.monotonic()
            self.on_poll(_Polled(n, n >= wanted))
            progress(f"{self.name}: {n} of {wanted} rows committed")
            if n >= wanted and not self.script and time.monotonic() - since >= SETTLE:
                return
            if time.monotonic() - began > timeout:
                raise UserError(f"{self.name}: {n} of {wanted} rows committed in {timeout:.0f} s")
            time.sleep(1.0)

    def _pid_of(self, component: str, task: int) -> int:
        """A keyed task's pid from its heartbeat; another component's from Nimbus's
        placement and the process table (``_component_pid``)."""
        if component in self._keyed():
            from elastorm.runtime.status import gather

            got = gather(self.topology, self.zk_hosts, None)
            return got.tasks[task].identity.pid
        return _component_pid(self.topology, component, task)

    def _keyed(self) -> tuple[str, ...]:
        return (self.operator,)

    def _tasks(self, component: str) -> list[int]:
        if component not in self._keyed():
            return _placed_tasks(self.topology, component)
        from elastorm.runtime.status import gather

        got = gather(self.topology, self.zk_hosts, None)
        return sorted(t for t, r in got.tasks.items() if r.identity.operator == component)

    def _input_ended_at(self) -> float | None:
        """The sink committed every row: ended (when is not known; the restore decides)."""
        return -math.inf if self._committed() >= self._total_rows() else None

    def _progress(self, status: dict[str, Any], groups: list[int], since: float) -> float | None:
        """Seconds from ``since`` until the sink committed a row more than it had when
        first asked after the restore (the job made progress again)."""
        return grown_since(self, since, self._committed())

    def _tentative_updates(self, output_dir: str) -> Any:
        rows = self.sink.read(self._sink_path())
        kinds = Counter(r[-1] for r in rows)
        return dict(kinds)

    def check(self, rows: list[tuple]) -> dict[str, Any]:
        """The sink's rows against the fold: checked, lost, twice; ``unrectified``: the
        keys whose latest row is still tentative (and job extras)."""
        got, unrectified = settled_rows(rows)
        return row_balance(got, self.want()) | {"unrectified": unrectified}

    def committed_check(self) -> dict[str, Any]:
        """``check`` of what the sink has committed so far."""
        return self.check(self.sink.read(self._sink_path()))

    def outcome(self, output_dir: str) -> Outcome:
        if self._client is not None:
            self._client.stop()
            self._client.close()
        rows = self.sink.read(self._sink_path())
        sink = self.committed_check()
        faults_ok = self._migrations_ok() and not self.script
        ok = faults_ok and not sink["lost"] and not sink["twice"] and not sink.get("totals_off")
        summary = f"{self.name}: {len(rows)} rows committed; {sink}; faults " + (
            "done as scripted" if faults_ok else f"NOT done as scripted: {self.migrations}"
        )
        facts = {"migrations": self.migrations, "sink": sink, "rows": len(rows)}
        return Outcome(summary=summary, ok=ok, facts=facts)


class WordCountJob(UserJob):
    """The tutorial's word count (``topologies/wordcount.py``)."""

    name = label = "wordcount"
    sink = SinkRows("counts", ("word", "count", "kind"))

    def want(self) -> Counter:
        return word_rows(user_stream())


class ChainedJob(UserJob):
    """Word counts into per-letter totals (``topologies/chained.py``); the fault hits
    the first keyed operator (``counts``)."""

    name = label = "chained"
    sink = SinkRows("letters", ("letter", "updates", "total", "kind"))
    components = {"spout": "words", "sink": "sink", "router": "letters_router"}

    def want(self) -> Counter:
        return letter_rows(user_stream())[0]

    def _keyed(self) -> tuple[str, ...]:
        return ("counts", "letters")

    def check(self, rows: list[tuple]) -> dict[str, Any]:
        """Adds ``totals_off``: letters whose last total is not the fold's."""
        off = totals_off([tuple(r[:3]) for r in rows], letter_rows(user_stream())[1])
        return super().check(rows) | {"totals_off": off}


class WindowsJob(UserJob):
    """The windowed count with every window kind and event-time timers
    (``topologies/windowkinds.py``): each ``(word, start, count, window)`` row of the
    model (``tests/integration/user_models.py``) committed once."""

    name = "windowkinds"
    label = "windows"
    sink = SinkRows("windows", ("word", "start", "count", "window", "kind"))

    def want(self) -> Counter:
        from user_models import window_model

        return Counter(window_model(user_stream(), key_groups=KEY_GROUPS))

    def check(self, rows: list[tuple]) -> dict[str, Any]:
        """Rows by every value but their kind (a window's start alone is not its
        identity: tumbling and sliding windows share starts); ``unrectified``: tentative
        rows (this job has no replicas, so none are expected)."""
        got = Counter(tuple(r[:-1]) for r in rows)
        tentative = sorted({r[0] for r in rows if r[-1] == "tentative"})
        return row_balance(got, self.want()) | {"unrectified": tentative}


class ChainedStage2Job(ChainedJob):
    """``chained`` with the fault on the second keyed operator (``letters``)."""

    label = "chained-stage2"
    operator = "letters"


class JoinJob(FlightsJob):
    """The repository's join-and-window job (``topologies/flights_join.py``): flights
    split into arrivals and air times, joined per plane (``join_flights``, where the
    faults hit), then counted per plane and UTC day (``daily_windows``) into a plain
    sink that keeps each window's latest totals. Checked per window against pandas
    (``drivers.flights_join``): ``lost`` sums the flights a window is short of,
    ``twice`` those it has too many (a keyed output applied twice by the window);
    ``totals_off`` the windows whose delay or air time differ.

    The faults of keyed state, and the kill of its spout or of the join's router: the
    spout replays into the router (``spouts/flights_join.py``; until session 32 a plain
    bolt between them kept it from replaying). Not the sink's: a plain bolt (its own
    state: none)."""

    name = "flights_join"
    label = "join"
    operator = "join_flights"
    in_user_project = False
    faults = (
        "lose-1", "lose-1-ctl", "sup-1", "zk-stop", "freeze-10", "cpal-source", "cpal-target",
        "spout", "router",
    )  # fmt: skip
    components = {"spout": "flights_spout", "router": "join_flights_router"}

    def _pid_of(self, component: str, task: int) -> int:
        if component == self.components["router"]:  # a router writes no counts file
            return _component_pid(self.topology, component, task)
        return super()._pid_of(component, task)

    def _tasks(self, component: str) -> list[int]:
        if component == self.components["router"]:
            return _placed_tasks(self.topology, component)
        return super()._tasks(component)

    def options(self, output_dir: str) -> dict[str, object]:
        self.output_dir = output_dir
        return self._join().options(output_dir)

    def _join(self):
        """The job's own driver: its options, its wait and its reference."""
        from drivers.flights_join import JoinWindowDriver

        if getattr(self, "_driver", None) is None:
            self._driver = JoinWindowDriver(
                self.limit,
                max_rate=self.max_rate,
                key_groups=self.key_groups,
                checkpoint_interval=self.checkpoint_interval,
            )
            self._driver.on_poll = lambda spout, sink: self.on_poll(
                _Polled(spout.get("rows_read", 0), bool(spout.get("exhausted")))
            )
        return self._driver

    def _total_rows(self) -> int:
        return self.limit or 336_776

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        try:
            self._join().wait(output_dir, timeout, progress)
        finally:
            self._close_client()

    def _flights(self) -> int:
        from drivers.flights_join import read_join_sink

        return sum(v[0] for v in read_join_sink(self.output_dir)["windows"].values())

    def _progress(self, status: dict[str, Any], groups: list[int], since: float) -> float | None:
        """Seconds from ``since`` until the sink held more flights than when first asked
        after the restore."""
        return grown_since(self, since, self._flights())

    def _tentative_updates(self, output_dir: str) -> Any:
        from drivers.flights_join import read_join_sink

        return read_join_sink(output_dir)["tentative_updates"]

    def committed_check(self) -> dict[str, Any]:
        """The sink's windows against pandas' (module doc of the class)."""
        from drivers.flights_join import read_join_sink

        got = {k: v for k, v in read_join_sink(self.output_dir)["windows"].items()}
        want = {f"{t}|{d}": v for (t, d), v in self._join().reference().windows.items()}
        lost = twice = 0
        off = []
        for key in want.keys() | got.keys():
            n, m = want.get(key, (0, 0, 0))[0], got.get(key, (0, 0, 0, False))[0]
            lost, twice = lost + max(0, n - m), twice + max(0, m - n)
            if n == m and tuple(got[key][:3]) != tuple(want[key]):
                off.append(key)
        tentative = sorted(k for k, v in got.items() if v[3])
        return {
            "checked": sum(v[0] for v in want.values()),
            "lost": lost,
            "twice": twice,
            "unrectified": tentative,
            "totals_off": sorted(off),
        }

    def outcome(self, output_dir: str) -> Outcome:
        self._close_client()
        sink = self.committed_check()
        faults_ok = self._migrations_ok() and not self.script
        ok = faults_ok and not (sink["lost"] or sink["twice"] or sink["totals_off"])
        ok = ok and not sink["unrectified"]
        summary = f"{self.name}: {sink}; faults " + (
            "done as scripted" if faults_ok else f"NOT done as scripted: {self.migrations}"
        )
        return Outcome(summary=summary, ok=ok, facts={"migrations": self.migrations, "sink": sink})


#: The user jobs by name (the harness's ``--jobs``; ``flights`` is the repository's).
USER_JOBS: dict[str, type[FlightsJob]] = {
    job.label: job for job in (WordCountJob, ChainedJob, ChainedStage2Job, WindowsJob, JoinJob)
}


def on_job(fault: type, job: type | None) -> type:
    """``fault`` (a fault driver class) run on ``job`` (a ``UserJob``; None: flights)."""
    if job is None:
        return fault
    return type(f"{job.__name__}{fault.__name__}", (fault, job), {})


def user_project(home: Path) -> Path:
    """The user project copied to ``home/chaos/user_project``, its ``config.json`` this
    checkout's (so the same cluster, ZooKeeper and elastorm home)."""
    project = home / "chaos" / "user_project"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(USER_PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    raw = json.loads((ROOT / "config.json").read_text())
    raw.setdefault("elastorm", {})["home"] = str(home.resolve())
    (project / "config.json").write_text(json.dumps(raw, indent=2))
    return project


@contextmanager
def user_imports(project: Path) -> Iterator[None]:
    """``sparse submit`` in ``project`` imports the user's ``src/`` first (this
    checkout's editable install would give it its own ``bolts``)."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(project / "src")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _placement(topology: str) -> dict[str, dict[str, list[int]]]:
    """``{component: {slot port: [task ids]}}`` of ``topology`` from Nimbus."""
    from elastorm.runtime.cluster import CLUSTER_ENV
    from elastorm.runtime.config import env_nimbus, load_config
    from elastorm.runtime.nimbus import executor_nodes

    host, port = env_nimbus(load_config().project, CLUSTER_ENV)
    return executor_nodes(host, port, topology, node_of=lambda _, slot: str(slot))


def _placed_tasks(topology: str, component: str) -> list[int]:
    """``component``'s task ids where Nimbus placed them (``_placement``), sorted."""
    return sorted(t for ts in _placement(topology)[component].values() for t in ts)


def _component_pid(topology: str, component: str, task: int) -> int:
    """The Python process of ``component``'s task ``task``: the child of the worker JVM
    on that task's slot (each executor has a worker of its own in these runs)."""
    slots = [
        int(p) for p, tasks in _placement(topology).get(component, {}).items() if task in tasks
    ]
    if len(slots) != 1:
        raise UserError(f"task {task} of {component} runs on slots {slots}, not one")
    marks = (b"org.apache.storm.daemon.worker.Worker", f"-Dworker.port={slots[0]}".encode())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if b"streamparse_run" not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            parent = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
            jvm = Path(f"/proc/{parent}/cmdline").read_bytes()
        except OSError:
            continue
        if all(m in jvm for m in marks) and f"-Dstorm.id={topology}-".encode() in jvm:
            found.append(int(entry))
    if len(found) != 1:
        raise UserError(f"{len(found)} Python processes in the worker of {component} {task}")
    return found[0]
