"""Hypothesis stateful test of the durable format: any sequence of updates, checkpoints,
compactions, retention and crashes (between a checkpoint's file and its manifest, or
of the writer's whole process) recovers the state the model had at the last manifest."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from elastorm.core.state import KeyGroupState
from elastorm.durable.format import Policy
from elastorm.durable.restore import load_latest
from elastorm.durable.store import DurableStore, StoreError
from elastorm.durable.writer import ChainBroken, no_pins, retire, write_checkpoint

OP = "op"
GROUP = 5


class MemoryStore:
    """An in-memory DurableStore; ``crash_on`` makes the next put of a matching path fail."""

    uri = "memory://"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.crash_on: str | None = None

    def put(self, path: str, data: bytes) -> None:
        if self.crash_on is not None and self.crash_on in path:
            self.crash_on = None
            raise StoreError("crash")
        self.files[path] = bytes(data)

    def get(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def list(self, directory: str) -> list[str]:
        prefix = directory + "/"
        return sorted(p[len(prefix) :] for p in self.files if p.startswith(prefix))

    def delete(self, path: str) -> None:
        self.files.pop(path, None)


class DurableMachine(RuleBasedStateMachine):
    """The real format and store calls against a model: the dict at the last manifest."""

    @initialize(
        compact=st.integers(1, 4), retain=st.integers(0, 2), compact_bytes=st.integers(50, 5000)
    )
    def setup(self, compact, retain, compact_bytes):
        self.store = MemoryStore()
        assert isinstance(self.store, DurableStore)
        self.policy = Policy(compact_deltas=compact, compact_bytes=compact_bytes, retain=retain)
        self.state = KeyGroupState(GROUP)
        self.kept = []  # the writer's view: newest first
        self.seq = 0
        self.model: dict | None = None  # state at the last manifest (None: nothing durable)
        self.model_marks: dict = {}

    @rule(key=st.sampled_from("abcd"), value=st.integers(-5, 5))
    def update(self, key, value):
        self.seq += 1
        self.state.update(key, value)
        self.state.applied["up"] = self.seq

    def _checkpoint(self, crash_on: str | None = None) -> None:
        delta = self.state.begin_checkpoint()
        self.state.finish_checkpoint()
        self.store.crash_on = crash_on
        current = self.kept[0] if self.kept else None
        try:
            manifest = write_checkpoint(self.store, self.policy, OP, current, delta)
        except ChainBroken:
            self.state.needs_full = True  # the writer asks the owner for a full checkpoint
            return
        except StoreError:
            self.state.needs_full = True  # a lost write breaks the chain the same way
            return
        self.kept = [manifest, *self.kept][: self.policy.retain + 1]
        self.model = self.state.items()
        self.model_marks = dict(self.state.applied)

    @rule()
    def checkpoint(self):
        self._checkpoint()

    @rule(where=st.sampled_from(["/manifest-", "/delta-", "/base-"]))
    def crash_mid_write(self, where):
        self._checkpoint(crash_on=where)

    @precondition(lambda self: self.kept)
    @rule()
    def retention(self):
        if len(self.kept) == self.policy.retain + 1:
            retire(self.store, OP, self.kept, no_pins)

    @rule()
    def writer_restarts(self):
        """The writer's process restarts: it knows its sets only from the store."""
        found = load_latest(self.store, OP, GROUP)
        self.kept = [] if found is None else [found.manifest]

    @invariant()
    def recovers_the_last_manifest(self):
        found = load_latest(self.store, OP, GROUP)
        if self.model is None:
            assert found is None
            return
        assert found is not None and found.skipped == 0
        assert found.copy.entries == self.model
        assert found.copy.watermarks == self.model_marks


TestDurable = DurableMachine.TestCase
TestDurable.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
