"""The controller's commands through ZooKeeper, not through Storm.

Why: a Storm 2 bolt consumes no input while one of its emits waits on a target in
backpressure (``BoltExecutor`` flushes its pending emits before it reads its queue),
so a controller that commanded a router behind on data heard nothing, its ticks
included, for as long as the router stayed behind: 124 s in the join job under
overload (``docs/failures.md``). Commands are not data: here the controller writes
each one to the target task's mailbox, ``commands/<task>/c-<seq>`` (ephemeral, gone
with the controller's session as its in-flight tuples would be with its worker), and
the task reads and deletes them in sequence order. One writer thread keeps the
controller's order, so each task sees the commands to it in the order they were
sent (the FIFO channel the protocols assume); a data line ``<sender> <n>`` lets the
task drop a command written twice (a create retried after a lost answer).

A restarted task clears its mailbox as it starts (:func:`clear_mailbox`, from
``zk.requests.at_start``): commands to its earlier life are lost with it, as a
crashed worker's input tuples are, and the controller sends again what the restart
calls for once the task reports. A first start keeps what waits: the controller may
command a task whose worker is still being launched, and those commands are its own.
Both loops run off the processing thread (``BackgroundLoop``); the task takes what was
read between two of its tuples.

With the topology's secret (``elastorm.auth.secret_file``) each command is sealed as it
is written (``elastorm.core.auth``: HMAC, time, nonce) and a task refuses, logs and
deletes one that is unsigned, wrongly signed, older than 30 s or replayed.
"""

from __future__ import annotations

import collections
import logging
import os
import secrets
import time
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from elastorm.core.auth import AuthError, ReplayGuard, seal, unseal
from elastorm.core.messages import Message, from_json, to_json
from elastorm.zk.client import (
    KAZOO_ERRORS,
    BackgroundLoop,
    DirectoryLoop,
    client_keyring,
    new_nonce,
)
from elastorm.zk.layout import ZkSettings, ZnodeLayout, zk_settings

log = logging.getLogger(__name__)

RESYNC_SECS = 2.0
"""How often a mailbox is listed without a watch firing (kazoo drops watches when
its connection does)."""


def encode_command(sender: str, number: int, message: Message) -> bytes:
    """A command's znode data: ``<sender> <number>`` then the message's JSON.

    >>> from elastorm.core.messages import PeerDown
    >>> encode_command("c7-1", 3, PeerDown(key_group=0, task=4))[:5]
    b'c7-1 '
    """
    return f"{sender} {number}\n{to_json(message)}".encode()


def decode_command(data: bytes) -> tuple[str, int, Message]:
    """Inverse of :func:`encode_command`; ``ValueError`` on anything malformed."""
    head, sep, body = data.decode().partition("\n")
    sender, number = head.split(" ")
    if not sep:
        raise ValueError("no message after the command's header")
    return sender, int(number), from_json(body)


def clear_mailbox(client: KazooClient, layout: ZnodeLayout, task: int, incarnation: int) -> int:
    """As ``task`` starts its ``incarnation``-th life: delete every command waiting for
    it if it restarted (they were for its earlier life), none on a first start (they
    were sent before it came up, to it: join cpal-source at 58535de dropped 7 so);
    returns how many were deleted."""
    if incarnation <= 1:
        return 0
    path = layout.command_dir(task)
    try:
        names = client.get_children(path)
    except NoNodeError:
        return 0
    for name in names:
        try:
            client.delete(f"{path}/{name}")
        except NoNodeError:
            pass
    return len(names)


class CommandOutbox(BackgroundLoop):
    """The controller's end: :meth:`post` queues a command (never blocks); this
    thread creates the znodes in the order posted, retrying one ZooKeeper refused
    before any later one."""

    def __init__(self, client: KazooClient, layout: ZnodeLayout, task: int) -> None:
        super().__init__(
            client, layout=layout, settings=None, name="elastorm-commands-out", interval=1.0
        )
        # Unique to this process: a restarted controller numbers from 1 again.
        self._sender = f"{task}.{os.getpid()}.{secrets.token_hex(4)}"
        self._numbered = 0
        self._queue: collections.deque[tuple[int, bytes]] = collections.deque()
        self.written = 0

    def post(self, task: int, message: Message) -> None:
        """Queue ``message`` for ``task``'s mailbox (thread-safe)."""
        with self._lock:
            self._numbered += 1
            self._queue.append((task, encode_command(self._sender, self._numbered, message)))
        self.wake()

    def stop(self, timeout: float = 2.0) -> None:
        self._halt(timeout)

    def _step(self) -> None:
        ring = client_keyring(self._client)
        while self._queue and self._client.connected:
            task, data = self._queue[0]
            if ring is not None:  # sealed now, not when posted: a late write stays fresh
                data = seal(ring, "command", data, now=time.time(), nonce=new_nonce())
            try:
                self._client.create(
                    f"{self._layout.command_dir(task)}/c-",
                    data,
                    ephemeral=True,
                    sequence=True,
                    makepath=True,
                )
            except KAZOO_ERRORS as exc:
                log.warning("controller: command to task %s not written yet (%r)", task, exc)
                return
            self._queue.popleft()
            self.written += 1


class CommandInbox(DirectoryLoop):
    """A task's end: this thread reads its mailbox in sequence order, deletes what it
    read and queues the messages; the task's thread :meth:`take`s them (never
    blocks). A malformed command, or one refused by its signature (with the secret),
    is logged, counted and deleted."""

    def __init__(
        self,
        *,
        layout: ZnodeLayout,
        task: int,
        settings: ZkSettings | None = None,
        client: KazooClient | None = None,
    ) -> None:
        super().__init__(
            client,
            layout=layout,
            settings=settings,
            name=f"elastorm-commands-{task}",
            interval=RESYNC_SECS,
            directory=layout.command_dir(task),
        )
        self._read: set[str] = set()  # names read, until ZooKeeper lists them no more
        self._last: dict[str, int] = {}  # sender -> number of its newest command read
        self._inbox: collections.deque[Message] = collections.deque()
        self._guard = ReplayGuard()
        self.malformed = 0
        self.refused = 0

    @classmethod
    def of(cls, conf: Mapping[str, Any], task: int) -> CommandInbox | None:
        """The inbox of ``task`` of the topology whose Storm conf is ``conf``, on a
        ZooKeeper client of its own, started; ``None`` (logged) if the conf names no
        ZooKeeper or topology (never under Storm)."""
        try:
            settings = zk_settings(conf)
            layout = ZnodeLayout(str(conf["topology.name"]))
        except (KeyError, ValueError) as exc:
            log.error("task %s: no commands from the controller (%s)", task, exc)
            return None
        inbox = cls(layout=layout, task=task, settings=settings)
        inbox.start()
        return inbox

    def __bool__(self) -> bool:
        """Whether a command waits to be taken (one attribute read: per tuple)."""
        return bool(self._inbox)

    def take(self) -> list[Message]:
        """The commands read since the last call, in the order sent (thread-safe)."""
        out = []
        inbox = self._inbox
        while inbox:
            out.append(inbox.popleft())
        return out

    def _step(self) -> None:
        names = self._children()
        if names is None:
            return
        self._read &= set(names)
        for name in sorted(names):
            if name not in self._read and not self._take_one(name):
                return  # keep the order: read the rest after this one
            self._delete(name)

    def _take_one(self, name: str) -> bool:
        """Read command ``name`` into the inbox; False if ZooKeeper did not answer."""
        path = f"{self._dir}/{name}"
        try:
            data = self._client.get(path)[0]
        except NoNodeError:
            return True
        except KAZOO_ERRORS as exc:
            log.debug("commands: %s unreadable now (%r)", path, exc)
            return False
        self._read.add(name)
        ring = client_keyring(self._client)
        try:
            if ring is not None:
                data = unseal(ring, "command", data, now=time.time(), guard=self._guard)
        except AuthError as exc:
            self.refused += 1
            log.error("commands: %s refused, dropped: %s", path, exc)
            return True
        try:
            sender, number, message = decode_command(data)
        except ValueError as exc:
            self.malformed += 1
            log.error("commands: %s is malformed, dropped: %s", path, exc)
            return True
        if number <= self._last.get(sender, 0):
            return True  # written twice (a retried create)
        self._last[sender] = number
        self._inbox.append(message)
        return True

    def _delete(self, name: str) -> None:
        try:
            self._client.delete(f"{self._dir}/{name}")
        except NoNodeError:
            pass
        except KAZOO_ERRORS as exc:  # listed again next step, deleted then
            log.debug("commands: %s/%s not deleted yet (%r)", self._dir, name, exc)
