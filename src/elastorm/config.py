"""elastorm's topology options: one typed, frozen object, each option declared once.

Flink's ``ConfigOptions`` and Kafka's ``ConfigDef`` style: every option is a
dataclass field made by :func:`option`, which carries its Storm conf key, its kind
(how a conf value is parsed), its default, its check and a one-line doc. From those
declarations come

* :meth:`Section.from_conf`: parse and validate a Storm conf (values may be strings,
  as ``sparse submit -o`` passes them); a bad value raises :class:`ConfigError`
  naming the key, the value and what is allowed; an unknown key under a namespace
  the section owns is an error with a did-you-mean;
* :meth:`Section.to_conf`: the conf that goes to Storm (round-trips through
  ``from_conf``);
* :func:`check_conf`: the submit-time check of a whole topology conf, where *every*
  ``elastorm.*`` key must belong to elastorm's own options or to a given section;
* :func:`options_table`: the README's option tables.

:class:`TopologyConfig` holds elastorm's own options (a ``controller`` section
inside); a project's jobs declare their own small sections with the same helper
(this repository's demo jobs: ``src/demos/options.py``); :class:`ProjectConfig` is the
project's own ``config.json`` ``elastorm`` section (Storm version, home, ports,
supervisors), read by ``elastorm.runtime.config``. Pure: no Storm, no ZooKeeper.

>>> TopologyConfig.from_conf({"elastorm.key_groups": "8"}).key_groups
8
>>> TopologyConfig(key_groups=8).to_conf()["elastorm.key_groups"]
8
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, ClassVar, Self

PREFIX = "elastorm."
STRATEGIES = ("none", "baseline", "even", "correlated", "ring")
REPLICATION_PLANNERS = ("dp", "greedy", "structure_aware")
ENCODINGS = ("json", "msgpack")  # pystorm's serializers, streamparse_run -s
CHAOS_DROP_ON = ("emitter", "spout")  # elastorm.chaos.drop_on: whose emits are lost
SINK_STORES = ("sqlite", "postgres")  # elastorm.sinks.store
DURABLE_SCHEDULES = ("none", "peace")  # elastorm.durable.schedule


class ConfigError(ValueError):
    """A topology option is unknown, of the wrong type or out of range (one line)."""


# -- kinds: how a conf value is parsed ------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """How to read one option from a Storm conf value.

    ``parse`` returns the typed value or raises ``ValueError``/``TypeError``;
    ``name`` is what the README's table and the error messages call it.
    """

    name: str
    parse: Callable[[Any], Any]


def _int(raw: Any) -> int:
    if isinstance(raw, bool) or isinstance(raw, float) and not raw.is_integer():
        raise TypeError
    return int(raw)


def _float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypeError
    value = float(raw)
    if math.isnan(value):
        raise ValueError
    return value


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise TypeError


def _str(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise TypeError
    return raw


def _json_int(raw: Any) -> int:
    """An integer as JSON writes it (config.json: no strings, no true/false)."""
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise TypeError
    return raw


def _path(raw: Any) -> Path:
    return raw if isinstance(raw, Path) else Path(_str(raw))


def _node_shares(raw: Any) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        raise TypeError
    return {str(node): _float(share) for node, share in raw.items()}


def _node_zones(raw: Any) -> dict[str, str]:
    if isinstance(raw, str):  # Storm may hand a map over as JSON text
        raw = json.loads(raw)
    if not isinstance(raw, Mapping):
        raise TypeError
    return {_str(node): _str(zone) for node, zone in raw.items()}


def _node_lists(raw: Any) -> dict[str, tuple[int, ...]]:
    if not isinstance(raw, Mapping):
        raise TypeError
    out = {}
    for operator, nodes in raw.items():
        if isinstance(nodes, str | bytes) or not isinstance(nodes, Iterable):
            raise TypeError
        out[str(operator)] = tuple(_int(n) for n in nodes)
    return out


def _operator_emitters(raw: Any) -> dict[str, tuple[str, ...]]:
    if isinstance(raw, str):  # Storm may hand a map over as JSON text
        raw = json.loads(raw)
    if not isinstance(raw, Mapping):
        raise TypeError
    out = {}
    for operator, emitters in raw.items():
        if isinstance(emitters, str | bytes) or not isinstance(emitters, Iterable):
            raise TypeError
        out[str(operator)] = tuple(_str(e) for e in emitters)
    return out


def _names(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):  # Storm may hand a list over as JSON text, or one name
        raw = json.loads(raw) if raw.startswith("[") else [raw]
    if isinstance(raw, bytes) or not isinstance(raw, Iterable):
        raise TypeError
    return tuple(_str(n) for n in raw)


INT = Kind("integer", _int)
JSON_INT = Kind("integer", _json_int)
PATH = Kind("path", _path)
FLOAT = Kind("number", _float)
BOOL = Kind("true/false", _bool)
STR = Kind("string", _str)
NODE_SHARES = Kind("{node: share}", _node_shares)
NODE_LISTS = Kind("{operator: [node index, ...]}", _node_lists)
NODE_ZONES = Kind("{node: zone}", _node_zones)
OPERATOR_EMITTERS = Kind("{keyed operator: [emitter component, ...]}", _operator_emitters)
NAMES = Kind("[name, ...]", _names)
EMITTER_SOURCES = Kind("{emitter component: [replayable spout, ...]}", _operator_emitters)
SPOUT_LINKS = Kind("{replayable spout: emitter component}", _node_zones)
ROUTER_SOURCES = Kind("{keyed operator: [component feeding its router, ...]}", _operator_emitters)
CONFIRMED_OUTPUTS = Kind("{keyed operator: [consumer:stream, ...]}", _operator_emitters)


# -- checks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """A condition on a parsed value; ``allowed`` says it in words (README, errors)."""

    allowed: str
    ok: Callable[[Any], bool]
    whole: bool = False  # ``allowed`` says the type too (choices, mappings)


def at_least(low: float) -> Check:
    """``value >= low``."""
    return Check(f">= {low:g}", lambda v: v >= low)


def above(low: float) -> Check:
    """``value > low``."""
    return Check(f"> {low:g}", lambda v: v > low)


def between(low: int, high: int) -> Check:
    """``low <= value <= high``."""
    return Check(f"in {low}..{high}", lambda v: low <= v <= high)


def port() -> Check:
    """A TCP port elastorm may take: 1024..65000 (above the privileged ones, below
    the ephemeral range's top)."""
    return Check("a port in 1024..65000", lambda v: 1024 <= v <= 65000, whole=True)


def identifier() -> Check:
    """An SQL identifier elastorm may put in a statement unquoted: ``[A-Za-z_][A-Za-z0-9_]*``."""
    return Check(
        "an SQL name ([A-Za-z_][A-Za-z0-9_]*)",
        lambda v: v.isascii() and v.replace("_", "a").isalnum() and not v[0].isdigit(),
        whole=True,
    )


def share() -> Check:
    """``0 <= value <= 1``."""
    return Check("in [0, 1]", lambda v: 0 <= v <= 1)


def one_of(*choices: str) -> Check:
    """``value`` is one of ``choices``."""
    return Check("one of " + "|".join(choices), lambda v: v in choices, whole=True)


def shares_below_one() -> Check:
    """Every node's share in ``[0, 1)``."""
    return Check(
        "{node: share in [0, 1)}", lambda v: all(0 <= s < 1 for s in v.values()), whole=True
    )


def node_indices() -> Check:
    """Every operator names at least one node index, each >= 0."""
    return Check(
        "{operator: [node index >= 0, ...]} (non-empty lists)",
        lambda v: all(nodes and min(nodes) >= 0 for nodes in v.values()),
        whole=True,
    )


# -- options and sections -------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One declared option: conf key, kind, default, check, doc."""

    key: str
    kind: Kind
    default: Any
    doc: str
    check: Check | None = None
    optional: bool = False  # None allowed (and the default when unset)

    @property
    def allowed(self) -> str:
        """What is allowed, in words."""
        if self.check is not None and self.check.whole:
            text = self.check.allowed
        else:
            name = self.kind.name
            text = name if not name[0].isalpha() or "/" in name else f"{_article(name)} {name}"
            if self.check is not None:
                text += f" {self.check.allowed}"
        return text + (" (or unset)" if self.optional else "")

    def parse(self, raw: Any) -> Any:
        """The typed value of ``raw``; raises ``ConfigError`` naming key, value and rule."""
        if self.optional and (raw is None or raw == ""):
            return None
        try:
            value = self.kind.parse(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.key} = {raw!r}: expected {self.allowed}") from None
        if self.check is not None and not self.check.ok(value):
            raise ConfigError(f"{self.key} = {raw!r}: expected {self.allowed}")
        return value

    def render(self, value: Any) -> Any:
        """``value`` as a Storm conf (JSON) value."""
        if isinstance(value, Mapping):
            return {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
        if isinstance(value, PurePath):
            return str(value)
        return value


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def option(
    key: str,
    kind: Kind,
    default: Any,
    doc: str,
    *,
    check: Check | None = None,
    optional: bool = False,
) -> Any:
    """Declare one option as a dataclass field (the only place it is written down)."""
    opt = Option(key, kind, default, doc, check, optional)
    if isinstance(default, Mapping):
        return field(default_factory=lambda: dict(default), metadata={"option": opt})
    return field(default=default, metadata={"option": opt})


def section(cls: type[Section]) -> Any:
    """Declare a nested section (built with its defaults unless given)."""
    return field(default_factory=cls, metadata={"section": cls})


def _namespace(key: str) -> str:
    """``elastorm.<first segment>`` of a key."""
    return ".".join(key.split(".")[:2])


@dataclass(frozen=True, kw_only=True)
class Section:
    """Base of a frozen options section: fields made by :func:`option` or :func:`section`.

    Built directly (``TopologyConfig(key_groups=8)``) or from a conf; either way
    every value is parsed and checked, so an instance always holds valid options.
    """

    registry: ClassVar[list[type[Section]]] = []  # a topology conf's sections

    def __init_subclass__(cls, *, topology: bool = True, **kwargs: Any) -> None:
        """Register a topology conf's section (``topology=False``: another file's, such
        as config.json's, whose keys a topology conf never holds)."""
        super().__init_subclass__(**kwargs)
        if topology:
            Section.registry.append(cls)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            opt = f.metadata.get("option")
            if opt is not None:
                object.__setattr__(self, f.name, opt.parse(getattr(self, f.name)))
        self.validate()

    def validate(self) -> None:
        """Checks across options (override; raise ``ConfigError``)."""

    @classmethod
    def options(cls) -> list[Option]:
        """Every option of this section and its nested sections, in declaration order."""
        out: list[Option] = []
        for f in dataclasses.fields(cls):
            if "option" in f.metadata:
                out.append(f.metadata["option"])
            elif "section" in f.metadata:
                out.extend(f.metadata["section"].options())
        return out

    @classmethod
    def key(cls, name: str) -> str:
        """The conf key of field ``name`` (for messages: ``TopologyConfig.key("key_groups")``)."""
        for f in dataclasses.fields(cls):
            if f.name == name and "option" in f.metadata:
                return f.metadata["option"].key
        raise KeyError(name)

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` falls in a namespace this section declares options in."""
        return _namespace(key) in {_namespace(o.key) for o in cls.options()}

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> Self:
        """Parse and validate this section's options from a Storm conf.

        Keys this section does not declare are ignored unless they fall in one of
        its namespaces: then they are a ``ConfigError`` with a did-you-mean.
        """
        known = {o.key for o in cls.options()}
        for key in sorted(k for k in conf if isinstance(k, str)):
            if key not in known and key.startswith(PREFIX) and cls.owns(key):
                raise unknown_key(key, known)
        return cls._build(conf)

    @classmethod
    def _build(cls, conf: Mapping[str, Any]) -> Self:
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if "section" in f.metadata:
                values[f.name] = f.metadata["section"]._build(conf)
            elif "option" in f.metadata and f.metadata["option"].key in conf:
                values[f.name] = conf[f.metadata["option"].key]
        return cls(**values)

    @classmethod
    def overrides(cls, **values: Any) -> dict[str, Any]:
        """The conf of just ``values`` (field name -> value), each parsed and checked:
        what a driver passes with ``sparse submit -o`` over a topology's own config.

        >>> TopologyConfig.overrides(key_groups="8")
        {'elastorm.key_groups': 8}
        """
        declared = {
            f.name: f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata
        }
        out: dict[str, Any] = {}
        for name, value in values.items():
            if name not in declared:
                raise ConfigError(f"{cls.__name__} has no option {name!r}")
            opt = declared[name]
            out[opt.key] = opt.render(opt.parse(value))
        return out

    def to_conf(self, *, changed_only: bool = False) -> dict[str, Any]:
        """The Storm conf of these options (``None`` values left out); with
        ``changed_only``, only the options that differ from their defaults."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if "section" in f.metadata:
                out.update(value.to_conf(changed_only=changed_only))
            elif "option" in f.metadata and value is not None:
                opt = f.metadata["option"]
                if not (changed_only and value == opt.default):
                    out[opt.key] = opt.render(value)
        return out


def unknown_key(key: str, known: Iterable[str]) -> ConfigError:
    """The error for an unknown ``elastorm.*`` key, with the closest known key."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return ConfigError(f"unknown option {key}{hint}")


# -- elastorm's own options -----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ControllerConfig(Section):
    """``elastorm.controller.*``: the controller loop (Madsen & Zhou 2015, sections 4 and 6;
    Kumbhare et al. 2015's thresholds, section VI).

    Without any of them the controller only carries out requests (``elastorm migrate``).
    """

    p: ClassVar[str] = "elastorm.controller."
    strategy: str = option(
        p + "strategy", STR, "none",
        "checkpoint allocation; `none` keeps the start-up holders; `ring`: on the owner's "
        "successor on a consistent-hashing ring (Kumbhare et al. 2015)",
        check=one_of(*STRATEGIES),
    )  # fmt: skip
    adapt: bool = option(p + "adapt", BOOL, False, "plan load-balancing migrations")
    warmup_secs: float = option(
        p + "warmup_secs", FLOAT, 30.0,
        "seconds of statistics, from the first input, before the first allocation",
        check=at_least(0),
    )  # fmt: skip
    window: int = option(
        p + "window", INT, 60, "samples in the sliding correlation", check=at_least(2)
    )
    sample_secs: float = option(
        p + "sample_secs", FLOAT, 5.0, "seconds between correlation samples", check=at_least(0)
    )
    settle_secs: float = option(
        p + "settle_secs", FLOAT, 10.0,
        "first seconds of input left out of the correlation (start-up transient)",
        check=at_least(0),
    )  # fmt: skip
    defer_secs: float = option(
        p + "defer_secs", FLOAT, 10.0,
        "how long a checkpoint-assisted move waits for its target's first checkpoint",
        check=at_least(0),
    )  # fmt: skip
    theta: float = option(
        p + "theta", FLOAT, 0.0, "score drift that triggers re-optimisation", check=at_least(0)
    )
    epsilon: float | None = option(
        p + "epsilon", FLOAT, None,
        "slack of Algorithm 3's constraint 2 (`correlated`): a node's checkpoint load "
        "stays within (1 + epsilon) times the mean; unset: no bound, as in the paper's runs",
        check=at_least(0), optional=True,
    )  # fmt: skip
    reallocate_secs: float = option(
        p + "reallocate_secs", FLOAT, 30.0,
        "seconds between re-optimisations of the checkpoint allocation (`correlated`) "
        "or re-applications of the ring (`ring`)",
        check=above(0),
    )  # fmt: skip
    recover_lost: bool = option(
        p + "recover_lost", BOOL, True,
        "restore a lost task's key groups from their checkpoints as soon as it is declared "
        "lost; false: only once Storm restarts the task (Storm's way, slower)",
    )  # fmt: skip
    liveness_connections: bool = option(
        p + "liveness_connections", BOOL, True,
        "keyed tasks hold a TCP connection to the controller, so a dead process is "
        "declared lost in milliseconds; false: only by its ZooKeeper session timeout",
    )  # fmt: skip
    standbys: int = option(
        p + "standbys", INT, 1, "controller tasks beyond the leader, each waiting to take "
        "over when the leader's ZooKeeper session ends (read when the topology is wired: "
        "set it in the topology's config); 0: one controller, restarted by Storm (slow)",
        check=at_least(0),
    )  # fmt: skip
    watchdog_secs: float = option(
        p + "watchdog_secs", FLOAT, 120.0,
        "a controller task that has handled no tuple for this long (it gets a tick every "
        "second) is hung: it writes its threads' stacks and exits, so Storm restarts it "
        "and a standby leads; 0: never",
        check=at_least(0),
    )  # fmt: skip
    seed: int = option(p + "seed", INT, 0, "seed of the allocation's random choices")
    round_secs: float = option(
        p + "round_secs", FLOAT, 1.0, "seconds between controller rounds", check=above(0)
    )
    correlation_artifact: str | None = option(
        p + "correlation_artifact", STR, None,
        "path of the Spark correlation artifact used as a prior",
        optional=True,
    )  # fmt: skip
    prior_weight: float | None = option(
        p + "prior_weight", FLOAT, None,
        "weight of the prior in samples (unset: `window`)",
        check=at_least(0), optional=True,
    )  # fmt: skip
    cpu_high: float = option(
        p + "cpu_high", FLOAT, 0.8, "CPU share above which a node is overloaded", check=share()
    )
    cpu_low: float = option(
        p + "cpu_low", FLOAT, 0.5, "CPU share below which a node can take load", check=share()
    )
    queue_high: float = option(
        p + "queue_high", FLOAT, 100.0, "queue length above which a node is overloaded",
        check=at_least(0),
    )  # fmt: skip
    queue_low: float = option(
        p + "queue_low", FLOAT, 10.0, "queue length below which a node can take load",
        check=at_least(0),
    )  # fmt: skip
    cooldown_secs: float = option(
        p + "cooldown_secs", FLOAT, 30.0,
        "seconds a moved key group or changed node is left alone",
        check=at_least(0),
    )  # fmt: skip
    max_moves: int = option(
        p + "max_moves", INT, 16, "migrations planned per round at most", check=at_least(0)
    )
    scale_in: bool = option(p + "scale_in", BOOL, True, "empty under-loaded nodes")
    lazy_move: bool = option(
        p + "lazy_move", BOOL, False,
        "a move whose target holds no checkpoint of its key group first makes the target "
        "its holder, waits for that full checkpoint, then runs CPA (Madsen & Zhou 2015's "
        "lazy move); false: it goes direct at once",
    )  # fmt: skip
    max_concurrent_migrations: int = option(
        p + "max_concurrent_migrations", INT, 4,
        "migrations a rescale runs at once (never two sharing a source or target task)",
        check=at_least(1),
    )  # fmt: skip
    replication_budget: int = option(
        p + "replication_budget", INT, 0,
        "keyed tasks that get an active replica (Su & Zhou 2016), chosen to keep the most "
        "Output Fidelity; 0: none",
        check=at_least(0),
    )  # fmt: skip
    replication_planner: str = option(
        p + "replication_planner", STR, "structure_aware",
        "which tasks get the replicas: `dp` (optimal, slow for big budgets), `greedy` or "
        "`structure_aware`",
        check=one_of(*REPLICATION_PLANNERS),
    )  # fmt: skip
    replan_secs: float = option(
        p + "replan_secs", FLOAT, 30.0,
        "seconds between replication plans from the current rates",
        check=above(0),
    )  # fmt: skip
    replan_min_gain: float = option(
        p + "replan_min_gain", FLOAT, 0.05,
        "a new replication plan replaces the current one only if its predicted Output "
        "Fidelity is higher by more than this (hysteresis: near-equal rates do not move "
        "replicas back and forth)",
        check=at_least(0),
    )  # fmt: skip
    join_settle_secs: float = option(
        p + "join_settle_secs", FLOAT, 15.0,
        "seconds after the scheduler binds a node before key groups move onto it "
        "(its tasks restart in their new worker)",
        check=at_least(0),
    )  # fmt: skip

    def validate(self) -> None:
        if not self.cpu_low < self.cpu_high:
            raise ConfigError(
                f"{self.p}cpu_low = {self.cpu_low!r}: expected < "
                f"{self.p}cpu_high ({self.cpu_high!r})"
            )
        if not self.queue_low < self.queue_high:
            raise ConfigError(
                f"{self.p}queue_low = {self.queue_low!r}: expected < "
                f"{self.p}queue_high ({self.queue_high!r})"
            )

    @property
    def active(self) -> bool:
        """Whether the loop has anything to decide (allocation, adaptation or replicas)."""
        return self.adapt or self.strategy != "none" or self.replication_budget > 0

    @property
    def slack(self) -> float:
        """``epsilon`` as the allocation takes it (``math.inf``: no bound)."""
        return math.inf if self.epsilon is None else self.epsilon


DURABLE_SCHEMES = ("file", "hdfs", "webhdfs")  # elastorm.durable.store.BACKENDS


def durable_uri() -> Check:
    """``none``, or a URI of a durable store backend (``file://`` alone: the default dir)."""
    return Check(
        "none, file:// (the default directory), file:///dir, hdfs://host:port/dir or "
        "webhdfs://host:port/dir",
        lambda v: v == "none" or v.split("://", 1)[0] in DURABLE_SCHEMES and "://" in v,
        whole=True,
    )


@dataclass(frozen=True, kw_only=True)
class DurableConfig(Section):
    """``elastorm.durable.*``: the durable checkpoint tier (Kwon et al. 2008): key groups'
    checkpoints also written, asynchronously, to a store that outlives the cluster."""

    p: ClassVar[str] = "elastorm.durable."
    uri: str = option(
        p + "uri", STR, "file://",
        "where durable checkpoints go (each topology in its own directory below it): "
        "`file://` is `<elastorm.home>/durable` on the submitting machine (a shared "
        "mount for a multi-host cluster), `hdfs://namenode:port/dir` HDFS through "
        "WebHDFS; `none` turns the durable tier off. Costs one JSON encoding of every "
        "written checkpoint on the task's writer thread, and the store's I/O",
        check=durable_uri(),
    )  # fmt: skip
    every: int = option(
        p + "every", INT, 1,
        "write every k-th checkpoint of a key group (the ones between are merged into "
        "it): k times fewer writes, a durable copy up to k checkpoint intervals older, "
        "and upstream buffers kept that much longer for a durable restore",
        check=at_least(1),
    )  # fmt: skip
    queue: int = option(
        p + "queue", INT, 64,
        "checkpoints a worker's writer holds before it merges a new one into the oldest "
        "pending one of its key group (the task never waits for the store)",
        check=at_least(1),
    )  # fmt: skip
    compact_deltas: int = option(
        p + "compact_deltas", INT, 20,
        "a key group's next durable checkpoint is a new base after this many deltas "
        "(reading the set back to merge it); fewer: faster restores, more bytes written",
        check=at_least(1),
    )  # fmt: skip
    compact_bytes: int = option(
        p + "compact_bytes", INT, 64 << 20,
        "a key group's next durable checkpoint is a new base once its deltas since the "
        "last base reach this many bytes",
        check=at_least(1),
    )  # fmt: skip
    retain: int = option(
        p + "retain", INT, 1,
        "complete sets kept per key group besides the newest (a fallback when the "
        "newest is found corrupt)",
        check=at_least(0),
    )  # fmt: skip
    retry_max_secs: float = option(
        p + "retry_max_secs", FLOAT, 30.0,
        "a failed write is retried, in order, after 0.5 s doubling up to this",
        check=above(0),
    )  # fmt: skip
    schedule: str = option(
        p + "schedule", STR, "none",
        "`peace`: keyed tasks write to the store in turns (Kwon et al. 2008's Peace): "
        "each durable period (`elastorm.checkpoint_interval_secs` x `every`) is cut "
        "into slots, and a task starts writes only in its own slot, at most "
        "`concurrent_writes` tasks per slot, computed alike by every task from the task "
        "list (no message). Costs up to one durable period more durable lag (so "
        "upstream buffers kept that much longer) and a longer time until all writes are "
        "done; buys faster single writes when many tasks checkpoint at once. `none`: "
        "every task writes as soon as it has a checkpoint (the default until "
        "`bench/peace.py` shows the gain on a store)",
        check=one_of(*DURABLE_SCHEDULES),
    )  # fmt: skip
    concurrent_writes: int = option(
        p + "concurrent_writes", INT, 4,
        "under `schedule = peace`: tasks whose slots are at the same time (the writes "
        "the store takes at once without slowing each down)",
        check=at_least(1),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SinkConfig(Section):
    """``elastorm.sinks.*``: the sinks that commit each output id once (``elastorm.sinks``)."""

    p: ClassVar[str] = "elastorm.sinks."
    store: str = option(
        p + "store", STR, "sqlite",
        "the database of an `elastorm.sinks.Sink`: an embedded SQLite file, or PostgreSQL",
        check=one_of(*SINK_STORES),
    )  # fmt: skip
    sqlite_path: str | None = option(
        p + "sqlite_path", STR, None,
        "the SQLite file of a sink (absolute: a worker's working directory is "
        "temporary); unset: `sink.sqlite` in `elastorm.output_dir`",
        optional=True,
    )  # fmt: skip
    postgres_dsn: str | None = option(
        p + "postgres_dsn", STR, None,
        "libpq connection string of a sink on PostgreSQL, e.g. `host=127.0.0.1 port=15432 "
        "dbname=elastorm user=postgres` (what `elastorm postgres up` prints)",
        optional=True,
    )  # fmt: skip
    batch_rows: int = option(
        p + "batch_rows", INT, 500,
        "outputs a sink task commits in one transaction at most (it also commits what it "
        "has on every tick)",
        check=at_least(1),
    )  # fmt: skip
    commit_attempts: int = option(
        p + "commit_attempts", INT, 5,
        "attempts at one transaction, reconnecting and re-reading the committed ids "
        "between them, before the sink task fails",
        check=at_least(1),
    )  # fmt: skip
    marks_table: str = option(
        p + "marks_table", STR, "elastorm_sink_marks",
        "the table of the output ids each sink has committed, written in the same "
        "transaction as its rows",
        check=identifier(),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class AuthConfig(Section):
    """``elastorm.auth.*``: the topology's secret (``docs/security.md``). The conf holds
    only the files' paths, never a secret (Storm's UI shows the whole conf)."""

    p: ClassVar[str] = "elastorm.auth."
    secret_file: str | None = option(
        p + "secret_file", STR, None,
        "file holding the topology's secret, readable on every host that runs its "
        "workers: elastorm's znodes get ZooKeeper ACLs (anyone reads, only holders of "
        "the secret write) and the controller's commands, migration requests and "
        "liveness hellos are signed with it (HMAC-SHA256); unset: none of this",
        optional=True,
    )  # fmt: skip
    previous_secret_file: str | None = option(
        p + "previous_secret_file", STR, None,
        "while rotating: file of the secret being replaced, still accepted in signatures "
        "and as a ZooKeeper identity (znodes written under it stay writable)",
        optional=True,
    )  # fmt: skip

    def validate(self) -> None:
        if self.previous_secret_file is not None and self.secret_file is None:
            raise ConfigError(f"{self.p}previous_secret_file is set without {self.p}secret_file")


@dataclass(frozen=True, kw_only=True)
class TopologyConfig(Section):
    """Every elastorm topology option (``elastorm.*`` in the topology conf).

    ``from_conf`` is strict over elastorm's own keys: any ``elastorm.<name>`` without
    a further dot, and everything under ``elastorm.controller.`` and
    ``elastorm.zookeeper.``; example jobs' namespaces are checked by their sections.
    """

    key_groups: int = option(
        "elastorm.key_groups", INT, 20,
        "key groups per keyed operator; fixed at submit",
        check=at_least(1),
    )  # fmt: skip
    checkpoint_interval_secs: float = option(
        "elastorm.checkpoint_interval_secs", FLOAT, 5.0,
        "seconds between a task's checkpoints; 0 turns periodic checkpoints off",
        check=at_least(0),
    )  # fmt: skip
    allowed_lateness_secs: float = option(
        "elastorm.allowed_lateness_secs", FLOAT, 0.0,
        "event-time watermark of a key group (keyed bolts with event_time: timers, "
        "state TTL, windows): the largest event time it applied minus this; an event "
        "older than the watermark is late (its windows may have fired). 0 suits sources "
        "in time order (the ready spouts); a window fires this much later",
        check=at_least(0),
    )  # fmt: skip
    idle_timeout_secs: float = option(
        "elastorm.idle_timeout_secs", FLOAT, 0.0,
        "wall-clock seconds after which a key group whose watermark has not moved stops "
        "holding event time back (Flink's withIdleness): a tick moves it up to the "
        "largest watermark of its task's groups, firing the windows and timers that "
        "passes, which a replay does not repeat. 0 (the default) turns it off: event "
        "time then moves only with each group's own tuples, replay-deterministically",
        check=at_least(0),
    )  # fmt: skip
    relay_tasks: int = option(
        "elastorm.relay_tasks", INT, 1,
        "tasks of the JVM relay that carries checkpoints, acks and trims between keyed "
        "tasks and emitters (fields-grouped by sender, so each sender keeps its order); "
        "each may cost a worker slot",
        check=at_least(1),
    )  # fmt: skip
    migration_timeout_secs: float = option(
        "elastorm.migration_timeout_secs", FLOAT, 60.0,
        "after this long an unfinished migration or restore is reported stuck",
        check=above(0),
    )  # fmt: skip
    restore_retry_secs: float = option(
        "elastorm.restore_retry_secs", FLOAT, 10.0,
        "a restore not complete this long after its commands went out is ordered again "
        "at a new epoch, a CPA or CPAL move gets its command again, and a move every "
        "emitter restarted during is stood in for (a command can be lost: Storm drops "
        "messages to a worker until it has reconnected to it, and a restarted emitter "
        "ignores what it missed)",
        check=above(0),
    )  # fmt: skip
    max_buffered: int = option(
        "elastorm.max_buffered", INT, 200_000,
        "tuples an emitter keeps for replay before it parks its further emits (reading "
        "on, so trims still arrive) until a checkpoint trims them; a key group with "
        "max_buffered / (2 x key groups) of them waiting asks its owner for a "
        "checkpoint at once; 0: no bound",
        check=at_least(0),
    )  # fmt: skip
    max_parked: int = option(
        "elastorm.max_parked", INT, 50_000,
        "emits an emitter parks behind a full output buffer while it reads on for "
        "trims (above Storm's 32,768-tuple input queue, so a trim behind a full queue "
        "is reached); beyond it the emitter pauses 1 ms per tuple and Storm's "
        "backpressure holds its input; 0: pause at once",
        check=at_least(0),
    )  # fmt: skip
    stall_secs: float = option(
        "elastorm.stall_secs", FLOAT, 30.0,
        "after this long, tuples parked behind a sequence that never came are reported "
        "(and an emitter waiting for a spout's rewind marker logs it and asks again)",
        check=above(0),
    )  # fmt: skip
    resend_after_secs: float = option(
        "elastorm.resend_after_secs", FLOAT, 1.5,
        "after this long (and again every as long) a keyed task whose tuples are parked "
        "behind a sequence gap asks the emitter that sent them to resend the missing ones "
        "from its output buffer (a tuple lost between live workers); an emitter re-sends "
        "the newest tuple of a lane idle that long once, so a loss at its end shows too "
        "(likewise a linked replayable spout sends its emitter its link numbers this often)",
        check=above(0),
    )  # fmt: skip
    chaos_drop_tuples: int = option(
        "elastorm.chaos.drop_tuples", INT, 0,
        "fault injection, for tests and the chaos harness (like a chaos tool's packet "
        "loss): each emitter task loses this many of its data messages to keyed "
        "operators on the wire (buffered, never sent); 0: off",
        check=at_least(0),
    )  # fmt: skip
    chaos_drop_from: int = option(
        "elastorm.chaos.drop_from", INT, 1_000,
        "the first data message (counted per emitter task from 1) that "
        "`elastorm.chaos.drop_tuples` loses",
        check=at_least(1),
    )  # fmt: skip
    chaos_drop_every: int = option(
        "elastorm.chaos.drop_every", INT, 1,
        "`elastorm.chaos.drop_tuples` loses every this-many-th data message from "
        "`elastorm.chaos.drop_from` on (1: one burst)",
        check=at_least(1),
    )  # fmt: skip
    chaos_drop_on: str = option(
        "elastorm.chaos.drop_on", STR, "emitter",
        "which messages `elastorm.chaos.drop_tuples` loses: `emitter` (an emitter's "
        "data messages to keyed operators) or `spout` (a replayable spout's rows to "
        "the emitter it feeds by task, `elastorm.replay_links`; counted per spout task)",
        check=one_of(*CHAOS_DROP_ON),
    )  # fmt: skip
    initial_nodes: Mapping[str, tuple[int, ...]] = option(
        "elastorm.initial_nodes", NODE_LISTS, {},
        "nodes an operator's key groups start on (default: all, round robin)",
        check=node_indices(),
    )  # fmt: skip
    external_load: Mapping[str, float] = option(
        "elastorm.external_load", NODE_SHARES, {},
        "background CPU share per node, added to its measured CPU",
        check=shares_below_one(),
    )  # fmt: skip
    fault_zones: Mapping[str, str] = option(
        "elastorm.fault_zones", NODE_ZONES, {},
        "fault zone per logical node (`node0`, ...): no key group's checkpoint is held "
        "in its owner's zone; a node not named is a zone of its own (one per supervisor)",
    )  # fmt: skip
    elastic_scheduling: bool = option(
        "elastorm.elastic_scheduling", BOOL, True,
        "place the keyed operators with elastorm's scheduler (one task per node); false: "
        "Storm's default scheduler",
    )  # fmt: skip
    heartbeats: bool = option(
        "elastorm.heartbeats", BOOL, True, "keyed tasks publish heartbeats to ZooKeeper"
    )
    output_dir: str | None = option(
        "elastorm.output_dir", STR, None,
        "absolute directory for counters, results and controller metrics",
        optional=True,
    )  # fmt: skip
    restore_from: str | None = option(
        "elastorm.restore_from", STR, None,
        "start from a savepoint in the topology's durable store (``elastorm savepoint``), "
        "or ``latest``: the newest durable sets of the most recent submission, taken as "
        "a savepoint named latest-<time> before submitting (restore_options; with sparse "
        "submit, run elastorm savepoint and use its name instead); keyed state, "
        "output counters and source positions continue from it",
        optional=True,
    )  # fmt: skip
    counts_interval_secs: float = option(
        "elastorm.counts_interval_secs", FLOAT, 1.0,
        "seconds between writes of a component's counters",
        check=at_least(0),
    )  # fmt: skip
    operators: Mapping[str, tuple[str, ...]] = option(
        "elastorm.operators", OPERATOR_EMITTERS, {},
        "each keyed operator and the components that emit to it; set by ElasticTopology",
    )  # fmt: skip
    confirmed_outputs: Mapping[str, tuple[str, ...]] = option(
        "elastorm.confirmed_outputs", CONFIRMED_OUTPUTS, {},
        "each keyed operator's streams with output ids whose consumers confirm them (a "
        "sink once committed, the router before a keyed bolt once that bolt's checkpoint "
        "covers them), as `consumer:stream`; its tasks keep those outputs until confirmed "
        "(`elastorm.core.outbox`); set by ElasticTopology",
    )  # fmt: skip
    release_outputs_on_copy: bool = option(
        "elastorm.release_outputs_on_copy", BOOL, False,
        "a keyed task holds each output on a stream whose consumers confirm (a sink, "
        "the router before another keyed bolt) until a copy that any restore of its key "
        "group would start from covers the input that made it (the point upstream is "
        "trimmed to: the held and, with the durable tier on, the durable copy), as "
        "Flink's and Kafka Streams' exactly-once sinks commit only on a checkpoint. "
        "Then nothing a restore computes again was ever seen downstream, so outputs "
        "that depend on the order of inputs from several sources (a running count in a "
        "second keyed stage) reach a sink exactly once in content, not only in id; "
        "costs about one checkpoint interval, plus the durable write, of output "
        "latency. Tentative outputs go at once, as before",
    )  # fmt: skip
    unconfirmed_resend_secs: float = option(
        "elastorm.unconfirmed_resend_secs", FLOAT, 10.0,
        "a keyed task sends an output again when a consumer (`elastorm.confirmed_outputs`) "
        "has not confirmed it for this long (the consumer's worker died with it in "
        "flight, or Storm dropped it), then after 2, 4 and at most 8 times this while "
        "it stays unconfirmed; consumers drop repeats by output id. An output "
        "whose producer dies before it is confirmed is lost unless a replay makes it "
        "again: keep this short",
        check=at_least(1),
    )  # fmt: skip
    routed_from: Mapping[str, tuple[str, ...]] = option(
        "elastorm.routed_from", ROUTER_SOURCES, {},
        "each keyed operator fed through a router, and the components feeding that "
        "router (a keyed operator among them is upstream of it in the Output Fidelity "
        "model and for tentative outputs); set by ElasticTopology",
    )  # fmt: skip
    join_operators: tuple[str, ...] = option(
        "elastorm.join_operators", NAMES, (),
        "keyed operators that join their inputs (correlated-input in the Output Fidelity "
        "model); the rest take the union",
    )  # fmt: skip
    replay_sources: Mapping[str, tuple[str, ...]] = option(
        "elastorm.replay_sources", EMITTER_SOURCES, {},
        "each emitter fed by replayable spouts, and those spouts (an emitter then "
        "recovers by replay); set by ElasticTopology",
    )  # fmt: skip
    replay_links: Mapping[str, str] = option(
        "elastorm.replay_links", SPOUT_LINKS, {},
        "each replayable spout that picks its emitter's task itself and numbers each "
        "link (a stream declared with `linked_fields`, subscribed with `by_task()`), "
        "and that emitter; set by ElasticTopology",
    )  # fmt: skip
    sources_at_most_once: tuple[str, ...] = option(
        "elastorm.sources.at_most_once", NAMES, (),
        "spouts allowed to feed keyed operators although they cannot replay: NO GUARANTEE "
        "for their data (a crash of the spout, of its router or emitter, or a lost tuple "
        "loses it for good: at most once); set it knowingly. Any other spout that feeds a "
        "keyed operator must replay from a position (`ReplayableSpout`, `LinesSpout`, "
        "`GeneratedSpout`) or the topology is refused at submit",
    )  # fmt: skip
    zookeeper_hosts: str | None = option(
        "elastorm.zookeeper.hosts", STR, None,
        "`host:port,...` of elastorm's own ZooKeeper (unset: Storm's)",
        optional=True,
    )  # fmt: skip
    zookeeper_session_secs: float = option(
        "elastorm.zookeeper.session_secs", FLOAT, 4.0,
        "ZooKeeper session timeout of elastorm's clients: how long until a silent task "
        "(dead host, cut network; a dead process is found at once by its liveness "
        "connection) is declared lost (too low declares a busy task lost)",
        check=at_least(1),
    )  # fmt: skip
    multilang_batch_size: int = option(
        "elastorm.multilang.batch_size", INT, 100,
        "emits an elastorm component sends to the JVM in one multilang message at most "
        "(1: one message per emit)",
        check=at_least(1),
    )  # fmt: skip
    data_batch_size: int = option(
        "elastorm.data.batch_size", INT, 1,
        "data tuples an emitter holds for the keyed tasks before it sends them, as runs of "
        "consecutive tuples, one Storm tuple per destination task (issue 34); also sent "
        "before any other message, on ticks and whenever the multilang batch goes. 1: one "
        "Storm tuple per data tuple. Needs elastorm's multilang wire (else 1)",
        check=at_least(1),
    )  # fmt: skip
    multilang_linger_ms: float = option(
        "elastorm.multilang.linger_ms", FLOAT, 1.0,
        "milliseconds an emit may wait for its batch to fill",
        check=at_least(0),
    )  # fmt: skip
    multilang_encoding: str = option(
        "elastorm.multilang.encoding", STR, "msgpack",
        "encoding of the multilang pipe of an ElasticTopology's Python components "
        "(streamparse_run -s), fixed when its class is built",
        check=one_of(*ENCODINGS),
    )  # fmt: skip
    gc_full_every_secs: float = option(
        "elastorm.gc.full_every_secs", FLOAT, 60.0,
        "seconds between full collections of Python's cyclic garbage collector in "
        "emitters and keyed tasks, run on a tick instead of Python's automatic ones, "
        "which traverse every buffered tuple every few seconds (0: Python's schedule)",
        check=at_least(0),
    )  # fmt: skip
    controller: ControllerConfig = section(ControllerConfig)
    durable: DurableConfig = section(DurableConfig)
    sink: SinkConfig = section(SinkConfig)
    auth: AuthConfig = section(AuthConfig)

    @classmethod
    def owns(cls, key: str) -> bool:
        return key.count(".") == 1 or super().owns(key)


@dataclass(frozen=True, kw_only=True)
class ProjectConfig(Section, topology=False):
    """The ``elastorm`` section of the project's ``config.json`` (next to streamparse's
    envs): where elastorm keeps Storm and its daemons, and the local clusters' shape.

    Every key is optional; the section is strict (an unknown key is an error with a
    did-you-mean) and, as JSON, typed (``"2181"`` is not a port). Built by
    :meth:`from_section` from the section as read.
    """

    storm_version: str = option(
        "elastorm.storm_version", STR, "2.8.3",
        "must equal `project.clj` and `src/elastorm/jvm/pom.xml` (`elastorm check`)",
    )  # fmt: skip
    home: Path = option(
        "elastorm.home", PATH, Path(".elastorm"),
        "Storm home, logs, pid files and run outputs (relative to the project)",
    )  # fmt: skip
    zookeeper_port: int = option(
        "elastorm.zookeeper_port", JSON_INT, 12181, "the ZooKeeper server's loopback port",
        check=port(),
    )  # fmt: skip
    zookeeper_fsync: bool = option(
        "elastorm.zookeeper_fsync", BOOL, True,
        "whether the project's ZooKeeper server fsyncs its transaction log before it "
        "answers a write (ZooKeeper's `forceSync`, on by default as in ZooKeeper). Off "
        "avoids the fsync stalls of a disk the whole machine shares (up to 2.7 s, which "
        "dropped every session at once), but the join job's zk-stop counted twice in 2 of "
        "2 runs with it off, 0 of 7 with it on (docs/failures.md, \"ZooKeeper's fsync\")",
    )  # fmt: skip
    local_supervisors: int = option(
        "elastorm.local_supervisors", JSON_INT, 1,
        "supervisors inside the embedded LocalCluster",
        check=between(1, 16),
    )  # fmt: skip
    cluster_supervisors: int = option(
        "elastorm.cluster_supervisors", JSON_INT, 2,
        "supervisors (nodes) of `elastorm cluster up`",
        check=between(1, 16),
    )  # fmt: skip
    cluster_slots_per_supervisor: int = option(
        "elastorm.cluster_slots_per_supervisor", JSON_INT, 2,
        "worker slots per supervisor (at most 8: thrift takes the ninth of its 10 ports)",
        check=between(1, 8),
    )  # fmt: skip
    cluster_first_slot_port: int = option(
        "elastorm.cluster_first_slot_port", JSON_INT, 16800,
        "supervisor *i* uses ports `first + 10 i` onwards (slots, then thrift at +8)",
        check=port(),
    )  # fmt: skip
    worker_heap_mb: int = option(
        "elastorm.worker_heap_mb", JSON_INT, 512, "heap of each worker JVM",
        check=at_least(128),
    )  # fmt: skip
    worker_jvm_opts: str = option(
        "elastorm.worker_jvm_opts", STR, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "JVM options of each worker, after its heap: the default compiles with C1 only and "
        "collects on one thread, so tens of workers starting on a few cores do not spend "
        "minutes in C2 and parallel GC (docs/benchmarks.md, \"Worker JVM options\")",
    )  # fmt: skip
    postgres_port: int = option(
        "elastorm.postgres_port", JSON_INT, 15432,
        "the loopback port of the private PostgreSQL server of `elastorm postgres up` "
        "(data in `<home>/postgres`)",
        check=port(),
    )  # fmt: skip
    hdfs_namenode_port: int = option(
        "elastorm.hdfs_namenode_port", JSON_INT, 18020,
        "`elastorm hdfs up`: the NameNode's RPC port (loopback)",
        check=port(),
    )  # fmt: skip
    hdfs_http_port: int = option(
        "elastorm.hdfs_http_port", JSON_INT, 18070,
        "`elastorm hdfs up`: the NameNode's HTTP port, WebHDFS (`hdfs://127.0.0.1:<it>/...`)",
        check=port(),
    )  # fmt: skip
    hdfs_control_port: int = option(
        "elastorm.hdfs_control_port", JSON_INT, 18080,
        "`elastorm hdfs up`: the launcher's control endpoint (stop the NameNode, kill a DataNode)",
        check=port(),
    )  # fmt: skip
    hdfs_first_datanode_port: int = option(
        "elastorm.hdfs_first_datanode_port", JSON_INT, 18100,
        "`elastorm hdfs up`: DataNode *i* uses `first + 3 i` (data), `+1` (HTTP), `+2` (IPC)",
        check=port(),
    )  # fmt: skip
    hdfs_datanodes: int = option(
        "elastorm.hdfs_datanodes", JSON_INT, 3, "`elastorm hdfs up`: DataNodes",
        check=between(1, 8),
    )  # fmt: skip
    hdfs_replication: int = option(
        "elastorm.hdfs_replication", JSON_INT, 3,
        "`elastorm hdfs up`: replicas of every block (at most `hdfs_datanodes`)",
        check=between(1, 8),
    )  # fmt: skip

    @classmethod
    def owns(cls, key: str) -> bool:
        return key.startswith(PREFIX)  # the whole section: any other key is a typo

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> Self:
        """Parse and check config.json's ``elastorm`` object (keys without the prefix).

        >>> ProjectConfig.from_section({"zookeeper_port": 2181}).zookeeper_port
        2181
        """
        return cls.from_conf({PREFIX + str(key): value for key, value in section.items()})


def check_conf(conf: Mapping[str, Any], *sections: type[Section]) -> dict[str, Any]:
    """Validate a whole topology conf at submit; return it unchanged.

    Every ``elastorm.*`` key must be one of :class:`TopologyConfig`'s or of
    ``sections`` (a project's own jobs', e.g. those a driver declares), and every
    value must pass its check.
    Raises ``ConfigError`` (one line) otherwise.
    """
    everything = (TopologyConfig, *sections)
    known = {o.key for s in everything for o in s.options()}
    for key in sorted(k for k in conf if isinstance(k, str)):
        if key.startswith(PREFIX) and key not in known:
            raise unknown_key(key, known | {o.key for s in Section.registry for o in s.options()})
    for s in everything:
        s.from_conf(conf)
    return dict(conf)


def options_table(*sections: type[Section]) -> str:
    """The markdown table of ``sections``' options (the README's, generated)."""

    def show(value: Any) -> str:
        if value is None:
            return "unset"
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        return f"`{value}`"

    rows = ["| key | allowed | default | meaning |", "|---|---|---|---|"]
    for s in sections:
        for o in s.options():
            allowed = o.allowed.replace("|", "\\|")
            rows.append(f"| `{o.key}` | {allowed} | {show(o.default)} | {o.doc} |")
    return "\n".join(rows) + "\n"
