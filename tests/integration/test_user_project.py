"""elastorm as a new user meets it: a streamparse project of their own, outside this
repository, with elastorm pip-installed as a package.

The project is ``tests/integration/user_project/`` (the tutorial's listings), copied
to a temporary directory: its own ``project.clj``, ``config.json``, a keyed word count
written with the state API in ``src/bolts/``, a finite word stream in ``src/spouts/``.
A fresh virtualenv there gets elastorm from a wheel of this repository (non-editable,
``-c constraints.txt``). With that virtualenv's commands only: ``elastorm jar``,
``sparse submit -e cluster`` to the session's ``elastorm cluster up`` (the workers run
the project's virtualenv: ``use_virtualenv`` with ``install_virtualenv: false``),
``elastorm migrate`` of key groups by every protocol while it runs, ``kill -9`` of the
keyed task owning the most key groups (``elastorm status --pid``) and one more
migration after it: from ``sparse submit`` on, the page's own commands
(``tutorial_commands.py``), through bash, without ``LEIN_ROOT`` in the environment.
Then every word's counts committed by the project's sink (``elastorm.sinks.Sink``
into SQLite) must be exactly 1..n, n its count in a single-process fold.

Queryable state on the same run: while key groups 0, 1 and 2 move (the words
``python``, ``storm`` and ``checkpoint`` are in them), a thread asks for those words'
state over and over through ``elastorm.runtime.state``: every query must be answered
(by the group's owner, before or after the move: the query follows the routing table),
each word's count never goes down, and each word is answered by both ends of its
group's move. Once the stream has ended, the user's own ``elastorm state`` command
prints every word's count, equal to its count in the stream.

Talks to: the real ZooKeeper, Nimbus and supervisors of the ``storm_cluster`` fixture,
pip (its cache), Maven (``~/.m2``) for the project's JVM build.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tutorial_commands as page
from user_models import letter_rows, window_model
from wheel_build import build_wheel

from elastorm.core.keygroups import key_group
from elastorm.errors import UserError
from elastorm.runtime.config import load_config
from elastorm.runtime.migrate import connect
from elastorm.runtime.scale import progress
from elastorm.runtime.state import ask_owner
from elastorm.zk.layout import ZnodeLayout

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
USER_PROJECT = Path(__file__).parent / "user_project"
TOPOLOGY = "wordcount"
OPERATOR = "counts"
KEY_GROUPS = 12  # the user project's elastorm.key_groups
PROBES = {0: "python", 1: "storm", 2: "checkpoint"}  # a word of each group that moves


def _user_files(project: Path) -> dict[str, int]:
    """Lines of every file the user wrote (the venv and build output excluded)."""
    files = [project / "project.clj", project / "config.json"]
    files += sorted((project / "topologies").rglob("*.py"))
    files += sorted((project / "src").rglob("*.py"))
    return {p.relative_to(project).as_posix(): len(p.read_text().splitlines()) for p in files}


def _run(cmd: list[str], cwd: Path, timeout: float = 300, check: bool = True) -> str:
    # The user's own venv only: a PYTHONPATH naming this checkout's src/ (how a
    # worktree's tests run) showed pip its elastorm.egg-info, and pip then skipped
    # installing the wheel ("already satisfied"), leaving no venv/bin/elastorm.
    hidden = ("ELASTORM_PROJECT", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env |= {"LEIN_ROOT": "1", "PYTHONWARNINGS": "ignore"}
    env["PATH"] = os.pathsep.join([str(Path(cmd[0]).parent), env.get("PATH", "")])
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout


def _sh(command: str, cwd: Path, timeout: float = 300, check: bool = True) -> str:
    """``command`` as the page shows it, through bash in the project (its venv/bin first
    on PATH only through the command's own ``venv/bin/...``); LEIN_ROOT is not set."""
    hidden = ("ELASTORM_PROJECT", "VIRTUAL_ENV", "PYTHONPATH", "LEIN_ROOT")
    env = {k: v for k, v in os.environ.items() if k not in hidden} | {"PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{command} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _new_project(tmp: Path, cfg) -> Path:
    """The user's files in ``tmp/wordcount``, config.json pointed at the session cluster."""
    project = tmp / "wordcount"
    shutil.copytree(USER_PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    repo = json.loads((ROOT / "config.json").read_text())
    raw = json.loads((project / "config.json").read_text())
    env = raw["envs"]["cluster"]
    env["nimbus"] = repo["envs"]["cluster"]["nimbus"]
    env["virtualenv_root"] = str(project)
    raw["elastorm"] = {"zookeeper_port": cfg.zookeeper_port}
    (project / "config.json").write_text(json.dumps(raw, indent=2))
    return project


def _stream() -> list[str]:
    """The spout's whole stream, from the user's own module."""
    spec = importlib.util.spec_from_file_location(
        "user_words", USER_PROJECT / "src/spouts/words.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.words()


def _lines(path: Path) -> list[tuple[str, int]]:
    """The (word, count) rows the project's sink has committed to its SQLite file."""
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        try:
            return [(w, int(n)) for w, n in db.execute("SELECT word, count FROM counts")]
        except sqlite3.OperationalError:  # the sink has not created its table yet
            return []


@pytest.fixture(scope="module")
def installed(storm_cluster, tmp_path_factory) -> tuple[Path, Path]:
    """The user's project (outside this repository) with a fresh virtualenv holding
    elastorm from a wheel of this checkout; shared by this module's tests (one wheel,
    one install: CI's 40 minutes). ``(project, venv)``."""
    cfg, _ = storm_cluster
    tmp = tmp_path_factory.mktemp("user")
    assert ROOT not in tmp.parents
    project = _new_project(tmp, cfg)
    lines = _user_files(project)
    print(f"user files: {lines}; {sum(lines.values())} lines in all")
    venv = project / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheel = build_wheel(tmp / "wheel")
    pip = [str(venv / "bin/pip"), "install", "-q", "-c", str(ROOT / "constraints.txt")]
    _run([*pip, str(wheel)], project, timeout=600)
    shown = _run([str(venv / "bin/pip"), "show", "-f", "elastorm"], project)
    assert "Editable project location" not in shown
    return project, venv


# 129 s (and the user project's install) in session 28's CI: with --slow (CI's 40
# minutes); every protocol runs in CI on the flights job (test_storm_elastic.py) and on
# this project with its own parallelism (below) and windows (docs/benchmarks.md, "Slow
# tests").
@pytest.mark.slow
def test_user_project_counts_exactly_with_every_protocol(storm_cluster, installed) -> None:
    cfg, _ = storm_cluster
    project, venv = installed

    # From here on, the page's own commands (tutorial_commands.py), through bash in the
    # project directory, with no LEIN_ROOT in the environment: each sets what it needs.
    output = project / "counts.sqlite"
    _sh(f"{page.JAR}\n{page.SUBMIT}", project, timeout=600)
    stream = _stream()
    truth = Counter(stream)
    assert {key_group(w, KEY_GROUPS) for w in PROBES.values()} == set(PROBES)
    answers: dict[str, list[tuple[int, int]]] = defaultdict(list)  # word -> [(task, count)]
    failures: list[str] = []
    stop = threading.Event()

    def probe() -> None:
        client = connect(cfg.zookeeper)
        try:
            while not stop.is_set():
                for word in PROBES.values():
                    try:
                        got = ask_owner(client, TOPOLOGY, OPERATOR, word, timeout=30)
                    except UserError as exc:
                        failures.append(f"{word}: {exc}")
                        continue
                    answers[word].append((got["task"], (got["state"] or {}).get("count", 0)))
        finally:
            client.stop()
            client.close()

    try:
        deadline = time.monotonic() + 180
        while _sh(page.CONTROLLER, project, check=False) == "":
            assert time.monotonic() < deadline, "the topology's controller never answered"
            time.sleep(2)
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        time.sleep(3)  # answers from the groups' first owners
        done = []
        for command, protocol in zip(page.MIGRATIONS, ("direct", "cpa", "cpal"), strict=True):
            out = _sh(command, project)
            print(out.strip())
            assert f"protocol {protocol};" in out, out
            done.append(protocol)
            time.sleep(2)  # answers from the new owner
        stop.set()
        prober.join(60)
        assert len(_lines(output)) < len(stream), "the migrations came after the stream ended"
        status = _sh(page.STATUS, project, check=False)  # exit 1 if a problem is current
        print(status.strip())
        assert "counts task" in status, status
        _sh(page.KILL, project)
        killed = len(_lines(output))
        _sh(page.SETTLE, project, timeout=60)
        out = _sh(page.AFTER_KILL, project)
        print(f"after the kill ({killed} outputs then): {out.strip()}")
        assert out.startswith("key group 3: done; protocol "), out
        print(_sh(page.STATUS, project, check=False).strip())
        deadline = time.monotonic() + 300
        while len(_lines(output)) < len(stream) and time.monotonic() < deadline:
            time.sleep(2)
        time.sleep(5)  # anything extra (a duplicate) would arrive by now
        lines = _lines(output)  # judged while the topology runs, its sink alive
        final = {}
        for word in sorted(truth):
            asked = page.STATE.replace("--key storm", f"--key {word}") + " --timeout 30"
            final[word] = json.loads(_sh(asked, project))["state"]
    finally:
        stop.set()
        _sh(page.STOP + " --wait 1", project, check=False)

    emitted: dict[str, list[int]] = defaultdict(list)
    for word, count in lines:
        emitted[word].append(count)
    assert set(emitted) == set(truth)
    for word, n in truth.items():
        assert sorted(emitted[word]) == list(range(1, n + 1)), word
    assert sum(len(c) for c in emitted.values()) == len(stream)
    assert done == ["direct", "cpa", "cpal"]
    # queryable state: answered throughout the moves, never back in time, exact at the end
    assert not failures, failures
    for word, seen in answers.items():
        counts = [c for _, c in seen]
        print(f"{word}: {len(seen)} answers, tasks {sorted({t for t, _ in seen})}")
        assert counts == sorted(counts), (word, counts)
        assert len({t for t, _ in seen}) == 2, (word, seen)  # both ends of its group's move
    assert set(answers) == set(PROBES.values())
    assert final == {word: {"count": n} for word, n in truth.items()}


def _migrate_by_every_protocol(
    venv: Path, project: Path, topology: str, *, settle: bool = False
) -> list[str]:
    """Once the controller answers (and, with ``settle``, has no move of its own in
    flight), migrate key groups 0, 1, 2 of the operator by DIRECT, CPA and CPAL; the
    protocols done."""
    migrate = [str(venv / "bin/elastorm"), "migrate", "--topology", topology]
    migrate += ["--operator", OPERATOR]
    deadline = time.monotonic() + 180
    while _run([*migrate, "--status"], project, check=False) == "":
        assert time.monotonic() < deadline, "the topology's controller never answered"
        time.sleep(2)
    # The controller's own moves first: groups that start on a logical node the
    # scheduler left unbound move at start, and their holders are placed anew; a CPA
    # asked meanwhile could find its holder without the newest checkpoint (direct).
    # Settled: no group owned on an idle node (the rescale done; before it starts
    # nothing moves and every holder may be ready, which is how a CI run went on after
    # 4 s and saw its CPA fall back to direct), nothing left to move, every holder ready.
    deadline = time.monotonic() + 120
    client = connect(load_config().zookeeper)
    try:
        while settle:
            status = json.loads(_run([*migrate, "--status"], project))
            p = progress(client, ZnodeLayout(topology))
            idle = [node for node in p.owned if node.endswith("(idle)")]
            if not (idle or p.joining or p.pending or p.moving) and all(status["assisted"]):
                print(f"{topology}: settled after {time.monotonic() - deadline + 120:.0f} s")
                break
            assert time.monotonic() < deadline, f"never settled: {p}; {status}"
            time.sleep(1)
    finally:
        client.stop()
        client.close()
    done = []
    for group, protocol in enumerate(("direct", "cpa", "cpal")):
        args = ["--group", str(group), "--to", "holder", "--protocol", protocol]
        out = _run([*migrate, *args, "--timeout", "90"], project)
        print(out.strip())
        assert f"protocol {protocol};" in out, out
        done.append(protocol)
    return done


# -- the windowed count: event-time windows and timers ------------------------------


def _window_rows(path: Path) -> list[tuple[str, float, int, str]]:
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        try:
            rows = db.execute("SELECT word, start, count, window FROM windows")
            return sorted((w, float(s), int(n), k) for w, s, n, k in rows)
        except sqlite3.OperationalError:  # the sink has not created its table yet
            return []


def _router_pid(venv: Path) -> int:
    """The pid of the project's one ``KeyRouter`` process (the router elastorm adds in
    front of ``counts``: its parallelism is its spout's, 1)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        words = [a.decode(errors="replace") for a in args]
        # Storm passes the component's arguments as one: "-s json ... module.Class"
        if any(w.endswith("elastorm.storm.keyed_bolt.KeyRouter") for w in words) and any(
            w.startswith(str(venv.parent)) for w in words
        ):
            pids.append(int(cmdline.parent.name))
    assert len(pids) == 1, pids
    return pids[0]


def test_user_project_every_window_kind_and_timers_exact_through_migrations_and_a_restore(
    installed,
) -> None:
    """The project's windowed count with every window kind (``topologies/windowkinds.py``:
    the tutorial's ``windowcount`` bolt, tumbling windows, event-time timers and a TTL
    state, plus sliding windows and sessions) through a migration by each protocol and then a
    ``kill -9`` of its only router: Storm halts the router's worker, and with it the
    keyed task beside it. That task's groups are restored from their checkpoints while
    the router restarts and replays from its spout (the restores' commands died with
    it: they are ordered again, ``EmitterRestarted``; CI at f378ed2 saw them stuck). The
    rows committed are the model's, each once (timers and windows live in the key
    group's state, and fire at the same tuple wherever the group is, and again on the
    same tuple after a restore: the sink drops what it committed)."""
    project, venv = installed
    output = project / "windows.sqlite"
    topology = "windowkinds"
    jar = _run([str(venv / "bin/elastorm"), "jar"], project).strip().splitlines()[-1]
    submit = [str(venv / "bin/sparse"), "submit", "-e", "cluster", "-n", topology]
    submit += ["-N", topology, "-j", jar, "-f", "-o", f"elastorm.sinks.sqlite_path={output}"]
    _run(submit, project)
    expected = window_model(_stream(), key_groups=12)
    try:
        # settled first: a CPA asked before the holder reported its first checkpoint
        # runs direct instead (CI at a9aac57 saw it)
        done = _migrate_by_every_protocol(venv, project, topology, settle=True)
        pid = _router_pid(venv)
        killed = len(_window_rows(output))
        assert killed < len(expected), "the migrations came too late"
        os.kill(pid, 9)
        print(f"kill -9 of the router {pid} (and its worker) with {killed} of {len(expected)} rows")
        # Judged while the topology runs: the sink killed with it is no witness.
        got = _settled(lambda: _window_rows(output), expected, 300)
    finally:
        kill = [str(venv / "bin/sparse"), "kill", "-e", "cluster", "-n", topology, "--wait", "1"]
        _run(kill, project, check=False)
    assert got == expected, _row_diff(got, expected)
    assert done == ["direct", "cpa", "cpal"]


def _settled(read: Callable[[], list], expected: list, timeout: float) -> list:
    """``read()`` once it equals ``expected`` (or at ``timeout`` s), then again 5 s
    later: anything extra (a duplicate) would have arrived by then."""
    deadline = time.monotonic() + timeout
    while read() != expected and time.monotonic() < deadline:
        time.sleep(2)
    time.sleep(5)
    return read()


def _row_diff(got: list, expected: list) -> str:
    """The rows missing and the rows extra (with their multiplicity), for a failure."""
    have, want = Counter(got), Counter(expected)
    missing, extra = sorted((want - have).elements()), sorted((have - want).elements())
    return f"{len(got)} rows of {len(expected)}; missing {missing[:20]}; extra {extra[:20]}"


def _letter_rows(path: Path) -> list[tuple[str, int, int]]:
    """The (letter, updates, total) rows the chained topology's sink has committed."""
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        try:
            rows = db.execute("SELECT letter, updates, total FROM letters")
            return [(str(c), int(n), int(t)) for c, n, t in rows]
        except sqlite3.OperationalError:  # the sink has not created its table yet
            return []


def _submit_own(project: Path, venv: Path, jar: str, counts_par: int, letters_par: int) -> str:
    """The chained topology with its keyed bolts at ``counts_par`` and ``letters_par``,
    its words read from the files of ``<project>/<name>-input/`` (section 11's
    ``WordLines``), submitted as ``own<counts_par><letters_par>``; its name. ``par=1``
    runs 2 tasks, and submit says so."""
    name = f"own{counts_par}{letters_par}"
    chained = (project / "topologies/chained.py").read_text()
    own = chained.replace("class Chained", f"class Own{counts_par}{letters_par}")
    own = own.replace("from spouts.words import Words", "from spouts.lines import WordLines")
    own = own.replace("= Words.spec()", "= WordLines.spec()")
    own = own.replace('keyed("word")}, par=2)', f'keyed("word")}}, par={counts_par})')
    own = own.replace("keyed(first_letter)}, par=2)", f"keyed(first_letter)}}, par={letters_par})")
    assert f"par={counts_par})" in own and f"par={letters_par})" in own and "WordLines" in own
    (project / f"topologies/{name}.py").write_text(own)
    submit = [str(venv / "bin/sparse"), "submit", "-e", "cluster", "-n", name, "-N", name]
    submit += ["-j", jar, "-f", "-o", f"elastorm.sinks.sqlite_path={project / name}.sqlite"]
    submit += ["-o", f"wordcount.input={project / name}-input"]
    proc = subprocess.run(
        submit,
        cwd=project,
        env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        | {"LEIN_ROOT": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    raised = "letters: par=1 runs 2 tasks: a keyed bolt's key groups are checkpointed"
    assert (raised in proc.stdout + proc.stderr) == (letters_par == 1)
    return name


def test_keyed_bolts_with_their_own_parallelism_count_exactly_through_migrations_and_a_kill(
    installed,
) -> None:
    """The user's chained topology (word counts into per-letter totals, neither
    idempotent) with its keyed bolts at their own ``par``, 3 and 2, and 4 and 1, as two
    topologies side by side: on the two-supervisor cluster the scheduler binds two
    logical nodes of each and parks the other ``counts`` tasks in an idle worker, from
    which the controller moves their groups (``letters`` has no task there: none of
    its groups may go). Each reads the stream's first half from a file; then a
    migration by each protocol of ``counts`` groups, a CPAL of a ``letters`` group and
    ``kill -9`` of the ``letters`` task owning most groups (its worker, and the
    ``counts`` task beside it, go down with it); then the second half comes in a second
    file. Every ``(letter, updates)`` row committed once, each letter's last total the
    fold's. ``par=1`` runs 2 tasks (a key group's checkpoint is held by another task of
    its operator). The test, not the clock, decides when the rest of the stream comes,
    so a loaded machine only makes it slower (under two CPU hogs, a spout paced by time
    ended before the kill)."""
    project, venv = installed
    elastorm = str(venv / "bin/elastorm")
    jar = _run([elastorm, "jar"], project).strip().splitlines()[-1]
    stream = _stream()
    want, totals = letter_rows(stream)
    half = len(stream) // 2

    def feed(name: str, part: int, words: list[str]) -> None:
        """``words`` as the file ``part-<part>`` of ``name``'s input, whole at once (a
        hidden file renamed: the spout skips names starting with a dot)."""
        folder = project / f"{name}-input"
        folder.mkdir(exist_ok=True)
        hidden = folder / f".part-{part}"
        hidden.write_text("".join(f"{w}\n" for w in words))
        hidden.rename(folder / f"part-{part}")

    def migrate_kill_then_feed(name: str) -> list[str]:
        """The protocols done; then the kill with half the stream in; then the rest."""
        done = _migrate_by_every_protocol(venv, project, name, settle=True)
        letters = [elastorm, "migrate", "--topology", name, "--operator", "letters"]
        status = json.loads(_run([*letters, "--status"], project))
        assert len(status["tasks"]) == 2, status["tasks"]  # par=1 runs 2
        args = ["--group", "0", "--to", "holder", "--protocol", "cpal", "--timeout", "90"]
        moved = _run([*letters, *args], project)
        print(f"{name}: {moved.strip()}")
        assert "protocol cpal;" in moved, moved
        pid = int(_run([elastorm, "status", "--topology", name, "--pid", "letters"], project))
        killed = len(_letter_rows(project / f"{name}.sqlite"))
        os.kill(pid, 9)
        print(f"{name}: kill -9 of the letters task {pid} with {killed} of {len(stream)} rows")
        feed(name, 1, stream[half:])
        return done

    names: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            running = []
            for counts_par, letters_par in ((3, 2), (4, 1)):
                feed(f"own{counts_par}{letters_par}", 0, stream[:half])
                names.append(_submit_own(project, venv, jar, counts_par, letters_par))
                running.append(pool.submit(migrate_kill_then_feed, names[-1]))
            done = {name: future.result() for name, future in zip(names, running, strict=True)}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(
            len(_letter_rows(project / f"{name}.sqlite")) < len(stream) for name in names
        ):
            time.sleep(2)
        time.sleep(5)  # anything extra (a duplicate) would arrive by now
        committed = {name: _letter_rows(project / f"{name}.sqlite") for name in names}
    finally:
        for name in names:
            kill = [str(venv / "bin/sparse"), "kill", "-e", "cluster", "-n", name, "--wait", "1"]
            _run(kill, project, check=False)
    for name in names:
        rows = committed[name]
        assert Counter((c, n) for c, n, _ in rows) == want, name
        last = {c: t for c, n, t in sorted(rows, key=lambda r: r[1])}
        assert last == totals, name
        assert done[name] == ["direct", "cpa", "cpal"]
