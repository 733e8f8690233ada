"""Driver of the elastic flights job (``topologies/flights_elastic.py``): the flights
job on key groups, with a scripted series of migrations while it runs."""

from __future__ import annotations

import time
from typing import Any

from demos.options import FlightsOptions
from drivers.flights import FlightsDriver
from elastorm.config import TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.drivers import DriverArgs
from elastorm.runtime.outcome import Outcome, Progress

#: The keyed operator the script migrates (topologies/flights_elastic.py's op2).
OPERATOR = "sum_delays"


class ElasticFlightsDriver(FlightsDriver):
    """The flights job on key groups, with a scripted series of migrations while it runs.

    ``script`` holds ``(share of rows read, protocol)``: when the spout has read that
    share of the rows, a key group moves by that protocol (CPA/CPAL to its holder,
    direct to a task that is neither owner nor holder), through ``elastorm migrate``'s
    path. The run passes only if every migration completed, each protocol was used
    as asked, and every plane's totals still equal pandas'.
    """

    name = "flights_elastic"
    keyed = frozenset({"op2"})
    operator = OPERATOR  # the keyed operator migrated (another job's driver sets its own)
    # Seconds a scripted migration may take. The first ones of a run can wait behind
    # the start-up backlog for tens of seconds (control is FIFO with data); on a
    # loaded 2-core machine one took over 60 s.
    migration_timeout = 180.0
    DEFAULT_SCRIPT = tuple(
        (share, protocol)
        for share, protocol in zip(
            (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
            ("direct", "cpa", "cpal", "direct", "cpa", "cpal", "cpa", "cpal"),
            strict=True,
        )
    )

    def __init__(
        self,
        limit: int | None = None,
        script: tuple[tuple[float, str], ...] = DEFAULT_SCRIPT,
        key_groups: int = 20,
        checkpoint_interval: float = 5.0,
        max_rate: float = 4000.0,
    ) -> None:
        super().__init__(limit)
        self.max_rate = max_rate
        self.script = list(script)
        self.scripted = len(script)
        self.key_groups = key_groups
        self.checkpoint_interval = checkpoint_interval
        self.migrations: list[dict[str, Any]] = []
        self._client = None

    def options(self, output_dir: str) -> dict[str, object]:
        return (
            super().options(output_dir)
            | TopologyConfig.overrides(
                key_groups=self.key_groups, checkpoint_interval_secs=self.checkpoint_interval
            )
            | FlightsOptions.overrides(max_rate=self.max_rate)
        )

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        try:
            super().wait(output_dir, timeout, progress)
        finally:  # before the run stops ZooKeeper: a client left open retries, and logs, for 15 s
            self._close_client()

    def _close_client(self) -> None:
        """Stop and close the ZooKeeper client of the scripted migrations, if any."""
        if self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None

    def _total_rows(self) -> int:
        return self.limit or 336_776

    def on_poll(self, result) -> None:
        # Migrations run one at a time; those still due when the input is exhausted
        # (a slow one delays the rest) run then, before the run can count as complete.
        while self.script:
            share, protocol = self.script[0]
            if result.spout_total("rows_read") < share * self._total_rows():
                return
            self.script.pop(0)
            self.migrations.append(self._migrate(len(self.migrations), protocol))
            if not result.exhausted:
                return

    def _migrate(self, index: int, protocol: str) -> dict[str, Any]:
        from elastorm.controller.requests import RequestState
        from elastorm.core.messages import Protocol
        from elastorm.runtime.migrate import connect, request_migration, wait_until_movable

        if self._client is None:
            self._client = connect(self.zk_hosts)
        group = (index * 7 + 3) % self.key_groups
        deadline = time.monotonic() + self.migration_timeout
        while True:
            # Like a controller would: move a group once its last move is over, and by
            # CPA/CPAL once its holder has reported the newest checkpoint.
            status = wait_until_movable(
                self._client,
                self.topology,
                self.operator,
                group,
                assisted=protocol != "direct",
                timeout=self.migration_timeout,
            )
            if protocol == "direct":
                target: int | str = self._direct_target(group, status)
            else:
                target = "holder"
            done = request_migration(
                self._client,
                self.topology,
                self.operator,
                group,
                target,
                Protocol(protocol),
                timeout=self.migration_timeout,
            )
            # The controller may start a move of the group itself (rebalancing) between
            # the look and the request, which it then refuses (CI, session 24): as an
            # operator would, ask again once that move is over.
            moving = done.state is RequestState.REFUSED and "already moving" in (done.detail or "")
            if not moving or time.monotonic() > deadline:
                break
        times = done.times
        return {
            "group": group,
            "asked": protocol,
            "used": done.protocol_used.value if done.protocol_used else None,
            "state": done.state.value,
            "source": done.source,
            "target": done.target,
            "ms": round((times["done"] - times["started"]) * 1000) if "done" in times else None,
            # how long the group's new tuples waited at the target (None if not reported)
            "pause_ms": None if done.pause is None else round(done.pause * 1000, 1),
            "detail": done.detail,
        }

    def _direct_target(self, group: int, status: dict[str, Any]) -> int:
        """A live task that neither owns ``group`` nor holds its checkpoint, else (an
        operator of two tasks) its holder; waits (at most the migration timeout) for a
        task declared lost to be back if need be."""
        from elastorm.runtime.migrate import wait_for_status

        deadline = time.monotonic() + self.migration_timeout
        while True:
            busy = {status["owners"][group], *status.get("lost", ())}
            free = [t for t in status["tasks"] if t not in busy]
            if free:
                return min(free, key=lambda t: t == status["holders"][group])
            if time.monotonic() > deadline:
                raise UserError(f"no live task to move key group {group} to: {status}")
            time.sleep(0.5)
            status = wait_for_status(self._client, self.topology, self.operator, 60)

    def _migrations_ok(self) -> bool:
        """Every scripted migration ran, completed, and used the protocol asked."""
        return len(self.migrations) == self.scripted and all(
            m["state"] == "done" and m["used"] == m["asked"] for m in self.migrations
        )

    def outcome(self, output_dir: str) -> Outcome:
        base = super().outcome(output_dir)
        self._close_client()
        lines = [
            f"migration {i + 1}: "
            + (
                f"key group {m['group']} task {m['source']} -> {m['target']}, "
                if m["group"] is not None
                else ""
            )
            + f"asked {m['asked']}, used {m['used']}, {m['state']}"
            + (f" in {m['ms']} ms" if m["ms"] is not None else f" ({m['detail']})")
            + (f", pause {m['pause_ms']} ms" if m.get("pause_ms") is not None else "")
            for i, m in enumerate(self.migrations)
        ]
        all_done = self._migrations_ok()
        missing = f"{len(self.script)} scripted migrations never ran" if self.script else ""
        lines.append(
            f"migrations: {len(self.migrations)} run, "
            + ("all done as asked" if all_done and not missing else "NOT all done as asked")
            + (f"; {missing}" if missing else "")
        )
        facts = base.facts | {"migrations": self.migrations}
        ok = base.ok and all_done and not self.script
        return Outcome(summary=base.summary + "\n" + "\n".join(lines), ok=ok, facts=facts)


def make_driver(args: DriverArgs) -> ElasticFlightsDriver:
    """``elastorm local flights_elastic [--limit N]``: the first N rows (default: all)."""
    return ElasticFlightsDriver(args.limit)
