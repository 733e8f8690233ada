"""Why a topology cannot run, in one line per problem (pure).

What a user looks at (``elastorm status``, ``elastorm cluster status``, the dashboard)
must say at once when a topology cannot run, not only a worker log: the elastic
scheduler refused to place it, its controller refuses it or crashes at start, a
task cannot start (a dependency missing on a worker, say). The readers
(``elastorm.zk.problems``, ``elastorm.runtime.nimbus``) gather plain facts into a
:class:`TopologyFacts`; :func:`problems` decides what to report and
:func:`why_no_status` explains a missing controller status. No I/O, no clock: the
time of the facts is a field of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLACEMENT_REFUSED = "elastorm: cannot be placed elastically"
"""How the elastic scheduler's status (Storm's ``sched_status``) starts when it refused a
topology (``ElasticScheduler.java``); Storm's default scheduling then runs it."""

CONTROLLER = "controller"  # the component elastorm adds (``elastorm.storm.elastic``)
STORM_NEWER = 5.0  # s by which Storm's error must follow elastorm's record to be news
LINE_MAX = 240  # characters of a reason kept in a line
RECENT_SECS = 90.0  # s after which a failure not seen again is an earlier one, not current

_EXCEPTION = re.compile(
    r"^(?!java\.|javax\.|org\.|com\.|clojure\.|Caused by)"
    r"[A-Za-z_][\w.]*(Error|Exception|Exit|Refused|Interrupt)\b(: .*)?$"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class StartFailure:
    """Task ``task`` of ``component`` failed to start ``count`` times, last at ``at``
    (wall clock, s) because of ``reason`` (what its bolt recorded before it died)."""

    component: str
    task: int
    count: int
    reason: str
    at: float

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a start failure counts at least 1, got {self.count}")


@dataclass(frozen=True, kw_only=True, slots=True)
class StormError:
    """The errors Storm keeps for ``component`` (Nimbus ``getTopologyInfo``: its last ten),
    ``count`` of them, the newest ``text`` at ``at`` (wall clock, s)."""

    component: str
    count: int
    text: str
    at: float


@dataclass(frozen=True, kw_only=True, slots=True)
class TopologyFacts:
    """What the readers found about ``topology`` at ``now``.

    ``on_storm``: whether Nimbus runs a topology of that name (None: Nimbus not asked or
    not answering); ``storm_status``, ``sched_status``, ``uptime_secs`` and
    ``storm_errors`` are Nimbus's for it. ``elastic_state``: whether ZooKeeper holds
    elastorm znodes of it; ``refusal``: why its controller refuses it
    (``controller/refused``); ``start_failures``: tasks' recorded failed starts;
    ``statuses``: the operators with a controller status; ``controller_alive``: a
    controller leads it.
    """

    topology: str
    now: float
    on_storm: bool | None = None
    storm_status: str = ""
    sched_status: str = ""
    uptime_secs: int | None = None
    storm_errors: tuple[StormError, ...] = ()
    elastic_state: bool = False
    refusal: str | None = None
    start_failures: tuple[StartFailure, ...] = ()
    statuses: tuple[str, ...] = ()
    controller_alive: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One reason ``topology`` cannot run (or could not, ``seconds_ago``), in one line."""

    where: str  # "scheduler", "controller" or a component's name
    line: str
    seconds_ago: float | None = None

    @property
    def current(self) -> bool:
        """Whether it still holds: undated (a refusal stands while it is there), or seen
        within ``RECENT_SECS`` (a crash loop keeps failing; one crash recovered from ages)."""
        return self.seconds_ago is None or self.seconds_ago <= RECENT_SECS


def one_line(text: str) -> str:
    """The line of an error that says what happened: the last Python exception line of
    a traceback (``ModuleNotFoundError: No module named 'x'``), else the first line;
    at most ``LINE_MAX`` characters.

    >>> one_line("java.lang.RuntimeException: boom\\nTraceback (most recent call last):\\n"
    ...          "  File \\"x.py\\", line 1\\nImportError: no foo\\n\\tat org.Foo(Foo.java:1)")
    'ImportError: no foo'
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "(no detail)"
    found = [ln for ln in lines if _EXCEPTION.match(ln)]
    line = found[-1] if found else lines[0]
    return line if len(line) <= LINE_MAX else line[: LINE_MAX - 3] + "..."


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def problems(facts: TopologyFacts) -> tuple[Problem, ...]:
    """Every reason the topology cannot run, one :class:`Problem` each, most serious first:
    placement refused, controller refusing, failed starts per component (tasks and
    count summed, the newest reason), then Storm's errors of components elastorm
    recorded nothing newer for (a failure before elastorm's code ran: a module missing
    on a worker, a crash Storm saw)."""
    out: list[Problem] = []
    if facts.sched_status.startswith(PLACEMENT_REFUSED):
        out.append(Problem(where="scheduler", line=facts.sched_status.removeprefix("elastorm: ")))
    if facts.refusal:
        out.append(Problem(where=CONTROLLER, line=f"the controller cannot run it: {facts.refusal}"))
    newest: dict[str, float] = {}
    by_component: dict[str, list[StartFailure]] = {}
    for f in facts.start_failures:
        by_component.setdefault(f.component, []).append(f)
    for component, failures in sorted(by_component.items()):
        last = max(failures, key=lambda f: (f.at, f.task))
        newest[component] = last.at
        tasks = ", ".join(str(f.task) for f in sorted(failures, key=lambda f: f.task))
        which = f"task {tasks}" if len(failures) == 1 else f"tasks {tasks}"
        count = sum(f.count for f in failures)
        out.append(
            Problem(
                where=component,
                line=f"{component} {which} failed to start {_times(count)}, last "
                f"{_ago(facts.now - last.at)}: {one_line(last.reason)}",
                seconds_ago=max(0.0, facts.now - last.at),
            )
        )
    for err in sorted(facts.storm_errors, key=lambda e: e.component):
        if err.count < 1 or err.at < newest.get(err.component, -float("inf")) + STORM_NEWER:
            continue
        out.append(
            Problem(
                where=err.component,
                line=f"{err.component}: Storm reported {_times(err.count)} an error, last "
                f"{_ago(facts.now - err.at)}: {one_line(err.text)}",
                seconds_ago=max(0.0, facts.now - err.at),
            )
        )
    return tuple(out)


def why_no_status(facts: TopologyFacts) -> str:
    """Why no controller status of ``facts.topology`` can be read, in one line: the
    controller's own reason if it gave one, else what the facts allow (not submitted,
    killed, not elastic, not started yet), with the most serious problem found."""
    name = facts.topology
    found = [p for p in problems(facts) if p.current]
    if found:
        return f"{name} cannot run: {found[0].line}"
    up = f" (up {facts.uptime_secs} s)" if facts.uptime_secs is not None else ""
    if facts.on_storm is False and not facts.elastic_state:
        return (
            f"Nimbus runs no topology {name} and ZooKeeper holds no elastorm state of it: "
            "not submitted, or under another name (the run's name is sparse submit's -N)"
        )
    if facts.on_storm is False:
        return (
            f"Nimbus runs no topology {name} (killed?); ZooKeeper still holds its "
            f"elastorm state (`elastorm forget --topology {name}` deletes it)"
        )
    if not facts.elastic_state:
        return (
            f"{name} has written no elastorm state{up}: not an elastic topology "
            "(no keyed bolt), or its workers have not started yet"
        )
    if facts.storm_status and facts.storm_status != "ACTIVE":
        return f"{name} is {facts.storm_status} on Storm{up}"
    return (
        f"the controller of {name} has not published a status yet{up}: workers take up to "
        "a minute or two to start"
    )
