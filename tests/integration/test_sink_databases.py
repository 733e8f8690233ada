"""The sinks against real databases: each output id committed exactly once.

Talks to: a real PostgreSQL server (Debian's package, started by the project's
``elastorm postgres up`` through the ``postgres_server`` fixture, port
``elastorm.postgres_port``) and an embedded SQLite file. No Storm: the sink's commit
path (``elastorm.sinks.stores.Committer``) gets what a sink task would, a keyed bolt's
outputs with their ids, here every one delivered twice, out of order, in batches, with
the connection killed in the middle of a transaction (after the rows were written,
before the commit) and two sink tasks committing the same outputs at once. Tentative
outputs and their rectifications arrive as they were sent. Seconds.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import uuid
from collections import Counter

import pytest

from elastorm.sinks.commits import Output
from elastorm.sinks.stores import Committer, PostgresStore, SQLiteStore, Store

pytestmark = pytest.mark.integration

CHANNELS = [("counts", "default", g, src) for g in (0, 5) for src in ("router:3", "router:4")]
PER_CHANNEL = 40


def _outputs() -> list[Output]:
    """A keyed bolt's outputs: per channel 1..PER_CHANNEL, the first ten tentative (a
    restore was replaying), then one rectification per channel (no id)."""
    outs = []
    for component, stream, g, source in CHANNELS:
        for seq in range(1, PER_CHANNEL + 1):
            kind = "tentative" if seq <= 10 else "final"
            values = (f"{g}/{source}/{seq}", seq)
            outs.append(Output(component=component, stream=stream, key_group=g, source=source,
                               seq=seq, kind=kind, values=values))  # fmt: skip
        final = (f"{g}/{source}/final", PER_CHANNEL)
        outs.append(Output(component=component, stream=stream, key_group=g, source="", seq=0,
                           kind="rectified", values=final))  # fmt: skip
    return outs


def _deliveries(seed: int) -> list[list[Output]]:
    """Every output twice, shuffled, in batches of 1 to 12."""
    rng = random.Random(seed)
    order = _outputs() * 2
    rng.shuffle(order)
    batches = []
    while order:
        n = rng.randint(1, 12)
        batches.append(order[:n])
        order = order[n:]
    return batches


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request, tmp_path):
    """A function making connected stores of one database, with fresh tables."""
    suffix = uuid.uuid4().hex[:8]
    table, marks = f"rows_{suffix}", f"marks_{suffix}"
    made: list[Store] = []
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_server").dsn

        def make() -> Store:
            store = PostgresStore(dsn, marks_table=marks)
            made.append(store)
            return store
    else:
        path = tmp_path / "sink.sqlite"

        def make() -> Store:
            store = SQLiteStore(path, marks_table=marks)
            made.append(store)
            return store

    first = make()
    first.connect()
    first.execute(f"CREATE TABLE {table} (id TEXT, n INTEGER, kind TEXT)")
    yield request.param, table, make
    if request.param == "postgres":
        first.connect()
        first.execute(f"DROP TABLE IF EXISTS {table}")
        first.execute(f"DROP TABLE IF EXISTS {marks}")
    for store in made:
        store.close()


def _writer(store: Store, table: str, kill_at: set[int] | None = None):
    """The user's ``write``: insert the rows; on the calls numbered in ``kill_at``, kill
    the connection after inserting (the transaction dies before its commit)."""
    calls = [0]

    def write(outputs: list[Output], cursor) -> None:
        calls[0] += 1
        store.insert(cursor, table, ["id", "n", "kind"], [(*o.values, o.kind) for o in outputs])
        if kill_at and calls[0] in kill_at:
            if isinstance(store, PostgresStore):
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            else:  # SQLite: the connection dies with its transaction open
                cursor.close()
                store.close()
                raise sqlite3.OperationalError("connection killed (injected)")

    return write


def _rows(make, table: str) -> list[tuple]:
    store = make()
    store.connect()
    with store.transaction() as cursor:
        cursor.execute(f"SELECT id, n, kind FROM {table}")
        rows = [tuple(r) for r in cursor.fetchall()]
    store.close()
    return rows


def _check(rows: list[tuple], rectifications_each: int) -> None:
    """Every numbered output exactly once, with its kind; rectifications as sent."""
    counts = Counter(r[0] for r in rows)
    for _, _, g, source in CHANNELS:
        for seq in range(1, PER_CHANNEL + 1):
            assert counts[f"{g}/{source}/{seq}"] == 1, (g, source, seq)
        assert counts[f"{g}/{source}/final"] == rectifications_each
    kinds = Counter(r[2] for r in rows)
    assert kinds["tentative"] == 10 * len(CHANNELS)
    assert kinds["final"] == (PER_CHANNEL - 10) * len(CHANNELS)
    assert kinds["rectified"] == rectifications_each * len(CHANNELS)


def test_twice_delivered_shuffled_outputs_with_killed_connections_commit_once(
    store_factory, caplog
) -> None:
    kind, table, make = store_factory
    store = make()
    committer = Committer(
        sink="sink", store=store, write=_writer(store, table, kill_at={3, 9, 10}), backoff_secs=0
    )
    for batch in _deliveries(seed=7):
        committer.deliver(batch)
    _check(_rows(make, table), rectifications_each=2)  # sent twice, written twice
    failed = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(failed) == 3, failed  # the three killed connections (9 and 10: one batch)
    assert committer.written == len(CHANNELS) * (PER_CHANNEL + 2)
    assert committer.duplicates == len(CHANNELS) * PER_CHANNEL


def test_two_sink_tasks_committing_the_same_outputs_at_once_commit_each_id_once(
    store_factory,
) -> None:
    kind, table, make = store_factory
    errors: list[BaseException] = []

    def task(seed: int) -> None:
        store = make()
        committer = Committer(sink="sink", store=store, write=_writer(store, table))
        try:
            for batch in _deliveries(seed):
                committer.deliver(batch)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=task, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    _check(_rows(make, table), rectifications_each=4)  # 2 tasks x sent twice
