"""The pause a migration causes, measured at the target (``core.migration.pause``), and
how it travels: in the target's ``MigrationDone``, onto the request's done record."""

from __future__ import annotations

import pytest
from sim import CONTROLLER, Cluster
from test_core_migration import cluster_with_checkpoint, drain

from elastorm.controller.requests import (
    MigrationRequest,
    RequestEvent,
    decode_request,
    encode_request,
)
from elastorm.core.actions import MigrationDone, Role, decode_report, encode_report
from elastorm.core.messages import Protocol
from elastorm.core.migration.pause import PauseMeter
from elastorm.core.migration.table import Phase


def test_cpal_pauses_only_from_leaving_shadow_until_synced() -> None:
    m = PauseMeter()
    m.observe(0, Phase.IDLE, Phase.SHADOW, began=1.0, ended=2.0)  # shadow work: no pause
    m.observe(0, Phase.SHADOW, Phase.SYNCING, began=5.0, ended=6.0)
    assert m.take(0) is None  # not owner yet
    m.observe(0, Phase.SYNCING, Phase.ACTIVE, began=6.5, ended=6.75)
    assert m.take(0) == pytest.approx(0.75)
    assert m.take(0) is None  # taken once


def test_cpa_and_direct_pause_includes_the_replay() -> None:
    m = PauseMeter()
    m.observe(1, Phase.IDLE, Phase.ACTIVE, began=3.0, ended=3.4)  # one upstream: one message
    assert m.take(1) == pytest.approx(0.4)
    m.observe(1, Phase.IDLE, Phase.REPLAYING, began=10.0, ended=10.2)
    m.observe(1, Phase.REPLAYING, Phase.ACTIVE, began=10.9, ended=11.0)
    assert m.take(1) == pytest.approx(1.0)


def test_a_source_or_an_aborted_target_measures_nothing() -> None:
    m = PauseMeter()
    m.observe(2, Phase.ACTIVE, Phase.DRAINING, began=1.0, ended=1.1)
    m.observe(2, Phase.DRAINING, Phase.IDLE, began=2.0, ended=2.1)
    assert m.take(2) is None
    m.observe(2, Phase.IDLE, Phase.REPLAYING, began=3.0, ended=3.1)
    m.observe(2, Phase.REPLAYING, Phase.FAILED, began=4.0, ended=4.1)
    assert m.take(2) is None
    with pytest.raises(ValueError, match="before began"):
        m.observe(2, Phase.IDLE, Phase.ACTIVE, began=5.0, ended=4.0)


class TimedCluster(Cluster):
    """The in-memory cluster with a clock: each delivery to a task takes 1 s, and the
    target's phases are timed as the Storm adapter does (``KeyedOperator._with_pause``)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.clock = 0.0
        self.meters = {t: PauseMeter() for t in self.tasks}
        self.pauses: list[tuple[int, float | None]] = []

    def deliver(self, channel):
        sender, receiver = channel
        if receiver not in self.coordinators:
            return super().deliver(channel)
        g = self.channels[channel][0].key_group
        before = self.coordinators[receiver].phase(g)
        began = self.clock
        self.clock += 1.0
        message = super().deliver(channel)
        after = self.coordinators[receiver].phase(g)
        if after is not before:
            self.meters[receiver].observe(g, before, after, began=began, ended=self.clock)
            if after is Phase.ACTIVE:
                self.pauses.append((receiver, self.meters[receiver].take(g)))
        return message


def test_a_real_cpal_pauses_for_the_sync_not_for_the_shadow_replay() -> None:
    c = cluster_with_checkpoint(TimedCluster)
    c.migrate(0, 1, Protocol.CPAL)
    drain(c, (CONTROLLER, 10), (CONTROLLER, 11), (10, 1), (11, 1))
    assert c.coordinators[1].phase(0) is Phase.SYNCING
    synced_at = c.clock
    c.run_until_quiet()
    ((task, pause),) = c.pauses
    assert task == 1 and pause is not None
    assert 0 < pause <= c.clock - synced_at  # from entering SYNCING to owning
    assert pause < c.clock - 2  # not since the migration began


def test_a_real_cpa_pauses_for_its_replay() -> None:
    c = cluster_with_checkpoint(TimedCluster)
    began = c.clock
    c.migrate(0, 1, Protocol.CPA)
    c.run_until_quiet()
    ((task, pause),) = c.pauses
    assert task == 1 and pause is not None and 1.0 <= pause <= c.clock - began


def test_the_pause_travels_in_the_report_and_onto_the_done_request() -> None:
    done = MigrationDone(key_group=3, epoch=2, protocol=Protocol.CPAL, role=Role.TARGET, pause=0.02)
    assert decode_report(encode_report(done)) == done
    old = {k: v for k, v in encode_report(done).items() if k != "pause"}  # an older task
    assert decode_report(old).pause is None
    req = MigrationRequest(operator="op", key_group=3, target="holder", protocol=Protocol.CPAL)
    started = req.advance(RequestEvent.START, 9.0, protocol_used=Protocol.CPAL, epoch=2)
    finished = started.advance(RequestEvent.FINISH, 10.0, pause=0.02)
    assert decode_request(encode_request(finished)).pause == 0.02


def test_the_storm_adapter_puts_the_measured_pause_into_the_targets_report_only() -> None:
    from elastorm.storm.elastic import KeyedOperator

    class Coordinator:
        phase_now = Phase.SYNCING

        def phase(self, key_group: int) -> Phase:
            return self.phase_now

    bolt = object.__new__(KeyedOperator)  # no Storm: only what _with_pause uses
    bolt.coordinator, bolt.pauses = Coordinator(), PauseMeter()
    assert bolt._with_pause(0, Phase.SHADOW, 0.0, []) == []
    bolt.coordinator.phase_now = Phase.ACTIVE
    target = MigrationDone(key_group=0, epoch=1, protocol=Protocol.CPAL, role=Role.TARGET)
    source = MigrationDone(key_group=0, epoch=1, protocol=Protocol.CPAL, role=Role.SOURCE)
    out = bolt._with_pause(0, Phase.SYNCING, 0.0, [target, source])
    assert out[1] is source and out[0].pause is not None and out[0].pause >= 0
    assert out[0].role is Role.TARGET and out[0].key_group == 0
