"""The output buffer's bound must not starve the trim that frees it (issue 15).

At saturation the router's buffer reached ``elastorm.max_buffered`` and the
trim that would free it sat in the same FIFO input behind a queue of data tuples;
pausing 1 ms per tuple made it wait N x 1 ms (40 s on Storm). These tests feed an
emitter (the Storm adapter, no Storm) a sequence in which the trim sits behind N
data tuples, with a fake clock that only its pauses advance.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx

from elastorm.core.holdback import Admission, HoldBack
from elastorm.core.keygroups import key_group
from elastorm.core.messages import CheckpointRequest, Data, Trim
from elastorm.storm.elastic import HOLD_BACK_SECS, STREAM, KeyedEmitting, to_wire

pytestmark = pytest.mark.usefixtures("emitter_first_start")

CONTEXT = {"taskid": 1, "componentid": "router", "task->component": {"1": "router", "20": "op"}}


class Tup:
    def __init__(self, message, sender: int) -> None:
        self.values = [to_wire(message), sender]
        self.stream = STREAM
        self.task = sender


class Router(KeyedEmitting):
    """An emitter whose sends are recorded and whose pauses advance a fake clock."""

    def __init__(self, **options) -> None:
        conf = {"elastorm.key_groups": 1, "elastorm.operators": {"op": ["router"]}}
        conf |= {f"elastorm.{k}": v for k, v in options.items()}
        self.sent: list = []
        self.clock = 0.0
        self.setup_emitting(conf, CONTEXT)

    def send(self, action) -> None:
        self.sent.append(action.message)

    def hold_back_sleep(self, secs: float) -> None:
        self.clock += secs

    def trim_all(self) -> None:
        """What the relay delivers once the holder has a checkpoint of all sent so far."""
        upto = self.emitter.counters.last(self.emitter.source, key_group("k", 1))
        self.receive_elastorm(Tup(Trim(key_group=0, watermarks={self.emitter.source: upto}), 20))


def run(router: Router, bound: int, behind: int) -> float:
    """Fill the buffer to ``bound``, then ``behind`` data tuples, then the trim: the
    fake time until the trim is read."""
    for i in range(bound + behind):
        router.emit_keyed("k", i, 0.0)
    router.trim_all()
    return router.clock


def test_a_trim_behind_n_data_tuples_does_not_wait_n_pauses() -> None:
    n = 5_000
    router = Router(max_buffered=1_000)
    assert run(router, 1_000, n) < n * HOLD_BACK_SECS / 100  # it took 0 s; before: 5 s
    assert router.emitter_health()["parked"] == n - 1_000  # the trim made room for 1,000
    for _ in range(n // 1_000 - 1):  # the next checkpoints' trims
        router.trim_all()
    # every tuple went out once, in input order, numbered 1, 2, 3, ...
    values = [m.item.value for m in router.sent if isinstance(m, Data)]
    assert values == list(range(1_000 + n))
    assert [m.item.seq for m in router.sent if isinstance(m, Data)] == list(range(1, 1_000 + n + 1))
    assert router.emitter_health()["parked"] == 0


def test_without_read_ahead_the_trim_waits_a_pause_per_tuple() -> None:
    """``elastorm.max_parked`` = 0 is the first design: the stall, for contrast."""
    n = 5_000
    assert run(Router(max_buffered=1_000, max_parked=0), 1_000, n) == approx(n * HOLD_BACK_SECS)


def test_when_no_trim_comes_memory_stays_bounded() -> None:
    """A dead holder: no trim. The buffer stays at its bound, the parked emits reach
    theirs, then every further tuple costs a pause (Storm's backpressure holds the rest)."""
    router = Router(max_buffered=100, max_parked=50)
    for i in range(400):
        router.emit_keyed("k", i, 0.0)
    health = router.emitter_health()
    assert health["buffered"] == 100 and health["parked"] == 300
    assert health["held_back"] == 250 and router.clock == approx(250 * HOLD_BACK_SECS)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 6),
    st.integers(0, 6),
    st.lists(st.sampled_from(["data", "trim"]), max_size=60),
)
def test_holdback_against_a_model(max_buffered: int, max_parked: int, events: list) -> None:
    """Any sequence of emits and trims (each trim frees the whole buffer): what is
    sent is every emit in order, the buffer never passes its bound, and a pause
    comes exactly when the parked emits are over theirs."""
    hold: HoldBack[int] = HoldBack(max_buffered=max_buffered, max_parked=max_parked)
    buffered, sent, pauses, n = 0, [], 0, 0

    def send_released() -> None:
        nonlocal buffered
        while (item := hold.release(buffered)) is not None:
            sent.append(item)
            buffered += 1

    for event in events:
        if event == "trim":
            buffered = 0
            send_released()
            continue
        send_released()
        admission = hold.admit(n, buffered)
        if admission is Admission.SEND:
            sent.append(n)
            buffered += 1
        else:
            pauses += admission is Admission.SLOW
            assert (admission is Admission.SLOW) == (hold.parked > max_parked)
        n += 1
        assert not max_buffered or buffered <= max_buffered
    assert sent + list(range(len(sent), n)) == list(range(n)) and hold.parked == n - len(sent)
    assert pauses == hold.slowed


def run_with_checkpoints(router: Router, tuples: int, every: int, round_trip: int) -> int:
    """Emit ``tuples``; the owner checkpoints every ``every`` tuples (the clock) and on
    each ``CheckpointRequest``; each checkpoint's trim (all sent when it was taken)
    arrives ``round_trip`` tuples later. Returns the most emits ever parked."""
    due: list[tuple[int, int]] = []  # (arrives after tuple i, trim up to seq)
    seen = most = 0
    for i in range(tuples):
        router.emit_keyed("k", i, 0.0)
        upto = router.emitter.counters.last(router.emitter.source, 0)
        asked = any(isinstance(m, CheckpointRequest) for m in router.sent[seen:])
        seen = len(router.sent)
        if asked or (i + 1) % every == 0:
            due.append((i + round_trip, upto))
        while due and due[0][0] <= i:
            _, mark = due.pop(0)
            router.receive_elastorm(
                Tup(Trim(key_group=0, watermarks={router.emitter.source: mark}), 20)
            )
        most = max(most, router.emitter_health()["parked"])
    return most


def test_checkpoint_requests_trim_before_the_bound_at_a_high_rate() -> None:
    """A checkpoint every 5,000 tuples with a bound of 1,000 (the quiet machine's
    saturation: 5 s x 40k/s against 200k): by the clock alone the buffer fills and
    emits park; asking at half the bound, the trims come first."""
    by_clock = Router(max_buffered=1_000)
    by_clock.emitter.request_at = 0  # what the emitter did before
    assert run_with_checkpoints(by_clock, 20_000, every=5_000, round_trip=200) > 0
    by_volume = Router(max_buffered=1_000)
    assert by_volume.emitter.request_at == 500
    assert run_with_checkpoints(by_volume, 20_000, every=5_000, round_trip=200) == 0
    assert by_volume.emitter_health()["held_back"] == 0
