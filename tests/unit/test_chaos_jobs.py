"""The chaos harness's user jobs (``bench/chaos_jobs.py``): the folds a sink's committed
rows are checked against, the balance of lost and twice, and how a fault driver is
put on a user job."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / "bench", ROOT / "tests" / "integration", ROOT):
    sys.path.insert(0, str(path))

from chaos import _chosen, _scenarios  # noqa: E402
from chaos_jobs import (  # noqa: E402
    USER_JOBS,
    row_balance,
    settled_rows,
    totals_off,
    user_stream,
)
from user_models import letter_rows, word_rows  # noqa: E402

WORDS = st.lists(st.sampled_from(["ab", "ac", "b", "bb", "c"]), max_size=40)


@given(WORDS)
def test_word_rows_are_one_to_n_per_word(stream: list[str]) -> None:
    rows = word_rows(stream)
    assert sum(rows.values()) == len(stream)
    for word, n in Counter(stream).items():
        assert sorted(c for w, c in rows if w == word) == list(range(1, n + 1))


@given(WORDS)
def test_letter_rows_count_updates_and_sum_the_counts(stream: list[str]) -> None:
    rows, totals = letter_rows(stream)
    per_letter = Counter(w[0] for w in stream)
    assert rows == Counter((k, i) for k, n in per_letter.items() for i in range(1, n + 1))
    counts = Counter(stream)
    assert totals == {k: sum(n * (n + 1) // 2 for w, n in counts.items() if w[0] == k)
                      for k in per_letter}  # fmt: skip


@given(WORDS, st.data())
def test_balance_counts_each_duplicate_and_each_gap(stream: list[str], data) -> None:
    want = word_rows(stream)
    rows = list(want.elements())
    dropped = data.draw(st.sets(st.integers(0, max(0, len(rows) - 1)), max_size=len(rows)))
    doubled = data.draw(st.sets(st.integers(0, max(0, len(rows) - 1)), max_size=len(rows)))
    got = [r for i, r in enumerate(rows) if i not in dropped]
    got += [r for i, r in enumerate(rows) if i in doubled]
    result = row_balance(Counter(got), want)
    assert result["checked"] == len(rows)
    # a row both dropped and doubled is there once: neither lost nor twice
    assert result["lost"] == len({i for i in dropped if i < len(rows)} - doubled)
    assert result["twice"] == len({i for i in doubled if i < len(rows)} - dropped)


def test_a_duplicate_update_in_stage_two_shows_as_twice_and_a_wrong_total() -> None:
    stream = ["ab", "ac", "ab"]
    want, totals = letter_rows(stream)
    # one update of "ab" applied twice: updates 1..4, totals 1, 2, 4, 6
    committed = [("a", 1, 1), ("a", 2, 2), ("a", 3, 4), ("a", 4, 6)]
    assert row_balance(Counter(r[:2] for r in committed), want)["twice"] == 1
    assert totals_off(committed, totals) == ["a"]
    assert totals_off([("a", 1, 1), ("a", 2, 2), ("a", 3, 4)], totals) == []


def test_the_user_stream_is_the_spouts() -> None:
    stream = user_stream()
    assert len(stream) == 4000 and sum(word_rows(stream).values()) == 4000


def test_a_fault_on_a_user_job_reads_the_jobs_hooks() -> None:
    scenarios = _scenarios(100, 10.0, lambda: None, USER_JOBS["chained-stage2"])
    assert list(scenarios) == [f"chained-stage2/{f}" for f in USER_JOBS["chained"].faults]
    driver = scenarios["chained-stage2/lose-1"]()
    assert (driver.name, driver.operator, driver.lose) == ("chained", "letters", 1)
    assert driver.components["router"] == "letters_router"
    assert scenarios["chained-stage2/sink"]().victim == "sink"
    flights = _scenarios(100, 10.0, lambda: None)
    assert (
        "sink" not in flights
        and "router" not in flights
        and flights["lose-1"]().operator == "sum_delays"
    )
    assert _chosen(["lose-1"], flights | scenarios) == ["lose-1", "chained-stage2/lose-1"]


def test_the_doctests_of_the_jobs_the_models_and_the_harness() -> None:
    import doctest

    import chaos
    import chaos_jobs
    import user_models

    assert doctest.testmod(chaos_jobs).attempted >= 4
    assert doctest.testmod(user_models).attempted >= 2
    assert doctest.testmod(chaos_jobs).failed == doctest.testmod(chaos).failed == 0
    assert doctest.testmod(user_models).failed == 0


def test_a_rectification_is_not_a_duplicate_and_an_open_tentative_is_reported() -> None:
    rows = [("a", 1, "final"), ("a", 2, "tentative"), ("a", 2, "final"), ("b", 1, "tentative")]
    got, unrectified = settled_rows(rows)
    assert row_balance(got, word_rows(["a", "a", "b"])) == {"checked": 3, "lost": 0, "twice": 0}
    assert unrectified == ["b"]
    twice, _ = settled_rows([("a", 1, "tentative"), ("a", 1, "tentative")])
    assert row_balance(twice, word_rows(["a"]))["twice"] == 1


def test_the_windows_job_counts_a_window_twice_and_tells_sliding_from_tumbling() -> None:
    """A window row committed twice counts twice; a sliding window sharing a tumbling
    window's word and start is a row of its own, not a duplicate."""
    job = USER_JOBS["windows"]()
    want = job.want()
    rows = [(*r, "final") for r in sorted(want.elements())]
    assert job.check(rows) == {
        "checked": len(rows), "lost": 0, "twice": 0, "unrectified": []
    }  # fmt: skip
    tumbling = next(r for r in rows if r[3] == "tumbling")
    assert any(r[:2] == tumbling[:2] and r[3] == "sliding" for r in rows)
    again = job.check([*rows, tumbling])
    assert (again["lost"], again["twice"]) == (0, 1)
    missing = job.check(rows[1:])
    assert (missing["lost"], missing["twice"]) == (1, 0)


def test_the_join_job_runs_the_keyed_faults_and_counts_flights_per_window(tmp_path) -> None:
    """The repository's join-and-window job: the faults of keyed state and the kills of
    its replaying spout and the join's router (not its sink: a plain bolt), the fault on
    ``join_flights``, submitted from this checkout; a window short of flights counts them
    lost, one over counts them twice, equal flights with another delay is
    ``totals_off``."""
    scenarios = _scenarios(1000, 10.0, lambda: None, USER_JOBS["join"])
    assert "join/sink" not in scenarios
    assert {"join/cpal-target", "join/lose-1", "join/spout", "join/router"} <= set(scenarios)
    assert scenarios["join/router"]().components["router"] == "join_flights_router"
    driver = scenarios["join/lose-1"]()
    assert (driver.name, driver.operator, driver.limit) == ("flights_join", "join_flights", 1000)
    assert not USER_JOBS["join"].in_user_project and USER_JOBS["wordcount"].in_user_project
    driver.options(str(tmp_path))
    reference = SimpleNamespace(windows={("N1", 1): (3, 10, 50), ("N2", 1): (2, 5, 9)})
    reference.windows[("N3", 2)] = (1, 0, 1)
    driver._join().expected = reference
    windows = {"N1|1": [4, 12, 60, False], "N2|1": [2, 6, 9, False], "N3|2": [1, 0, 1, True]}
    (tmp_path / "join-sink-1.json").write_text(json.dumps({"windows": windows}))
    got = driver.committed_check()
    assert got == {
        "checked": 6, "lost": 0, "twice": 1, "unrectified": ["N3|2"], "totals_off": ["N2|1"]
    }  # fmt: skip
    del windows["N1|1"]
    (tmp_path / "join-sink-1.json").write_text(json.dumps({"windows": windows}))
    assert driver.committed_check()["lost"] == 3
