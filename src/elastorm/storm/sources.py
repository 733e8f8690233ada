"""Ready replayable sources: spouts with a position and a replay from any position.

The source contract (:class:`~elastorm.storm.replay.ReplayableSpout`): a tuple's
first field is its **position**, an integer that grows with every tuple a spout task
emits, and the spout can emit again, in the same order, every tuple from any
position on (a Kafka offset; a FLIP-27 split and its position in Flink). elastorm
then recovers a restarted router or emitter by replay (``elastorm.core.replay``):
the spout rewinds to the oldest position any downstream buffer still needs. A spout
feeding a keyed bolt that cannot do this is refused at submit
(``elastorm.storm.topology``) unless named in ``elastorm.sources.at_most_once``.

Two adapters meet the contract for the commonest sources; subclass one, name the
``fields`` after the position, and say what a line or an index becomes:

* :class:`LinesSpout`: the lines of a file, or of every file of a directory in name
  order (files added later must sort last, as rotated logs do). Position = (file
  number, byte offset of the line's start), packed into one integer (:func:`pack`),
  so a replay seeks straight to it.
* :class:`GeneratedSpout`: tuple ``i`` is ``generate(i)``, a deterministic function
  of ``i`` (a seed and the index): a replay is a recomputation.

Each spout task reads the whole source: give these spouts ``par=1`` (the default).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any, BinaryIO, ClassVar

from streamparse import Spout, Stream

from elastorm.storm.replay import REWIND, ReplayableSpout
from elastorm.storm.wire import use_elastorm_wire

log = logging.getLogger(__name__)

POSITION = "position"
"""The first field of every tuple of a ready source."""

OFFSET_BITS = 40
"""Bits of a packed position that hold the byte offset: files up to 1 TiB."""


def pack(file_number: int, offset: int) -> int:
    """One integer position for byte ``offset`` of file ``file_number``; it grows with
    the file number, then the offset (0 <= offset < 2**40).

    >>> pack(0, 17), pack(2, 0) > pack(1, 2**40 - 1)
    (17, True)
    """
    if not 0 <= offset < 1 << OFFSET_BITS or file_number < 0:
        raise ValueError(f"no position for file {file_number}, offset {offset}")
    return file_number << OFFSET_BITS | offset


def unpack(position: int) -> tuple[int, int]:
    """``(file number, byte offset)`` of a packed position (inverse of :func:`pack`).

    >>> unpack(pack(3, 99))
    (3, 99)
    """
    return position >> OFFSET_BITS, position & ((1 << OFFSET_BITS) - 1)


class PositionedSpout(ReplayableSpout, Spout):
    """The common loop of the ready sources: start where elastorm says, serve rewinds,
    emit ``[position, *values]`` at most ``rate`` tuples a second (0: as fast as Storm
    asks), ``batch`` per call. Subclasses implement :meth:`open_source`,
    :meth:`seek` and :meth:`read`."""

    fields: ClassVar[list[str]] = []
    rate: ClassVar[float] = 0.0
    batch: ClassVar[int] = 100
    idle_sleep: ClassVar[float] = 0.1  # seconds to wait when the source has nothing new

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Declare the data stream (the position, then ``fields``) and the rewind stream."""
        super().__init_subclass__(**kwargs)
        if POSITION in cls.fields:
            raise TypeError(f"{cls.__name__}.fields: {POSITION!r} is the first field already")
        cls.outputs = [Stream(fields=[POSITION, *cls.fields]), REWIND]

    def initialize(self, conf: Mapping[str, Any], context: Mapping[str, Any]) -> None:
        use_elastorm_wire(self, conf)
        self.open_source(conf)
        self.seek(self.setup_replay(conf, context))
        self._began = time.monotonic()
        self._sent = 0

    def open_source(self, conf: Mapping[str, Any]) -> None:
        """Get ready to read (the topology conf at hand); called once, before seek."""

    def seek(self, position: int) -> None:
        """Go to the first tuple at or after ``position``."""
        raise NotImplementedError

    def read(self) -> tuple[int, list] | None:
        """The next tuple, as ``(position, values)``; None when nothing is there yet."""
        raise NotImplementedError

    @property
    def position(self) -> int:
        """Where the spout is: the next tuple's position is at least this."""
        raise NotImplementedError

    def next_tuple(self) -> None:
        rewind = self.poll_rewind(self.position)
        if rewind is not None and rewind < self.position:
            self.seek(rewind)
        count = self.batch
        if self.rate:
            count = min(count, int((time.monotonic() - self._began) * self.rate) - self._sent)
            if count <= 0:
                time.sleep(min(self.idle_sleep, 1 / self.rate))
                return
        for _ in range(count):
            item = self.read()
            if item is None:
                time.sleep(self.idle_sleep)
                return
            position, values = item
            self.emit([position, *values])
            self._sent += 1


class GeneratedSpout(PositionedSpout):
    """A generated stream: tuple ``i`` (its position) is :meth:`generate` ``(i)``.

    ``generate`` must be a function of ``i`` alone (derive any randomness from a seed
    and ``i``, e.g. ``random.Random(f"{seed}:{i}")``): a replay recomputes.
    """

    _next = 0

    def generate(self, position: int) -> list | None:
        """The values of tuple ``position`` (after the position field); None: the stream
        has no tuple there (yet); it is asked again later."""
        raise NotImplementedError

    @property
    def position(self) -> int:
        return self._next

    def seek(self, position: int) -> None:
        self._next = position

    def read(self) -> tuple[int, list] | None:
        values = self.generate(self._next)
        if values is None:
            return None
        position, self._next = self._next, self._next + 1
        return position, list(values)


class LinesSpout(PositionedSpout):
    """The lines of :attr:`path` (a file, or a directory of line files read in name
    order), each emitted as ``[position, *values(line)]``.

    A line is read once its newline is written (a last line without one, once a later
    file appears); a file added to the directory later must sort after those already
    read. Position: :func:`pack` ``(file number, byte offset of the line)``.
    """

    fields: ClassVar[list[str]] = ["line"]
    path: ClassVar[str | None] = None
    path_option: ClassVar[str | None] = None  # a conf key naming the path (overrides path)
    encoding: ClassVar[str] = "utf-8"

    _files: list[str]
    _number = 0
    _file: BinaryIO | None = None
    _offset = 0

    def values(self, line: str) -> list | None:
        """What a line (without its newline) becomes; None skips it. Default: ``[line]``."""
        return [line]

    def open_source(self, conf: Mapping[str, Any]) -> None:
        path = conf.get(self.path_option) if self.path_option else None
        path = path or self.path
        if not path:
            raise ValueError(
                f"{type(self).__name__}: no input; set its path or path_option "
                f"(the conf key that names the file or directory)"
            )
        self.root = os.path.abspath(str(path))
        self._files = []
        self._refused: set[str] = set()
        self._list()

    def _list(self) -> bool:
        """Take in the directory's new files (those sorting after the last known);
        True if there are any. A single file is its own list."""
        if not os.path.isdir(self.root):
            found = [self.root] if os.path.exists(self.root) else []
        else:
            found = sorted(
                os.path.join(self.root, n)
                for n in os.listdir(self.root)
                if not n.startswith(".") and os.path.isfile(os.path.join(self.root, n))
            )
        known = set(self._files)
        last = self._files[-1] if self._files else ""
        new = []
        for name in found:
            if name in known:
                continue
            if name > last:
                new.append(name)
            elif name not in self._refused:
                self._refused.add(name)
                log.error(
                    "%s: %s sorts before %s, which was read already: not read (a replay "
                    "needs a fixed file order; name new files to sort last)",
                    type(self).__name__, name, last,
                )  # fmt: skip
        self._files.extend(new)
        return bool(new)

    @property
    def position(self) -> int:
        return pack(self._number, self._offset)

    def seek(self, position: int) -> None:
        """Open the file of ``position`` at the first line starting at or after it."""
        number, offset = unpack(position)
        if number >= len(self._files):
            self._list()
        if self._file is not None:
            self._file.close()
            self._file = None
        self._number, self._offset = number, offset
        if number >= len(self._files):
            return  # not there yet: read() waits for it
        self._file = open(self._files[number], "rb")  # noqa: SIM115 (kept open while reading)
        if offset > 0:  # skip the rest of the line holding the byte before the offset
            self._file.seek(offset - 1)
            self._file.readline()
        self._offset = self._file.tell()

    def read(self) -> tuple[int, list] | None:
        while True:
            if self._file is None:
                if self._number >= len(self._files) and not self._list():
                    return None
                self.seek(pack(self._number, 0))
                continue
            start = self._offset
            raw = self._file.readline()
            if not raw.endswith(b"\n"):  # the file's end, or a last line being written
                if self._number + 1 >= len(self._files) and not self._list():
                    self._file.seek(start)  # nothing after it yet: wait
                    return None
                if not raw:
                    self.seek(pack(self._number + 1, 0))
                    continue
            self._offset = self._file.tell()
            values = self.values(raw.decode(self.encoding, errors="replace").rstrip("\r\n"))
            if values is not None:
                return pack(self._number, start), list(values)
