"""The stateful migration test again, with CPAL toStates sent in tiny chunks.

Same rules and invariants as ``test_migration_stateful``; every emitter sends
its CPAL toState in chunks of 1-3 tuples with 1-2 unacknowledged at a time, so
chunks, their acks, duplicated data and every other message interleave in any
FIFO-preserving order (``ToState.more``, ``ToStateAck``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from property_scale import examples
from test_migration_stateful import EMITTERS, GROUPS, KEYS, MigrationMachine

from elastorm.core.keygroups import key_group
from elastorm.core.messages import Protocol


class ChunkedMigrationMachine(MigrationMachine):
    @initialize(
        chunk=st.integers(1, 3), window=st.integers(1, 2), request_at=st.sampled_from([0, 2, 5])
    )
    def setup(self, chunk: int, window: int, request_at: int) -> None:  # type: ignore[override]
        MigrationMachine.setup(self, request_at=request_at)
        for emitter in self.cluster.emitters.values():
            emitter.to_state_chunk = chunk
            emitter.to_state_window = window

    @precondition(lambda self: any(self.cluster.can_migrate(g) for g in range(GROUPS)))
    @rule(data=st.data(), n=st.integers(2, 8))
    def burst_then_cpal(self, data: st.DataObject, n: int) -> None:
        """Data into one group, then CPAL it to its holder at once: a buffer long
        enough to chunk (the controller falls back to direct if the holder is
        not ready)."""
        c = self.cluster
        movable = [g for g in range(GROUPS) if c.can_migrate(g)]
        group = data.draw(st.sampled_from(movable), label="group")
        if data.draw(st.booleans(), label="holder ready"):  # else direct, usually
            c.run_until_quiet()
            c.checkpoint(c.owner(group), group)
            c.run_until_quiet()
        keys = [k for k in KEYS if key_group(k, GROUPS) == group]
        for i in range(n):
            emitter = data.draw(st.sampled_from(EMITTERS), label="emitter")
            self.emit(emitter=emitter, key=keys[i % len(keys)], value=i)
        used = c.migrate(group, c.holders[group], Protocol.CPAL)
        event(f"burst then {used.value}")

    def teardown(self) -> None:
        if hasattr(self, "cluster"):
            chunks = sum(e.stats["to_state_chunks"] for e in self.cluster.emitters.values())
            event("chunked toState" if chunks else "no chunked toState")
        super().teardown()


ChunkedMigrationMachine.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestChunkedMigration = ChunkedMigrationMachine.TestCase


def test_chunks_reassemble_the_buffer_in_order() -> None:
    """One emitter, one CPAL: the target acks each chunk and the emitter sends the
    next; the chunks' items are the buffer, in order, and only the last has
    ``more`` unset."""
    from elastorm.core.messages import Migrate, ToState, ToStateAck
    from elastorm.core.migration.emitter import Emitter
    from elastorm.core.routing import RoutingTable

    emitter = Emitter(task=9, routing=RoutingTable.round_robin(2, [0, 1]), source="u")
    emitter.to_state_chunk, emitter.to_state_window = 2, 2
    keys = [k for k in (f"k{i}" for i in range(40)) if key_group(k, 2) == 0][:5]
    for i, key in enumerate(keys):
        emitter.emit(key, i, 0.0)
    buffered = emitter.buffer.replay(0)
    sends = emitter.command(
        Migrate(key_group=0, epoch=1, protocol=Protocol.CPAL, source=0, target=1)
    )
    assert [s.message.more for s in sends] == [True, True]  # the window: 2 in flight
    got = [s.message for s in sends]
    while got[-1].more:
        (send,) = emitter.receive(1, ToStateAck(key_group=0, epoch=1))
        got.append(send.message)
    assert all(isinstance(m, ToState) and m.protocol is Protocol.CPAL for m in got)
    assert [len(m.items) for m in got] == [2, 2, 1]
    assert tuple(i for m in got for i in m.items) == buffered
    assert emitter.receive(1, ToStateAck(key_group=0, epoch=1)) == []  # nothing left: stale
    assert emitter.stats["stale_to_state_acks"] == 1
