"""Queryable state on a real cluster: ``elastorm state`` / ``elastorm.query_state``
read a word's count from the tutorial's word count while it runs, during migrations
of the word's key group by every protocol, and exactly once the stream has ended.

The user's project of ``test_user_project.py`` (the tutorial's listings, elastorm from
a wheel of this repository in the project's own virtualenv), submitted to the session
cluster. While key groups 0, 1 and 2 move (direct, CPA, CPAL: the words ``python``,
``storm`` and ``checkpoint`` are in them), a thread asks for those words' state over
and over through this checkout's ``elastorm.runtime.state``: every query must be
answered (by the group's owner, before or after the move: the query follows the
routing table), each word's count never goes down, and each word is answered by
both ends of its group's move. Once the stream has ended, the user's own
``elastorm state`` command prints every word's count, equal to its count in the
stream.

Talks to: the real ZooKeeper, Nimbus and supervisors of the ``storm_cluster`` fixture,
pip (its cache), Maven (``~/.m2``) for the project's JVM build.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from test_user_project import ROOT, _lines, _new_project, _run, _stream
from wheel_build import build_wheel

from elastorm.core.keygroups import key_group
from elastorm.errors import UserError
from elastorm.runtime.migrate import connect
from elastorm.runtime.state import ask_owner

pytestmark = pytest.mark.integration

TOPOLOGY = "wordcount"
OPERATOR = "counts"
KEY_GROUPS = 12  # the user project's elastorm.key_groups
PROBES = {0: "python", 1: "storm", 2: "checkpoint"}  # a word of each group that moves


def test_state_queries_answer_during_migrations_and_are_exact(storm_cluster, tmp_path) -> None:
    assert {key_group(w, KEY_GROUPS) for w in PROBES.values()} == set(PROBES)
    cfg, _ = storm_cluster
    project = _new_project(tmp_path, cfg)
    venv = project / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheel = build_wheel(tmp_path / "wheel")
    pip = [str(venv / "bin/pip"), "install", "-q", "-c", str(ROOT / "constraints.txt")]
    _run([*pip, str(wheel)], project, timeout=600)
    jar = Path(_run([str(venv / "bin/elastorm"), "jar"], project).strip().splitlines()[-1])
    output = tmp_path / "counts.sqlite"
    submit = [str(venv / "bin/sparse"), "submit", "-e", "cluster", "-n", TOPOLOGY]
    submit += ["-N", TOPOLOGY, "-j", str(jar), "-f", "-o", f"elastorm.sinks.sqlite_path={output}"]
    _run(submit, project)
    elastorm = str(venv / "bin/elastorm")
    migrate = [elastorm, "migrate", "--topology", TOPOLOGY, "--operator", OPERATOR]
    stream = _stream()
    truth = Counter(stream)
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
                    count = (got["state"] or {}).get("count", 0)
                    answers[word].append((got["task"], count))
        finally:
            client.stop()
            client.close()

    try:
        deadline = time.monotonic() + 180
        while _run([*migrate, "--status"], project, check=False) == "":
            assert time.monotonic() < deadline, "the topology's controller never answered"
            time.sleep(2)
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        time.sleep(3)  # answers from the groups' first owners
        for group, protocol in enumerate(("direct", "cpa", "cpal")):
            args = ["--group", str(group), "--to", "holder", "--protocol", protocol]
            out = _run([*migrate, *args, "--timeout", "90"], project)
            print(out.strip())
            assert f"protocol {protocol};" in out, out
            time.sleep(2)  # answers from the new owner
        stop.set()
        prober.join(60)
        assert len(_lines(output)) < len(stream), "the migrations came after the stream ended"
        deadline = time.monotonic() + 240
        while len(_lines(output)) < len(stream) and time.monotonic() < deadline:
            time.sleep(2)
        final = {}
        for word in sorted(truth):
            cmd = [elastorm, "state", "--topology", TOPOLOGY, "--operator", OPERATOR]
            printed = json.loads(_run([*cmd, "--key", word, "--timeout", "30"], project))
            final[word] = printed["state"]
    finally:
        stop.set()
        _run(
            [str(venv / "bin/sparse"), "kill", "-e", "cluster", "-n", TOPOLOGY, "--wait", "1"],
            project,
            check=False,
        )

    assert not failures, failures
    for word, seen in answers.items():
        counts = [c for _, c in seen]
        print(
            f"{word}: {len(seen)} answers, tasks {sorted({t for t, _ in seen})}, last {counts[-1]}"
        )
        assert counts == sorted(counts), (word, counts)  # never back in time
        assert len({t for t, _ in seen}) == 2, (word, seen)  # both ends of its group's move
    assert set(answers) == set(PROBES.values())
    assert final == {word: {"count": n} for word, n in truth.items()}
