"""The sink bolts: a streamparse ``Bolt`` around ``stores.Committer``.

A :class:`Sink` subscribes to keyed bolts' streams declared with
``output_id_fields`` (any grouping: the committed ids live in the database, read and
locked in each transaction). It splits each tuple into the bolt's own values and the
output's id (``commits.Output``), collects up to ``elastorm.sinks.batch_rows`` of them
(or what came until the next tick) and hands them to the committer: the ids not yet
committed are written by :meth:`Sink.write` and recorded in the same transaction.
A malformed tuple (no id fields) is counted and logged, never written unchecked.

Acks are off in an elastorm topology, so an output a sink task holds in its batch
when the task dies is lost with it (as are the tuples in its Storm queue and those
Storm's Netty client dropped for its dead worker). So after each transaction the sink
tells every keyed task it read from which ids it committed
(``storm.elastic.COMMITTED_STREAM``, wired by ``ElasticTopology``), and the keyed
tasks send again what stays unconfirmed (``elastorm.core.outbox``).
"""

from __future__ import annotations

import logging
from typing import Any

from streamparse import Bolt

from elastorm.config import TopologyConfig
from elastorm.core.outbox import OutputKey, confirmation, confirmed_inputs
from elastorm.sinks.commits import Output
from elastorm.sinks.stores import Committer, open_store
from elastorm.storm.elastic import COMMITTED, COMMITTED_STREAM, OUTPUT_ID, CommitsOutputs

log = logging.getLogger(__name__)

_ID = len(OUTPUT_ID)


def split_output(component: str, stream: str, values: list) -> Output:
    """A sink's input tuple as an :class:`Output`: its last ``len(OUTPUT_ID)`` values
    are the id (``ValueError`` if they are missing or malformed).

    >>> split_output("counts", "default", ["storm", 3, 5, "router:2", 7, "final"]).seq
    7
    """
    if len(values) < _ID:
        raise ValueError(f"{len(values)} values, fewer than the {_ID} id fields {OUTPUT_ID}")
    group, source, seq, kind = values[-_ID:]
    return Output(
        component=component,
        stream=stream,
        key_group=group,
        source=source,
        seq=seq,
        kind=kind,
        values=tuple(values[:-_ID]),
    )


class Sink(CommitsOutputs, Bolt):
    """Subclass it and either declare a ``table`` and its ``columns`` (each output's
    values, then its kind in ``kind_column`` unless that is None), or override
    :meth:`write`. ``schema``, if set, is run once at start (e.g. ``CREATE TABLE IF
    NOT EXISTS ...``). The database is ``elastorm.sinks.store``: an embedded SQLite
    file (the default) or PostgreSQL (``stores.open_store``)."""

    outputs: list = [COMMITTED_STREAM]
    table: str | None = None
    columns: tuple[str, ...] = ()
    kind_column: str | None = "kind"
    schema: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Keep the confirmations' stream among a subclass's own ``outputs``."""
        super().__init_subclass__(**kwargs)
        if COMMITTED_STREAM not in cls.outputs:
            cls.outputs = [*cls.outputs, COMMITTED_STREAM]

    def initialize(self, conf, context):
        config = TopologyConfig.from_conf(conf)
        self.store = open_store(config.sink, config.output_dir)
        self.store.connect()
        if self.schema:
            self.store.execute(self.schema)
        self.committer = Committer(
            sink=context["componentid"],
            store=self.store,
            write=self.write,
            attempts=config.sink.commit_attempts,
        )
        self.batch_rows = config.sink.batch_rows
        self.pending: list[Output] = []
        self.senders: list[int | None] = []  # per pending output: the task to confirm to
        self.confirmed = confirmed_inputs(config.confirmed_outputs, context["componentid"])
        self.malformed = 0

    def write(self, outputs: list[Output], cursor: Any) -> None:
        """Write ``outputs`` (not committed before; in arrival order) with ``cursor``,
        inside the transaction that records their ids. The default inserts each
        output's values (and kind) into ``table``."""
        if not self.table:
            raise NotImplementedError(f"{type(self).__name__}: declare a table or write()")
        columns = [*self.columns, *([self.kind_column] if self.kind_column else [])]
        rows = [
            (*o.values, *([o.kind] if self.kind_column else ())) for o in outputs
        ]  # fmt: skip
        self.store.insert(cursor, self.table, columns, rows)

    def process(self, tup):
        try:
            output = split_output(tup.component, tup.stream, list(tup.values))
        except (ValueError, TypeError) as exc:
            self.malformed += 1
            log.error(
                "sink: a tuple from %s:%s without a valid output id (%s); not written: %r",
                tup.component, tup.stream, exc, tup.values,
            )  # fmt: skip
            return
        self.pending.append(output)
        confirm = (tup.component, tup.stream) in self.confirmed and output.seq
        self.senders.append(tup.task if confirm else None)
        if len(self.pending) >= self.batch_rows:
            self.flush()

    def process_tick(self, tup):
        self.flush()

    def flush(self) -> None:
        """Commit the outputs collected so far (``Committer.deliver``), then tell each
        sending task which of its outputs are committed."""
        if self.pending:
            batch, self.pending = self.pending, []
            senders, self.senders = self.senders, []
            self.committer.deliver(batch)
            by_task: dict[int, list[OutputKey]] = {}
            for output, task in zip(batch, senders, strict=True):
                if task is not None:
                    key = (output.stream, output.key_group, output.source, output.seq)
                    by_task.setdefault(task, []).append(key)
            for task, keys in by_task.items():
                self.emit([confirmation(keys)], stream=COMMITTED, direct_task=task)
