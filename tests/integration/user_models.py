"""Independent folds of the user project's jobs (``tests/integration/user_project``):
what their sinks must commit, each once, computed in one process. Shared by the
integration tests, the chaos harness's user jobs (``bench/chaos_jobs.py``) and the
side-by-side check (``bench/side_by_side/run.py``)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable


def window_model(
    stream: list[str], key_groups: int, quiet: float = 0.3
) -> list[tuple[str, float, int, str]]:
    """The rows the project's ``windowkinds`` topology must commit, each once, as
    ``(word, start, count, kind)``: a key group's watermark is the latest event time it
    applied (event time = position / 100; no lateness); the windows whose end it passes
    and the quiet timers (a word's last time + ``quiet``, the bolt's ``QUIET``, deleted
    when it comes again; ``(word, time, -1, "quiet")``) fire inside the tuple that moved
    it. Per word: 5-second tumbling windows, 5-second windows sliding by 2.5 s, sessions
    of gap 0.25 s (a window ``[t, t + gap]`` per event, joined with every session it
    touches). Windows and timers of a group no later tuple reaches never fire."""
    from elastorm import SessionWindow, SlidingWindow, TumblingWindow
    from elastorm.core.keygroups import key_group
    from elastorm.core.windows import merge_windows

    assigners = {
        "tumbling": TumblingWindow(5),
        "sliding": SlidingWindow(5, 2.5),
        "session": SessionWindow(0.25),
    }
    rows: list[tuple[str, float, int, str]] = []
    groups: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for position, word in enumerate(stream):
        groups[key_group(word, key_groups)].append((position, word))
    for tuples in groups.values():
        mark = None
        windows: dict[tuple[str, str], dict] = defaultdict(dict)  # (kind, word) -> {window: n}
        timers: set[tuple[float, str]] = set()
        last: dict[str, float] = {}
        for position, word in tuples:
            t = position / 100
            for kind, assigner in assigners.items():
                open_ = windows[(kind, word)]
                for window in assigner.assign(t):
                    if assigner.merging:
                        window, absorbed = merge_windows(list(open_), window)
                        open_[window] = sum(open_.pop(w) for w in absorbed) + 1
                    else:
                        open_[window] = open_.get(window, 0) + 1
            if word in last:
                timers.discard((last[word] + quiet, word))
            last[word] = t
            timers.add((t + quiet, word))
            if mark is not None and t <= mark:
                continue
            mark = t
            due = {(at, w) for at, w in timers if at <= mark}
            timers -= due
            rows += [(w, at, -1, "quiet") for at, w in due]
            for (kind, w), open_ in windows.items():
                for window in [x for x in open_ if x.end <= mark]:
                    rows.append((w, window.start, open_.pop(window), kind))
    return sorted(rows)


def word_rows(stream: Iterable[str]) -> Counter:
    """The word count's committed rows in one process: ``(word, i)`` for its ``i``-th
    occurrence.

    >>> sorted(word_rows(["a", "b", "a"]))
    [('a', 1), ('a', 2), ('b', 1)]
    """
    seen: Counter = Counter()
    rows: Counter = Counter()
    for word in stream:
        seen[word] += 1
        rows[(word, seen[word])] += 1
    return rows


def letter_rows(stream: Iterable[str]) -> tuple[Counter, dict[str, int]]:
    """The chained job in one process: its ``(letter, updates)`` rows (one per word of
    the stream) and each letter's final total (the sum of every word count update).

    >>> rows, totals = letter_rows(["ab", "ac", "ab"])
    >>> sorted(rows), totals
    ([('a', 1), ('a', 2), ('a', 3)], {'a': 4})
    """
    rows: Counter = Counter()
    totals: dict[str, int] = {}
    for (word, count), n in word_rows(stream).items():
        letter = word[0]
        totals[letter] = totals.get(letter, 0) + count * n
    updates: Counter = Counter(word[0] for word in stream)
    for letter, n in updates.items():
        rows.update((letter, i) for i in range(1, n + 1))
    return rows, totals
