"""Signing and verifying with the topology's secret (``elastorm.core.auth``)."""

from __future__ import annotations

import doctest

import pytest

from elastorm.core import auth
from elastorm.core.auth import (
    AuthError,
    Keyring,
    ReplayGuard,
    digest_identity,
    seal,
    sign,
    unseal,
    verify,
)

RING = Keyring(current=b"current-secret")


def check(ring: Keyring, tag: str, *, payload: bytes = b"11 42", now: float = 1001.0,
          purpose: str = "hello", guard: ReplayGuard | None = None) -> None:  # fmt: skip
    verify(ring, purpose, payload, tag, now=now, guard=guard or ReplayGuard())


def test_doctests() -> None:
    assert doctest.testmod(auth).failed == 0


def test_a_fresh_tag_under_the_secret_is_accepted() -> None:
    check(RING, sign(RING, "hello", b"11 42", now=1000.0, nonce="aa"))


def test_a_wrong_secret_is_refused() -> None:
    tag = sign(Keyring(current=b"forger"), "hello", b"11 42", now=1000.0, nonce="aa")
    with pytest.raises(AuthError, match="wrong signature"):
        check(RING, tag)


def test_a_changed_payload_or_purpose_is_refused() -> None:
    tag = sign(RING, "hello", b"11 42", now=1000.0, nonce="aa")
    with pytest.raises(AuthError, match="wrong signature"):
        check(RING, tag, payload=b"12 42")
    with pytest.raises(AuthError, match="wrong signature"):
        check(RING, tag, purpose="command")


def test_an_expired_or_future_tag_is_refused() -> None:
    tag = sign(RING, "hello", b"11 42", now=1000.0, nonce="aa")
    with pytest.raises(AuthError, match="beyond 30 s"):
        check(RING, tag, now=1030.5)
    with pytest.raises(AuthError, match="beyond 30 s"):
        check(RING, tag, now=969.0)
    check(RING, tag, now=1029.9)


def test_a_replayed_nonce_is_refused() -> None:
    guard = ReplayGuard()
    tag = sign(RING, "hello", b"11 42", now=1000.0, nonce="aa")
    check(RING, tag, guard=guard)
    with pytest.raises(AuthError, match="seen before"):
        check(RING, tag, guard=guard)


def test_the_guard_forgets_nonces_older_than_its_window() -> None:
    guard = ReplayGuard(max_age=30.0)
    assert guard.admit("aa", 1000.0, 1000.0)
    assert not guard.admit("aa", 1000.0, 1010.0)
    assert guard.admit("bb", 1040.0, 1040.0)
    assert guard._seen == {"bb": 1040.0}


def test_rotation_accepts_the_previous_secret_and_signs_with_the_current() -> None:
    old = Keyring(current=b"old-secret")
    rotating = Keyring(current=b"new-secret", previous=b"old-secret")
    check(rotating, sign(old, "hello", b"11 42", now=1000.0, nonce="aa"))
    new_tag = sign(rotating, "hello", b"11 42", now=1000.0, nonce="bb")
    check(Keyring(current=b"new-secret"), new_tag)
    with pytest.raises(AuthError, match="wrong signature"):
        check(old, new_tag)


def test_malformed_and_unsigned_data_are_refused() -> None:
    for tag in ("", "v1.1000", "v2.1000.000.aa.ff", "v1.x.y.aa.ff"):
        with pytest.raises(AuthError):
            check(RING, tag)
    with pytest.raises(AuthError, match="not signed"):
        unseal(RING, "command", b'c1 1\n{"type": "x"}', now=1000.0, guard=ReplayGuard())


def test_seal_and_unseal_round_trip() -> None:
    data = seal(RING, "command", b"c1 1\n{}", now=1000.0, nonce="0f")
    assert unseal(RING, "command", data, now=1001.0, guard=ReplayGuard()) == b"c1 1\n{}"


def test_bad_arguments_are_the_callers_error() -> None:
    with pytest.raises(ValueError):
        sign(RING, "hello", b"", now=1.0, nonce="XYZ")
    with pytest.raises(ValueError):
        sign(RING, "launch", b"", now=1.0, nonce="aa")
    with pytest.raises(ValueError):
        Keyring(current=b"")


def test_the_digest_identity_is_derived_not_the_secret() -> None:
    user, password = digest_identity(b"current-secret")
    assert digest_identity(b"current-secret") == (user, password)
    assert b"current-secret" not in (user + password).encode()
    assert digest_identity(b"other")[0] != user
    assert "current-secret" not in repr(RING)


def test_the_conf_names_the_secret_file_and_zk_settings_read_it(tmp_path) -> None:
    from elastorm.config import TopologyConfig
    from elastorm.zk.layout import zk_settings

    (tmp_path / "new").write_text("new-secret\n")
    (tmp_path / "old").write_text("old-secret")
    conf = {
        "storm.zookeeper.servers": ["127.0.0.1"],
        "elastorm.auth.secret_file": str(tmp_path / "new"),
        "elastorm.auth.previous_secret_file": str(tmp_path / "old"),
    }
    assert TopologyConfig.from_conf(conf).auth.secret_file == str(tmp_path / "new")
    settings = zk_settings(conf)
    assert settings.keyring == Keyring(current=b"new-secret", previous=b"old-secret")
    assert "secret" not in repr(settings).replace("secret_file", "")
    assert zk_settings({"storm.zookeeper.servers": ["h"]}).keyring is None  # off by default


def test_an_unreadable_or_empty_secret_file_is_a_clear_error(tmp_path) -> None:
    from elastorm.config import ConfigError, TopologyConfig
    from elastorm.files import SecretFileError, load_keyring

    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SecretFileError, match="secret file .*/missing is unreadable"):
        load_keyring(str(tmp_path / "missing"))
    with pytest.raises(SecretFileError, match="secret file .*/empty is empty"):
        load_keyring(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="previous_secret_file is set without"):
        TopologyConfig.from_conf({"elastorm.auth.previous_secret_file": "/x"})
    with pytest.raises(ConfigError, match="did you mean elastorm.auth.secret_file"):
        TopologyConfig.from_conf({"elastorm.auth.secret": "/x"})
