"""Hypothesis stateful test of the migration request lifecycle against a plain model.

The real thing: requests submitted as the client does (``submit_request``), their
states written by a ``RequestBoard`` (through ``TRANSITIONS``) into an in-memory
ZooKeeper, and a leader that dies: a new board, and the successor's rule
(``after_leader_lost`` on each request its predecessor left in flight, from the
routing epoch it loaded and what the heartbeats show). The model: each request's
state and epoch by hand-written rules, and which requests the current board has
already listed.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from memory_zk import MemoryZk

from elastorm.controller.requests import (
    MigrationRequest,
    RequestEvent,
    after_leader_lost,
    decode_request,
    encode_request,
)
from elastorm.core.messages import Protocol
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import RequestBoard, submit_request

LAYOUT = ZnodeLayout("t")
FINAL = {"done", "refused", "abandoned"}


class RequestLifecycle(RuleBasedStateMachine):
    names = Bundle("names")

    @initialize()
    def start_cluster(self) -> None:
        self.zk = MemoryZk()
        self.zk.ensure_path(LAYOUT.requests)
        self.board = RequestBoard(self.zk, LAYOUT, "op")
        self.state: dict[str, str] = {}  # the model: name -> state
        self.epoch: dict[str, int | None] = {}
        self.listed: set[str] = set()  # names the current board has listed
        self.ended: dict[str, str] = {}  # final states reached, which must never change
        self.next_epoch = 1

    def _apply(self, name: str, event: RequestEvent, **changes) -> None:
        self.board.apply(name, event, **changes)

    @rule(target=names, group=st.integers(0, 3))
    def submit(self, group: int) -> str:
        request = MigrationRequest(
            operator="op", key_group=group, target="holder", protocol=Protocol.CPA
        )
        name = submit_request(self.zk, LAYOUT, request)
        self.state[name], self.epoch[name] = "pending", None
        return name

    @rule()
    def list_pending(self) -> None:
        """The board lists each pending request once (again after a re-drive)."""
        found = {name for name, _ in self.board.pending()}
        assert found == {n for n, s in self.state.items() if s == "pending"} - self.listed
        self.listed |= set(self.state)

    @rule(name=names)
    def start(self, name: str) -> None:
        self._apply(name, RequestEvent.START, epoch=self.next_epoch, source=0, target=1)
        if self.state[name] == "pending":
            self.state[name], self.epoch[name] = "started", self.next_epoch
        self.next_epoch += 1

    @rule(name=names)
    def refuse(self, name: str) -> None:
        self._apply(name, RequestEvent.REFUSE, detail="refused")
        if self.state[name] in ("pending", "started", "stuck"):
            self.state[name] = "refused"

    @rule(name=names)
    def overdue(self, name: str) -> None:
        self._apply(name, RequestEvent.OVERDUE, detail="stuck: waiting")
        if self.state[name] == "started":
            self.state[name] = "stuck"

    @rule(name=names, pause=st.none() | st.floats(0, 1))
    def finish(self, name: str, pause: float | None) -> None:
        self._apply(name, RequestEvent.FINISH, pause=pause)
        if self.state[name] in ("started", "stuck"):
            self.state[name] = "done"

    @precondition(lambda self: self.state)
    @rule(behind=st.integers(0, 3), seen=st.booleans())
    def leader_dies(self, behind: int, seen: bool) -> None:
        """The leader dies; its successor loaded a routing ``behind`` epochs older than
        the newest order (0: every order reached it) and handles what was in flight:
        when ``seen``, the heartbeats show each ordered move's end (target 1 owns the
        group, source 0 not); otherwise it waits them out."""
        claims = {0: False, 1: True} if seen else {}
        routing_epoch = self.next_epoch - 1 - behind
        self.board = RequestBoard(self.zk, LAYOUT, "op")
        self.listed = set()
        found = self.board.in_flight()
        assert found is not None
        assert {n for n, _ in found} == {
            n for n, s in self.state.items() if s in ("started", "stuck")
        }
        for name, request in found:
            event = after_leader_lost(request, routing_epoch, claims=claims)
            self._apply(name, event, detail="leader lost")
            epoch = self.epoch[name]
            if epoch is None or routing_epoch < epoch:
                self.state[name], self.epoch[name] = "pending", None
            else:
                self.state[name] = "done" if seen else "abandoned"
        assert not any(s in ("started", "stuck") for s in self.state.values())

    @invariant()
    def zookeeper_holds_the_model(self) -> None:
        if not hasattr(self, "zk"):
            return
        assert not self.board.unwritten
        for name, state in self.state.items():
            request = decode_request(self.zk.nodes[LAYOUT.request(name)])
            assert decode_request(encode_request(request)) == request  # round trip
            assert request.state.value == state, (name, request, state)
            assert request.epoch == self.epoch[name]
            assert state in request.times or (state == "pending" and not request.times)

    @invariant()
    def final_states_stay_final(self) -> None:
        if not hasattr(self, "state"):
            return
        for name, state in self.state.items():
            if name in self.ended:
                assert state == self.ended[name]
            elif state in FINAL:
                self.ended[name] = state


RequestLifecycle.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestRequestLifecycle = RequestLifecycle.TestCase
