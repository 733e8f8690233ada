"""``StartGate``: a restarted keyed task is given no work before its restart is recovered."""

from __future__ import annotations

import logging

import pytest

from elastorm.controller.starts import StartGate


def test_a_first_start_is_no_restart_and_a_new_incarnation_waits_for_its_recovery() -> None:
    gate = StartGate(patience=30.0)
    assert gate.waiting({5: 100, 6: 101}, now=0.0) == set()
    assert gate.waiting({5: 100}, now=1.0) == set()  # 6 lost: not live, nothing to wait for
    assert gate.waiting({5: 100, 6: 300}, now=2.0) == {6}  # restarted by Storm
    assert gate.waiting({5: 100, 6: 300}, now=3.0) == {6}
    gate.recovered(6, 300)
    assert gate.waiting({5: 100, 6: 300}, now=4.0) == set()
    assert gate.waiting({5: 100, 6: 300, 7: 50}, now=5.0) == set()  # a task first seen now


def test_a_start_report_ahead_of_the_new_registration_is_kept_for_it() -> None:
    gate = StartGate(patience=30.0)
    gate.waiting({6: 101}, now=0.0)
    gate.recovered(6, 101)  # recovered while the watcher still lists the old znode
    assert gate.waiting({6: 300}, now=1.0) == set()  # the new one is that restart's
    assert gate.waiting({6: 400}, now=2.0) == {6}  # a further restart waits again
    gate.recovered(6, None)  # recovered with no znode listed at all
    assert gate.waiting({6: 500}, now=3.0) == set()


def test_a_restart_never_reported_waits_patience_then_is_logged_and_admitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = StartGate(patience=10.0)
    gate.waiting({6: 101}, now=0.0)
    assert gate.waiting({6: 300}, now=1.0) == {6}
    assert gate.waiting({6: 300}, now=10.9) == {6}
    with caplog.at_level(logging.ERROR):
        assert gate.waiting({6: 300}, now=11.0) == set()
    assert "task 6 restarted 10 s ago and never reported its start" in caplog.text
    assert gate.waiting({6: 300}, now=12.0) == set()


def test_a_controller_that_starts_leading_accounts_for_every_live_incarnation() -> None:
    gate = StartGate(patience=30.0)
    gate.waiting({5: 100, 6: 101}, now=0.0)  # seen while leading before (a restart)
    assert gate.waiting({5: 100, 6: 300}, now=1.0) == {6}
    gate.accept_all({5: 100, 6: 300})  # it recovers the restarts it knows of itself
    assert gate.waiting({5: 100, 6: 300}, now=2.0) == set()
