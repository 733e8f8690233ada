"""Topology wiring in one declaration: a streamparse ``Topology`` with keyed inputs marked.

A user writes an ordinary streamparse topology and marks the inputs of keyed
bolts with :func:`keyed`::

    class WordCount(ElasticTopology):
        words = Words.spec()
        counts = CountWords.spec(inputs={words: keyed("word")}, par=3)
        sink = Sink.spec(inputs={counts: Grouping.SHUFFLE})

When the class is created, :class:`ElasticTopologyType` adds what elastorm needs
before streamparse builds the Thrift topology:

* for a keyed input from an ordinary component, a router bolt
  (``<keyed bolt>_router``, :class:`~elastorm.storm.keyed_bolt.KeyRouter`) fed by a
  fields grouping on the key (one router task per key keeps the key's order); an
  upstream that is itself an emitter (``KeyedEmitting``) feeds the keyed bolt
  directly: on ``elastorm`` (direct) and, for a carrier stream, by ``by_task()``;
* the relay (``relay``) and every direct ``elastorm`` stream between it, the
  emitters and the keyed bolts (these close cycles, so they are named by component
  id); the controller (``controller``), which hears the keyed bolts' reports and
  commands through ZooKeeper (``elastorm.zk.commands``), never on a Storm stream;
  elastorm's :class:`~elastorm.storm.controller_bolt.MigrationControllerBolt`, or the
  project's own subclass named by the class attribute ``controller_bolt`` (a
  streamparse project's ``src/controller/``, as its bolts are in ``src/bolts/``);
* the conf ``elastorm.operators``: ``{keyed bolt: [its emitters]}``, from which
  every component learns its peers at run time, and a tick frequency;
* the conf ``elastorm.routed_from``: ``{keyed bolt: [components feeding its
  router]}``, so the controller sees a keyed bolt fed by another one through a
  router (its Output Fidelity graph, and which outputs turn tentative);
* for a keyed bolt's stream with output ids read by a sink or by another keyed
  bolt's router, the direct ``elastorm_committed`` stream back from that consumer,
  and the conf ``elastorm.confirmed_outputs``: the keyed tasks keep those outputs
  until confirmed (``elastorm.core.outbox``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from streamparse import Grouping, JavaBolt, Topology
from streamparse.dsl.component import ComponentSpec
from streamparse.dsl.spout import JavaSpoutSpec, ShellSpoutSpec
from streamparse.dsl.topology import TopologyType
from streamparse.thrift import GlobalStreamId, storm_thrift

from elastorm.config import ConfigError, DurableConfig, TopologyConfig
from elastorm.core.keys import KeySelectorError, function_path
from elastorm.durable.store import DEFAULT_URI, HOME_DIR, file_root
from elastorm.files import SecretFileError, load_keyring
from elastorm.storm.controller_bolt import MigrationControllerBolt
from elastorm.storm.elastic import (
    CARRIED,
    COMMITTED,
    CONTROLLER_COMPONENT,
    MESSAGE_STREAM,
    OPERATORS_KEY,
    OUTPUT_ID,
    RELAY,
    RELAY_CLASS,
    RELAY_COMPONENT,
    REPORTS,
    STREAM,
    CommitsOutputs,
    KeyedEmitting,
    KeyedOperator,
    by_task,
)
from elastorm.storm.keyed_bolt import ROUTER_KEYS, KeyRouter, resolve_key_function
from elastorm.storm.replay import LINK_FIELDS, REWIND_STREAM, ReplayableSpout
from elastorm.storm.wire import ACKERS_KEY, EncodingUnavailable, require_encoding, with_encoding

log = logging.getLogger(__name__)
TICK_KEY = "topology.tick.tuple.freq.secs"
DEFAULT_TICK_SECS = 1  # checkpoints, heartbeats and the controller's rounds run on ticks
RESERVED = frozenset({RELAY_COMPONENT, CONTROLLER_COMPONENT})


KeyBy = str | list[str] | tuple[str, ...] | Callable[[list], Any]
"""What :func:`keyed` takes: a field name, a list of field names, a key function, or
a key function's dotted path ``"package.module:function"``."""


class Keyed(storm_thrift.Grouping):
    """The grouping :func:`keyed` returns: a marker that :func:`wire` replaces. In a
    plain ``Topology`` nothing replaces it, and the keyed bolt refuses to start
    (no ``elastorm.operators`` in its conf)."""

    def __init__(self, by: KeyBy | None) -> None:
        fields = [by] if isinstance(by, str) else list(by) if isinstance(by, list | tuple) else []
        super().__init__(fields=fields)
        self.by = list(by) if isinstance(by, tuple) else by


def keyed(by: KeyBy | None = None) -> Keyed:
    """Mark an input of a keyed bolt: its tuples are keyed by ``by`` (a key selector,
    ``elastorm.core.keys``).

    * ``keyed("word")``: the ``word`` field's value (``str()``-ed);
    * ``keyed(["airline", "year"])``: those fields' values as one key, the compact JSON
      array of them (``'["AA",2013]'``: distinct values, distinct keys);
    * ``keyed(my_key)`` or ``keyed("package.module:my_key")``: a function, defined with
      ``def`` at the top level of a module the workers import (not the topology file),
      called with the tuple's values (a list) and returning the key. Its input goes to
      one router task (Storm's global grouping), so each key's order is kept; a field
      selector spreads the routing instead. A string is a field name if the upstream
      stream has that field, else a dotted path.

    A selector is needed for an ordinary upstream; an upstream that is an elastorm
    emitter (``KeyedEmitting``) chooses keys itself, so ``keyed()`` takes none.
    """
    return Keyed(by)


class WiringError(ValueError):
    """A topology elastorm cannot wire; the message says which component and why."""


def _component(stream_id: GlobalStreamId) -> ComponentSpec | str:
    return stream_id.componentId


def _is(spec: Any, base: type) -> bool:
    return isinstance(spec, ComponentSpec) and issubclass(spec.component_cls, base)


def _direct(component: str) -> GlobalStreamId:
    """The ``elastorm`` stream of ``component``, by name (it may close a cycle)."""
    return GlobalStreamId(componentId=component, streamId=STREAM)


def _fields(spec: ComponentSpec, stream: str) -> list[str]:
    info = spec.common.streams.get(stream)
    if info is None:
        raise WiringError(f"component {spec.name!r} has no output stream {stream!r}")
    return list(info.output_fields)


def _replayable_inputs(
    specs: dict[str, ComponentSpec], emitter: ComponentSpec, links: dict[str, str]
) -> list[str]:
    """The replayable spouts feeding ``emitter``, each now also sending it its rewind
    stream. Their data must reach it deterministically (a fields or global grouping,
    not shuffle): a replay must give each emitter task the same tuples, in order.

    A stream declared with ``linked_fields`` is subscribed with ``by_task()`` (the
    spout picks the task and numbers the link), by this one emitter; ``links`` gets
    ``{spout: emitter}``."""
    sources = []
    for stream_id, grouping in list(emitter.inputs.items()):
        upstream = _component(stream_id)
        if isinstance(upstream, str):
            upstream = specs.get(upstream)
        if not _is(upstream, ReplayableSpout) or stream_id.streamId == REWIND_STREAM:
            continue
        if REWIND_STREAM not in upstream.common.streams:
            raise WiringError(
                f"{upstream.name}: a ReplayableSpout declares "
                "elastorm.storm.replay.REWIND among its outputs"
            )
        fields = _fields(upstream, stream_id.streamId)
        linked = fields[-len(LINK_FIELDS) :] == LINK_FIELDS
        if linked != (grouping == by_task()):
            raise WiringError(
                f"{emitter.name}: {upstream.name}:{stream_id.streamId} "
                + (
                    "is linked (declared with linked_fields): subscribe with by_task(), "
                    "so the spout picks the task and numbers each link"
                    if linked
                    else "is not linked: by_task() needs a stream declared with "
                    "linked_fields (the spout names the task)"
                )
            )
        if linked:
            if links.setdefault(upstream.name, emitter.name) != emitter.name:
                raise WiringError(
                    f"{emitter.name}: {upstream.name} already feeds "
                    f"{links[upstream.name]} by task; a spout links to one emitter"
                )
        elif not getattr(grouping, "fields", None) and grouping != Grouping.GLOBAL:
            raise WiringError(
                f"{emitter.name}: {upstream.name} is a replayable spout; subscribe with a "
                f"fields grouping, e.g. Grouping.fields({fields[0]!r}), so a replay reaches "
                f"the same tasks, not {grouping!r}"
            )
        if upstream.name not in sources:
            sources.append(upstream.name)
            emitter.inputs[upstream[REWIND_STREAM]] = Grouping.ALL
    return sources


def _emitters_of(operators: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """``[(emitter, [keyed operators it feeds]), ...]`` by name, from ``{keyed operator:
    [emitters]}``."""
    out: dict[str, list[str]] = {}
    for op, emitters in sorted(operators.items()):
        for name in emitters:
            out.setdefault(name, []).append(op)
    return sorted(out.items())


def _unreplayed(
    specs: dict[str, ComponentSpec], emitter: ComponentSpec, replayed: list[str]
) -> list[tuple[str, str | None]]:
    """The spouts whose tuples reach ``emitter`` without a replay behind them, each with
    the first plain bolt they pass (None: they feed it directly). A replayable spout
    feeding it directly is covered (``replayed``); through a plain bolt it is not (what
    the bolt holds when it crashes is lost). Upstream keyed operators and emitters are
    elastorm's to recover. O(components)."""
    found: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    stack: list[tuple[ComponentSpec, str | None]] = [(emitter, None)]
    while stack:
        spec, via = stack.pop()
        for stream_id in spec.inputs:
            upstream = _component(stream_id)
            if isinstance(upstream, str):
                upstream = specs.get(upstream)
            if (
                upstream is None
                or stream_id.streamId == REWIND_STREAM
                or _is(upstream, KeyedOperator)
                or _is(upstream, KeyedEmitting)
            ):
                continue
            if isinstance(upstream, JavaSpoutSpec | ShellSpoutSpec):
                if via is not None or upstream.name not in replayed:
                    found.append((upstream.name, via))
            elif upstream.name not in seen:
                seen.add(upstream.name)
                stack.append((upstream, via or upstream.name))
    return found


def _refuse_unreplayable(
    classname: str,
    specs: dict[str, ComponentSpec],
    emitters: dict[str, tuple[ComponentSpec, list[str]]],
    replay_sources: dict[str, list[str]],
    at_most_once: tuple[str, ...],
) -> None:
    """Refuse, in one line, a topology in which a spout feeds a keyed operator without
    a replay and without the explicit ``elastorm.sources.at_most_once`` opt-out (its
    data would be lost silently when a router or an emitter restarts). O(components)."""
    option = TopologyConfig.key("sources_at_most_once")
    spouts = {n for n, s in specs.items() if isinstance(s, JavaSpoutSpec | ShellSpoutSpec)}
    stray = sorted(set(at_most_once) - spouts)
    if stray:
        raise WiringError(f"{classname}: {option} names {stray}, not spouts of this topology")
    offenders: dict[str, str] = {}
    for name, (emitter, ops) in emitters.items():
        for spout, via in _unreplayed(specs, emitter, replay_sources.get(name, [])):
            if spout not in at_most_once and spout not in offenders:
                through = f" through plain bolt {via!r}" if via else ""
                bolts = ", ".join(repr(op) for op in ops)
                offenders[spout] = f"spout {spout!r} feeds keyed bolt {bolts}{through}"
    if not offenders:
        return
    raise WiringError(
        f"{classname}: {'; '.join(offenders.values())} and cannot replay there, so a "
        "crash would lose its tuples silently; fix: make it replayable "
        "(subclass elastorm.ReplayableSpout, or use "
        "elastorm.LinesSpout / elastorm.GeneratedSpout) subscribed directly by keyed() or "
        "by an emitter, or accept the loss knowingly with config "
        f"{{{option!r}: {sorted(offenders)!r}}} (no guarantee: at most once)"
    )


def _selector(
    where: str, by: KeyBy | None, fields: list[str], class_dict: dict[str, Any]
) -> tuple[int | list[int] | str, Grouping]:
    """A ``keyed(by)`` input's selector in the router's conf form (a field index, a
    list of them, or a function's dotted path; ``elastorm.core.keys``) and the grouping
    into the router that keeps each key on one router task (fields, or global for a
    function). A bad selector is refused here, at submit, in one line."""
    if by is None:
        raise WiringError(f"{where}: keyed() needs a key selector (a field, fields or a function)")
    if isinstance(by, str) and (by in fields or ":" not in by):
        if by not in fields:
            raise WiringError(f"{where} has no field {by!r} (fields: {fields})")
        return fields.index(by), Grouping.fields(by)
    if isinstance(by, list):
        missing = [f for f in by if f not in fields]
        if not by or missing or len(set(by)) != len(by):
            raise WiringError(
                f"{where}: keyed({by!r}) needs distinct fields of the stream "
                f"(fields: {fields}; not there: {missing})"
            )
        return [fields.index(f) for f in by], Grouping.fields(*by)
    try:
        path = by if isinstance(by, str) else function_path(by)
        resolved = resolve_key_function(path)
    except KeySelectorError as exc:
        raise WiringError(f"{where}: {exc}") from None
    if getattr(resolved, "__module__", None) == class_dict.get("__module__"):
        raise WiringError(
            f"{where}: key function {path} is defined in the topology file, which the "
            "workers do not get; move it to a module under src/ (e.g. src/bolts/keys.py) "
            "and import it"
        )
    if not isinstance(by, str) and resolved is not by:
        raise WiringError(f"{where}: key function {path} imports as another object than given")
    return path, Grouping.GLOBAL


def _tasks(spec: ComponentSpec) -> dict[str | None, int]:
    """A component's task count per streamparse environment (``None``: every one);
    ``par`` is an int or, in streamparse, ``{environment: int}``."""
    return dict(spec.par) if isinstance(spec.par, dict) else {None: spec.par}


def _at_least_two_tasks(keyed_specs: list[ComponentSpec]) -> None:
    """Run every keyed bolt on two tasks at least, saying so when ``par`` asks for one.

    A key group's checkpoint is held by another task of its operator on another node
    (Madsen & Zhou 2015), so a keyed operator with one task would have nowhere to keep
    its checkpoints and nowhere to recover to. Each keyed bolt otherwise keeps its own
    ``par`` (per streamparse environment when ``par`` is a dict): the elastic
    scheduler gives logical node ``i`` the ``i``-th task of every keyed bolt that has
    one, and the controller moves a bolt's key groups only among its own nodes.
    """
    for spec in keyed_specs:
        counts = _tasks(spec)
        if all(count >= 2 for count in counts.values()):
            continue
        raised = {env: max(count, 2) for env, count in counts.items()}
        spec.par = spec.common.parallelism_hint = raised[None] if None in raised else raised
        log.warning(
            "%s: par=%s runs 2 tasks: a keyed bolt's key groups are checkpointed on "
            "another task of it, on another node",
            spec.name,
            counts[None] if None in counts else counts,
        )


def _confirms(spec: ComponentSpec, stream: str) -> bool:
    """Whether ``spec``'s ``stream`` is a keyed bolt's stream with output ids (whose
    consumers confirm them back, ``core.outbox``)."""
    return _is(spec, KeyedOperator) and _fields(spec, stream)[-len(OUTPUT_ID) :] == OUTPUT_ID


def _wire_confirmations(
    specs: dict[str, ComponentSpec], routed: list[tuple[str, str, str]]
) -> dict[str, list[str]]:
    """Every consumer that confirms a keyed bolt's outputs by id sends its
    confirmations back on its ``COMMITTED`` stream (direct): each sink
    (``CommitsOutputs``) reading such a stream, and each router in ``routed``
    (``(router, keyed bolt, stream)``). Returns ``{keyed bolt: ["consumer:stream",
    ...]}`` for ``elastorm.confirmed_outputs``."""
    pairs = list(routed)
    for sink in specs.values():
        if _is(sink, CommitsOutputs):
            for stream_id in sink.inputs:
                upstream = _component(stream_id)
                name = upstream.name if isinstance(upstream, ComponentSpec) else upstream
                if name in specs and _confirms(specs[name], stream_id.streamId):
                    pairs.append((sink.name, name, stream_id.streamId))
    confirmed: dict[str, list[str]] = {}
    for consumer, producer, stream in pairs:
        specs[producer].inputs[GlobalStreamId(componentId=consumer, streamId=COMMITTED)] = (
            Grouping.DIRECT
        )
        confirmed.setdefault(producer, []).append(f"{consumer}:{stream}")
    return confirmed


def wire(classname: str, class_dict: dict[str, Any]) -> None:
    """Add routers, relay, controller, direct streams and conf to ``class_dict``."""
    specs: dict[str, ComponentSpec] = {}
    for attr, spec in class_dict.items():
        if isinstance(spec, ComponentSpec):
            spec.name = spec.name or attr
            specs[spec.name] = spec
    clash = RESERVED & specs.keys()
    if clash:
        raise WiringError(f"{classname}: component names {sorted(clash)} are elastorm's")
    keyed_specs = [s for s in specs.values() if _is(s, KeyedOperator)]
    if not keyed_specs:
        raise WiringError(f"{classname}: no keyed bolt (a KeyedBolt with keyed() inputs)")
    operators: dict[str, list[str]] = {}
    added: dict[str, ComponentSpec] = {}
    routed_from: dict[str, list[str]] = {}  # keyed bolt -> components feeding its router
    confirming: list[tuple[str, str, str]] = []  # (router, keyed bolt, stream) to confirm
    _at_least_two_tasks(keyed_specs)
    for spec in keyed_specs:
        emitters = operators.setdefault(spec.name, [])
        routed: dict[GlobalStreamId, Grouping] = {}
        router_keys: dict[str, int | list[int] | str] = {}
        router_par = 1
        for stream_id, grouping in list(spec.inputs.items()):
            if not isinstance(grouping, Keyed):
                continue
            del spec.inputs[stream_id]
            upstream = _component(stream_id)
            if not isinstance(upstream, ComponentSpec):
                raise WiringError(
                    f"{spec.name}: keyed() input {upstream!r} must be given as a component "
                    "spec of this topology, not by name"
                )
            upstream.name = upstream.name or next(a for a, s in class_dict.items() if s is upstream)
            stream = stream_id.streamId
            if _is(upstream, KeyedEmitting):
                if grouping.by is not None:
                    raise WiringError(
                        f"{spec.name}: {upstream.name} is an elastorm emitter and chooses "
                        f"keys itself; use keyed() without a field"
                    )
                if stream != STREAM:
                    if _fields(upstream, stream)[-len(CARRIED) :] != CARRIED:
                        raise WiringError(
                            f"{spec.name}: {upstream.name}:{stream} does not carry data "
                            f"messages (declare it with carrier_fields) ; subscribe to "
                            f"{upstream.name}[{STREAM!r}] instead"
                        )
                    spec.inputs[stream_id] = by_task()
                spec.inputs[_direct(upstream.name)] = Grouping.DIRECT
                emitters.append(upstream.name)
                continue
            where = f"{spec.name}: {upstream.name}:{stream}"
            fields = _fields(upstream, stream)
            conf_form, grouped = _selector(where, grouping.by, fields, class_dict)
            routed[stream_id] = grouped
            routed_from.setdefault(spec.name, []).append(upstream.name)
            if _confirms(upstream, stream):
                confirming.append((f"{spec.name}_router", upstream.name, stream))
            router_keys[f"{upstream.name}:{stream}"] = conf_form
            par = upstream.par if isinstance(upstream.par, int) else 1
            router_par = max(router_par, par)
        if routed:
            name = f"{spec.name}_router"
            if name in specs:
                raise WiringError(f"{classname}: component name {name!r} is elastorm's")
            routed[_direct(RELAY_COMPONENT)] = Grouping.DIRECT
            added[name] = KeyRouter.spec(
                name=name,
                inputs=routed,
                par=router_par,
                config={ROUTER_KEYS: router_keys},
            )
            spec.inputs[_direct(name)] = Grouping.DIRECT
            emitters.append(name)
        if not emitters:
            raise WiringError(f"{classname}: keyed bolt {spec.name!r} has no keyed() input")
        spec.inputs[_direct(RELAY_COMPONENT)] = Grouping.DIRECT
    confirmed = _wire_confirmations(specs, confirming)
    replay_sources: dict[str, list[str]] = {}
    replay_links: dict[str, str] = {}
    for name in sorted({e for es in operators.values() for e in es}):
        emitter = added.get(name)
        if emitter is None:  # a hand-written emitter (a router has these streams already)
            emitter = specs[name]
            emitter.inputs[_direct(RELAY_COMPONENT)] = Grouping.DIRECT
        sources = _replayable_inputs(specs, emitter, replay_links)
        if sources:
            replay_sources[name] = sources
    config = dict(class_dict.get("config") or {})
    _refuse_unreplayable(
        classname,
        specs,
        {name: (added.get(name) or specs[name], ops) for name, ops in _emitters_of(operators)},
        replay_sources,
        _checked(classname, config).sources_at_most_once,
    )
    added[RELAY_COMPONENT] = JavaBolt.spec(
        name=RELAY_COMPONENT,
        full_class_name=RELAY_CLASS,
        args_list=[],
        inputs={s[RELAY]: Grouping.fields("sender") for s in keyed_specs},
        par=_checked(classname, config).relay_tasks,
        outputs=[MESSAGE_STREAM],
    )
    # The leader and its standbys (elastorm.controller.standby): every report reaches
    # each, so a standby knows of a restarted task that its leader died before handling.
    standbys = _checked(classname, config).controller.standbys
    added[CONTROLLER_COMPONENT] = _controller_bolt(classname, class_dict).spec(
        name=CONTROLLER_COMPONENT,
        inputs={s[REPORTS]: Grouping.ALL for s in keyed_specs},
        par=1 + standbys,
    )
    for name, spec in added.items():
        class_dict[f"_elastorm_{name}"] = spec
    config[OPERATORS_KEY] = operators
    if replay_sources:
        config[TopologyConfig.key("replay_sources")] = replay_sources
    if replay_links:
        config[TopologyConfig.key("replay_links")] = replay_links
    if confirmed:
        config[TopologyConfig.key("confirmed_outputs")] = confirmed
    if routed_from:
        config[TopologyConfig.key("routed_from")] = {
            op: sorted(set(ups)) for op, ups in routed_from.items()
        }
    # A bare file:// store would resolve in each worker's own directory (Storm's copy of
    # the topology, one per supervisor, deleted with it): made absolute here, at submit,
    # where the project's .elastorm is (the default of elastorm.run and savepoint).
    uri_key = DurableConfig.key("uri")
    if config.get(uri_key, DEFAULT_URI) == DEFAULT_URI:
        config[uri_key] = file_root(os.path.abspath(HOME_DIR))
    config.setdefault(TICK_KEY, DEFAULT_TICK_SECS)
    # elastorm's own sequence numbers, buffers and checkpoints give exactly-once;
    # Storm's acking would track nothing (spouts emit without ids) at a message per
    # tuple. Without ackers the JVM releases inputs itself (elastorm.storm.wire).
    config.setdefault(ACKERS_KEY, 0)
    checked = _checked(classname, config)
    if checked.chaos_drop_tuples and checked.chaos_drop_on == "spout" and not replay_links:
        raise WiringError(
            f"{classname}: elastorm.chaos.drop_on = 'spout' loses a replayable spout's "
            "rows to the emitter it feeds by task, and no spout here does (declare its "
            "stream with linked_fields, subscribe with by_task())"
        )
    for spec in (*specs.values(), *added.values()):
        with_encoding(spec, checked.multilang_encoding)
    class_dict["config"] = config


def _controller_bolt(classname: str, class_dict: dict[str, Any]) -> type[MigrationControllerBolt]:
    """The controller component's class: the topology's ``controller_bolt`` (taken out
    of ``class_dict``: streamparse sees components only), else elastorm's own."""
    bolt = class_dict.pop("controller_bolt", MigrationControllerBolt)
    if not (isinstance(bolt, type) and issubclass(bolt, MigrationControllerBolt)):
        raise WiringError(
            f"{classname}.controller_bolt must be a subclass of "
            f"elastorm.storm.controller_bolt.MigrationControllerBolt, got {bolt!r}"
        )
    return bolt


def _checked(classname: str, config: dict) -> TopologyConfig:
    """The topology's elastorm options: a bad one fails at submit, not in a worker (a
    secret file too, if unreadable or empty on the submitting machine)."""
    try:
        checked = TopologyConfig.from_conf(config)
        require_encoding(checked.multilang_encoding)
        load_keyring(checked.auth.secret_file, checked.auth.previous_secret_file)
    except (ConfigError, EncodingUnavailable, SecretFileError) as exc:
        raise WiringError(f"{classname}: {exc}") from None
    return checked


class ElasticTopologyType(type):
    """Wires a subclass of :class:`ElasticTopology` and returns it as a plain streamparse
    ``Topology`` (so ``sparse``, which takes the first ``Topology`` class of a
    topology module, finds the user's class and never the imported base)."""

    def __new__(mcs, classname, bases, class_dict):
        if not any(isinstance(base, ElasticTopologyType) for base in bases):
            return super().__new__(mcs, classname, bases, class_dict)  # the base itself
        wire(classname, class_dict)
        return TopologyType(classname, (Topology,), class_dict)


class ElasticTopology(metaclass=ElasticTopologyType):
    """Base class of a topology whose keyed bolts keep elastic state (module doc)."""
