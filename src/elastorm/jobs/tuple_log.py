"""Sampled tuple logs: what spouts and bolts saw, for the offline correlation job.

A task keeps one ``TupleLogWriter`` per operator it logs for and calls
``write(key, ts)`` for every tuple; a seeded Bernoulli sample of them is
buffered and written as Parquet files, ``batch_rows`` rows per file::

    <directory>/<operator>/part-<task>-<seq>.parquet
        key     string   the tuple's routing key (as given to key_group)
        ts      float64  the tuple's event time, epoch seconds
        weight  float64  1 / sample_rate, so summed weights estimate the load

Files are written under a dot-name and renamed when complete, so a reader (Spark
skips dot-files) never sees half a file. No Storm imports: usable from any
process. ``elastorm correlate --input name=<operator>,format=tuplelog,...`` reads
``<directory>/<operator>`` back.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("key", pa.string()), ("ts", pa.float64()), ("weight", pa.float64())])


class TupleLogWriter:
    """Append a sample of ``(key, ts)`` pairs of one operator to Parquet files.

    ``sample_rate`` in ``(0, 1]`` is the probability that a tuple is kept; the
    choice is drawn from ``random.Random(seed)``, so a rerun with the same seed
    and input logs the same tuples. ``task`` names this writer's files so
    several tasks can share a directory (default: the process id).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        operator: str,
        sample_rate: float = 1.0,
        seed: int = 0,
        *,
        batch_rows: int = 50_000,
        task: str | int | None = None,
    ) -> None:
        if not operator or "/" in operator or operator.startswith((".", "_")):
            raise ValueError(f"operator must be a plain non-hidden name, got {operator!r}")
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
        self.directory = Path(directory) / operator
        self.operator = operator
        self.sample_rate = float(sample_rate)
        self.batch_rows = batch_rows
        self.task = str(os.getpid() if task is None else task)
        self._rng = random.Random(seed)
        self._keys: list[str] = []
        self._ts: list[float] = []
        self._files = 0
        self._closed = False
        self.seen = 0

    def write(self, key: str, ts: float) -> bool:
        """Offer one tuple; return whether it was sampled. Flushes every ``batch_rows``."""
        if self._closed:
            raise ValueError("write() on a closed TupleLogWriter")
        if not isinstance(key, str):
            raise TypeError(f"key must be str, got {type(key).__name__}")
        self.seen += 1
        if self.sample_rate < 1.0 and self._rng.random() >= self.sample_rate:
            return False
        self._keys.append(key)
        self._ts.append(float(ts))
        if len(self._keys) >= self.batch_rows:
            self.flush()
        return True

    def flush(self) -> Path | None:
        """Write buffered rows to a new file; return its path (``None`` if nothing buffered)."""
        if not self._keys:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        table = pa.table(
            {
                "key": pa.array(self._keys, pa.string()),
                "ts": pa.array(self._ts, pa.float64()),
                "weight": pa.array([1.0 / self.sample_rate] * len(self._keys), pa.float64()),
            },
            schema=SCHEMA,
        )
        name = f"part-{self.task}-{self._files:06d}.parquet"
        tmp = self.directory / f".{name}.tmp"
        pq.write_table(table, tmp)
        final = self.directory / name
        os.replace(tmp, final)
        self._files += 1
        self._keys.clear()
        self._ts.clear()
        return final

    def close(self) -> None:
        """Flush and refuse further writes. Idempotent."""
        if not self._closed:
            self.flush()
            self._closed = True

    def __enter__(self) -> TupleLogWriter:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.close()
