"""The side-by-side of issue 33: one windowed word count in elastorm, PyFlink and Bytewax.

The job: per word, how often it came in each 5-second tumbling window of event time,
over the user project's stream (``words()`` of
``tests/integration/user_project/src/spouts/words.py``, event time = position / 100).
This command runs the PyFlink programs (``pyflink_windowcount.py``, the DataStream
API, and ``pyflink_table_windowcount.py``, the Table API, in the PyFlink virtualenv
of ``bench/pyflink/venv.py``) and the Bytewax program
(``bytewax_windowcount.py``, in a Bytewax virtualenv built the same way from
``bytewax-requirements.txt``) locally on that stream, and checks each one's
per-(word, window) counts against an independent fold: a dict count per word and
window start. Each flushes every open window at the end of input, so each must give
every window of the fold. elastorm's windows fire when their key group's watermark
(the latest event time the group applied) passes their end, so each group's last
windows stay open at the end of the stream: its complete windows are the fold's
windows that end at or before their group's last event time, and the model the
cluster test checks row for row (``window_model`` of
``tests/integration/user_models.py``) is compared with those here. elastorm's
own run is that integration test on a Storm cluster, not this command. Last, the
lines of user code of each program (code lines, without blank lines, comments and
docstrings). Usage, from the project's virtualenv::

    .venv/bin/python bench/side_by_side/run.py [--skip pyflink|pyflink_table|bytewax]...
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import os
import re
import subprocess
import sys
import tempfile
import time
import tokenize
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
USER_PROJECT = ROOT / "tests" / "integration" / "user_project"
WINDOW_SECS = 5
KEY_GROUPS = 12  # topologies/windowcount.py's elastorm.key_groups
LINE = re.compile(r"^(\S+) (\d+(?:\.\d+)?) (\d+)$")
TABLE_ROW = re.compile(r"^\| \+I \|\s*(\S+) \|\s*(\d+) \|\s*(\d+) \|$")  # Flink's print()

Counts = dict[tuple[str, float], int]

ELASTORM_FILES = (
    "src/bolts/windowcount.py",
    "src/bolts/windowsink.py",
    "topologies/windowcount.py",
    "src/spouts/words.py",
)


def load(name: str, path: Path) -> ModuleType:
    """The module at ``path``, loaded by path (a ``pyflink`` folder on ``sys.path``
    would shadow the real package, and the test module is not a package's)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stream() -> list[str]:
    """The user project's whole stream, from its spout module's ``words()``."""
    sys.path.insert(0, str(USER_PROJECT / "src"))
    from spouts.words import words

    return words()


def fold(words: list[str]) -> Counts:
    """Per (word, window start in seconds): how many times the word came in that
    5-second window; word number ``p`` happens at ``p / 100`` s, in window ``p // 500``."""
    counts: Counter[tuple[str, float]] = Counter()
    for position, word in enumerate(words):
        counts[(word, float(position // (100 * WINDOW_SECS) * WINDOW_SECS))] += 1
    return dict(counts)


def elastorm_complete(words: list[str], counts: Counts, key_groups: int) -> Counts:
    """The windows of ``counts`` that elastorm fires by the end of ``words``: those
    that end at or before the last event time of their word's key group."""
    from elastorm.core.keygroups import key_group

    last: dict[int, float] = {}
    for position, word in enumerate(words):
        last[key_group(word, key_groups)] = position / 100
    return {
        (w, start): n
        for (w, start), n in counts.items()
        if start + WINDOW_SECS <= last[key_group(w, key_groups)]
    }


def elastorm_model(words: list[str]) -> Counts:
    """The tumbling-window rows that the integration test
    ``test_user_project_every_window_kind_and_timers_exact_through_migrations_and_a_restore``
    requires of the cluster, from its model (``tests/integration/user_models.py``)."""
    models = load("user_models", ROOT / "tests" / "integration" / "user_models.py")
    rows = models.window_model(words, key_groups=KEY_GROUPS)
    return {(w, float(start)): n for w, start, n, kind in rows if kind == "tumbling"}


def parse(output: str) -> Counts:
    """``word start count`` lines, or insert rows of a Flink result table, of a
    program's output (other lines ignored)."""
    counts: Counts = {}
    for line in output.splitlines():
        m = LINE.match(line.strip()) or TABLE_ROW.match(line.strip())
        if m:
            key = (m[1], float(m[2]))
            assert key not in counts, f"window {key} printed twice"
            counts[key] = int(m[3])
    return counts


def compare(name: str, got: Counts, expected: Counts) -> bool:
    """Print how ``got`` matches ``expected`` window by window; True if equal."""
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    wrong = sorted(k for k in expected.keys() & got.keys() if got[k] != expected[k])
    ok = not (missing or extra or wrong)
    print(
        f"{name}: {len(got)} windows, {sum(got.values())} words; against the fold's "
        f"{len(expected)}: {'EQUAL' if ok else 'DIFFERENT'}"
        f" (missing {len(missing)}, extra {len(extra)}, wrong counts {len(wrong)})"
    )
    for key in (missing + extra + wrong)[:10]:
        print(f"  {key}: got {got.get(key)}, expected {expected.get(key)}")
    return ok


def run_program(name: str, argv: list[str], env: dict[str, str]) -> Counts:
    """Run one peer's program, print its wall time, and parse its windows."""
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=HERE, env=env, capture_output=True, text=True, timeout=900)
    print(f"{name}: exit {proc.returncode} in {time.monotonic() - started:.1f} s")
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
    return parse(proc.stdout)


def venv_env(python: Path) -> dict[str, str]:
    """The environment of a shell with the virtualenv of ``python`` activated (PyFlink
    starts its Python workers as ``python`` from ``PATH``)."""
    path = f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PATH": path}


def code_lines(path: Path) -> int:
    """Lines of code of a Python file: lines with a token other than a comment, and
    not inside a docstring (module, class or function); blank lines do not count."""
    source = path.read_text()
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip and tok.type != tokenize.ENDMARKER:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


def line_counts() -> None:
    """Print the lines of user code of each system's program."""
    print("\nlines of user code (without blank lines, comments and docstrings):")
    total = 0
    for rel in ELASTORM_FILES:
        n = code_lines(USER_PROJECT / rel)
        total += n
        print(f"  elastorm  {rel:32} {n:3}")
    print(f"  elastorm  {'total':32} {total:3}")
    for program in PROGRAMS.values():
        system = program.file.split("_")[0]
        print(f"  {system:9} {program.file:32} {code_lines(HERE / program.file):3}")


def pyflink_python() -> Path:
    """The PyFlink virtualenv's interpreter (``bench/pyflink/venv.py``)."""
    return load("pyflink_venv", ROOT / "bench" / "pyflink" / "venv.py").python()


def bytewax_python() -> Path:
    """The Bytewax virtualenv's interpreter, built by the PyFlink venv's builder."""
    venv = load("pyflink_venv", ROOT / "bench" / "pyflink" / "venv.py")
    return venv.built(ROOT / ".elastorm" / "bytewax-venv", HERE / "bytewax-requirements.txt")


@dataclass(frozen=True)
class Program:
    """A peer's program: its virtualenv, its file here, the interpreter's arguments."""

    venv: Callable[[], Path]
    file: str
    args: tuple[str, ...]


PROGRAMS = {
    "pyflink": Program(pyflink_python, "pyflink_windowcount.py", ("pyflink_windowcount.py",)),
    "pyflink_table": Program(
        pyflink_python, "pyflink_table_windowcount.py", ("pyflink_table_windowcount.py",)
    ),
    "bytewax": Program(
        bytewax_python, "bytewax_windowcount.py", ("-m", "bytewax.run", "bytewax_windowcount:flow")
    ),
}


def check_peer(name: str, words_file: Path, expected: Counts) -> bool:
    """Build the peer's virtualenv, run its program on the stream, compare with the fold."""
    program = PROGRAMS[name]
    python = program.venv()
    env = venv_env(python) | {"WORDS_FILE": str(words_file)}
    return compare(name, run_program(name, [str(python), *program.args], env), expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", action="append", choices=sorted(PROGRAMS), default=[])
    args = parser.parse_args()
    print(f"side by side, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    words = stream()
    expected = fold(words)
    print(
        f"stream: {len(words)} words, {len(set(words))} distinct, event time 0 to "
        f"{(len(words) - 1) / 100} s; the fold: {len(expected)} (word, window) counts"
    )
    complete = elastorm_complete(words, expected, KEY_GROUPS)
    print(
        f"elastorm ({KEY_GROUPS} key groups): {len(complete)} of the fold's windows are "
        f"complete at the end of the stream; the other {len(expected) - len(complete)} "
        "wait for a later word of their key group"
    )
    results = {"elastorm model": compare("elastorm model", elastorm_model(words), complete)}
    with tempfile.TemporaryDirectory() as tmp:
        words_file = Path(tmp) / "words.txt"
        words_file.write_text("\n".join(words) + "\n")
        for name in PROGRAMS:
            if name not in args.skip:
                results[name] = check_peer(name, words_file, expected)
    line_counts()
    print("\n" + ", ".join(f"{k}: {'ok' if v else 'FAILED'}" for k, v in results.items()))
    sys.exit(0 if all(results.values()) else 1)


if __name__ == "__main__":
    main()
