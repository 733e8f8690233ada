"""Authentication with the topology's secret: HMAC-SHA256 tags and digest identities (pure).

A signed message carries a *tag*, ``v1.<time>.<nonce>.<mac>``: ``mac`` is
HMAC-SHA256 under the secret of the message's *purpose* (``command``, ``request``,
``hello``: a tag made for one is worthless for another), the time, the nonce and the
payload. :func:`verify` accepts a tag whose MAC is right under the current or the
previous secret (rotation), whose time is within ``max_age`` seconds of now, and whose
nonce its :class:`ReplayGuard` has not seen; anything else raises :class:`AuthError`
saying why. Clocks and nonces are arguments: no I/O here (``docs/security.md``).

>>> ring = Keyring(current=b"s3cret")
>>> tag = sign(ring, "hello", b"11 42", now=100.0, nonce="ab12")
>>> verify(ring, "hello", b"11 42", tag, now=101.0, guard=ReplayGuard())
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from elastorm.core.errors import ElastormError

VERSION = "v1"
MAX_AGE_SECS = 30.0
"""A signed message older (or further in the future) than this is refused."""
PURPOSES = ("command", "request", "hello")


class AuthError(ElastormError):
    """A signed message is refused: the reason says which check failed (the peer's fault)."""


@dataclass(frozen=True, kw_only=True)
class Keyring:
    """The topology's current secret and, while rotating, the previous one (never shown)."""

    current: bytes = field(repr=False)
    previous: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.current or self.previous == b"":
            raise ValueError("a secret must not be empty")

    @property
    def secrets(self) -> tuple[bytes, ...]:
        """The secrets a MAC may be made with, current first."""
        return (self.current,) if self.previous is None else (self.current, self.previous)


def _mac(secret: bytes, purpose: str, stamp: str, nonce: str, payload: bytes) -> str:
    """The hex HMAC-SHA256 of one message under ``secret``."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}: expected one of {PURPOSES}")
    head = f"{VERSION}\n{purpose}\n{stamp}\n{nonce}\n".encode()
    return hmac.new(secret, head + payload, hashlib.sha256).hexdigest()


def sign(ring: Keyring, purpose: str, payload: bytes, *, now: float, nonce: str) -> str:
    """The tag of ``payload`` for ``purpose`` at time ``now`` (always the current secret).

    ``nonce``: unique per message, ``[0-9a-f]``, e.g. ``secrets.token_hex(16)``.
    """
    if not nonce or not all(c in "0123456789abcdef" for c in nonce):
        raise ValueError(f"nonce must be lowercase hex, got {nonce!r}")
    stamp = f"{now:.3f}"
    return f"{VERSION}.{stamp}.{nonce}.{_mac(ring.current, purpose, stamp, nonce, payload)}"


@dataclass
class ReplayGuard:
    """The nonces accepted within the last ``max_age`` seconds: one seen again is a replay.

    Older ones are forgotten (their messages are refused as expired anyway), so it
    holds at most the messages of one ``max_age`` window."""

    max_age: float = MAX_AGE_SECS
    _seen: dict[str, float] = field(default_factory=dict, repr=False)

    def admit(self, nonce: str, stamp: float, now: float) -> bool:
        """Record ``nonce`` (of a message stamped ``stamp``); False if it was seen."""
        self._seen = {n: t for n, t in self._seen.items() if now - t <= self.max_age}
        if nonce in self._seen:
            return False
        self._seen[nonce] = stamp
        return True


def verify(
    ring: Keyring, purpose: str, payload: bytes, tag: str, *, now: float, guard: ReplayGuard
) -> None:
    """Accept ``tag`` for ``payload`` or raise :class:`AuthError` with the reason:
    malformed, wrong MAC (under every secret of ``ring``), expired, or a replay."""
    parts = tag.split(".")
    if len(parts) != 5 or parts[0] != VERSION:
        raise AuthError(f"{purpose}: malformed or missing signature")
    stamp_text = f"{parts[1]}.{parts[2]}"
    nonce, mac = parts[3], parts[4]
    try:
        stamp = float(stamp_text)
    except ValueError:
        raise AuthError(f"{purpose}: malformed signature time {stamp_text!r}") from None
    if not any(
        hmac.compare_digest(mac, _mac(s, purpose, stamp_text, nonce, payload)) for s in ring.secrets
    ):
        raise AuthError(f"{purpose}: wrong signature (not made with the topology's secret)")
    if abs(now - stamp) > guard.max_age:
        raise AuthError(f"{purpose}: signed {now - stamp:.1f} s ago, beyond {guard.max_age:g} s")
    if not guard.admit(nonce, stamp, now):
        raise AuthError(f"{purpose}: nonce {nonce} seen before (a replay)")


def seal(ring: Keyring, purpose: str, payload: bytes, *, now: float, nonce: str) -> bytes:
    """``payload`` preceded by its tag line: a signed znode's data.

    >>> seal(Keyring(current=b"k"), "request", b"{}", now=1.0, nonce="00")[:10]
    b'v1.1.000.0'
    """
    return sign(ring, purpose, payload, now=now, nonce=nonce).encode() + b"\n" + payload


def unseal(ring: Keyring, purpose: str, data: bytes, *, now: float, guard: ReplayGuard) -> bytes:
    """The payload of sealed ``data`` once :func:`verify` accepts it; else ``AuthError``."""
    head, sep, payload = data.partition(b"\n")
    if not sep or not head.startswith(VERSION.encode() + b"."):
        raise AuthError(f"{purpose}: not signed")
    verify(ring, purpose, payload, head.decode("ascii", "replace"), now=now, guard=guard)
    return payload


def payload_of(data: bytes) -> bytes:
    """The payload of ``data`` whether sealed or not, unverified: for readers that only
    show it (the dashboard, ``elastorm migrate`` following its request).

    >>> payload_of(b'v1.1.000.00.ff\\n{}'), payload_of(b'{}')
    (b'{}', b'{}')
    """
    head, sep, payload = data.partition(b"\n")
    return payload if sep and head.startswith(VERSION.encode() + b".") else data


def digest_identity(secret: bytes) -> tuple[str, str]:
    """``(user, password)`` of ZooKeeper's digest scheme derived from ``secret``: the
    same for every process holding it, and never the secret itself.

    >>> digest_identity(b"k")[0]
    'elastorm-20de7b87'
    """
    user = "elastorm-" + hashlib.sha256(b"elastorm-zk-user\n" + secret).hexdigest()[:8]
    password = hmac.new(secret, b"elastorm-zookeeper-digest", hashlib.sha256).hexdigest()
    return user, password
