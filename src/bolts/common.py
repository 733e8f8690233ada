"""Helpers shared by the flights job's spout and bolts.

Every component writes its counters (tuples in, tuples out per stream, errors by
reason) as a small JSON file, ``<output_dir>/counts/<component>-<task>.json``,
replaced atomically (write a temporary file, then ``os.replace``) so a runner
polling the directory never reads half a file. Files are written on each tick
tuple and, as a fallback when ticks are not configured, every
``COUNTS_CHECK_EVERY`` tuples once ``elastorm.counts_interval_secs`` has passed;
never once per tuple.

Reliability: the flights job of issue 2 emits without tuple ids (no acking, no
replay). Bolts still ack each input because Storm's ``ShellBolt`` keeps every
input tuple in a map until the Python side acks or fails it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from streamparse import Bolt

from demos.options import EXAMPLE_SECTIONS, FlightsOptions
from elastorm.config import ConfigError, Section, TopologyConfig, check_conf
from elastorm.files import write_json_atomic  # noqa: F401 (re-exported)

OUTPUT_DIR_KEY = TopologyConfig.key("output_dir")
COUNTS_CHECK_EVERY = 4096  # tuples between clock reads when no tick arrives

ERRORS_STREAM = "errors"
ERROR_FIELDS = ["id", "role", "reason", "detail"]
DETAIL_MAX_CHARS = 200


def required_output_dir(conf: Mapping[str, Any] | TopologyConfig) -> str:
    """Return ``elastorm.output_dir`` of a Storm conf (or its parsed config) as an
    absolute path.

    Raises ``ConfigError`` naming the key when it is missing or empty.
    """
    config = conf if isinstance(conf, TopologyConfig) else TopologyConfig.from_conf(conf)
    if not config.output_dir:
        raise ConfigError(
            f"{OUTPUT_DIR_KEY} is not set in the topology config: set it to an absolute "
            "directory where the components write their counters and results "
            f"(e.g. sparse submit -o {OUTPUT_DIR_KEY}=/tmp/flights-out)"
        )
    return os.path.abspath(config.output_dir)


def component_identity(context: Mapping[str, Any]) -> tuple[str, int]:
    """Return ``(component id, task id)`` from Storm's multilang context."""
    task = context.get("taskid", 0)
    component = context.get("componentid")
    if component is None:  # Storm before 0.10 only had the task->component map
        component = context.get("task->component", {}).get(str(task), "unknown")
    return str(component), int(task)


def error_detail(value: Any) -> str:
    """Shorten ``value`` to a one-line string fit for the errors stream."""
    text = value if isinstance(value, str) else repr(value)
    return text[:DETAIL_MAX_CHARS]


class Counters:
    """Per-task counters of one component, written to its counts file.

    ``out`` maps stream -> tuples emitted, ``errors`` maps reason -> count and
    ``extra`` holds component-specific fields (the spout's progress, op1's
    pending sample). Hot paths increment the attributes directly.
    """

    __slots__ = (
        "path",
        "role",
        "component",
        "task",
        "tuples_in",
        "out",
        "errors",
        "extra",
        "interval",
        "clock",
        "next_write",
    )

    def __init__(
        self,
        output_dir: str,
        role: str,
        component: str,
        task: int,
        *,
        streams: tuple[str, ...] = ("default",),
        interval: float = TopologyConfig().counts_interval_secs,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        counts_dir = os.path.join(output_dir, "counts")
        os.makedirs(counts_dir, exist_ok=True)
        self.path = os.path.join(counts_dir, f"{component}-{task}.json")
        self.role = role
        self.component = component
        self.task = task
        self.tuples_in = 0
        self.out: dict[str, int] = dict.fromkeys(streams, 0)
        self.errors: dict[str, int] = {}
        self.extra: dict[str, Any] = {}
        self.interval = interval
        self.clock = clock
        self.next_write = clock() + interval

    @classmethod
    def from_conf(
        cls,
        conf: Mapping[str, Any],
        context: Mapping[str, Any],
        role: str,
        *,
        streams: tuple[str, ...] = ("default",),
        clock: Callable[[], float] = time.monotonic,
    ) -> Counters:
        """The counters of the task ``context`` names, in ``elastorm.output_dir``."""
        component, task = component_identity(context)
        config = TopologyConfig.from_conf(conf)
        return cls(
            required_output_dir(config),
            role,
            component,
            task,
            streams=streams,
            interval=config.counts_interval_secs,
            clock=clock,
        )

    def error(self, reason: str, n: int = 1) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + n

    def snapshot(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "component": self.component,
            "task": self.task,
            "pid": os.getpid(),
            "written_at": time.time(),
            "tuples_in": self.tuples_in,
            "out": dict(self.out),
            "errors": dict(self.errors),
            "extra": dict(self.extra),
        }

    def write(self) -> None:
        write_json_atomic(self.path, self.snapshot())
        self.next_write = self.clock() + self.interval

    def maybe_write(self) -> None:
        if self.clock() >= self.next_write:
            self.write()


class ErrorReporting:
    """Mixin for a spout or bolt that has ``role``, ``counters`` and ``emit``."""

    def emit_error(self, tuple_id: Any, reason: str, detail: Any) -> None:
        """Count an error and report it on the ``errors`` stream (never drop silently)."""
        counters = self.counters
        counters.error(reason)
        counters.out[ERRORS_STREAM] += 1
        self.emit([tuple_id, self.role, reason, error_detail(detail)], stream=ERRORS_STREAM)


class CountingBolt(ErrorReporting, Bolt):
    """Base of the flights bolts: config, counters, tick handling.

    Subclasses set ``role`` and ``streams`` and implement ``handle(tup)``; they may
    override ``setup(conf)`` (after the counters exist) and ``on_tick()`` (before
    the counters are written). Tuples are unanchored (no acking in issue 2).
    """

    role = "bolt"
    streams: tuple[str, ...] = ("default",)
    auto_anchor = False
    auto_ack = True  # ShellBolt holds every input until acked: always ack
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def initialize(self, conf, context):
        self.output_dir = required_output_dir(conf)
        self.counters = Counters.from_conf(
            conf, context, self.role, streams=self.streams, clock=self.clock
        )
        self.setup(conf)
        self.counters.write()

    def setup(self, conf: Mapping[str, Any]) -> None:
        """Read component-specific config; called once from ``initialize``."""

    def on_tick(self) -> None:
        """Periodic work (flush batched output); called on every tick tuple."""

    def handle(self, tup) -> None:
        raise NotImplementedError

    def process(self, tup):
        counters = self.counters
        counters.tuples_in += 1
        self.handle(tup)
        if not counters.tuples_in % COUNTS_CHECK_EVERY:
            self.on_tick()
            counters.maybe_write()

    def process_tick(self, tup):
        self.on_tick()
        self.counters.write()


TICK_SECS = 1


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """An integer setting from the environment at submit time, validated."""
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {raw!r}")
    return value


def topology_config(*sections: Section) -> dict[str, Any]:
    """A topology's ``config``: 1 s ticks plus the conf of ``sections``.

    The sections are built (so checked) when the topology module is loaded, by
    ``sparse submit`` and the drivers: a bad option fails at submit, not in a
    worker; ``check_conf`` then checks the whole dict once more.
    """
    config: dict[str, Any] = {"topology.tick.tuple.freq.secs": TICK_SECS}
    for s in sections:
        config.update(s.to_conf())
    return check_conf(config, *EXAMPLE_SECTIONS)


def flights_topology_config(**elastorm: Any) -> dict[str, object]:
    """Topology config of the flights jobs: 1 s ticks, ``elastorm`` (``TopologyConfig``
    fields), plus output dir and row limit from ``ELASTORM_OUTPUT_DIR`` /
    ``ELASTORM_FLIGHTS_LIMIT`` when set at submit."""
    if os.environ.get("ELASTORM_OUTPUT_DIR"):
        elastorm["output_dir"] = os.path.abspath(os.environ["ELASTORM_OUTPUT_DIR"])
    flights = FlightsOptions(limit=os.environ.get("ELASTORM_FLIGHTS_LIMIT") or None)
    return topology_config(TopologyConfig(**elastorm), flights)
