"""Driver of the quickstart (``bin/quickstart``): the elastic flights job
(``topologies/flights_elastic.py``) with a live CPAL migration and a keyed task
killed with ``kill -9`` mid-run, told in plain words, then checked against pandas."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from demos.flights_results import read_results
from drivers.flights_elastic import OPERATOR, ElasticFlightsDriver
from elastorm.errors import UserError
from elastorm.runtime.drivers import DriverArgs
from elastorm.runtime.outcome import Outcome

MIGRATE_AT = 0.2  # share of the input read when a key group moves by CPAL
KILL_AT = 0.4  # share read when a keyed task is killed (once no group moves)


class QuickstartDriver(ElasticFlightsDriver):
    """The elastic flights job with a CPAL migration at ``MIGRATE_AT`` of the input and
    a ``kill -9`` of one op2 task's Python process at ``KILL_AT``.

    On ``elastorm local`` every worker is the LocalCluster's one JVM, and each op2
    task is a ShellBolt with a Python subprocess of its own: the kill is a real
    ``kill -9`` of that subprocess, the task and its in-memory key groups. The
    LocalCluster leaves the task dead (``LocalRunner.KeyedTaskDeath``; on a cluster
    Storm would restart its worker), so the controller must declare it lost and
    restore its key groups on their checkpoint holders, replaying what came after
    the checkpoints from the emitters' buffers. The victim is a task whose every key
    group has its newest checkpoint on another task, and it is killed while no group
    moves. Passes if the migration completed by CPAL, every group of the killed task
    was restored, and every plane's totals still equal pandas'.
    """

    name = "flights_elastic"  # the topology it runs

    def __init__(self, limit: int | None = None) -> None:
        super().__init__(limit, script=((MIGRATE_AT, "cpal"), (KILL_AT, "kill")))
        self.output_dir = ""
        self.kill: dict[str, Any] = {}
        self.also_lost: list[int] = []  # keyed tasks declared lost besides the killed one

    def options(self, output_dir: str) -> dict[str, object]:
        self.output_dir = output_dir
        return super().options(output_dir)

    def on_poll(self, result) -> None:
        super().on_poll(result)
        if self.kill and self._client is not None:
            from kazoo.exceptions import KazooException

            from elastorm.runtime.migrate import wait_for_status

            try:
                lost = wait_for_status(self._client, self.topology, OPERATOR, 10).get("lost", ())
            except KazooException:  # e.g. this client's session expired on a busy machine
                return  # only for the story: the next poll reads it again
            self.also_lost = sorted(set(self.also_lost) | set(lost) - {self.kill["task"]})

    def _migrate(self, index: int, protocol: str) -> dict[str, Any]:
        if protocol != "kill":
            return super()._migrate(index, protocol)
        return self._kill_a_keyed_task()

    def _kill_a_keyed_task(self) -> dict[str, Any]:
        """kill -9 of a keyed task's Python process; the seconds until the controller
        declared it lost and until every key group it owned was restored elsewhere."""
        from elastorm.runtime.migrate import connect, wait_for_status

        if self._client is None:
            self._client = connect(self.zk_hosts)
        due = time.monotonic()
        deadline = due + self.migration_timeout
        while True:
            status = wait_for_status(self._client, self.topology, OPERATOR, 60)
            victim = None if status["moving"] else _victim(status)
            if victim is not None:
                break
            if time.monotonic() > deadline:
                raise UserError(
                    "no keyed task to kill: each one's groups lack a newest checkpoint "
                    f"elsewhere: {status}"
                )
            time.sleep(0.1)
        owned = [g for g, owner in enumerate(status["owners"]) if owner == victim]
        pid = self._pid_of(victim)
        load = os.getloadavg()[0]
        rows = read_results(self.output_dir).spout_total("rows_read")
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        seen: dict[str, float] = {}
        while "restored" not in seen:
            status = wait_for_status(self._client, self.topology, OPERATOR, 60)
            now = time.monotonic() - killed_at
            if "detected" not in seen and victim in status.get("lost", ()):
                seen["detected"] = now
            moving = set(status["moving"]) & set(owned)
            if victim not in status["owners"] and not moving:
                seen["restored"] = now
                seen.setdefault("detected", now)  # restored implies declared lost
            if now > self.migration_timeout:
                raise UserError(
                    f"keyed task {victim} killed {now:.0f} s ago; its groups {owned} are not "
                    f"restored (owners {[status['owners'][g] for g in owned]}, lost "
                    f"{status.get('lost')})"
                )
            time.sleep(0.05)
        self.kill = {
            "task": victim,
            "pid": pid,
            "groups": owned,
            "holders": sorted({status["owners"][g] for g in owned}),
            "loadavg_1m": round(load, 1),
            "rows_read": rows,
            "waited": round(killed_at - due, 1),  # for a moment when losing it loses no state
            **{k: round(v, 2) for k, v in seen.items()},
        }
        return {
            "group": None,
            "asked": f"kill -9 of task {victim}",
            "used": "kill",
            "state": "restored",
            "source": victim,
            "target": None,
            "ms": round(seen["restored"] * 1000),
            "detail": f"every group restored {seen['restored']:.2f} s after the kill",
        }

    def _pid_of(self, task: int) -> int:
        """The pid of an op2 task's Python process (from its counts file)."""
        path = os.path.join(self.output_dir, "counts", f"{OPERATOR}-{task}.json")
        with open(path, encoding="utf-8") as fh:
            return int(json.load(fh)["pid"])

    def _migrations_ok(self) -> bool:
        """The CPAL migration done as asked, and the killed task's groups restored."""
        moved = [m for m in self.migrations if m["used"] != "kill"]
        killed = [m for m in self.migrations if m["used"] == "kill"]
        return (
            len(self.migrations) == self.scripted
            and all(m["state"] == "done" and m["used"] == m["asked"] for m in moved)
            and all(m["state"] == "restored" for m in killed)
        )

    def outcome(self, output_dir: str) -> Outcome:
        out = super().outcome(output_dir)
        story = self.story(out.ok)
        return Outcome(
            summary=out.summary + "\n\n" + story, ok=out.ok, facts=out.facts | {"kill": self.kill}
        )

    def story(self, ok: bool) -> str:
        """What happened during the run, in plain words."""
        lines = [
            "What happened:",
            f"- op2 (delay sum per plane) ran on {self.key_groups} key groups over the "
            "keyed tasks; each group was checkpointed every "
            f"{self.checkpoint_interval:g} s onto another task (its checkpoint holder).",
        ]
        cpal = next((m for m in self.migrations if m["used"] != "kill"), None)
        if cpal is not None and cpal["state"] == "done":
            pause = cpal.get("pause_ms")
            lines.append(
                f"- At {MIGRATE_AT:.0%} of the input, key group {cpal['group']} moved live "
                f"from task {cpal['source']} to task {cpal['target']} (its checkpoint holder) "
                f"by CPAL in {cpal['ms']} ms: only the state changed since the last "
                "checkpoint was sent"
                + (
                    f"; the group's new tuples waited {pause} ms at the target (its pause)"
                    if pause is not None
                    else ""
                )
                + ", and every other group went on."
            )
        elif cpal is not None:
            lines.append(
                f"- The CPAL migration of key group {cpal['group']}: {cpal['state']} "
                f"({cpal['detail']})."
            )
        if self.kill:
            k = self.kill
            when = f"At {k['rows_read'] / self._total_rows():.0%} of the input"
            if k["waited"] >= 1:
                when += (
                    f" (after waiting {k['waited']:g} s for a moment when no group moved and "
                    "every group of one task had its newest checkpoint on another)"
                )
            lines.append(
                f"- {when}, kill -9 of keyed task {k['task']}'s Python process (pid {k['pid']}), "
                f"owner of key groups {k['groups']}, whose state lived in its memory. The "
                f"controller declared it lost {k['detected']:.2f} s after the kill and had "
                f"restored all {len(k['groups'])} groups on task(s) {k['holders']} from their "
                "checkpoints, replaying what came after them from the upstream buffers, "
                f"{k['restored']:.2f} s after it (load average {k['loadavg_1m']}). The "
                "LocalCluster does not restart the task (every worker is one JVM here), so "
                "the job finished on the tasks left."
            )
        if self.also_lost:
            lines.append(
                f"- Keyed task(s) {self.also_lost} were declared lost too and stopped themselves "
                "(fenced): on a machine this busy a ZooKeeper session can expire. Their key "
                "groups were restored the same way; the LocalCluster does not restart them."
            )
        lines.append(
            "- Check: every plane's totals "
            + (
                "equal pandas' exactly: nothing was lost or counted twice."
                if ok
                else "do NOT all equal pandas' (see above)."
            )
        )
        return "\n".join(lines)


def _victim(status: dict[str, Any]) -> int | None:
    """The lowest-numbered owner whose every key group has its newest checkpoint on
    another task, so losing it loses no state; None if there is none yet."""
    owners, holders, newest = status["owners"], status["holders"], status["assisted"]
    for task in sorted(set(owners)):
        mine = [g for g, owner in enumerate(owners) if owner == task]
        if all(holders[g] != task and newest[g] for g in mine):
            return task
    return None


def make_driver(args: DriverArgs) -> QuickstartDriver:
    """``elastorm local quickstart [--limit N]``: the first N rows (default: all)."""
    return QuickstartDriver(args.limit)
