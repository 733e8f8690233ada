"""The asker's loop over the pure query steps (``elastorm.core.queries``) against a
model of a migrating operator: whatever the routing tables and phases it meets, a
final answer comes only from the task that owns the key's group ``ACTIVE`` at that
moment, with that task's record, and the loop ends by its deadline."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from elastorm.core.keygroups import key_group
from elastorm.core.migration.table import Phase
from elastorm.core.queries import Next, Verdict, answer, ask, next_step
from elastorm.core.routing import RoutingTable
from elastorm.core.state import is_reserved

TASKS = (3, 4, 5)
GROUPS = 4


@st.composite
def moments(draw):
    """One moment of the operator: a routing table, each task's phase for every group
    (at most the table's owner ACTIVE: a migration may hold the group ACTIVE nowhere)
    and whether the addressed task answers at all."""
    owners = tuple(draw(st.sampled_from(TASKS)) for _ in range(GROUPS))
    active = draw(st.booleans())
    phases = {t: draw(st.sampled_from([p for p in Phase if p is not Phase.ACTIVE])) for t in TASKS}
    return owners, active, phases, draw(st.booleans())


@settings(max_examples=300)
# a user's key never names one of elastorm's own entries (``is_reserved``: NUL-led)
@given(
    st.text(max_size=6).filter(lambda k: not is_reserved(k)),
    st.lists(moments(), min_size=1, max_size=12),
)
def test_a_final_answer_comes_only_from_the_active_owner(key, timeline) -> None:
    g = key_group(key, GROUPS)
    records = {t: {"count": t * 10} for t in TASKS}  # what each task would say of the key
    query, result, steps = None, None, 0
    for now, (owners, active, phases, answers) in enumerate(timeline):
        table = RoutingTable(epoch=now, owners=owners)
        if query is None:
            query = ask("counts", key, table)
        phase = Phase.ACTIVE if active and query.task == owners[g] else phases[query.task]
        got = None
        if answers:
            got = answer(
                query,
                operator="counts",
                task=query.task,
                num_key_groups=GROUPS,
                phase=phase,
                record=records[query.task],
            )
        step = next_step(query, got, owner_now=owners[g], now=now, deadline=len(timeline) - 1)
        steps += 1
        if step is Next.DONE:
            result = (got, owners[g], active)
            break
        assert step is not Next.TIMEOUT or now >= len(timeline) - 1
        if step is Next.TIMEOUT:
            break
        if step is Next.REROUTE:
            query = None
    assert steps <= len(timeline)
    if result is not None:
        got, owner, active = result
        assert active and got.task == owner and got.verdict is Verdict.FOUND
        assert got.record == records[owner] and got.key_group == g
