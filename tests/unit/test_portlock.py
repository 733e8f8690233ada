"""The machine-wide lock of a configuration's fixed ports (``elastorm.runtime.portlock``)."""

from __future__ import annotations

import dataclasses

import pytest

from elastorm.errors import UserError
from elastorm.runtime import portlock
from elastorm.runtime.config import load_config


def test_a_second_holder_is_refused_at_once_naming_the_first(tmp_path, monkeypatch) -> None:
    cfg = dataclasses.replace(load_config(), home=tmp_path / "first")
    monkeypatch.setattr(portlock, "lock_path", lambda _cfg: tmp_path / "ports.lock")
    with portlock.hold_ports(cfg, "a test session"):
        other = dataclasses.replace(cfg, home=tmp_path / "second")
        with pytest.raises(UserError, match=r"in use by another run \(a test session, pid \d+"):
            with portlock.hold_ports(other, "bench/chaos.py"):
                pass
    with portlock.hold_ports(cfg, "the next run"):  # released when the first ended
        assert "the next run" in (tmp_path / "ports.lock").read_text()
