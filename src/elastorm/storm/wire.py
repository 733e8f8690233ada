"""elastorm's side of the multilang pipe: batched emits, no acks Storm would ignore.

Issue 15: every emit of a Python component is one multilang message, and every
input tuple costs an ``ack`` message back, which does nothing when Storm tracks
no tuples. Two adapters, used by elastorm's components (and by any component
that calls :func:`use_elastorm_wire` from ``initialize``), both active only with
elastorm's JVM serializer (``elastorm.jvm.MultilangSerializer``), which unpacks
and releases on the Java side:

* :class:`BatchingSerializer` holds emits that need no task ids and writes them
  as one ``{"command": "batch", "batch": [...]}`` message when
  ``elastorm.multilang.batch_size`` are held, when the oldest has waited
  ``elastorm.multilang.linger_ms``, before any other message (an ack, a sync, a
  log line, an emit that needs task ids: so what this component writes stays in
  order), and before it would block reading its next input. Storm still sees one
  emit per tuple (groupings, direct streams and FIFO per task pair unchanged).
  It also tells the JVM side (``{"command": "elastorm_wire"}``) that it unpacks
  batches: a bolt then gets its input tuples the same way, up to ``batch_size``
  per message, held at most ``linger_ms`` in the JVM.
* With ``topology.acker.executors`` = 0, Storm acks every spout tuple at emit; a
  bolt's ack only frees the ShellBolt's copy of the input, which the JVM
  serializer then does itself on delivery. The component sends no acks and no
  anchors.
"""

from __future__ import annotations

import importlib
import select
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from elastorm.config import TopologyConfig

ELASTORM_SERIALIZER = "elastorm.jvm.MultilangSerializer"
SERIALIZER_KEY = "topology.multilang.serializer"
ACKERS_KEY = "topology.acker.executors"


def elastorm_serializer(conf: Mapping[str, Any]) -> bool:
    """Whether the JVM side of the pipe is elastorm's serializer."""
    return conf.get(SERIALIZER_KEY) == ELASTORM_SERIALIZER


def released_on_delivery(conf: Mapping[str, Any]) -> bool:
    """Whether the JVM frees each input as it delivers it (no ackers, elastorm's
    serializer): then acks and anchors from Python are work that does nothing."""
    return elastorm_serializer(conf) and conf.get(ACKERS_KEY) == 0


class Held(Protocol):
    """Emits a component holds ahead of the serializer (an emitter's data runs,
    ``storm.elastic.RunOutbox``): the serializer has them sent whenever it sends its
    own batch, and before it would block on a read, so they never wait longer."""

    def held_since(self) -> float | None:
        """When (the serializer's clock) the oldest held emit came; None: none held."""
        ...

    def flush(self) -> None:
        """Emit what is held now (through the serializer)."""
        ...


class BatchingSerializer:
    """Wraps a pystorm serializer; batches emits that need no task ids (module doc).

    ``ahead`` (a :class:`Held`, if set) is flushed into the batch before the batch
    goes, so what it holds keeps its order before anything written after it."""

    ahead: Held | None = None

    def __init__(
        self,
        inner: Any,
        max_batch: int,
        linger_secs: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.max_batch = max_batch
        self.linger = linger_secs
        self.clock = clock
        self.pending: list[dict] = []
        self.first_at = 0.0
        self.inbox: deque = deque()  # the rest of a batch from the JVM
        self.input_stream = inner.input_stream
        self.output_stream = inner.output_stream
        self._fd = inner.input_stream.fileno()

    def send_message(self, msg: dict) -> None:
        if msg.get("command") == "emit" and msg.get("need_task_ids") is False:
            pending = self.pending
            if not pending:
                self.first_at = self.clock()
            pending.append(msg)
            if len(pending) >= self.max_batch or self.clock() - self.first_at >= self.linger:
                self.flush()
            return
        self.flush()
        self.inner.send_message(msg)

    def flush(self) -> None:
        if self.ahead is not None:
            self.ahead.flush()
        if self.pending:
            batch, self.pending = self.pending, []
            self.inner.send_message({"command": "batch", "batch": batch})

    def read_message(self) -> Any:
        oldest = self.first_at if self.pending else None
        if self.ahead is not None:
            since = self.ahead.held_since()
            if since is not None and (oldest is None or since < oldest):
                oldest = since
        if oldest is not None and (
            self.clock() - oldest >= self.linger
            or (not self.inbox and not select.select([self._fd], [], [], 0)[0])
        ):
            self.flush()  # never block on input with emits held back
        if self.inbox:
            return self.inbox.popleft()
        msg = self.inner.read_message()
        if type(msg) is dict and msg.get("command") == "batch":
            self.inbox.extend(msg["batch"])
            return self.inbox.popleft()
        return msg

    def serialize_dict(self, msg: dict) -> Any:
        return self.inner.serialize_dict(msg)


ENCODING_PACKAGES = {"msgpack": "msgpack"}  # pystorm serializer -> the package it needs


class EncodingUnavailable(RuntimeError):
    """The multilang encoding asked for needs a package this Python cannot import."""


def require_encoding(encoding: str) -> None:
    """Raise :class:`EncodingUnavailable` if this interpreter lacks what ``encoding`` needs.

    Why: without msgpack, pystorm maps ``-s msgpack`` to its base ``Serializer``
    without a word, whose every read raises ``NotImplementedError``; the component
    then dies at the handshake and the worker log says only "pipe broken". Called at
    submit (``ElasticTopology``), by ``elastorm check`` and when elastorm's
    components start (:class:`CheckedEncoding`), so the cause is named instead.
    """
    package = ENCODING_PACKAGES.get(encoding)
    if package is None:
        return
    try:
        importlib.import_module(package)
    except ImportError:
        raise EncodingUnavailable(
            f"{TopologyConfig.key('multilang_encoding')} is {encoding!r} but {sys.executable} "
            f"cannot import {package}: install it (pip install '{package}>=1.0', a dependency "
            "of elastorm) where the components run, or set the option to 'json'"
        ) from None


class CheckedEncoding:
    """Mixin for a pystorm component: a missing encoding package stops it at start
    with :func:`require_encoding`'s message, before pystorm's silent fallback."""

    def __init__(self, *args: Any, serializer: str = "json", **kwargs: Any) -> None:
        require_encoding(serializer)
        super().__init__(*args, serializer=serializer, **kwargs)


def with_encoding(spec: Any, encoding: str) -> None:
    """Start a shell component's Python side with pystorm's ``encoding`` serializer
    (``streamparse_run -s``). ``sparse submit`` puts config.json's ``serializer``
    first; streamparse_run's argparse, and elastorm's JVM serializer, which reads the
    flag from the component's command to talk the same encoding, take the last."""
    shell = getattr(getattr(spec, "component_object", None), "shell", None)
    if shell is not None and shell.execution_command == "streamparse_run":
        shell.script = f"-s {encoding} {shell.script}"


def use_elastorm_wire(component: Any, conf: Mapping[str, Any]) -> None:
    """Switch a pystorm component (from its ``initialize``) to elastorm's wire:
    batched emits (``elastorm.multilang.batch_size`` > 1) and, when inputs are
    released on delivery, no acks and no anchors. A no-op unless the JVM side is
    elastorm's serializer."""
    if not elastorm_serializer(conf):
        return
    if released_on_delivery(conf):
        component.auto_ack = False
        component.auto_anchor = False
    config = TopologyConfig.from_conf(conf)
    if config.multilang_batch_size > 1 and not isinstance(component.serializer, BatchingSerializer):
        component.serializer.send_message({"command": "elastorm_wire"})  # we unpack batches
        component.serializer = BatchingSerializer(
            component.serializer, config.multilang_batch_size, config.multilang_linger_ms / 1000
        )
