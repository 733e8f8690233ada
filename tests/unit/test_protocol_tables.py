"""The protocols' tables, row by row: the coordinator's dispatch, the key group's
``PEER_DOWN`` rows, the registration and leadership machines; that only the machines
change their states; and that docs/protocols.md shows the tables as they are."""

from __future__ import annotations

import ast
import contextlib
import doctest
import re
from collections import deque
from pathlib import Path
from unittest import mock

import pytest

from elastorm.core import sessions
from elastorm.core.actions import EmitterRestarted, MigrationAborted, MigrationDone, Rejected, Role
from elastorm.core.errors import MigrationProtocolError, StateTransitionError
from elastorm.core.keygroups import key_group
from elastorm.core.messages import (
    MESSAGE_TYPES,
    CheckpointAck,
    CheckpointDelta,
    CheckpointNack,
    CheckpointRequest,
    Data,
    DataTuple,
    DropReplica,
    DurableLoaded,
    DurableWritten,
    Message,
    Migrate,
    PeerDown,
    ProcessedAllReplay,
    Protocol,
    Resend,
    SetHolder,
    StandIn,
    SyncGroup,
    ToCheckpoint,
    ToState,
    ToStateAck,
    Trim,
    UpstreamRecovery,
    UpstreamRestarted,
)
from elastorm.core.migration.coordinator import TaskCoordinator
from elastorm.core.migration.table import (
    COORDINATOR_TABLE,
    EMITTER_MESSAGES,
    EMITTER_TRANSITIONS,
    PEER_DOWN,
    TRANSITIONS,
    UPSTREAM_RESTARTED,
    Phase,
    Route,
)
from elastorm.core.sessions import (
    PUBLISHER_TRANSITIONS,
    STORE_TRANSITIONS,
    LeadershipMachine,
    Machine,
    PublisherInput,
    PublisherState,
    RegistrationMachine,
    StoreInput,
    StoreStatus,
)
from elastorm.core.state import KeyGroupState, sum_step

ROOT = Path(__file__).resolve().parents[2]
G = 2
KEY0 = next(f"k{i}" for i in range(100) if key_group(f"k{i}", G) == 0)


# -- the coordinator's dispatch ------------------------------------------------------


def _full_checkpoint(g: int = 0) -> CheckpointDelta:
    state = KeyGroupState(g, step=sum_step, epoch=0)
    state.apply_next(DataTuple(source="u10", seq=1, key=KEY0, value=1, ts=0))
    delta = state.begin_checkpoint(full=True)
    state.finish_checkpoint()
    return delta


SAMPLES: dict[str, Message] = {
    "Data": Data(key_group=0, item=DataTuple(source="u10", seq=1, key=KEY0, value=1, ts=0)),
    "ToState": ToState(key_group=0, epoch=1, protocol=Protocol.RESTORE, items=()),
    "ToStateAck": ToStateAck(key_group=0, epoch=1),
    "ToCheckpoint": ToCheckpoint(key_group=0, epoch=1),
    "ProcessedAllReplay": ProcessedAllReplay(key_group=0, epoch=1),
    "SyncGroup": SyncGroup(key_group=0, epoch=1),
    "CheckpointDelta": _full_checkpoint(),
    "CheckpointAck": CheckpointAck(key_group=0, checkpoint=(0, 1), watermarks={}),
    "CheckpointNack": CheckpointNack(key_group=0, checkpoint=(0, 1)),
    "Trim": Trim(key_group=0, watermarks={}),
    "CheckpointRequest": CheckpointRequest(key_group=0),
    "Resend": Resend(key_group=0, source="u10", first=1, last=1),
    "Migrate": Migrate(key_group=0, epoch=1, protocol=Protocol.DIRECT, source=0, target=1),
    "SetHolder": SetHolder(key_group=0, holder=1),
    "DropReplica": DropReplica(key_group=0, epoch=1, replica=0),
    "UpstreamRecovery": UpstreamRecovery(key_group=0, recovering=True),
    "PeerDown": PeerDown(key_group=0, task=7),
    "UpstreamRestarted": UpstreamRestarted(key_group=0, epoch=1),
    "StandIn": StandIn(key_group=0, epoch=1, protocol=Protocol.CPA, source=1, target=0),
    "DurableWritten": DurableWritten(key_group=0, checkpoint=(0, 1), watermarks={"u10": 1}),
    "DurableLoaded": DurableLoaded(
        key_group=0, epoch=1, checkpoint=None, entries={}, watermarks={}, out_seq={}
    ),
}


def test_every_message_kind_has_one_coordinator_row_and_a_sample() -> None:
    assert set(COORDINATOR_TABLE) == set(MESSAGE_TYPES) == set(SAMPLES)
    assert {k for k, h in COORDINATOR_TABLE.items() if h == "_on_emitter_message"} == set(
        EMITTER_MESSAGES
    )


@pytest.mark.parametrize("kind", sorted(COORDINATOR_TABLE))
def test_each_kind_goes_to_its_rows_handler(kind: str) -> None:
    handler = COORDINATOR_TABLE[kind]
    original = getattr(TaskCoordinator, handler)
    with mock.patch.object(TaskCoordinator, handler, autospec=True, side_effect=original) as spy:
        coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0])
        with contextlib.suppress(MigrationProtocolError):  # the machine's table may refuse it
            coord.receive(10, SAMPLES[kind])
    spy.assert_called_once()
    assert spy.call_args.args[2] is SAMPLES[kind]


@pytest.mark.parametrize("kind", sorted(COORDINATOR_TABLE))
def test_each_kind_is_counted_and_its_key_group_checked(kind: str) -> None:
    """Data counts apart and checks its key; an emitter's message is refused as such
    whatever its key group; every other kind is counted and range-checked."""
    coord = TaskCoordinator(task=0, num_key_groups=1, upstreams=[10])
    message = SAMPLES[kind]
    if kind == "Data":
        message = Data(key_group=1, item=message.item)
    else:
        message = type(message)(**{**vars_of(message), "key_group": 1})
    (action,) = coord.receive(10, message)
    assert isinstance(action, Rejected) and action.message is message
    if kind in EMITTER_MESSAGES:
        assert action.reason == "emitter message sent to a coordinator"
    else:
        assert action.reason == "key group out of range"
    counted = coord.stats[f"in.{kind}"]
    assert counted == 1
    assert coord.phase(0) is Phase.IDLE  # no machine of another group touched


def vars_of(message: Message) -> dict:
    return {f: getattr(message, f) for f in message.__dataclass_fields__}


def test_an_object_that_is_no_message_kind_is_refused_by_name() -> None:
    coord = TaskCoordinator(task=3, num_key_groups=G, upstreams=[10])
    with pytest.raises(MigrationProtocolError, match="Trimmed from 10 is no message for a"):
        coord.receive(10, type("Trimmed", (), {"key_group": 0})())


# -- a key group's PEER_DOWN rows ------------------------------------------------------


def _target(protocol: Protocol) -> TaskCoordinator:
    """Task 1 holding group 0's checkpoint, the target of ``protocol`` from upstream 10
    (upstream 11's toState not in yet)."""
    coord = TaskCoordinator(task=1, num_key_groups=G, upstreams=[10, 11])
    coord.receive(0, _full_checkpoint())
    coord.receive(10, ToState(key_group=0, epoch=1, protocol=protocol, items=()))
    return coord


def _draining() -> TaskCoordinator:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10, 11], owned=[0])
    coord.receive(10, ToCheckpoint(key_group=0, epoch=1, protocol=Protocol.CPA))
    return coord


def _direct_source() -> TaskCoordinator:
    coord = TaskCoordinator(task=0, num_key_groups=G, upstreams=[10, 11], owned=[0])
    migrate = Migrate(key_group=0, epoch=1, protocol=Protocol.DIRECT, source=0, target=11)
    coord.receive(-1, migrate)
    return coord


def _syncing() -> TaskCoordinator:
    """Every toState in, upstream 10 synced, upstream 11's syncGroup not in yet."""
    coord = _target(Protocol.CPAL)
    coord.receive(11, ToState(key_group=0, epoch=1, protocol=Protocol.CPAL, items=()))
    coord.receive(10, SyncGroup(key_group=0, epoch=1))
    return coord


#: phase -> (a coordinator with group 0 in that phase, the task that dies, the phase
#: after, what it reports)
PEER_DOWN_CASES = {
    Phase.IDLE: (lambda: TaskCoordinator(task=1, num_key_groups=G, upstreams=[10]), 10, None),
    Phase.ACTIVE: (
        lambda: TaskCoordinator(task=0, num_key_groups=G, upstreams=[10], owned=[0]),
        10,
        None,
    ),
    Phase.DIRECT_SOURCE: (_direct_source, 11, MigrationAborted),
    Phase.DRAINING: (_draining, 11, MigrationDone),
    Phase.REPLAYING: (lambda: _target(Protocol.CPA), 11, MigrationDone),
    Phase.SHADOW: (lambda: _target(Protocol.CPAL), 11, None),
    Phase.SYNCING: (_syncing, 11, MigrationDone),
    Phase.REPLICA: (lambda: _target(Protocol.REPLICATE), 11, MigrationDone),
    Phase.LOADING: (lambda: _target(Protocol.DURABLE), 11, None),
}
PEER_DOWN_AFTER = {
    Phase.IDLE: Phase.IDLE,
    Phase.ACTIVE: Phase.ACTIVE,
    Phase.DIRECT_SOURCE: Phase.ACTIVE,  # the direct target died: the source owns it again
    Phase.DRAINING: Phase.IDLE,  # the last toCheckpoint is not coming: done as a source
    Phase.REPLAYING: Phase.ACTIVE,
    Phase.SHADOW: Phase.SYNCING,  # processedAllReplay to upstream 10, which is still there
    Phase.SYNCING: Phase.ACTIVE,
    Phase.REPLICA: Phase.REPLICA,  # shadowing every upstream now: reported once
    Phase.LOADING: Phase.LOADING,  # still waits for the store's copy
}


def test_peer_down_has_a_row_for_every_phase_but_failed() -> None:
    phases = {phase for phase, event in TRANSITIONS if event == PEER_DOWN}
    assert phases == set(Phase) - {Phase.FAILED} == set(PEER_DOWN_CASES)


@pytest.mark.parametrize("phase", sorted(PEER_DOWN_CASES, key=lambda p: p.value))
def test_peer_down_row(phase: Phase) -> None:
    make, dead, reported = PEER_DOWN_CASES[phase]
    coord = make()
    assert coord.phase(0) is phase
    actions = coord.peer_down(dead)
    after = coord.phase(0)
    assert after is PEER_DOWN_AFTER[phase]
    assert after in TRANSITIONS[(phase, PEER_DOWN)][1]
    kinds = [type(a) for a in actions if isinstance(a, MigrationAborted | MigrationDone)]
    assert kinds == ([] if reported is None else [reported])
    if reported is MigrationDone:
        (done,) = (a for a in actions if isinstance(a, MigrationDone))
        assert done.role is (Role.SOURCE if phase is Phase.DRAINING else Role.TARGET)


def test_a_failed_machine_ignores_a_peers_death() -> None:
    coord = TaskCoordinator(task=5, num_key_groups=G, upstreams=[10])
    with pytest.raises(MigrationProtocolError, match="not allowed"):
        coord.receive(10, ToCheckpoint(key_group=0, epoch=1))
    assert coord.peer_down(10) == [] and coord.phase(0) is Phase.FAILED


# -- a key group's UPSTREAM_RESTARTED rows ---------------------------------------------

#: phase -> the phase after upstream 11 restarts knowing epoch 1 (the migration's)
RESTARTED_AFTER = {
    **PEER_DOWN_AFTER,
    Phase.DIRECT_SOURCE: Phase.DIRECT_SOURCE,  # an upstream is never a direct target
}


def test_upstream_restarted_has_a_row_for_every_phase_but_failed() -> None:
    phases = {phase for phase, event in TRANSITIONS if event == UPSTREAM_RESTARTED}
    assert phases == set(Phase) - {Phase.FAILED} == set(RESTARTED_AFTER)


@pytest.mark.parametrize("phase", sorted(PEER_DOWN_CASES, key=lambda p: p.value))
def test_upstream_restarted_row(phase: Phase) -> None:
    """The new life of upstream 11 ignores the commands of epoch 1 (it read them): no
    machine waits for it there, as if it had died, but it stays an upstream."""
    make, _, reported = PEER_DOWN_CASES[phase]
    coord = make()
    upstreams = set(coord.upstreams)
    actions = coord.receive(11, UpstreamRestarted(key_group=0, epoch=1))
    after = coord.phase(0)
    assert after is RESTARTED_AFTER[phase]
    assert after in TRANSITIONS[(phase, UPSTREAM_RESTARTED)][1]
    kinds = [type(a) for a in actions if isinstance(a, MigrationAborted | MigrationDone)]
    expected = None if phase is Phase.DIRECT_SOURCE else reported
    assert kinds == ([] if expected is None else [expected])
    assert coord.upstreams == upstreams


@pytest.mark.parametrize("phase", [Phase.REPLAYING, Phase.SHADOW, Phase.SYNCING, Phase.DRAINING])
def test_an_upstream_restarted_before_a_migration_was_ordered_is_still_awaited(
    phase: Phase,
) -> None:
    """Its new life read epoch 0: it gets the commands of epoch 1 and answers them."""
    make, _, _ = PEER_DOWN_CASES[phase]
    coord = make()
    reported = coord.receive(11, UpstreamRestarted(key_group=0, epoch=0))
    assert reported == [EmitterRestarted(task=11, epoch=0)]  # for the controller
    assert coord.phase(0) is phase


# -- the registration and leadership machines ------------------------------------------


def _old_publisher(state: PublisherState, given: PublisherInput) -> PublisherState:
    """What the publisher's adapter set before the table (its ``_set_state`` calls):
    the reference the table must agree with wherever it allows the pair."""
    if given is PublisherInput.UNREACHABLE:  # only ever set from REGISTERED
        return PublisherState.DISCONNECTED if state is PublisherState.REGISTERED else state
    return {
        PublisherInput.REGISTERED: PublisherState.REGISTERED,
        PublisherInput.SESSION_ENDED: PublisherState.EXPIRED,
        PublisherInput.HELD_ELSEWHERE: PublisherState.STARTING,
        PublisherInput.FENCED: PublisherState.FENCED,
        PublisherInput.STOP: PublisherState.STOPPED,
    }[given]


def _old_store(status: StoreStatus, given: StoreInput) -> StoreStatus:
    """What the store's adapter set before the table (``_set_status``: CLOSED for good,
    CONFLICT until CLOSED)."""
    if status is StoreStatus.CLOSED:
        return status
    if status is StoreStatus.CONFLICT and given is not StoreInput.CLOSE:
        return status
    if given in (StoreInput.UNREACHABLE, StoreInput.LEAD_LOST):  # only ever set from ONLINE
        return StoreStatus.OFFLINE if status is StoreStatus.ONLINE else status
    return {
        StoreInput.LEADING: StoreStatus.ONLINE,
        StoreInput.ANOTHER_LEADS: StoreStatus.STANDBY,
        StoreInput.CONFLICT: StoreStatus.CONFLICT,
        StoreInput.CLOSE: StoreStatus.CLOSED,
    }[given]


_S, _P = StoreStatus, PublisherState
MACHINES = {
    "publisher": (
        RegistrationMachine,
        PUBLISHER_TRANSITIONS,
        _old_publisher,
        # A step's input after FENCED or STOPPED: only a race with fence()/stop() on
        # another thread reached these, and the old code let a fenced task register.
        {
            (s, i)
            for s in (_P.FENCED, _P.STOPPED)
            for i in PublisherInput
            if i not in (PublisherInput.FENCED, PublisherInput.STOP)
        },
    ),
    "store": (
        LeadershipMachine,
        STORE_TRANSITIONS,
        _old_store,
        # A controller that has led and sees another leader is deposed, never a standby.
        {(_S.ONLINE, StoreInput.ANOTHER_LEADS), (_S.OFFLINE, StoreInput.ANOTHER_LEADS)},
    ),
}


def _path_to(make: type[Machine], table: dict, state) -> list:
    """The shortest list of inputs that takes a new machine to ``state`` (through its
    table: every state must be reachable)."""
    start = make().state
    paths = {start: []}
    todo = deque([start])
    while todo:
        here = todo.popleft()
        for (s, given), nxt in table.items():
            if s is here and nxt not in paths:
                paths[nxt] = [*paths[here], given]
                todo.append(nxt)
    assert state in paths, f"{state} unreachable"
    return paths[state]


def _rows(name: str) -> list[tuple[str, object, object]]:
    _, table, _, _ = MACHINES[name]
    return [(name, s, i) for s, i in table]


def _pairs(name: str) -> list[tuple[str, object, object]]:
    make, table, _, _ = MACHINES[name]
    states = type(make().state)
    inputs = {type(i) for _, i in table}.pop()
    return [(name, s, i) for s in states for i in inputs]


@pytest.mark.parametrize(("name", "state", "given"), _rows("publisher") + _rows("store"))
def test_session_machine_row(name: str, state, given) -> None:
    make, table, old, _ = MACHINES[name]
    m = make()
    for step in _path_to(make, table, state):
        m.feed(step)
    assert m.state is state
    assert m.feed(given) is table[(state, given)] is m.state
    assert table[(state, given)] is old(state, given)  # the same outcome as before


@pytest.mark.parametrize(("name", "state", "given"), _pairs("publisher") + _pairs("store"))
def test_session_machine_refuses_what_its_table_lacks(name: str, state, given) -> None:
    make, table, _, refused = MACHINES[name]
    assert ((state, given) in table) is ((state, given) not in refused)
    if (state, given) in table:
        return
    m = make()
    for step in _path_to(make, table, state):
        m.feed(step)
    with pytest.raises(StateTransitionError, match=f"{given.value} not allowed in state"):
        m.feed(given)
    assert m.state is state  # unchanged


def test_the_machine_doctest() -> None:
    assert doctest.testmod(sessions).failed == 0


# -- only the machines change their states -------------------------------------------

#: attribute -> the one module allowed to assign it (or an item of it)
STATE_ATTRIBUTES = {
    "phase": "src/elastorm/core/migration/keygroup.py",  # KeyGroupMachine
    "_route": "src/elastorm/core/migration/emitter.py",  # Emitter, per key group
    "_current": "src/elastorm/core/sessions.py",  # the registration and leadership machines
}


SETTERS = ("setattr", "_set_field")  # _set_field: object.__setattr__ (core's hot paths)


def _assigned_attributes(tree: ast.AST) -> list[tuple[str, int]]:
    """``(attribute, line)`` of every ``x.attr = ...`` / ``x.attr[...] = ...`` (also
    augmented, annotated and unpacked), and ``setattr(x, "attr", ...)``."""
    found = []

    def targets(node: ast.AST) -> list[ast.AST]:
        if isinstance(node, ast.Assign):
            return node.targets
        if isinstance(node, ast.AugAssign | ast.AnnAssign):
            return [node.target]
        return []

    for node in ast.walk(tree):
        todo = list(targets(node))
        while todo:
            t = todo.pop()
            if isinstance(t, ast.Tuple | ast.List):
                todo.extend(t.elts)
            elif isinstance(t, ast.Starred | ast.Subscript):
                todo.append(t.value)
            elif isinstance(t, ast.Attribute):
                found.append((t.attr, t.lineno))
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", ""))
            in ("setattr", "_set_field")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            found.append((node.args[1].value, node.lineno))
    return found


def test_no_code_outside_the_machines_assigns_their_state() -> None:
    outside = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for attr, line in _assigned_attributes(ast.parse(path.read_text())):
            if attr in STATE_ATTRIBUTES and STATE_ATTRIBUTES[attr] != rel:
                outside.append(f"{rel}:{line} assigns .{attr}")
    assert not outside, "\n".join(outside)


def test_the_scan_sees_an_assignment() -> None:
    tree = ast.parse("m.phase = 1\na, m._route[3] = 1, 2\nsetattr(m, '_current', 2)\n")
    assert sorted(_assigned_attributes(tree)) == [("_current", 3), ("_route", 2), ("phase", 1)]


def test_the_adapters_keep_no_state_of_their_own() -> None:
    """The publisher and the store read their machine's state; they hold none."""
    for rel in ("src/elastorm/zk/heartbeat.py", "src/elastorm/zk/store.py"):
        attrs = {a for a, _ in _assigned_attributes(ast.parse((ROOT / rel).read_text()))}
        assert not attrs & {"_state", "_status"}, rel


# -- docs/protocols.md shows the tables as they are -----------------------------------

DOC = ROOT / "docs" / "protocols.md"


def _doc_table(name: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows' cells of the markdown table that follows the line
    ``<!-- table: name -->`` in the doc."""
    lines = DOC.read_text().splitlines()
    start = lines.index(f"<!-- table: {name} -->") + 1
    rows = []
    for line in (line.strip() for line in lines[start:]):  # also indented in a list
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    assert len(rows) > 2, f"no table after the {name} marker"
    return rows[0], rows[2:]  # less the header's rule


def _names(cell: str) -> list[str]:
    return [w.strip().strip("`") for w in cell.split(",") if w.strip()]


def _first_code(cell: str) -> str:
    return re.match(r"`([^`]+)`", cell).group(1)


def _transitions_from_doc(name: str, enum) -> set[tuple]:
    """``(state, event, handler, next states)`` of a doc table with columns state(s) |
    event | handler | next (``same``: the row's own state) | ..."""
    rows = set()
    for cells in _doc_table(name)[1]:
        for state in _names(cells[0]):
            nxt = frozenset(enum(state) if n == "same" else enum(n) for n in _names(cells[3]))
            rows.add((enum(state), _first_code(cells[1]), _first_code(cells[2]), nxt))
    return rows


@pytest.mark.parametrize(
    ("name", "table", "enum"),
    [("TRANSITIONS", TRANSITIONS, Phase), ("EMITTER_TRANSITIONS", EMITTER_TRANSITIONS, Route)],
)
def test_the_doc_shows_each_transition_table(name: str, table: dict, enum) -> None:
    code = {(s, e, handler, allowed) for (s, e), (handler, allowed) in table.items()}
    assert _transitions_from_doc(name, enum) == code


def test_the_doc_shows_the_coordinator_table() -> None:
    doc = {}
    for cells in _doc_table("COORDINATOR_TABLE")[1]:
        for kind in _names(cells[0]):
            doc[kind] = _first_code(cells[1])
    assert doc == COORDINATOR_TABLE


@pytest.mark.parametrize(
    ("name", "table", "states", "inputs"),
    [
        ("PUBLISHER_TRANSITIONS", PUBLISHER_TRANSITIONS, PublisherState, PublisherInput),
        ("STORE_TRANSITIONS", STORE_TRANSITIONS, StoreStatus, StoreInput),
    ],
)
def test_the_doc_shows_each_session_table(name: str, table: dict, states, inputs) -> None:
    """A grid: one row per state, one column per input, ``-`` where refused."""
    header, rows = _doc_table(name)
    columns = [inputs(c.strip("`")) for c in header[1:]]
    assert sorted(c.value for c in columns) == sorted(i.value for i in inputs)
    doc = {}
    for cells in rows:
        state = states(cells[0].strip("`"))
        for given, cell in zip(columns, cells[1:], strict=True):
            if cell != "-":
                doc[(state, given)] = states(cell.strip("`"))
    assert doc == table
