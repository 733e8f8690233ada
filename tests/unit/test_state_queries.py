"""State queries: who answers and what (``elastorm.core.queries``), the query znode
(``elastorm.zk.queries``, against an in-memory ZooKeeper), a keyed bolt answering on
its tick, and the asker's loop (``elastorm.runtime.state``)."""

from __future__ import annotations

import json

import pytest
from memory_zk import MemoryZk
from test_keyed_api import _bolt, _data, _Tup

from elastorm import KeyedBolt, MapState, TumblingWindow, ValueState, WindowState
from elastorm.core.keyed_state import CLEANUP, readable_record
from elastorm.core.keygroups import key_group
from elastorm.core.messages import Data, DataTuple
from elastorm.core.migration.table import Phase
from elastorm.core.queries import (
    Next,
    QueryError,
    StateAnswer,
    StateQuery,
    Verdict,
    answer,
    ask,
    decode_answer,
    decode_query,
    encode_answer,
    encode_query,
    next_step,
)
from elastorm.core.routing import RoutingTable
from elastorm.core.timers import TIMERS
from elastorm.errors import UserError
from elastorm.runtime import state as runtime_state
from elastorm.zk.codec import encode_routing
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.queries import QueryInbox, post_query, read_answer, withdraw_query

ROUTING = RoutingTable(epoch=5, owners=(3, 4, 3, 4))


def _query(key: str = "apple", **changes) -> StateQuery:
    return StateQuery(**{**vars_of(ask("counts", key, ROUTING)), **changes})


def vars_of(query: StateQuery) -> dict:
    return {f: getattr(query, f) for f in ("operator", "key", "key_group", "task", "epoch")}


# -- who answers, and what ----------------------------------------------------------


def test_ask_addresses_the_owner_of_the_keys_group_in_the_routing_table() -> None:
    query = ask("counts", "apple", ROUTING)
    g = key_group("apple", 4)
    assert (query.key_group, query.task, query.epoch) == (g, ROUTING.owner(g), 5)


def _answer(query: StateQuery, phase: Phase, record, *, task=None, operator="counts"):
    task = query.task if task is None else task
    return answer(query, operator=operator, task=task, num_key_groups=4, phase=phase, record=record)


def test_an_active_owner_answers_found_or_absent() -> None:
    query = _query()
    found = _answer(query, Phase.ACTIVE, {"count": 2})
    assert (found.verdict, found.record, found.task) == (Verdict.FOUND, {"count": 2}, query.task)
    assert found.key_group == query.key_group
    absent = _answer(query, Phase.ACTIVE, None)
    assert (absent.verdict, absent.record) == (Verdict.ABSENT, None)


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.ACTIVE])
def test_any_other_phase_is_not_mine_with_the_phase(phase) -> None:
    got = _answer(_query(), phase, {"count": 2})
    assert (got.verdict, got.phase, got.record) == (Verdict.NOT_MINE, phase, None)


def test_a_query_for_another_task_or_operator_is_not_mine() -> None:
    query = _query()
    assert _answer(query, Phase.ACTIVE, {}, task=query.task + 1).verdict is Verdict.NOT_MINE
    assert _answer(query, Phase.ACTIVE, {}, operator="other").verdict is Verdict.NOT_MINE


def test_the_task_computes_the_group_itself() -> None:
    query = _query(key_group=(key_group("apple", 4) + 1) % 4)
    assert _answer(query, Phase.IDLE, None).key_group == key_group("apple", 4)


def _a(verdict: Verdict) -> StateAnswer:
    record = {"count": 1} if verdict is Verdict.FOUND else None
    phase = Phase.DRAINING if verdict is Verdict.NOT_MINE else Phase.ACTIVE
    return StateAnswer(verdict=verdict, task=3, key_group=0, phase=phase, record=record)


@pytest.mark.parametrize(
    ("got", "owner_now", "now", "step"),
    [
        (Verdict.FOUND, 3, 0.0, Next.DONE),
        (Verdict.ABSENT, 4, 99.0, Next.DONE),  # a final answer wins over the deadline
        (Verdict.NOT_MINE, 3, 0.0, Next.REROUTE),  # a migration: ask again, the same table
        (Verdict.NOT_MINE, 3, 10.0, Next.TIMEOUT),
        (None, 3, 0.0, Next.WAIT),
        (None, 4, 0.0, Next.REROUTE),  # the group moved (or task 3 was lost)
        (None, 3, 10.0, Next.TIMEOUT),
    ],
)
def test_next_step(got, owner_now, now, step) -> None:
    query = _query(task=3)
    got = None if got is None else _a(got)
    assert next_step(query, got, owner_now=owner_now, now=now, deadline=10.0) is step


def test_queries_and_answers_round_trip_as_json() -> None:
    query = _query("ünïcode")
    assert decode_query(encode_query(query)) == query
    assert decode_answer(encode_query(query)) is None
    found = _answer(query, Phase.ACTIVE, {"count": 2, "seen": {"x": 1}})
    data = encode_answer(query, found)
    assert decode_query(data) == query and decode_answer(data) == found


def test_an_operators_record_may_be_any_json_value() -> None:
    query = _query()
    got = _answer(query, Phase.ACTIVE, [3, 4.5])  # a hand-written KeyedOperator's fold
    assert decode_answer(encode_answer(query, got)).record == [3, 4.5]


def test_a_value_json_cannot_hold_is_answered_as_its_repr() -> None:
    query = _query()
    data = encode_answer(query, _answer(query, Phase.ACTIVE, {"s": {1, 2}}))
    assert decode_answer(data).record == {"s": "{1, 2}"}


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"version": 2}',
        b'{"version": 1, "key": "a"}',
        b'{"version": 1, "operator": "o", "key": 3, "key_group": 0, "task": 1, "epoch": 0}',
    ],
)
def test_a_malformed_query_is_a_query_error(data) -> None:
    with pytest.raises(QueryError):
        decode_query(data)


def test_a_malformed_answer_is_a_query_error() -> None:
    body = json.loads(encode_query(_query()))
    body["answer"] = {"verdict": "found", "task": 3, "key_group": 0, "phase": "active"}
    with pytest.raises(QueryError, match="record comes with 'found' only"):
        decode_answer(json.dumps(body).encode())
    body["answer"]["verdict"] = "maybe"
    with pytest.raises(QueryError, match="malformed answer"):
        decode_answer(json.dumps(body).encode())


# -- the query znode (in-memory ZooKeeper) ---------------------------------------------


class WatchedZk(MemoryZk):
    """``MemoryZk`` with kazoo's ``get_children(path, watch=...)``: the watch is kept
    and fired on the next change under ``path`` (once, as ZooKeeper does)."""

    def __init__(self) -> None:
        super().__init__()
        self.watches: dict[str, object] = {}

    def get_children(self, path, watch=None):
        names = super().get_children(path)
        if watch is not None:
            self.watches[path] = watch
        return names

    def create(self, path, data=b"", **kw):
        created = super().create(path, data, **kw)
        parent = created.rsplit("/", 1)[0]
        if parent in self.watches:
            self.watches.pop(parent)(None)
        return created

    def add_listener(self, _listener) -> None:
        pass

    def remove_listener(self, _listener) -> None:
        pass


LAYOUT = ZnodeLayout("wordcount")


def _inbox(zk: WatchedZk, task: int) -> QueryInbox:
    return QueryInbox(layout=LAYOUT, task=task, client=zk)


def test_a_query_reaches_its_task_and_the_answer_comes_back_once() -> None:
    zk = WatchedZk()
    inbox = _inbox(zk, 4)
    inbox._step()  # creates the task's directory, watches it
    query = _query(task=4)
    path = post_query(zk, LAYOUT, query)
    assert path.startswith(LAYOUT.query_dir(4) + "/q-") and zk.owners[path]  # ephemeral
    assert inbox._wake.is_set()  # the watch woke the inbox's loop
    inbox._step()
    assert inbox.take() == [(path, query)]
    assert inbox.take() == []
    inbox._step()
    assert inbox.take() == []  # read once
    found = _answer(query, Phase.ACTIVE, {"count": 7})
    inbox.reply(path, query, found)
    inbox.reply(path, query, _answer(query, Phase.ACTIVE, None))  # a second one is not written
    inbox._step()
    assert read_answer(zk, path) == found and inbox.answered == 1
    withdraw_query(zk, path)
    withdraw_query(zk, path)  # gone already: fine
    assert read_answer(zk, path) is None


def test_a_withdrawn_or_malformed_query_is_not_answered() -> None:
    zk = WatchedZk()
    inbox = _inbox(zk, 4)
    inbox._step()
    query = _query(task=4)
    path = post_query(zk, LAYOUT, query)
    zk.create(f"{LAYOUT.query_dir(4)}/q-", b"junk", sequence=True, ephemeral=True)
    inbox._step()
    assert inbox.take() == [(path, query)] and inbox.malformed == 1
    withdraw_query(zk, path)
    inbox.reply(path, query, _answer(query, Phase.ACTIVE, None))
    inbox._step()
    assert inbox.answered == 0 and path not in zk.nodes


# -- a keyed bolt answers on its tick --------------------------------------------------


class FakeInbox:
    def __init__(self, queries) -> None:
        self.queries, self.replies = list(queries), []

    def take(self):
        taken, self.queries = self.queries, []
        return taken

    def reply(self, path, query, answer) -> None:
        self.replies.append((path, answer))


def test_a_keyed_bolt_answers_from_its_live_state_and_writes_nothing(monkeypatch) -> None:
    bolt = _bolt(monkeypatch)  # one key group, owned ACTIVE by task 3
    monkeypatch.setattr(type(bolt), "emit", lambda *a, **kw: None)
    for seq, word in enumerate(["a", "b", "a"], start=1):
        bolt.process(_Tup(_data(word, "x", seq)))
    table = RoutingTable(epoch=0, owners=(3,))
    asked = [ask("counts", k, table) for k in ("a", "zzz")]
    bolt.queries = FakeInbox([(f"/q{i}", q) for i, q in enumerate(asked)])
    state = bolt.coordinator.state(0)
    before = (dict(state.master), dict(state.inactive), dict(state.active), dict(state.applied))
    bolt.answer_queries()
    (_, a), (_, zzz) = bolt.queries.replies
    assert (a.verdict, a.record) == (Verdict.FOUND, {"count": 2, "seen": {"x": 2}})
    assert zzz.verdict is Verdict.ABSENT
    after = (dict(state.master), dict(state.inactive), dict(state.active), dict(state.applied))
    assert after == before


def test_a_keyed_bolt_that_does_not_own_the_group_says_not_mine_and_creates_nothing(
    monkeypatch,
) -> None:
    bolt = _bolt(monkeypatch)
    query = ask("counts", "a", RoutingTable(epoch=0, owners=(3,)))
    bolt.coordinator = _Without(bolt.coordinator)
    bolt.queries = FakeInbox([("/q", query)])
    bolt.answer_queries()
    ((_, got),) = bolt.queries.replies
    assert (got.verdict, got.phase) == (Verdict.NOT_MINE, Phase.IDLE)
    assert bolt.coordinator.created == []


class _Without:
    """A coordinator that owns nothing, and records any machine created."""

    def __init__(self, real) -> None:
        self.task, self.num_key_groups, self.created = real.task, real.num_key_groups, []

    def peek_phase(self, key_group: int) -> Phase:
        return Phase.IDLE

    def machine(self, key_group: int):
        self.created.append(key_group)

    def state(self, key_group: int):
        self.created.append(key_group)


# -- the asker's loop -------------------------------------------------------------------


class Cluster(WatchedZk):
    """A topology's znodes with tasks that answer a query as soon as it is posted:
    ``phases[task]`` is the phase each task reports for every group; ``moves`` are
    routing tables installed after each answer (a migration ending)."""

    def __init__(self, owners, phases, records, moves=()) -> None:
        super().__init__()
        self.phases, self.records, self.moves = phases, records, list(moves)
        self.asked: list[int] = []
        self._route(RoutingTable(epoch=1, owners=owners))
        for task in phases:
            self.create(LAYOUT.task(task), b"{}", ephemeral=True, makepath=True)

    def _route(self, table: RoutingTable) -> None:
        data = encode_routing("counts", table, controller="c")
        if LAYOUT.routing("counts") in self.nodes:
            self.set(LAYOUT.routing("counts"), data)
        else:
            self.create(LAYOUT.routing("counts"), data, makepath=True)

    def create(self, path, data=b"", **kw):
        created = super().create(path, data, **kw)
        if "/queries/" in created:
            query = decode_query(data)
            self.asked.append(query.task)
            phase = self.phases.get(query.task)
            if phase is not None:
                got = answer(
                    query,
                    operator="counts",
                    task=query.task,
                    num_key_groups=2,
                    phase=phase,
                    record=self.records.get(query.key),
                )
                self.set(created, encode_answer(query, got))
                if self.moves:
                    self._route(self.moves.pop(0))
        return created


def test_the_asker_gets_the_owners_record() -> None:
    zk = Cluster((3, 3), {3: Phase.ACTIVE}, {"apple": {"count": 4}})
    got = runtime_state.ask_owner(zk, "wordcount", "counts", "apple", timeout=2)
    assert got["found"] and got["state"] == {"count": 4} and got["task"] == 3
    assert got["key_group"] == key_group("apple", 2)
    assert not [p for p in zk.nodes if "/q-" in p]  # the query is withdrawn
    absent = runtime_state.ask_owner(zk, "wordcount", "counts", "pear", timeout=2)
    assert (absent["found"], absent["state"]) == (False, None)


def test_after_not_mine_the_asker_asks_the_new_owner(monkeypatch) -> None:
    monkeypatch.setattr(runtime_state, "REROUTE_PAUSE_SECS", 0)
    moved = RoutingTable(epoch=2, owners=(4, 4))
    zk = Cluster((3, 3), {3: Phase.DRAINING, 4: Phase.ACTIVE}, {"apple": {"c": 1}}, [moved])
    got = runtime_state.ask_owner(zk, "wordcount", "counts", "apple", timeout=2)
    assert zk.asked == [3, 4] and got["task"] == 4 and got["state"] == {"c": 1}


def test_a_silent_owner_times_out_saying_so(monkeypatch) -> None:
    monkeypatch.setattr(runtime_state, "POLL_SECS", 0.01)
    zk = Cluster((3, 3), {}, {})
    with pytest.raises(UserError, match="its owner, task 3, is not running"):
        runtime_state.ask_owner(zk, "wordcount", "counts", "apple", timeout=0.1)
    zk = Cluster((3, 3), {}, {})
    zk.create(LAYOUT.task(3), b"{}", ephemeral=True, makepath=True)
    with pytest.raises(UserError, match="alive but did not answer"):
        runtime_state.ask_owner(zk, "wordcount", "counts", "apple", timeout=0.1)


def test_a_group_never_active_times_out_with_the_phase_heard(monkeypatch) -> None:
    monkeypatch.setattr(runtime_state, "REROUTE_PAUSE_SECS", 0.01)
    zk = Cluster((3, 3), {3: Phase.REPLAYING}, {})
    with pytest.raises(UserError, match="task 3 last said the group is replaying there"):
        runtime_state.ask_owner(zk, "wordcount", "counts", "apple", timeout=0.1)
    assert len(zk.asked) > 1


def test_no_such_topology_or_operator_is_one_line() -> None:
    zk = Cluster((3, 3), {3: Phase.ACTIVE}, {})
    with pytest.raises(UserError, match="no topology 'other' in ZooKeeper"):
        runtime_state.ask_owner(zk, "other", "counts", "apple", timeout=1)
    with pytest.raises(
        UserError, match="has no keyed operator 'sums'; its keyed operators: counts"
    ):
        runtime_state.ask_owner(zk, "wordcount", "sums", "apple", timeout=1)
    with pytest.raises(UserError, match="not a valid znode name"):
        runtime_state.ask_owner(zk, "../x", "counts", "apple", timeout=1)


def test_the_cli_parses_a_key_or_field_values() -> None:
    from elastorm.runtime import cli
    from elastorm.runtime.state_cmd import _key

    parser = cli.build_parser()
    args = parser.parse_args(["state", "--topology", "t", "--operator", "o", "--key", "k"])
    assert _key(args) == "k" and args.timeout == runtime_state.DEFAULT_TIMEOUT
    args = parser.parse_args(
        ["state", "--topology", "t", "--operator", "o", "--key-values", '["AA", 2013]']
    )
    assert _key(args) == ["AA", 2013]  # made into the key by query_state
    args.key_values = "{}"
    with pytest.raises(UserError, match="non-empty JSON array"):
        _key(args)
    with pytest.raises(SystemExit):
        parser.parse_args(["state", "--topology", "t", "--operator", "o"])


def test_query_state_makes_a_field_list_key_as_the_router_does(monkeypatch) -> None:
    import contextlib

    key = '["AA",2013]'
    zk = Cluster((3, 3), {3: Phase.ACTIVE}, {key: {"n": 2}})
    hosts = []

    @contextlib.contextmanager
    def connected(given, secret_file=None):
        hosts.append(given)
        yield zk

    monkeypatch.setattr(runtime_state, "connected", connected)
    got = runtime_state.query_state("wordcount", "counts", ["AA", 2013], zookeeper="zk:1")
    assert got["key"] == key and got["state"] == {"n": 2} and hosts == ["zk:1"]


# -- what a query shows of a keyed bolt's record -----------------------------------------


class Expiring(KeyedBolt):
    """``values = [word, time]``: the word's last time (ttl 10), its times seen (ttl 5),
    its tumbling windows of 100, a plain count."""

    outputs = ["word"]
    last = ValueState(ttl=10)
    seen = MapState(ttl=5)
    per_window = WindowState(TumblingWindow(100), lambda n, _: n + 1, initial=0)
    count = ValueState(default=0)

    def event_time(self, key, values):
        return values[1]

    def process_keyed(self, key, values):
        self.last.update(values[1])
        self.seen.put(str(values[1]), 1)
        self.per_window.add(1)
        self.count.update(self.count.value() + 1)


def test_a_query_shows_ttl_values_readably_and_never_reserved_entries(monkeypatch) -> None:
    bolt = _bolt(monkeypatch, Expiring)
    monkeypatch.setattr(type(bolt), "emit", lambda *a, **kw: None)
    for seq, (word, t) in enumerate([("a", 1), ("a", 4), ("b", 8)], start=1):
        bolt.process(_Tup(Data(key_group=0, item=DataTuple("r:1", seq, word, [word, t], 0.0))))
    table = RoutingTable(epoch=0, owners=(3,))
    asked = [ask("counts", k, table) for k in ("a", TIMERS)]
    bolt.queries = FakeInbox([(f"/q{i}", q) for i, q in enumerate(asked)])
    raw = bolt.coordinator.state(0).get("a")
    assert raw["last"] == [4, 14] and CLEANUP in raw  # stored raw, with the sweep's field
    bolt.answer_queries()
    (_, a), (_, timers) = bolt.queries.replies
    assert a.verdict is Verdict.FOUND
    assert a.record == {
        "last": {"value": 4, "expires": 14, "expires_in": 6},  # the watermark is 8
        "seen": {"4": {"value": 1, "expires": 9, "expires_in": 1}},  # "1" expired at 6
        "per_window": [{"start": 0, "end": 100, "aggregate": 2}],
        "count": 2,
    }
    assert timers.verdict is Verdict.ABSENT  # the group's clock is no user's key


def test_readable_record_leaves_foreign_records_as_stored() -> None:
    last = Expiring.last
    assert readable_record(None, (last,), 3) is None
    assert readable_record(7, (last,), 3) == 7  # a hand-written step's record
    assert readable_record({"old": [1, 2]}, (last,), None) == {"old": [1, 2]}
    assert readable_record({"last": [1, 2]}, (last,), None) == {
        "last": {"value": 1, "expires": 2, "expires_in": None}
    }
    assert readable_record({"last": [1, 2]}, (last,), 2) == {}  # expired: as value() reads
    assert (
        answer(
            ask("c", TIMERS, RoutingTable(epoch=0, owners=(3,))),
            operator="c",
            task=3,
            num_key_groups=1,
            phase=Phase.ACTIVE,
            record={"watermark": 1},
        ).verdict
        is Verdict.ABSENT
    )
