"""Migration requests from people and scripts (``elastorm migrate``), as plain data.

A request is a znode ``/elastorm/<topology>/requests/req-<seq>`` (sequential);
the controller bolt picks it up, orders the migration through
``elastorm.core.control.MigrationController`` and writes the request's status back
into the same znode. Pure: no ZooKeeper here, only the values and their JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from elastorm.core.messages import Protocol

HOLDER = "holder"
"""``target`` value meaning "the key group's checkpoint holder" (where CPA/CPAL can go)."""


class RequestError(ValueError):
    """A request that is malformed or names something that does not exist."""


class RequestState(Enum):
    PENDING = "pending"  # written by the client
    STARTED = "started"  # the controller sent the commands
    STUCK = "stuck"  # not done within the time limit; ``detail`` names what it waits for
    DONE = "done"  # both ends reported MigrationDone (also after STUCK, if they answer)
    REFUSED = "refused"  # the controller could not carry it out (see ``detail``)


@dataclass(frozen=True, kw_only=True)
class MigrationRequest:
    """Move ``key_group`` of ``operator`` to task ``target`` (or its holder) by ``protocol``."""

    operator: str
    key_group: int
    target: int | str
    protocol: Protocol
    state: RequestState = RequestState.PENDING
    protocol_used: Protocol | None = None
    epoch: int | None = None
    source: int | None = None
    detail: str = ""
    times: dict[str, float] = field(default_factory=dict)  # state name -> controller clock
    pause: float | None = None  # done: s the group's new tuples waited at the target

    def __post_init__(self) -> None:
        if not isinstance(self.key_group, int) or self.key_group < 0:
            raise RequestError(f"key group must be an int >= 0, got {self.key_group!r}")
        if not (self.target == HOLDER or (isinstance(self.target, int) and self.target >= 0)):
            raise RequestError(f"target must be a task id or {HOLDER!r}, got {self.target!r}")
        if self.protocol in (Protocol.RESTORE, Protocol.REPLICATE):
            raise RequestError(f"{self.protocol.value} is not a migration protocol one can request")

    def with_state(self, state: RequestState, now: float, **changes: Any) -> MigrationRequest:
        """This request moved to ``state`` at time ``now``."""
        values = {**asdict(self), **changes, "state": state}
        values["times"] = {**self.times, state.value: now}
        return MigrationRequest(**values)


def encode_request(request: MigrationRequest) -> bytes:
    """JSON bytes for a request znode."""
    data = asdict(request)
    for name in ("protocol", "protocol_used", "state"):
        value = data[name]
        data[name] = None if value is None else value.value
    return json.dumps(data, sort_keys=True).encode()


def decode_request(raw: bytes) -> MigrationRequest:
    """Inverse of :func:`encode_request`; ``RequestError`` names what is wrong."""
    try:
        data = json.loads(raw.decode())
        data["protocol"] = Protocol(data["protocol"])
        data["state"] = RequestState(data.get("state", "pending"))
        used = data.get("protocol_used")
        data["protocol_used"] = None if used is None else Protocol(used)
        return MigrationRequest(**data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RequestError(f"malformed migration request: {exc}") from None
