"""Stateful property test: an owner and its holder lost together, restored from the
durable store (Kwon et al. 2008), against the same single-threaded model.

The migration machine's rules (data, deliveries in any FIFO interleaving,
checkpoints, migrations, replicas, crashes), on a cluster with the durable tier on
(``sim.Cluster(durable=True)``): each task's writer writes its newest checkpoint of a
group when the ``persist`` rule says so, and owners trim upstream buffers no
further than the durable copy. ``lose_owner_and_holder`` kills a group's owner and
holder at once, so no copy survives in memory: the group is restored from the store
(a DURABLE restore), its target loading the copy while the emitters' toStates and
data arrive in any order, and the emitters' buffers replay everything after it.
Whatever the interleaving, the settled owner and the sink equal the fold of every
tuple, and every trimmed tuple is reflected in the store's copy.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from property_scale import examples
from sim import Cluster
from test_migration_stateful import EMITTERS, GROUPS, MigrationMachine, sum_count

from elastorm.core.state import fold


class DurableRestoreMachine(MigrationMachine):
    @initialize(request_at=st.sampled_from([0, 2, 5]))
    def setup(self, request_at: int) -> None:
        self.cluster = Cluster(
            num_key_groups=GROUPS,
            tasks=self.tasks,
            emitters=EMITTERS,
            step=fold(sum_count),
            request_at=request_at,
            durable=True,
        )
        self.log = defaultdict(list)
        self.read = {}

    @rule(task=st.sampled_from(MigrationMachine.tasks), group=st.integers(0, GROUPS - 1))
    def persist(self, task: int, group: int) -> None:
        if task in self.tasks and self.cluster.persist(task, group):
            event("durable write")

    def owner_and_holder(self) -> list[tuple[int, int]]:
        """(owner, holder) pairs of groups whose crash together leaves only the store's
        copy of the group, and loses nothing anywhere."""
        c = self.cluster
        pairs = set()
        for g in range(GROUPS):
            pair = tuple(sorted({c.owner(g), c.holders[g]}))
            if len(pair) == 2 and c.from_store(g, pair) and c.survives(pair):
                pairs.add(pair)
        return sorted(pairs)

    @precondition(lambda self: self.owner_and_holder())
    @rule(data=st.data())
    def lose_owner_and_holder(self, data: st.DataObject) -> None:
        c = self.cluster
        dead = data.draw(st.sampled_from(self.owner_and_holder()), label="dead")
        before = c.stats["durable_restores"]
        unwritten = [
            g
            for g in range(GROUPS)
            if any(c.involved(g, d) for d in dead) and c.from_store(g, dead) and g not in c.store
        ]
        c.crash(*dead)
        restored = c.stats["durable_restores"] - before
        assert restored >= 1
        event(f"owner and holder lost together: {restored} durable restore(s)")
        if unwritten:  # no set yet: empty, plus the whole replay (nothing was trimmed)
            event("a durable restore of a group the store has no set of")

    @invariant()
    def every_copy_is_a_fold_of_per_source_prefixes(self) -> None:
        """As in memory, so in the store: each copy is the fold of exactly the tuples
        its watermarks claim."""
        super().every_copy_is_a_fold_of_per_source_prefixes()
        if not hasattr(self, "cluster"):
            return
        for g, copy in self.cluster.store.items():
            assert copy.entries == self.fold(g, copy.watermarks), (g, "durable")

    @invariant()
    def trimmed_tuples_survive_somewhere(self) -> None:
        """Every tuple dropped from a buffer is reflected in the store's copy (owners
        trim no further than the durable copy), whatever happened in memory: while a
        DURABLE restore loads, the store's is the only copy."""
        if not hasattr(self, "cluster"):
            return
        c = self.cluster
        for g in range(GROUPS):
            stored = c.store.get(g)
            for source, seq in c.trimmed(g).items():
                assert stored is not None and stored.watermarks.get(source, 0) >= seq, (
                    g,
                    source,
                    seq,
                )


DurableRestoreMachine.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDurableRestore = DurableRestoreMachine.TestCase
