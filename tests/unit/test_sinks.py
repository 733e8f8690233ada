"""The sink bolt and its commit path on an embedded SQLite file (``elastorm.sinks``):
ids committed in the same transaction as the rows, a failed transaction retried
without a row twice, malformed tuples counted and not written, options checked.
The same against a real PostgreSQL: ``tests/integration/test_sink_databases.py``."""

from __future__ import annotations

import io
import sqlite3
from types import SimpleNamespace

import pytest

from elastorm import Sink
from elastorm.config import ConfigError, SinkConfig, TopologyConfig
from elastorm.sinks.commits import Committed, Output
from elastorm.sinks.stores import Committer, PostgresStore, SQLiteStore, open_store

SCHEMA = "CREATE TABLE IF NOT EXISTS counts (word TEXT, n INTEGER, kind TEXT)"


class CountsSink(Sink):
    table = "counts"
    columns = ("word", "n")
    schema = SCHEMA


def _sink(path, cls=CountsSink, **options):
    sink = cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)
    conf = {"elastorm.sinks.sqlite_path": str(path), **options}
    sink.initialize(conf, {"componentid": "sink", "taskid": 7})
    return sink


def _tup(values, component="counts", stream="default"):
    return SimpleNamespace(values=values, component=component, stream=stream)


def _rows(path) -> list:
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute("SELECT word, n, kind FROM counts"))


def test_the_sink_writes_each_id_once_and_unnumbered_outputs_each_time(tmp_path) -> None:
    path = tmp_path / "sink.sqlite"
    sink = _sink(path, **{"elastorm.sinks.batch_rows": 3})
    tuples = [
        ["a", 1, 0, "r:1", 1, "final"],
        ["a", 2, 0, "r:1", 2, "tentative"],
        ["a", 1, 0, "r:1", 1, "final"],  # a replay: dropped
        ["a", 2, 0, "", 0, "rectified"],
        ["b", 1, 1, "r:1", 1, "final"],
    ]
    for values in tuples:
        sink.process(_tup(values))
    assert len(_rows(path)) == 2  # the first batch of 3 is committed, the rest waits
    sink.process_tick(None)
    again = _sink(path)  # a sink task restarted: the committed ids are in the file
    for values in tuples:
        again.process(_tup(values))
    again.process_tick(None)
    assert _rows(path) == [
        ("a", 1, "final"),
        ("a", 2, "rectified"),
        ("a", 2, "rectified"),
        ("a", 2, "tentative"),
        ("b", 1, "final"),
    ]
    assert (sink.committer.duplicates, again.committer.duplicates) == (1, 4)


def test_a_tuple_without_an_output_id_is_counted_and_not_written(tmp_path, caplog) -> None:
    sink = _sink(tmp_path / "sink.sqlite")
    sink.process(_tup(["a", 1]))
    sink.process(_tup(["a", 1, 0, "r:1", -3, "final"]))
    sink.process(_tup(["a", 1, 0, "r:1", 1, "maybe"]))
    sink.process_tick(None)
    assert sink.malformed == 3 and _rows(tmp_path / "sink.sqlite") == []
    assert "without a valid output id" in caplog.text


def test_a_transaction_that_fails_after_writing_is_rolled_back_and_retried(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "sink.sqlite")
    store.connect()
    store.execute(SCHEMA)
    calls = []

    def write(outputs, cursor) -> None:
        store.insert(
            cursor, "counts", ["word", "n", "kind"], [(*o.values, o.kind) for o in outputs]
        )
        calls.append(len(outputs))
        if len(calls) == 1:
            raise sqlite3.OperationalError("disk I/O error (injected, after the rows)")

    committer = Committer(sink="sink", store=store, write=write, sleep=lambda s: None)
    outs = [
        Output(
            component="counts",
            stream="default",
            key_group=0,
            source="r:1",
            seq=s,
            kind="final",
            values=("a", s),
        )
        for s in (2, 1, 2, 3)
    ]
    done = committer.deliver(outs[:3])
    assert calls == [2, 2] and [o.seq for o in done.write] == [2, 1]
    assert _rows(tmp_path / "sink.sqlite") == [("a", 1, "final"), ("a", 2, "final")]
    calls.clear()  # fails again, and one attempt is all it gets: the error is raised
    with pytest.raises(sqlite3.OperationalError):
        Committer(sink="sink", store=store, write=write, attempts=1).deliver(outs[3:])
    assert len(_rows(tmp_path / "sink.sqlite")) == 2


def test_the_store_option_picks_sqlite_or_postgres_and_says_what_is_missing(tmp_path) -> None:
    assert isinstance(open_store(SinkConfig(), str(tmp_path)), SQLiteStore)
    dsn = "host=127.0.0.1 port=15432 dbname=elastorm"
    pg = open_store(SinkConfig(store="postgres", postgres_dsn=dsn))
    assert isinstance(pg, PostgresStore) and pg.dsn == dsn and not pg.connected
    with pytest.raises(ConfigError, match="needs elastorm.sinks.sqlite_path"):
        open_store(SinkConfig())
    with pytest.raises(ConfigError, match="needs elastorm.sinks.postgres_dsn"):
        open_store(SinkConfig(store="postgres"))
    with pytest.raises(ConfigError, match="elastorm.sinks.marks_table = 'x; drop'"):
        TopologyConfig.from_conf({"elastorm.sinks.marks_table": "x; drop"})
    with pytest.raises(ConfigError, match="elastorm.sinks.store = 'mysql'"):
        TopologyConfig.from_conf({"elastorm.sinks.store": "mysql"})


def test_marks_that_are_not_sorted_ranges_below_the_mark_are_refused() -> None:
    assert Committed.decode(9, "3-4,7-7") == Committed([(1, 2), (5, 6), (8, 9)])
    for mark, holes in ((5, "4-6"), (9, "5-6,3-4"), (0, "1-1"), (-1, "")):
        with pytest.raises(ValueError):
            Committed.decode(mark, holes)
