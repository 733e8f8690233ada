"""Which protocol moves a key group: the one place that chooses (Madsen & Zhou 2015, section 5).

Every move (the adaptation planner's, a rescale's, an operator's request) gets its
protocol from :func:`choose_protocol`; ``MigrationController.migrate`` only checks
that what it is told to run can run. Pure: facts in, a :class:`ProtocolChoice` out.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from elastorm.core.messages import Protocol

MOVES = (Protocol.DIRECT, Protocol.CPA, Protocol.CPAL)
"""The protocols that move a key group between live tasks (RESTORE and REPLICATE do not)."""


class Verdict(enum.Enum):
    """``ORDER``: run ``protocol`` now. ``WAIT``: put the move off (the target is the
    holder and its first checkpoint is on its way). ``RELOCATE``: the lazy move, make
    the target the holder first (its next checkpoint is full), then wait, then CPA."""

    ORDER = "order"
    WAIT = "wait"
    RELOCATE = "relocate"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProtocolChoice:
    """What :func:`choose_protocol` decided: ``protocol`` is the one to order (for
    ``WAIT``/``RELOCATE``: the one it will be); ``reason`` says why whenever the
    verdict is not "order what was wanted"."""

    wanted: Protocol | None
    protocol: Protocol
    verdict: Verdict
    reason: str = ""

    def __post_init__(self) -> None:
        if self.protocol not in MOVES:
            raise ValueError(f"{self.protocol.value} is not a migration protocol")
        if self.verdict is not Verdict.ORDER and self.protocol is Protocol.DIRECT:
            raise ValueError("only a checkpoint-assisted move waits or relocates")

    @property
    def changed(self) -> bool:
        """Whether a wanted protocol is ordered as another one (a fallback to direct)."""
        return (
            self.verdict is Verdict.ORDER
            and self.wanted is not None
            and self.protocol is not self.wanted
        )


def choose_protocol(
    wanted: Protocol | None,
    *,
    target_is_holder: bool,
    holder_ready: bool,
    replay: float = 0.0,
    cpal_min_replay: float = 1.0,
    lazy: bool = False,
    waited: float = math.inf,
    defer_secs: float = 0.0,
) -> ProtocolChoice:
    """Choose how a key group moves to its target.

    Madsen & Zhou 2015, section 5: CPA (Alg. 1) and CPAL (Alg. 2) start from the
    checkpoint the target already holds, so they need the target to be the group's
    checkpoint holder *and* to hold its newest checkpoint (``holder_ready``: it
    reported it since the group last changed owner); otherwise the state has to be
    shipped whole, which is direct migration. Their lazy move (sections 5-6: relocate
    the checkpoint at the next full checkpoint, then move by CPA) is ``lazy``: a move
    whose target does not hold the checkpoint makes it the holder first and waits.

    ``wanted``: the protocol asked for (an operator's request, a planner's proposal);
    ``None`` lets this function pick: CPAL when the group has at least
    ``cpal_min_replay`` tuples to replay (its pause then does not grow with the
    replay), else CPA. A checkpoint-assisted move whose target is the holder but has
    not reported the newest checkpoint waits while ``waited < defer_secs`` (the
    target's first checkpoint after a holder change is on its way), then falls back
    to direct, and says so. ``DIRECT`` is always ordered as asked. O(1).

    Raises ``ValueError`` for a ``wanted`` protocol that moves nothing.

    >>> choose_protocol(Protocol.CPA, target_is_holder=True, holder_ready=True).protocol.value
    'cpa'
    >>> c = choose_protocol(Protocol.CPA, target_is_holder=False, holder_ready=False)
    >>> c.protocol.value, c.changed, c.reason
    ('direct', True, 'the target is not the checkpoint holder')
    >>> choose_protocol(None, target_is_holder=False, holder_ready=False, lazy=True).verdict.value
    'relocate'
    """
    if wanted is not None and wanted not in MOVES:
        raise ValueError(f"{wanted.value} is not a migration protocol one can choose")
    if wanted is Protocol.DIRECT:
        return ProtocolChoice(wanted=wanted, protocol=Protocol.DIRECT, verdict=Verdict.ORDER)
    assisted = wanted or (Protocol.CPAL if replay >= cpal_min_replay else Protocol.CPA)
    if target_is_holder and holder_ready:
        return ProtocolChoice(wanted=wanted, protocol=assisted, verdict=Verdict.ORDER)
    patient = waited < defer_secs
    if target_is_holder and patient:
        return ProtocolChoice(
            wanted=wanted,
            protocol=assisted,
            verdict=Verdict.WAIT,
            reason="waiting for the target's first checkpoint",
        )
    if not target_is_holder and lazy and patient:
        return ProtocolChoice(
            wanted=wanted,
            protocol=assisted,
            verdict=Verdict.RELOCATE,
            reason="lazy move: the target becomes the holder first, then CPA",
        )
    if target_is_holder:
        reason = "the target holds no newest checkpoint"
        if defer_secs > 0:
            reason += f" after {defer_secs:g} s"
    else:
        reason = "the target is not the checkpoint holder"
        if lazy:
            reason += f" after {defer_secs:g} s (lazy move)"
    return ProtocolChoice(
        wanted=wanted, protocol=Protocol.DIRECT, verdict=Verdict.ORDER, reason=reason
    )
