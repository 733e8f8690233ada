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
 * every elastic operator that has more than {@code i} tasks, as in the controller's
 * {@code Placement.by_index}; there are {@code M} of them (the largest task count, fixed
 * at submit: an operator with fewer tasks has none on the last nodes). The placement
 *
 * <ol>
 *   <li>binds logical nodes to live supervisors one to one (the <em>binding</em>):
 *       a node already bound keeps its supervisor while it is live and wanted; a wanted
 *       live supervisor that is not draining takes the lowest unbound logical node;</li>
 *   <li>gives each bound logical node one worker of its own on its supervisor (its
 *       current port if it has one there), so that worker's executor set never changes
 *       while the node stays bound (Storm restarts a worker whose executors change);</li>
 *   <li>keeps the topology's other executors (spouts, emitters, relay, controller,
 *       ackers) where they are while that worker stays (a bound node's, or one of their
 *       own); those whose worker is gone go with the lowest bound logical node (the
 *       <em>anchor</em>) when the anchor's worker is new in this plan, else into a
 *       <em>fresh</em> worker of their own (a port no executor of the topology runs in
 *       now) beside it, so they never join a running keyed worker;</li>
 *   <li>except the controller's standbys (every controller executor after the first, the
 *       <em>apart</em> ones): each gets a worker of its own on a supervisor other than the
 *       anchor's (its current one while valid), so a lost anchor worker or supervisor
 *       leaves a standby to take over. With no other supervisor to use, a fresh worker
 *       beside the anchor; with no free port at all, none (a standby not running is
 *       better than a keyed worker restarted); the decisions say which;</li>
 *   <li>puts every unbound (surplus) logical node's executors, which own nothing, into one
 *       <em>idle worker</em> on a live supervisor that is not draining (its current one
 *       while still valid, else a fresh port of the one with most of them, then by name).</li>
 * </ol>
 *
 * The invariant behind steps 2-5: <b>a running keyed worker's executor set never
 * changes</b> while its logical node stays bound, because Storm applies a changed set by
 * restarting the worker, and a restarted keyed task comes back empty (the state of the
 * groups it owned and the checkpoints it held are gone). Only a worker that no bound
 * node runs in, or one with no free port left anywhere, is ever joined, and the
 * decisions say which.
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

    /** The topology cannot be placed elastically (e.g. an operator with no task). */
    public static final class PlacementException extends IllegalArgumentException {
        public PlacementException(String message) {
            super(message);
        }
    }

    /** The executor key Storm-side code uses for task range {@code [start, end]}. */
    public static String key(int start, int end) {
        return start + "-" + end;
    }

    /**
     * The number of logical nodes: the largest task count of the elastic operators. Logical
     * node {@code i} hosts task {@code i} (by id) of every operator with more than {@code i}
     * tasks, so an operator with fewer tasks simply has none on the last nodes.
     */
    public static int logicalNodes(Map<String, List<Integer>> elasticTasks) {
        int m = 0;
        for (List<Integer> tasks : elasticTasks.values()) {
            m = Math.max(m, tasks.size());
        }
        if (m == 0) {
            throw new PlacementException("no elastic operator has a task: " + elasticTasks);
        }
        return m;
    }

    /** The executors of each logical node, in logical-node order (see {@link #logicalNodes}). */
    public static List<List<String>> nodeExecutors(Map<String, List<Integer>> elasticTasks) {
        int m = logicalNodes(elasticTasks);
        List<List<String>> byNode = new ArrayList<>();
        for (int i = 0; i < m; i++) {
            byNode.add(new ArrayList<>());
        }
        for (String op : new TreeSet<>(elasticTasks.keySet())) {
            List<Integer> tasks = new ArrayList<>(elasticTasks.get(op));
            Collections.sort(tasks);
            for (int i = 0; i < tasks.size(); i++) {
                byNode.get(i).add(key(tasks.get(i), tasks.get(i)));
            }
        }
        return byNode;
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

        List<List<String>> nodeExecutors = nodeExecutors(in.elasticTasks());

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

        Set<Slot> running = new HashSet<>(in.current().values());
        Slot anchor = placeOthers(in, live, nodeSlot, running, taken, assignment, decisions);
        placeApart(in, anchor, live, new HashSet<>(nodeSlot.values()), running, taken, assignment, decisions);

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
            Slot slot = idleWorker(idleExecutors, in.current(), live, running, taken);
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
                decisions.add(n.name() + ": every logical node is bound (" + m + ", the largest task count of an operator);"
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

    /**
     * Step 5: the idle worker's slot: its current one while valid, else a fresh port of
     * the supervisor (not draining) with most fresh ports, else any untaken port of the one
     * with most (the idle tasks own nothing, so joining costs only a restart of that worker).
     */
    private static Slot idleWorker(List<String> executors, Map<String, Slot> current, Map<String, Node> live,
            Set<Slot> running, Map<String, Set<Integer>> taken) {
        for (String e : executors) {
            Slot now = current.get(e);
            if (now != null && live.containsKey(now.node()) && !live.get(now.node()).draining()
                    && live.get(now.node()).freePorts().contains(now.port())
                    && !taken.getOrDefault(now.node(), Set.of()).contains(now.port())) {
                return now;
            }
        }
        for (boolean freshOnly : new boolean[] {true, false}) {
            Slot best = null;
            int bestFree = 0;
            for (Node n : live.values()) { // by name: the tie-breaker
                if (n.draining()) {
                    continue;
                }
                List<Integer> free = untaken(n, taken, freshOnly ? running : Set.of());
                if (free.size() > bestFree) {
                    bestFree = free.size();
                    best = new Slot(n.name(), free.get(0));
                }
            }
            if (best != null) {
                return best;
            }
        }
        return null;
    }

    /** ``n``'s free ports that no worker of this plan takes and (``avoid``) none runs in now. */
    private static List<Integer> untaken(Node n, Map<String, Set<Integer>> taken, Set<Slot> avoid) {
        Set<Integer> used = taken.getOrDefault(n.name(), Set.of());
        return n.freePorts().stream()
                .filter(p -> !used.contains(p) && !avoid.contains(new Slot(n.name(), p)))
                .toList();
    }

    /** A fresh worker on ``n`` (a port no worker of this plan takes and none runs in now), or null. */
    private static Slot fresh(Node n, Set<Slot> running, Map<String, Set<Integer>> taken) {
        List<Integer> free = n == null ? List.of() : untaken(n, taken, running);
        return free.isEmpty() ? null : new Slot(n.name(), free.get(0));
    }

    /** Whether ``slot`` may hold work: on a live supervisor that is wanted, a port it offers us. */
    private static boolean usable(Slot slot, Input in, Map<String, Node> live) {
        return slot != null && live.containsKey(slot.node())
                && (in.wanted() == null || in.wanted().contains(slot.node()))
                && live.get(slot.node()).freePorts().contains(slot.port());
    }

    /**
     * Step 3: the topology's other executors stay in a worker that stays (a bound node's,
     * or one of their own no bound node takes); the rest go with the anchor when its worker
     * is new, else into a fresh worker beside it (or on the first other supervisor with
     * one), and join the running anchor only when no fresh port is left anywhere.
     */
    private static Slot placeOthers(Input in, Map<String, Node> live, Map<Integer, Slot> nodeSlot,
            Set<Slot> running, Map<String, Set<Integer>> taken, Map<String, Slot> assignment,
            List<String> decisions) {
        if (in.otherExecutors().isEmpty()) {
            return null;
        }
        Set<Slot> nodeWorkers = new HashSet<>(nodeSlot.values());
        Slot anchor = nodeSlot.isEmpty() ? null : nodeSlot.values().iterator().next();
        List<String> moved = new ArrayList<>();
        Set<Slot> kept = new TreeSet<>();
        Set<String> standbys = standbys(in.apart());
        for (String e : new TreeSet<>(in.otherExecutors())) {
            Slot now = in.current().get(e);
            if (now != null && usable(now, in, live) && (nodeWorkers.contains(now)
                    || !taken.getOrDefault(now.node(), Set.of()).contains(now.port()))) {
                assignment.put(e, now);
                kept.add(now);
            } else if (!standbys.contains(e)) {
                moved.add(e); // a standby without a worker is step 4's: one of its own
            }
        }
        for (Slot s : kept) {
            taken.computeIfAbsent(s.node(), k -> new TreeSet<>()).add(s.port());
        }
        if (anchor == null) {
            if (!moved.isEmpty()) {
                decisions.add("no bound node: " + moved.size() + " other executors are left unassigned");
            }
            return null;
        }
        if (moved.isEmpty()) {
            return anchor;
        }
        Slot home = running.contains(anchor) ? null : anchor;
        String how = "with the first bound node, new worker " + anchor;
        if (home == null) {
            home = fresh(live.get(anchor.node()), running, taken);
            for (Node n : live.values()) { // by name: the tie-breaker
                if (home != null) {
                    break;
                }
                if (!n.draining() && (in.wanted() == null || in.wanted().contains(n.name()))) {
                    home = fresh(n, running, taken);
                }
            }
            how = "in a fresh worker of their own, " + home + " (the first bound node's worker " + anchor
                    + " runs and keeps its executors)";
        }
        if (home == null) {
            home = anchor;
            how = "with the first bound node's running worker " + anchor
                    + ": no fresh port left anywhere, so Storm restarts that worker";
        }
        taken.computeIfAbsent(home.node(), k -> new TreeSet<>()).add(home.port());
        for (String e : moved) {
            assignment.put(e, home);
        }
        decisions.add(moved.size() + " other executors placed " + how);
        return anchor;
    }

    /** The apart executors after the lowest: the controller's standbys, sorted. */
    private static Set<String> standbys(List<String> apart) {
        TreeSet<String> sorted = new TreeSet<>(apart);
        if (!sorted.isEmpty()) {
            sorted.pollFirst();
        }
        return sorted;
    }

    /**
     * Step 4: each apart executor after the lowest in a worker of its own, off the anchor's
     * supervisor: its current one while it is still such a worker, else a fresh port of the
     * first other live supervisor that is not draining (by name); with no other supervisor,
     * its own worker beside the anchor (kept while valid, else a fresh port there); with no
     * free port at all it is left unassigned. Step 3 kept it only where its worker stays.
     */
    private static void placeApart(Input in, Slot anchor, Map<String, Node> live, Set<Slot> nodeWorkers,
            Set<Slot> running, Map<String, Set<Integer>> taken, Map<String, Slot> assignment,
            List<String> decisions) {
        if (anchor == null) {
            return;
        }
        for (String e : standbys(in.apart())) {
            Slot now = in.current().get(e);
            // Step 3 kept it in a worker no bound node runs in: its own.
            boolean own = now != null && now.equals(assignment.get(e)) && !nodeWorkers.contains(now)
                    && !live.get(now.node()).draining();
            Slot slot = own && !now.node().equals(anchor.node()) ? now : null;
            for (Node n : live.values()) { // by name: the tie-breaker
                if (slot != null) {
                    break;
                }
                if (!n.name().equals(anchor.node()) && !n.draining()
                        && (in.wanted() == null || in.wanted().contains(n.name()))) {
                    slot = fresh(n, running, taken);
                }
            }
            String where = "apart from the anchor";
            if (slot == null) {
                slot = own ? now : fresh(live.get(anchor.node()), running, taken);
                where = "beside the anchor (no other supervisor with a free port: losing the anchor's"
                        + " supervisor loses both)";
            }
            if (slot == null) {
                decisions.add("controller executor " + e + ": no free port for a worker of its own; left"
                        + " unassigned rather than restart a running worker (no standby meanwhile)");
                continue;
            }
            assignment.put(e, slot);
            taken.computeIfAbsent(slot.node(), k -> new TreeSet<>()).add(slot.port());
            decisions.add("controller executor " + e + " " + where + ": worker " + slot);
        }
    }
}
