"""The databases a sink commits to, and the one commit path (:class:`Committer`).

A :class:`Store` is a thin adapter around one connection: transactions, the marks
table (the committed output ids per channel, ``commits.Committed``) and inserts.
:class:`Committer` is the path every sink takes, whatever its store: in ONE
transaction it reads (and locks) the marks of the batch's channels, plans what to
write (``commits.plan``), writes it with the user's code and saves the new marks. A
failure anywhere (the user's code, a dropped connection, a crash before the commit
is acknowledged) rolls the transaction back or leaves it in doubt; either way the
next attempt reconnects and reads the marks again, so it writes exactly what the
database does not hold yet. Nothing is cached between transactions, so several sink
tasks (or a sink task restarted elsewhere) may commit the same channels.

Ready stores: :class:`SQLiteStore` (embedded, the default) and
:class:`PostgresStore` (psycopg 3, a real PostgreSQL server).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from elastorm.config import ConfigError, SinkConfig
from elastorm.sinks.commits import Channel, Committed, Output, Plan, plan

log = logging.getLogger(__name__)

Write = Callable[[list[Output], Any], None]
"""``write(outputs, cursor)``: the user's part of a transaction (insert the rows)."""


class Store(ABC):
    """One connection to a sink's database; ``marks_table`` holds the committed ids."""

    param = "?"  # the driver's parameter placeholder

    def __init__(self, *, marks_table: str = "elastorm_sink_marks") -> None:
        self.marks_table = marks_table
        self._conn: Any = None  # the driver's connection; None when closed

    @abstractmethod
    def connect(self) -> None:
        """(Re)open the connection and create the marks table if missing."""

    def close(self) -> None:
        """Close the connection (a transaction in flight is abandoned: rolled back)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    @property
    @abstractmethod
    def connected(self) -> bool:
        """Whether :meth:`connect` has an open connection."""

    @abstractmethod
    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A cursor inside one transaction: committed when the block ends, rolled back
        if it raises."""

    def _marks_ddl(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.marks_table} ("
            "sink TEXT NOT NULL, component TEXT NOT NULL, stream TEXT NOT NULL, "
            "key_group INTEGER NOT NULL, source TEXT NOT NULL, "
            "mark BIGINT NOT NULL, holes TEXT NOT NULL, "
            "PRIMARY KEY (sink, component, stream, key_group, source))"
        )

    def read_marks(
        self, cursor: Any, sink: str, channels: Collection[Channel]
    ) -> dict[Channel, Committed]:
        """The committed ids of ``sink``'s ``channels`` (locked for this transaction
        where the database locks rows). O(channels) queries."""
        p = self.param
        out = {}
        for channel in sorted(channels):
            cursor.execute(
                f"SELECT mark, holes FROM {self.marks_table} WHERE sink = {p} AND "
                f"component = {p} AND stream = {p} AND key_group = {p} AND source = {p}"
                + self._lock_clause(),
                (sink, *channel),
            )
            row = cursor.fetchone()
            if row is not None:
                out[channel] = Committed.decode(int(row[0]), row[1])
        return out

    def _lock_clause(self) -> str:
        return ""

    def save_marks(self, cursor: Any, sink: str, marks: Mapping[Channel, Committed]) -> None:
        """Store ``marks`` (insert or overwrite, per channel)."""
        p = self.param
        cursor.executemany(
            f"INSERT INTO {self.marks_table} "
            "(sink, component, stream, key_group, source, mark, holes) "
            f"VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}) "
            "ON CONFLICT (sink, component, stream, key_group, source) "
            "DO UPDATE SET mark = excluded.mark, holes = excluded.holes",
            [(sink, *ch, c.mark, c.encode_holes()) for ch, c in sorted(marks.items())],
        )

    def insert(
        self, cursor: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """``INSERT INTO table (columns) VALUES ...`` for every row."""
        marks = ", ".join([self.param] * len(columns))
        cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

    def execute(self, statement: str) -> None:
        """Run one statement in its own transaction (a sink's ``schema``)."""
        with self.transaction() as cursor:
            cursor.execute(statement)


class SQLiteStore(Store):
    """An embedded SQLite file; each transaction takes the write lock at once
    (``BEGIN IMMEDIATE``), so concurrent sink tasks commit one after another."""

    def __init__(self, path: str | Path, *, marks_table: str = "elastorm_sink_marks") -> None:
        super().__init__(marks_table=marks_table)
        self.path = Path(path)

    def connect(self) -> None:
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One thread at a time uses a store (a sink task), not always the one that
        # opened it (closing it may come from another).
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, timeout=60, check_same_thread=False
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(self._marks_ddl())

    @property
    def connected(self) -> bool:
        return self._conn is not None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        if self._conn is None:
            raise sqlite3.ProgrammingError("not connected")
        cursor = self._conn.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            yield cursor
        except BaseException:
            try:
                if self._conn is not None and self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            except sqlite3.Error:  # the connection broke: closing it rolls back
                self.close()
            raise
        cursor.execute("COMMIT")


class PostgresStore(Store):
    """A PostgreSQL database through psycopg 3 (``dsn``: a libpq connection string).
    The marks of a batch's channels are locked (``FOR UPDATE``) for its transaction,
    after making sure their rows exist, so two sink tasks never both commit an id."""

    param = "%s"

    def __init__(self, dsn: str, *, marks_table: str = "elastorm_sink_marks") -> None:
        super().__init__(marks_table=marks_table)
        self.dsn = dsn

    def connect(self) -> None:
        import psycopg

        self.close()
        self._conn = psycopg.connect(self.dsn, connect_timeout=10)
        self.execute(self._marks_ddl())

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        if self._conn is None:
            raise RuntimeError("not connected")
        with self._conn.transaction(), self._conn.cursor() as cursor:
            yield cursor

    def read_marks(
        self, cursor: Any, sink: str, channels: Collection[Channel]
    ) -> dict[Channel, Committed]:
        # A row to lock for every channel (a concurrent insert of the same row waits
        # for the other transaction, then finds it): the FOR UPDATE below then sees
        # the newest committed marks.
        cursor.executemany(
            f"INSERT INTO {self.marks_table} "
            "(sink, component, stream, key_group, source, mark, holes) "
            "VALUES (%s, %s, %s, %s, %s, 0, '') ON CONFLICT DO NOTHING",
            [(sink, *ch) for ch in sorted(channels)],
        )
        return super().read_marks(cursor, sink, channels)

    def _lock_clause(self) -> str:
        return " FOR UPDATE"


def open_store(config: SinkConfig, output_dir: str | None = None) -> Store:
    """The store ``elastorm.sinks.store`` names (not connected yet): SQLite at
    ``elastorm.sinks.sqlite_path`` (unset: ``sink.sqlite`` in ``output_dir``), or
    PostgreSQL at ``elastorm.sinks.postgres_dsn``. ``ConfigError`` if that is unset."""
    if config.store == "postgres":
        if not config.postgres_dsn:
            raise ConfigError(
                f"{SinkConfig.key('store')} = postgres needs {SinkConfig.key('postgres_dsn')} "
                "(a libpq connection string; `elastorm postgres up` prints one)"
            )
        return PostgresStore(config.postgres_dsn, marks_table=config.marks_table)
    path = config.sqlite_path or (output_dir and str(Path(output_dir) / "sink.sqlite"))
    if not path:
        raise ConfigError(
            f"{SinkConfig.key('store')} = sqlite needs {SinkConfig.key('sqlite_path')} or "
            "elastorm.output_dir (absolute: a worker's working directory is temporary)"
        )
    return SQLiteStore(path, marks_table=config.marks_table)


class Committer:
    """The one commit path of every sink: ``deliver(outputs)`` commits the outputs
    whose ids ``sink`` has not committed, with their marks, in one transaction of
    ``store``, through ``write``; retried up to ``attempts`` times (reconnecting)
    before the error is raised. ``written``/``duplicates`` count outputs."""

    def __init__(
        self,
        *,
        sink: str,
        store: Store,
        write: Write,
        attempts: int = 5,
        backoff_secs: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.sink, self.store, self.write = sink, store, write
        self.attempts, self.backoff_secs, self.sleep = attempts, backoff_secs, sleep
        self.written = 0
        self.duplicates = 0

    def deliver(self, outputs: Sequence[Output]) -> Plan:
        """Commit ``outputs`` exactly once each (see the module docstring); returns the
        plan that was committed."""
        channels = {o.channel for o in outputs if o.seq}
        for attempt in range(1, self.attempts + 1):
            try:
                if not self.store.connected:
                    self.store.connect()
                with self.store.transaction() as cursor:
                    done = plan(self.store.read_marks(cursor, self.sink, channels), outputs)
                    if done.write:
                        self.write(list(done.write), cursor)
                    if done.marks:
                        self.store.save_marks(cursor, self.sink, done.marks)
            except Exception as exc:
                if attempt == self.attempts:
                    raise
                log.warning(
                    "sink %s: transaction of %d outputs failed (attempt %d of %d: %s); "
                    "reconnecting", self.sink, len(outputs), attempt, self.attempts, exc,
                )  # fmt: skip
                self.store.close()
                self.sleep(self.backoff_secs * attempt)
                continue
            self.written += len(done.write)
            self.duplicates += len(done.duplicates)
            if done.duplicates:
                log.debug(
                    "sink %s: dropped %d outputs already committed (first: %s#%d)",
                    self.sink, len(done.duplicates), done.duplicates[0].channel,
                    done.duplicates[0].seq,
                )  # fmt: skip
            return done
        raise AssertionError("unreachable")  # the loop returns or raises
