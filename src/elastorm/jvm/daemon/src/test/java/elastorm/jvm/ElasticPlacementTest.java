package elastorm.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import elastorm.jvm.ElasticPlacement.Input;
import elastorm.jvm.ElasticPlacement.Node;
import elastorm.jvm.ElasticPlacement.Plan;
import elastorm.jvm.ElasticPlacement.Slot;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/** ElasticPlacement on plain data: binding, one worker per bound node, idle worker, draining. */
class ElasticPlacementTest {
    /** Two elastic operators with 4 tasks each (4 logical nodes), three other executors. */
    static final Map<String, List<Integer>> OPS = new TreeMap<>(Map.of(
            "op1", List.of(4, 5, 6, 7), "op2", List.of(8, 9, 10, 11)));
    static final List<String> OTHERS = List.of("1-1", "2-2", "3-3");

    static Node node(String name, boolean draining) {
        int base = 27800 + 10 * (name.charAt(name.length() - 1) - '0');
        return new Node(name, "id-" + name, List.of(base, base + 1), draining);
    }

    static Input input(List<Node> nodes, Set<String> wanted, List<String> binding, Map<String, Slot> current) {
        return new Input(OPS, OTHERS, nodes, wanted, binding, current);
    }

    /** The slot each logical node's executors share (fails if they do not). */
    static Slot slotOfNode(Plan plan, int i) {
        Slot a = plan.assignment().get(ElasticPlacement.key(OPS.get("op1").get(i), OPS.get("op1").get(i)));
        Slot b = plan.assignment().get(ElasticPlacement.key(OPS.get("op2").get(i), OPS.get("op2").get(i)));
        assertEquals(a, b, "node" + i + "'s tasks share one worker");
        return a;
    }

    @Test
    void everyLiveNodeGetsOneTaskOfEachOperatorAndSurplusWaitsIdle() {
        Plan plan = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false)), null, null, Map.of()));
        assertEquals(Arrays.asList("s0", "s1", null, null), plan.binding());
        Slot n0 = slotOfNode(plan, 0);
        Slot n1 = slotOfNode(plan, 1);
        assertEquals("s0", n0.node());
        assertEquals("s1", n1.node());
        Slot idle = slotOfNode(plan, 2);
        assertEquals(idle, slotOfNode(plan, 3), "surplus nodes share one idle worker");
        assertNotEquals(n0, idle);
        assertNotEquals(n1, idle);
        for (String e : OTHERS) {
            assertEquals(n0, plan.assignment().get(e), "other executors go with the first bound node");
        }
        assertEquals(2 * 4 + OTHERS.size(), plan.assignment().size(), "every executor placed");
    }

    @Test
    void theControllersStandbyGetsAWorkerOfItsOwnOnAnotherSupervisor() {
        List<String> others = List.of("1-1", "2-2", "3-3", "12-12", "13-13");
        List<String> controllers = List.of("12-12", "13-13");
        List<Node> two = List.of(roomy("s0"), roomy("s1"));
        Plan plan = ElasticPlacement.place(new Input(OPS, others, two, null, null, Map.of(), controllers));
        Slot anchor = slotOfNode(plan, 0);
        assertEquals(anchor, plan.assignment().get("12-12"), "the first controller task stays with the anchor");
        Slot standby = plan.assignment().get("13-13");
        assertEquals("s1", standby.node(), "the standby is on another supervisor");
        assertFalse(plan.assignment().entrySet().stream()
                .anyMatch(e -> e.getValue().equals(standby) && !e.getKey().equals("13-13")),
                "in a worker of its own");
        Plan again = ElasticPlacement.place(
                new Input(OPS, others, two, null, plan.binding(), plan.assignment(), controllers));
        assertEquals(plan.assignment(), again.assignment(), "stable");
        // s1 lost: no other supervisor left, so the standby gets a fresh worker beside the
        // anchor, and the anchor's worker keeps its executors (Storm would restart it).
        Plan alone = ElasticPlacement.place(new Input(
                OPS, others, List.of(roomy("s0")), null, plan.binding(), plan.assignment(), controllers));
        assertEquals(executorsAt(plan, anchor), executorsAt(alone, anchor), "the anchor's worker is unchanged");
        Slot beside = alone.assignment().get("13-13");
        assertEquals("s0", beside.node());
        assertNotEquals(anchor, beside);
        assertTrue(alone.decisions().stream().anyMatch(d -> d.contains("beside the anchor")),
                alone.decisions().toString());
        Plan stays = ElasticPlacement.place(new Input(
                OPS, others, List.of(roomy("s0")), null, alone.binding(), alone.assignment(), controllers));
        assertEquals(beside, stays.assignment().get("13-13"), "stable beside the anchor");
        // s1 back: the standby moves apart again, and nothing else moves.
        Plan back = ElasticPlacement.place(new Input(OPS, others, two, null, stays.binding(),
                stays.assignment(), controllers));
        assertEquals("s1", back.assignment().get("13-13").node());
        assertEquals(executorsAt(stays, anchor), executorsAt(back, anchor));
        // Two ports only (the anchor's and the idle worker's): no standby rather than a
        // restarted anchor.
        Plan tight = ElasticPlacement.place(new Input(
                OPS, others, List.of(node("s0", false)), null, plan.binding(), plan.assignment(), controllers));
        assertEquals(executorsAt(plan, anchor), executorsAt(tight, anchor));
        assertNull(tight.assignment().get("13-13"));
        assertTrue(tight.decisions().stream().anyMatch(d -> d.contains("left unassigned rather than restart")),
                tight.decisions().toString());
    }

    /** The executors the plan puts in ``slot``. */
    static Set<String> executorsAt(Plan plan, Slot slot) {
        Set<String> out = new TreeSet<>();
        plan.assignment().forEach((e, s) -> {
            if (s.equals(slot)) {
                out.add(e);
            }
        });
        return out;
    }

    /** Fails if a logical node bound to the same worker before and after changed that worker's executors. */
    static void assertNoRunningKeyedWorkerChanges(Plan before, Plan after, String context) {
        for (int i = 0; i < before.binding().size(); i++) {
            Slot was = before.assignment().get(ElasticPlacement.key(OPS.get("op2").get(i), OPS.get("op2").get(i)));
            if (before.binding().get(i) == null || after.binding().get(i) == null || was == null) {
                continue;
            }
            if (was.equals(slotOfNode(after, i))) {
                assertEquals(executorsAt(before, was), executorsAt(after, was),
                        "node" + i + "'s running worker " + was + " changed (" + context + "): "
                        + after.decisions());
            }
        }
    }

    static Node roomy(String name) {
        int base = 27800 + 10 * (name.charAt(name.length() - 1) - '0');
        return new Node(name, "id-" + name, List.of(base, base + 1, base + 2, base + 3, base + 4), false);
    }

    @Test
    void losingTheAnchorsSupervisorMovesTheOthersToAFreshWorkerNotIntoARunningKeyedOne() {
        List<String> others = List.of("1-1", "2-2", "3-3", "12-12", "13-13");
        List<String> controllers = List.of("12-12", "13-13");
        List<Node> three = List.of(roomy("s0"), roomy("s1"), roomy("s2"));
        Plan before = ElasticPlacement.place(new Input(OPS, others, three, null, null, Map.of(), controllers));
        Plan after = ElasticPlacement.place(new Input(OPS, others, List.of(roomy("s1"), roomy("s2")), null,
                before.binding(), before.assignment(), controllers));
        assertNoRunningKeyedWorkerChanges(before, after, "s0 lost");
        Slot home = after.assignment().get("1-1");
        for (String e : List.of("2-2", "3-3", "12-12")) {
            assertEquals(home, after.assignment().get(e), "the displaced executors stay together");
        }
        for (int i = 1; i < 3; i++) {
            assertNotEquals(slotOfNode(after, i), home, "not in node" + i + "'s running worker");
        }
        assertNotEquals(home.node(), after.assignment().get("13-13").node(), "the standby still apart");
    }

    /** Random losses and joins of supervisors: no placement ever changes a running keyed worker. */
    @Test
    void noSequenceOfLossesAndJoinsChangesARunningKeyedWorker() {
        List<String> others = List.of("1-1", "2-2", "3-3", "12-12", "13-13");
        List<String> controllers = List.of("12-12", "13-13");
        List<String> names = List.of("s0", "s1", "s2", "s3", "s4");
        java.util.Random random = new java.util.Random(20261125);
        for (int run = 0; run < 200; run++) {
            Set<String> up = new TreeSet<>(names.subList(0, 1 + random.nextInt(names.size())));
            Plan plan = null;
            StringBuilder history = new StringBuilder(up.toString());
            for (int step = 0; step < 12; step++) {
                List<Node> nodes = up.stream().map(ElasticPlacementTest::roomy).toList();
                // What Storm still runs: the executors on supervisors that are up.
                Map<String, Slot> current = new TreeMap<>();
                if (plan != null) {
                    plan.assignment().forEach((e, s) -> {
                        if (up.contains(s.node())) {
                            current.put(e, s);
                        }
                    });
                }
                Plan next = ElasticPlacement.place(new Input(OPS, others, nodes, null,
                        plan == null ? null : plan.binding(), current, controllers));
                if (plan != null) {
                    assertNoRunningKeyedWorkerChanges(plan, next, "run " + run + ": " + history);
                }
                plan = next;
                String flip = names.get(random.nextInt(names.size()));
                if (up.contains(flip) && up.size() > 1) {
                    int lose = 1 + random.nextInt(Math.min(3, up.size() - 1));
                    List<String> gone = new java.util.ArrayList<>(up);
                    java.util.Collections.shuffle(gone, random);
                    up.removeAll(gone.subList(0, lose));
                    history.append(" -").append(gone.subList(0, lose));
                } else {
                    up.add(flip);
                    history.append(" +").append(flip);
                }
            }
        }
    }

    @Test
    void aJoiningNodeTakesTheLowestIdleNodeAndNothingElseMoves() {
        Plan before = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false)), null, null, Map.of()));
        Plan after = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false), node("s2", false)), null,
                before.binding(), before.assignment()));
        assertEquals(Arrays.asList("s0", "s1", "s2", null), after.binding());
        assertEquals(slotOfNode(before, 0), slotOfNode(after, 0));
        assertEquals(slotOfNode(before, 1), slotOfNode(after, 1));
        assertEquals("s2", slotOfNode(after, 2).node());
        for (String e : OTHERS) {
            assertEquals(before.assignment().get(e), after.assignment().get(e));
        }
        assertTrue(after.decisions().stream().anyMatch(d -> d.contains("node2: bound to s2")), after.decisions().toString());
    }

    @Test
    void aPlacementIsStableWhenNothingChanges() {
        List<Node> nodes = List.of(node("s0", false), node("s1", false), node("s2", false));
        Plan first = ElasticPlacement.place(input(nodes, null, null, Map.of()));
        Plan again = ElasticPlacement.place(input(nodes, null, first.binding(), first.assignment()));
        assertEquals(first.assignment(), again.assignment());
    }

    @Test
    void aDrainingNodeGetsNoNewWorkButKeepsWhatItHas() {
        Plan two = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false)), null, null, Map.of()));
        // s2 starts draining before it was ever bound: it gets nothing, not even the idle worker.
        Plan plan = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false), node("s2", true)), null,
                two.binding(), two.assignment()));
        assertFalse(plan.binding().contains("s2"));
        assertFalse(plan.assignment().values().stream().anyMatch(s -> s.node().equals("s2")));
        // s1 drains while bound: it keeps its worker (the controller empties it first).
        Plan draining = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", true)), null, two.binding(), two.assignment()));
        assertEquals(slotOfNode(two, 1), slotOfNode(draining, 1));
    }

    @Test
    void aReleasedNodeGetsNothingAtAllAndItsTasksGoIdle() {
        List<Node> three = List.of(node("s0", false), node("s1", false), node("s2", false));
        Plan before = ElasticPlacement.place(input(three, null, null, Map.of()));
        Plan after = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false), node("s2", true)),
                Set.of("s0", "s1"), before.binding(), before.assignment()));
        assertEquals(Arrays.asList("s0", "s1", null, null), after.binding());
        assertFalse(after.assignment().values().stream().anyMatch(s -> s.node().equals("s2")));
        assertEquals(slotOfNode(after, 2), slotOfNode(after, 3));
        assertEquals(slotOfNode(before, 0), slotOfNode(after, 0));
        assertTrue(after.decisions().stream().anyMatch(d -> d.contains("s2 released")), after.decisions().toString());
    }

    @Test
    void anUnwantedLiveNodeIsNotBound() {
        Plan plan = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false), node("s2", false)),
                Set.of("s0", "s1"), null, Map.of()));
        assertEquals(Arrays.asList("s0", "s1", null, null), plan.binding());
    }

    @Test
    void aLostNodesTasksGoIdleAndTheOthersStay() {
        List<Node> three = List.of(node("s0", false), node("s1", false), node("s2", false));
        Plan before = ElasticPlacement.place(input(three, null, null, Map.of()));
        Plan after = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s2", false)), null, before.binding(), before.assignment()));
        assertEquals(Arrays.asList("s0", null, "s2", null), after.binding());
        assertEquals(slotOfNode(before, 2), slotOfNode(after, 2));
    }

    @Test
    void moreNodesThanTasksLeavesTheExtraEmpty() {
        List<Node> five = List.of(node("s0", false), node("s1", false), node("s2", false),
                node("s3", false), node("s4", false));
        Plan plan = ElasticPlacement.place(input(five, null, null, Map.of()));
        assertEquals(List.of("s0", "s1", "s2", "s3"), plan.binding());
        assertFalse(plan.assignment().values().stream().anyMatch(s -> s.node().equals("s4")));
    }

    @Test
    void noFreePortLeavesTheIdleTasksUnassignedAndSaysSo() {
        Node tight = new Node("s0", "id-s0", List.of(27800), false);
        Plan plan = ElasticPlacement.place(input(List.of(tight), null, null, Map.of()));
        assertNull(slotOfNode(plan, 1));
        assertTrue(plan.decisions().stream().anyMatch(d -> d.contains("left unassigned")));
    }

    @Test
    void anOperatorWithFewerTasksHasNoneOnTheLastNodes() {
        Map<String, List<Integer>> ops = Map.of("a", List.of(1, 2), "b", List.of(3, 4, 5));
        assertEquals(List.of(List.of("1-1", "3-3"), List.of("2-2", "4-4"), List.of("5-5")),
                ElasticPlacement.nodeExecutors(ops));
        Plan plan = ElasticPlacement.place(new Input(ops, List.of(),
                List.of(node("s0", false), node("s1", false), node("s2", false)), null, null, Map.of()));
        assertEquals(List.of("s0", "s1", "s2"), plan.binding());
        assertNotNull(plan.assignment().get("5-5"));
        assertNotEquals(plan.assignment().get("5-5"), plan.assignment().get("2-2"));
        assertEquals(plan.binding(), ElasticScheduler.bindingFromAssignment(ops, plan.assignment()));
    }

    @Test
    void noOperatorTaskIsRefused() {
        assertThrows(ElasticPlacement.PlacementException.class, () -> ElasticPlacement.place(
                new Input(Map.of("a", List.of()), List.of(), List.of(node("s0", false)), null, null,
                        Map.of())));
    }

    @Test
    void theBindingIsRecoveredFromAnAssignment() {
        Plan plan = ElasticPlacement.place(input(
                List.of(node("s0", false), node("s1", false)), null, null, Map.of()));
        assertEquals(plan.binding(), ElasticScheduler.bindingFromAssignment(OPS, plan.assignment()));
    }

    @Test
    void theNodeSetParses() throws Exception {
        ElasticScheduler.NodeSet set = ElasticScheduler.parseNodes(
                "{\"wanted\": [\"a\", \"b\"], \"draining\": [\"b\"]}".getBytes(StandardCharsets.UTF_8));
        assertEquals(new HashSet<>(List.of("a", "b")), set.wanted());
        assertEquals(Set.of("b"), set.draining());
        ElasticScheduler.NodeSet all = ElasticScheduler.parseNodes("{}".getBytes(StandardCharsets.UTF_8));
        assertNull(all.wanted());
    }

    @Test
    void aTopologyIsElasticWhenItHasKeyedOperatorsAndDoesNotOptOut() {
        Map<String, Object> conf = new HashMap<>(Map.of("elastorm.operators", Map.of("c", List.of("e"))));
        assertTrue(ElasticScheduler.isElastic(conf));
        conf.put("elastorm.elastic_scheduling", false);
        assertFalse(ElasticScheduler.isElastic(conf));
        assertFalse(ElasticScheduler.isElastic(Map.of("topology.workers", 2)));
    }
}
