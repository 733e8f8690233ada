"""docs/tutorial_windows.md's join (the user project's ``bolts/orderspaid.py``) run in
one process against a model: every window that closes, every declined order and, once
the customers are quiet, every window still open, each once; the same when the key
group is handed over to another task mid-stream (its windows, waiting orders and both
kinds of timers move with its state)."""

from __future__ import annotations

import importlib
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from streamparse import Bolt
from test_keyed_api import _bolt, _Tup

from elastorm.core.checkpoint import CheckpointHolder, checkpoint_to_state
from elastorm.core.messages import Data, DataTuple, from_json, to_json
from elastorm.storm.elastic import OUTPUT_ID

PROJECT = Path(__file__).resolve().parents[2] / "tests" / "integration" / "user_project"


@pytest.fixture
def user(monkeypatch):
    """The user project's ``bolts.orderspaid`` and ``spouts.shop`` (not this repository's
    own ``bolts``/``spouts``)."""
    monkeypatch.syspath_prepend(str(PROJECT / "src"))
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("bolts", "spouts")]:
        monkeypatch.delitem(sys.modules, loaded)
    bolt, shop = importlib.import_module("bolts.orderspaid"), importlib.import_module("spouts.shop")
    yield bolt, shop
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("bolts", "spouts")]:
        del sys.modules[loaded]


ORDERS = 1000  # of the spouts' 1500: 20 s of event time, a window closed, two open


def stream(shop) -> list[tuple[float, str, int, list]]:
    """Both spouts' first ORDERS tuples merged in event-time order: (time, source, seq,
    values)."""
    out = []
    for i in range(ORDERS):
        out.append(
            (i / shop.RATE, "orders:1", i + 1, [i, "order", shop.customer(i), shop.amount(i)])
        )
        values = [i, "payment", shop.customer(i), shop.paid(i)]
        out.append((i / shop.RATE + shop.PAY_AFTER, "payments:1", i + 1, values))
    return sorted(out, key=lambda e: (e[0], e[1]))


def model(orders_paid, shop, lateness: float) -> list[list]:
    """The rows: per customer and 10-second window [orders, ordered, paid], "window"
    once the (one) group's watermark passed its end, "open" otherwise; "unpaid" for
    each declined order whose deadline the watermark passed."""
    totals: dict = defaultdict(lambda: [0, 0, 0])
    for t, _, _, (_, kind, who, amount) in stream(shop):
        start = t - t % 10
        totals[(who, start)] = orders_paid.add(totals[(who, start)], [kind, amount])
    mark = max(t for t, *_ in stream(shop)) - lateness
    rows = [[who, "window" if s + 10 <= mark else "open", s, *v] for (who, s), v in totals.items()]
    for i in range(ORDERS):
        deadline = i / shop.RATE + orders_paid.DEADLINE
        if shop.paid(i) == 0 and deadline <= mark:
            rows.append(
                [shop.customer(i), "unpaid", deadline - orders_paid.DEADLINE, 1, shop.amount(i), 0]
            )
    return sorted(rows)


def _run(bolt, events, clock: list) -> None:
    for t, source, seq, values in events:
        clock[0] = t  # the wall clock goes with event time
        item = DataTuple(source, seq, values[2], values, 0.0)
        bolt.process(_Tup(Data(key_group=0, item=item)))


def _new(monkeypatch, cls, clock: list):
    bolt = _bolt(
        monkeypatch,
        cls,
        elastorm__allowed_lateness_secs=5.0,
        elastorm__durable__uri="none",
    )
    bolt.wall_clock = lambda: clock[0]
    return bolt


def _rows(emitted: list) -> list[list]:
    n = len(OUTPUT_ID)
    return sorted(v[:-n] for v in emitted if len(v) == 6 + n)


@pytest.mark.parametrize("handover", [None, 777])
def test_the_tutorials_join_outputs_the_models_rows_once(monkeypatch, user, handover) -> None:
    orders_paid, shop = user
    emitted: list = []
    monkeypatch.setattr(
        Bolt, "emit", lambda self, values, stream=None, **kw: emitted.append(values)
    )
    clock = [0.0]
    events = stream(shop)
    bolt = _new(monkeypatch, orders_paid.OrdersPaid, clock)
    if handover is not None:  # the group moves to another task at tuple ``handover``
        _run(bolt, events[:handover], clock)
        group = bolt.coordinator.state(0)
        holder = CheckpointHolder()
        holder.apply(from_json(to_json(group.begin_checkpoint(full=True))))
        group.finish_checkpoint()
        bolt = _new(monkeypatch, orders_paid.OrdersPaid, clock)
        machine = bolt.coordinator.machine(0)
        machine.state = checkpoint_to_state(holder.take(0), epoch=1, step=bolt._step)
        events = events[handover:]
    _run(bolt, events, clock)
    assert not [r for r in _rows(emitted) if r[1] == "open"]
    bolt.fire_on_tick(clock[0] + orders_paid.IDLE - 0.5)  # not quiet long enough yet
    assert not [r for r in _rows(emitted) if r[1] == "open"]
    bolt.fire_on_tick(clock[0] + orders_paid.IDLE)
    bolt.fire_on_tick(clock[0] + 2 * orders_paid.IDLE)  # each customer reports once
    assert _rows(emitted) == model(orders_paid, shop, 5.0)
    assert bolt.failed == 0
    kinds = {r[1] for r in _rows(emitted)}
    assert kinds == {"window", "open", "unpaid"}  # the model is not empty of any kind
