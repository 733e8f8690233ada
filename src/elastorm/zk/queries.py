"""State queries in ZooKeeper: the asker's side and the keyed task's (a thin kazoo
adapter over ``elastorm.core.queries``, which decides).

The asker creates ``queries/<task>/q-<seq>`` (ephemeral: gone with its session if it
dies) holding the query; the task writes its answer over it (with the version it
read, so a query is answered once) and the asker reads, then deletes it. A keyed
task's :class:`QueryInbox` runs on its own thread with the heartbeat publisher's
client and a children watch on its own directory: the task's processing never waits
for ZooKeeper; it takes the queries on its tick and hands back the answers.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from elastorm.core.queries import (
    QueryError,
    StateAnswer,
    StateQuery,
    decode_answer,
    decode_query,
    encode_answer,
    encode_query,
)
from elastorm.zk.client import KAZOO_ERRORS, DirectoryLoop
from elastorm.zk.layout import ZkSettings, ZnodeLayout

log = logging.getLogger(__name__)

RESYNC_SECS = 5.0
"""How often the inbox lists its directory without a watch firing (kazoo drops
watches when its connection does)."""


def post_query(client: KazooClient, layout: ZnodeLayout, query: StateQuery) -> str:
    """Create the query's ephemeral znode under its task's directory; return its path."""
    return client.create(
        f"{layout.query_dir(query.task)}/q-",
        encode_query(query),
        ephemeral=True,
        sequence=True,
        makepath=True,
    )


def read_answer(client: KazooClient, path: str) -> StateAnswer | None:
    """The answer written over the query at ``path``, or None (unanswered, or gone)."""
    try:
        data = client.get(path)[0]
    except NoNodeError:
        return None
    return decode_answer(data)


def withdraw_query(client: KazooClient, path: str) -> None:
    """Delete the query at ``path`` (answered or given up); gone already is fine."""
    try:
        client.delete(path)
    except NoNodeError:
        pass


class QueryInbox(DirectoryLoop):
    """A keyed task's state queries: read on this thread, answered on the task's.

    :meth:`take` (the task's thread, never blocks) returns the new queries with their
    znode paths; :meth:`reply` queues an answer, which this thread writes over the
    query if it is still unanswered and there. A malformed query is logged and left
    for its asker's timeout.
    """

    def __init__(
        self,
        *,
        layout: ZnodeLayout,
        task: int,
        client: KazooClient | None = None,
        settings: ZkSettings | None = None,
    ) -> None:
        super().__init__(
            client,
            layout=layout,
            settings=settings,
            name=f"elastorm-queries-{task}",
            interval=RESYNC_SECS,
            directory=layout.query_dir(task),
        )
        self._seen: dict[str, int] = {}  # name -> version read (until it is gone)
        self._inbox: list[tuple[str, StateQuery]] = []
        self._outbox: list[tuple[str, StateQuery, StateAnswer]] = []
        self._queue_lock = threading.Lock()
        self.answered = 0
        self.malformed = 0

    def take(self) -> list[tuple[str, StateQuery]]:
        """The queries read since the last call, oldest first (thread-safe)."""
        with self._queue_lock:
            taken, self._inbox = self._inbox, []
        return taken

    def reply(self, path: str, query: StateQuery, answer: StateAnswer) -> None:
        """Queue ``answer`` to the query at ``path``; written on this thread (never blocks)."""
        with self._queue_lock:
            self._outbox.append((path, query, answer))
        self.wake()

    def _step(self) -> None:
        if not self._client.connected:
            return
        with self._queue_lock:
            outbox, self._outbox = self._outbox, []
        for path, query, answer in outbox:
            self._write(path, query, answer)
        names = self._children()
        if names is None:
            return
        current = set(names)
        for name in [n for n in self._seen if n not in current]:
            del self._seen[name]
        for name in sorted(current - self._seen.keys()):
            self._read(name)

    def _read(self, name: str) -> None:
        path = f"{self._dir}/{name}"
        try:
            data, stat = self._client.get(path)
        except NoNodeError:
            return
        except KAZOO_ERRORS as exc:
            log.debug("queries: %s unreadable now (%r)", path, exc)
            return
        self._seen[name] = stat.version
        try:
            query = decode_query(data)
            if decode_answer(data) is not None:
                return  # answered already (an earlier incarnation of this task)
        except QueryError as exc:
            self.malformed += 1
            log.error("state query %s is malformed, not answered: %s", path, exc)
            return
        with self._queue_lock:
            self._inbox.append((path, query))

    def _write(self, path: str, query: StateQuery, answer: StateAnswer) -> None:
        version = self._seen.get(path.rsplit("/", 1)[1])
        if version is None:
            return  # withdrawn meanwhile
        try:
            self._client.set(path, encode_answer(query, answer), version=version)
            self.answered += 1
        except (NoNodeError, BadVersionError):
            pass  # withdrawn, or answered by an earlier incarnation
        except KAZOO_ERRORS as exc:
            log.warning("state query %s: answer not written yet (%r)", path, exc)
            with self._queue_lock:  # written on a later step, if the query is still there
                self._outbox.append((path, query, answer))
