package elastorm.jvm;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Where the executors of one elastic topology go: plain data in, plain data out, no
 * Storm types (the {@link ElasticScheduler} translates), so every decision can be
 * tested on its own.
 *
 * <p>Madsen &amp; Zhou (2015) deploy every operator with one task per node it may ever
 * run on. Here a <em>logical node</em> {@code i} is the {@code i}-th task (by id) of
 * every elastic operator, as in the controller's {@code Placement.by_index}; there are
 * {@code M} of them (the task count fixed at submit). The placement
 *
 * <ol>
 *   <li>binds logical nodes to live supervisors one to one (the <em>binding</em>):
 *       a node already bound keeps its supervisor while it is live and wanted; a wanted
 *       live supervisor that is not draining takes the lowest unbound logical node;</li>
 *   <li>gives each bound logical node one worker of its own on its supervisor (its
 *       current port if it has one there), so that worker's executor set never changes
 *       while the node stays bound (Storm restarts a worker whose executors change);</li>
 *   <li>puts every unbound (surplus) logical node's executors, which own nothing, into one
 *       <em>idle worker</em> on a live supervisor that is not draining (its current one
 *       while still valid, else the one with most free ports, then by name);</li>
 *   <li>keeps the topology's other executors (spouts, emitters, relay, controller,
 *       ackers) where they are if that worker stays, else puts them with the lowest
 *       bound logical node (the <em>anchor</em>);</li>
 *   <li>except the controller's standbys (every controller executor after the first, the
 *       <em>apart</em> ones): each gets a worker of its own on a supervisor other than the
 *       anchor's (its current one while valid), so a lost anchor worker or supervisor
 *       leaves a standby to take over. A worker of its own, not a bound node's: moving it
 *       never changes (and so restarts) a keyed task's worker. With no other supervisor
 *       to use, it joins the anchor, and the decisions say so.</li>
 * </ol>
 *
 * A draining supervisor gets no new work: it is never newly bound and never takes the
 * idle worker; it keeps what it has until it is unwanted, then gets nothing at all.
 * Deterministic: every iteration is sorted. O(E + M x S) for E executors and S supervisors.
 */
public final class ElasticPlacement {
    private ElasticPlacement() {
    }

    /** A live supervisor: elastorm's node name, Storm's id, ports no other topology uses. */
    public record Node(String name, String supervisorId, List<Integer> freePorts, boolean draining) {
        public Node {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(supervisorId, "supervisorId");
            freePorts = List.copyOf(new TreeSet<>(freePorts));
        }
    }

    /** A worker: a port on a supervisor (by node name). */
    public record Slot(String node, int port) implements Comparable<Slot> {
        @Override
        public int compareTo(Slot o) {
            int c = node.compareTo(o.node);
            return c != 0 ? c : Integer.compare(port, o.port);
        }

        @Override
        public String toString() {
            return node + ":" + port;
        }
    }

    /**
     * What the placement works from.
     *
     * @param elasticTasks each elastic operator's task ids (one executor per task)
     * @param otherExecutors the topology's other executors, by key ({@code "start-end"})
     * @param nodes the live supervisors
     * @param wanted node names that may be bound (null: every live node)
     * @param binding logical node {@code i} -> node name it was bound to (null entries:
     *     unbound); shorter lists are padded
     * @param current executor key -> the slot it runs in now (absent: unassigned)
     * @param apart the controller's executors (also in {@code otherExecutors}): all but
     *     the lowest are placed apart from the anchor (step 5)
     */
    public record Input(
            Map<String, List<Integer>> elasticTasks,
            List<String> otherExecutors,
            List<Node> nodes,
            Set<String> wanted,
            List<String> binding,
            Map<String, Slot> current,
            List<String> apart) {
        public Input {
            apart = List.copyOf(apart);
        }

        /** Without executors to keep apart. */
        public Input(Map<String, List<Integer>> elasticTasks, List<String> otherExecutors, List<Node> nodes,
                Set<String> wanted, List<String> binding, Map<String, Slot> current) {
            this(elasticTasks, otherExecutors, nodes, wanted, binding, current, List.of());
        }
    }

    /** Executor key -> slot, the binding it follows, and one line per decision. */
    public record Plan(Map<String, Slot> assignment, List<String> binding, List<String> decisions) {
    }

    /** The topology cannot be placed elastically (e.g. operators with unequal task counts). */
    public static final class PlacementException extends IllegalArgumentException {
        public PlacementException(String message) {
            super(message);
        }
    }

    /** The executor key Storm-side code uses for task range {@code [start, end]}. */
    public static String key(int start, int end) {
        return start + "-" + end;
    }

    /** The number of logical nodes: the common task count of the elastic operators. */
    public static int logicalNodes(Map<String, List<Integer>> elasticTasks) {
        Set<Integer> counts = new TreeSet<>();
        for (List<Integer> tasks : elasticTasks.values()) {
            counts.add(tasks.size());
        }
        if (counts.size() != 1) {
            throw new PlacementException("elastic operators need equal task counts, got " + elasticTasks);
        }
        return counts.iterator().next();
    }

    /** Compute the placement (see the class comment). */
    public static Plan place(Input in) {
        int m = logicalNodes(in.elasticTasks());
        List<String> decisions = new ArrayList<>();
        Map<String, Node> live = new TreeMap<>();
        for (Node n : in.nodes()) {
            live.put(n.name(), n);
        }
        List<String> binding = bind(m, in, live, decisions);

        // Executors of each logical node, in logical-node order.
        List<List<String>> nodeExecutors = new ArrayList<>();
        for (int i = 0; i < m; i++) {
            nodeExecutors.add(new ArrayList<>());
        }
        for (String op : new TreeSet<>(in.elasticTasks().keySet())) {
            List<Integer> tasks = new ArrayList<>(in.elasticTasks().get(op));
            Collections.sort(tasks);
            for (int i = 0; i < m; i++) {
                nodeExecutors.get(i).add(key(tasks.get(i), tasks.get(i)));
            }
        }

        Map<String, Slot> assignment = new LinkedHashMap<>();
        Map<String, Set<Integer>> taken = new TreeMap<>();
        Map<Integer, Slot> nodeSlot = new TreeMap<>();
        for (int i = 0; i < m; i++) {
            String name = binding.get(i);
            if (name == null) {
                continue;
            }
            Slot slot = workerOf(nodeExecutors.get(i), in.current(), name, live.get(name), taken);
            if (slot == null) {
                decisions.add("node" + i + ": no free port on " + name + "; left unassigned");
                continue;
            }
            taken.computeIfAbsent(name, k -> new TreeSet<>()).add(slot.port());
            nodeSlot.put(i, slot);
            for (String e : nodeExecutors.get(i)) {
                assignment.put(e, slot);
            }
        }

        List<Integer> idle = new ArrayList<>();
        for (int i = 0; i < m; i++) {
            if (binding.get(i) == null) {
                idle.add(i);
            }
        }
        if (!idle.isEmpty()) {
            List<String> idleExecutors = new ArrayList<>();
            for (int i : idle) {
                idleExecutors.addAll(nodeExecutors.get(i));
            }
            Slot slot = idleWorker(idleExecutors, in.current(), live, taken);
            if (slot == null) {
                decisions.add("idle nodes " + idle + ": no free port on a node that is not draining;"
                        + " left unassigned");
            } else {
                taken.computeIfAbsent(slot.node(), k -> new TreeSet<>()).add(slot.port());
                for (String e : idleExecutors) {
                    assignment.put(e, slot);
                }
                decisions.add("idle nodes " + idle + " wait in worker " + slot);
            }
        }

        Slot anchor = placeOthers(in, nodeSlot, assignment, decisions);
        placeApart(in, anchor, live, taken, assignment, decisions);
        for (Map.Entry<Integer, Slot> e : nodeSlot.entrySet()) {
            decisions.add("node" + e.getKey() + " -> " + binding.get(e.getKey()) + " worker " + e.getValue());
        }
        return new Plan(assignment, Collections.unmodifiableList(binding), decisions);
    }

    /** Step 1: the binding of logical nodes to live, wanted supervisors. */
    private static List<String> bind(int m, Input in, Map<String, Node> live, List<String> decisions) {
        List<String> binding = new ArrayList<>(Collections.nCopies(m, (String) null));
        Set<String> bound = new HashSet<>();
        List<String> previous = in.binding() == null ? List.of() : in.binding();
        for (int i = 0; i < Math.min(m, previous.size()); i++) {
            String name = previous.get(i);
            if (name == null) {
                continue;
            }
            if (!live.containsKey(name)) {
                decisions.add("node" + i + ": " + name + " is not live; its tasks go idle");
            } else if (in.wanted() != null && !in.wanted().contains(name)) {
                decisions.add("node" + i + ": " + name + " released; its tasks go idle");
            } else if (bound.add(name)) {
                binding.set(i, name);
            }
        }
        for (Node n : live.values()) { // sorted by name
            if (bound.contains(n.name()) || n.draining()
                    || (in.wanted() != null && !in.wanted().contains(n.name()))) {
                continue;
            }
            int free = binding.indexOf(null);
            if (free < 0) {
                decisions.add(n.name() + ": every logical node is bound (" + m + " tasks per operator);"
                        + " it gets nothing");
                continue;
            }
            binding.set(free, n.name());
            bound.add(n.name());
            decisions.add("node" + free + ": bound to " + n.name() + " (joined)");
        }
        return binding;
    }

    /** A bound node's worker: its current slot on ``name`` if it has one, else the lowest free port. */
    private static Slot workerOf(List<String> executors, Map<String, Slot> current, String name, Node node,
            Map<String, Set<Integer>> taken) {
        Set<Integer> used = taken.getOrDefault(name, Set.of());
        Slot now = executors.isEmpty() ? null : current.get(executors.get(0));
        if (now != null && now.node().equals(name) && !used.contains(now.port())
                && node.freePorts().contains(now.port())) {
            return now;
        }
        for (int port : node.freePorts()) {
            if (!used.contains(port) && !occupiedByOther(current, executors, new Slot(name, port))) {
                return new Slot(name, port);
            }
        }
        for (int port : node.freePorts()) { // only ports of this topology's other workers remain
            if (!used.contains(port)) {
                return new Slot(name, port);
            }
        }
        return null;
    }

    /** Whether another executor of this topology runs in ``slot`` now (prefer not to disturb it). */
    private static boolean occupiedByOther(Map<String, Slot> current, List<String> mine, Slot slot) {
        for (Map.Entry<String, Slot> e : current.entrySet()) {
            if (e.getValue().equals(slot) && !mine.contains(e.getKey())) {
                return true;
            }
        }
        return false;
    }

    /** Step 3: the idle worker's slot (its current one while valid). */
    private static Slot idleWorker(List<String> executors, Map<String, Slot> current, Map<String, Node> live,
            Map<String, Set<Integer>> taken) {
        for (String e : executors) {
            Slot now = current.get(e);
            if (now != null && live.containsKey(now.node()) && !live.get(now.node()).draining()
                    && live.get(now.node()).freePorts().contains(now.port())
                    && !taken.getOrDefault(now.node(), Set.of()).contains(now.port())) {
                return now;
            }
        }
        Slot best = null;
        int bestFree = -1;
        for (Node n : live.values()) { // by name: the tie-breaker
            if (n.draining()) {
                continue;
            }
            Set<Integer> used = taken.getOrDefault(n.name(), Set.of());
            List<Integer> free = n.freePorts().stream().filter(p -> !used.contains(p)).toList();
            if (free.size() > bestFree && !free.isEmpty()) {
                bestFree = free.size();
                best = new Slot(n.name(), free.get(0));
            }
        }
        return best;
    }

    /** Step 4: the topology's other executors stay in a worker that stays, else go to the anchor. */
    private static Slot placeOthers(Input in, Map<Integer, Slot> nodeSlot, Map<String, Slot> assignment,
            List<String> decisions) {
        if (in.otherExecutors().isEmpty()) {
            return null;
        }
        Set<Slot> kept = new HashSet<>(nodeSlot.values());
        Slot anchor = nodeSlot.isEmpty() ? null : nodeSlot.values().iterator().next();
        int moved = 0;
        for (String e : new TreeSet<>(in.otherExecutors())) {
            Slot now = in.current().get(e);
            if (now != null && kept.contains(now)) {
                assignment.put(e, now);
            } else if (anchor != null) {
                assignment.put(e, anchor);
                moved++;
            }
        }
        if (anchor == null) {
            decisions.add("no bound node: the other executors are left unassigned");
        } else if (moved > 0) {
            decisions.add(moved + " other executors placed with the first bound node, worker " + anchor);
        }
        return anchor;
    }

    /**
     * Step 5: each apart executor after the lowest in a worker of its own, off the anchor's
     * supervisor: its current slot while that is still such a worker, else the lowest
     * untaken port of the first other live supervisor that is not draining (by name).
     */
    private static void placeApart(Input in, Slot anchor, Map<String, Node> live,
            Map<String, Set<Integer>> taken, Map<String, Slot> assignment, List<String> decisions) {
        List<String> apart = new ArrayList<>(new TreeSet<>(in.apart()));
        if (anchor == null || apart.size() < 2) {
            return;
        }
        Set<Slot> used = new HashSet<>(assignment.values());
        for (String e : apart.subList(1, apart.size())) {
            Slot now = in.current().get(e);
            Slot slot = null;
            if (now != null && !now.node().equals(anchor.node()) && live.containsKey(now.node())
                    && !live.get(now.node()).draining() && live.get(now.node()).freePorts().contains(now.port())
                    && !taken.getOrDefault(now.node(), Set.of()).contains(now.port())
                    && (!used.contains(now) || now.equals(assignment.get(e)))) {
                slot = now;
            }
            for (Node n : live.values()) { // by name: the tie-breaker
                if (slot != null) {
                    break;
                }
                if (n.name().equals(anchor.node()) || n.draining()) {
                    continue;
                }
                Set<Integer> busy = taken.getOrDefault(n.name(), Set.of());
                for (int port : n.freePorts()) {
                    if (!busy.contains(port) && !used.contains(new Slot(n.name(), port))) {
                        slot = new Slot(n.name(), port);
                        break;
                    }
                }
            }
            if (slot == null) {
                decisions.add("controller executor " + e + ": no other supervisor with a free port;"
                        + " it shares worker " + assignment.get(e));
                continue;
            }
            assignment.put(e, slot);
            used.add(slot);
            taken.computeIfAbsent(slot.node(), k -> new TreeSet<>()).add(slot.port());
            decisions.add("controller executor " + e + " apart from the anchor: worker " + slot);
        }
    }
}
