package elastorm.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.RetryNTimes;
import org.apache.storm.metric.StormMetricsRegistry;
import org.apache.storm.scheduler.Cluster;
import org.apache.storm.scheduler.DefaultScheduler;
import org.apache.storm.scheduler.ExecutorDetails;
import org.apache.storm.scheduler.IScheduler;
import org.apache.storm.scheduler.SchedulerAssignment;
import org.apache.storm.scheduler.SupervisorDetails;
import org.apache.storm.scheduler.Topologies;
import org.apache.storm.scheduler.TopologyDetails;
import org.apache.storm.scheduler.WorkerSlot;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * elastorm's Storm scheduler (named by {@code storm.scheduler} in Nimbus's storm.yaml).
 *
 * <p>An <em>elastic</em> topology is one whose conf has {@code elastorm.operators}
 * (ElasticTopology sets it): its keyed operators' tasks are placed by
 * {@link ElasticPlacement} (one task of each per live node, surplus tasks idle, draining
 * nodes get no new work), unless it sets {@code elastorm.elastic_scheduling: false}.
 * Everything else is scheduled by Storm's {@link DefaultScheduler}.
 *
 * <p>It reads {@code <root>/<topology>/scheduler/nodes} from ZooKeeper
 * ({@code {"wanted": [names] | null, "draining": [names]}}, written by
 * {@code elastorm scale} / {@code elastorm drain}) and writes what it applied to
 * {@code <root>/<topology>/scheduler/placement}. A node's name is its supervisor's
 * {@code supervisor.scheduler.meta} entry {@code elastorm.node}, else its host.
 */
public final class ElasticScheduler implements IScheduler {
    private static final Logger LOG = LoggerFactory.getLogger(ElasticScheduler.class);
    static final String OPERATORS = "elastorm.operators";
    static final String NODE_META = "elastorm.node";
    static final String OPT_OUT = "elastorm.elastic_scheduling";
    /** The controller's component id (elastorm.storm.elastic.CONTROLLER_COMPONENT). */
    static final String CONTROLLER = "controller";
    private static final ObjectMapper JSON = new ObjectMapper();

    private CuratorFramework zk;
    private String root = "/elastorm";
    private final Map<String, List<String>> bindings = new HashMap<>();
    private final Map<String, String> lastLogged = new HashMap<>();

    @Override
    public void prepare(Map<String, Object> conf, StormMetricsRegistry metricsRegistry) {
        Object own = conf.get("elastorm.zookeeper.hosts");
        String hosts;
        if (own instanceof String s && !s.isEmpty()) {
            hosts = s;
        } else {
            List<String> parts = new ArrayList<>();
            Object port = conf.getOrDefault("storm.zookeeper.port", 2181);
            for (Object server : (List<?>) conf.get("storm.zookeeper.servers")) {
                parts.add(server + ":" + port);
            }
            hosts = String.join(",", parts);
        }
        Object r = conf.get("elastorm.zookeeper.root");
        if (r instanceof String s && !s.isEmpty()) {
            root = s;
        }
        zk = CuratorFrameworkFactory.newClient(hosts, 20000, 5000, new RetryNTimes(2, 500));
        zk.start();
        LOG.info("elastorm scheduler: ZooKeeper {}, root {}", hosts, root);
    }

    @Override
    public Map<String, Map<String, Double>> config() {
        return Map.of();
    }

    @Override
    public void cleanup() {
        if (zk != null) {
            zk.close();
        }
    }

    /** How the scheduler status of a topology it refused starts (PLACEMENT_REFUSED in Python). */
    static final String REFUSED = "elastorm: cannot be placed elastically";

    static boolean isElastic(TopologyDetails td) {
        return isElastic(td.getConf());
    }

    /** Elastic: {@code elastorm.operators} set and {@code elastorm.elastic_scheduling} not false. */
    static boolean isElastic(Map<String, Object> conf) {
        return conf.get(OPERATORS) instanceof Map<?, ?> ops && !ops.isEmpty()
                && !Boolean.FALSE.equals(conf.get(OPT_OUT));
    }

    static String nodeName(SupervisorDetails s) {
        if (s.getSchedulerMeta() instanceof Map<?, ?> meta && meta.get(NODE_META) instanceof String name) {
            return name;
        }
        return s.getHost();
    }

    @Override
    public void schedule(Topologies topologies, Cluster cluster) {
        List<TopologyDetails> others = new ArrayList<>();
        for (TopologyDetails td : topologies) {
            if (!isElastic(td)) {
                others.add(td);
                continue;
            }
            try {
                scheduleElastic(td, cluster);
            } catch (ElasticPlacement.PlacementException e) {
                LOG.error("elastorm scheduler: {} cannot be placed elastically ({}); Storm's default"
                        + " scheduling instead", td.getName(), e.getMessage());
                // Storm's scheduler status (the UI's and getClusterInfo's sched_status), which
                // `elastorm status` and the dashboard read (elastorm/controller/problems.py).
                cluster.setStatus(td.getId(), REFUSED + " (" + e.getMessage() + "); Storm's default"
                        + " scheduling instead");
                others.add(td);
            } catch (RuntimeException e) {
                // An exception out of schedule() halts Nimbus ("Error while processing
                // event"): leave this topology as it is until the next round instead.
                LOG.error("elastorm scheduler: scheduling {} failed; it keeps its assignment until"
                        + " the next round", td.getName(), e);
            }
        }
        if (others.isEmpty()) {
            return;
        }
        // Storm's default scheduling over a copy that knows only the other topologies (it
        // still sees every occupied slot), then their assignments copied back.
        Cluster view = new Cluster(cluster, new Topologies(others.toArray(new TopologyDetails[0])));
        DefaultScheduler.defaultSchedule(view.getTopologies(), view);
        for (TopologyDetails td : others) {
            SchedulerAssignment after = view.getAssignmentById(td.getId());
            SchedulerAssignment before = cluster.getAssignmentById(td.getId());
            if (after == null || after.equals(before)) {
                continue;
            }
            if (!slotsFree(cluster, after, td.getId())) {
                // The copy does not see every slot the real cluster holds (a killed
                // topology's, say): Cluster.assign would throw and halt Nimbus.
                LOG.warn("elastorm scheduler: {}'s default placement takes a slot in use; next"
                        + " round", td.getName());
                continue;
            }
            if (before != null) {
                cluster.unassign(td.getId());
            }
            cluster.assign(after, false);
        }
    }

    /** Whether every slot of {@code assignment} is free in {@code cluster}, or held by
     * {@code topologyId} itself. */
    static boolean slotsFree(Cluster cluster, SchedulerAssignment assignment, String topologyId) {
        for (WorkerSlot slot : assignment.getSlots()) {
            if (cluster.isSlotOccupied(slot)) {
                SchedulerAssignment own = cluster.getAssignmentById(topologyId);
                if (own == null || !own.getSlots().contains(slot)) {
                    return false;
                }
            }
        }
        return true;
    }

    private void scheduleElastic(TopologyDetails td, Cluster cluster) {
        Map<?, ?> operators = (Map<?, ?>) td.getConf().get(OPERATORS);
        Map<String, List<Integer>> elastic = new TreeMap<>();
        List<String> otherExecutors = new ArrayList<>();
        List<String> controllers = new ArrayList<>();
        Map<String, ExecutorDetails> byKey = new HashMap<>();
        for (Map.Entry<ExecutorDetails, String> e : td.getExecutorToComponent().entrySet()) {
            ExecutorDetails ex = e.getKey();
            String key = ElasticPlacement.key(ex.getStartTask(), ex.getEndTask());
            byKey.put(key, ex);
            if (operators.containsKey(e.getValue())) {
                if (ex.getStartTask() != ex.getEndTask()) {
                    throw new ElasticPlacement.PlacementException(
                            "operator " + e.getValue() + " has executors with several tasks");
                }
                elastic.computeIfAbsent(e.getValue(), k -> new ArrayList<>()).add(ex.getStartTask());
            } else {
                otherExecutors.add(key);
                if (CONTROLLER.equals(e.getValue())) {
                    controllers.add(key);
                }
            }
        }
        Map<String, SupervisorDetails> supervisors = new TreeMap<>();
        for (SupervisorDetails s : cluster.getSupervisors().values()) {
            if (!cluster.isBlackListed(s.getId())) {
                supervisors.put(nodeName(s), s);
            }
        }
        NodeSet desired = readNodes(td.getName());
        SchedulerAssignment assigned = cluster.getAssignmentById(td.getId());
        Map<String, ElasticPlacement.Slot> current = new HashMap<>();
        Set<WorkerSlot> mine = new TreeSet<>((a, b) -> a.toString().compareTo(b.toString()));
        if (assigned != null) {
            for (Map.Entry<ExecutorDetails, WorkerSlot> e : assigned.getExecutorToSlot().entrySet()) {
                SupervisorDetails s = cluster.getSupervisorById(e.getValue().getNodeId());
                mine.add(e.getValue());
                if (s != null) {
                    current.put(ElasticPlacement.key(e.getKey().getStartTask(), e.getKey().getEndTask()),
                            new ElasticPlacement.Slot(nodeName(s), e.getValue().getPort()));
                }
            }
        }
        List<ElasticPlacement.Node> nodes = new ArrayList<>();
        for (Map.Entry<String, SupervisorDetails> e : supervisors.entrySet()) {
            SupervisorDetails s = e.getValue();
            Set<Integer> free = new TreeSet<>(cluster.getAvailablePorts(s));
            for (WorkerSlot w : mine) {
                if (w.getNodeId().equals(s.getId())) {
                    free.add(w.getPort());
                }
            }
            nodes.add(new ElasticPlacement.Node(e.getKey(), s.getId(), new ArrayList<>(free),
                    desired.draining.contains(e.getKey())));
        }
        List<String> previous = bindings.get(td.getId());
        if (previous == null) {
            previous = bindingFromAssignment(elastic, current);
        }
        ElasticPlacement.Plan plan = ElasticPlacement.place(new ElasticPlacement.Input(
                elastic, otherExecutors, nodes, desired.wanted, previous, current, controllers));
        bindings.put(td.getId(), plan.binding());

        Map<ElasticPlacement.Slot, List<ExecutorDetails>> workers = new TreeMap<>();
        for (Map.Entry<String, ElasticPlacement.Slot> e : plan.assignment().entrySet()) {
            workers.computeIfAbsent(e.getValue(), k -> new ArrayList<>()).add(byKey.get(e.getKey()));
        }
        Map<String, ElasticPlacement.Slot> now = new TreeMap<>(current);
        boolean changed = !now.equals(new TreeMap<>(plan.assignment()));
        String summary = td.getName() + ": " + String.join("; ", plan.decisions());
        if (changed || !summary.equals(lastLogged.get(td.getId()))) {
            LOG.info("elastorm scheduler: {} {}", changed ? "re-placing" : "keeping", summary);
            lastLogged.put(td.getId(), summary);
        }
        if (changed) {
            if (assigned != null) {
                cluster.freeSlots(mine);
            }
            for (Map.Entry<ElasticPlacement.Slot, List<ExecutorDetails>> w : workers.entrySet()) {
                SupervisorDetails s = supervisors.get(w.getKey().node());
                cluster.assign(new WorkerSlot(s.getId(), w.getKey().port()), td.getId(), w.getValue());
            }
        }
        cluster.setStatus(td.getId(), "elastorm: " + String.join("; ", plan.decisions()));
        publish(td.getName(), plan, elastic);
    }

    /** The binding implied by an assignment: a logical node alone in its worker is bound there. */
    static List<String> bindingFromAssignment(Map<String, List<Integer>> elastic,
            Map<String, ElasticPlacement.Slot> current) {
        List<List<String>> byNode = ElasticPlacement.nodeExecutors(elastic);
        Map<ElasticPlacement.Slot, Integer> nodesInSlot = new HashMap<>();
        List<ElasticPlacement.Slot> slotOf = new ArrayList<>();
        for (List<String> executors : byNode) {
            ElasticPlacement.Slot s = current.get(executors.get(0));
            for (String e : executors) {
                if (!Objects.equals(current.get(e), s)) {
                    s = null;
                }
            }
            slotOf.add(s);
            if (s != null) {
                nodesInSlot.merge(s, 1, Integer::sum);
            }
        }
        List<String> binding = new ArrayList<>();
        Set<String> seen = new TreeSet<>();
        for (ElasticPlacement.Slot s : slotOf) {
            boolean alone = s != null && nodesInSlot.get(s) == 1 && seen.add(s.node());
            binding.add(alone ? s.node() : null);
        }
        return binding;
    }

    /** The wanted and draining node sets of a topology (none written: every node wanted). */
    record NodeSet(Set<String> wanted, Set<String> draining) {
    }

    private NodeSet readNodes(String topology) {
        String path = root + "/" + topology + "/scheduler/nodes";
        try {
            byte[] data = zk.getData().forPath(path);
            return parseNodes(data);
        } catch (KeeperException.NoNodeException e) {
            return new NodeSet(null, Set.of());
        } catch (Exception e) {
            LOG.warn("elastorm scheduler: cannot read {} ({}); placing with no node set", path, e.toString());
            return new NodeSet(null, Set.of());
        }
    }

    static NodeSet parseNodes(byte[] data) throws java.io.IOException {
        JsonNode json = JSON.readTree(new String(data, StandardCharsets.UTF_8));
        Set<String> wanted = null;
        if (json.hasNonNull("wanted")) {
            wanted = new TreeSet<>();
            for (JsonNode n : json.get("wanted")) {
                wanted.add(n.asText());
            }
        }
        Set<String> draining = new TreeSet<>();
        if (json.hasNonNull("draining")) {
            for (JsonNode n : json.get("draining")) {
                draining.add(n.asText());
            }
        }
        return new NodeSet(wanted, draining);
    }

    private void publish(String topology, ElasticPlacement.Plan plan, Map<String, List<Integer>> elastic) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("binding", plan.binding());
        Map<String, List<Integer>> tasks = new TreeMap<>();
        for (Map.Entry<String, List<Integer>> e : elastic.entrySet()) {
            List<Integer> sorted = new ArrayList<>(e.getValue());
            sorted.sort(null);
            tasks.put(e.getKey(), sorted);
        }
        out.put("tasks", tasks);
        Map<String, String> workers = new TreeMap<>();
        for (Map.Entry<String, ElasticPlacement.Slot> e : plan.assignment().entrySet()) {
            workers.put(e.getKey(), e.getValue().toString());
        }
        out.put("executors", workers);
        out.put("decisions", plan.decisions());
        String path = root + "/" + topology + "/scheduler/placement";
        try {
            byte[] data = JSON.writeValueAsBytes(out);
            Stat stat = zk.checkExists().forPath(path);
            if (stat == null) {
                zk.create().creatingParentsIfNeeded().forPath(path, data);
            } else {
                byte[] old = zk.getData().forPath(path);
                if (!java.util.Arrays.equals(old, data)) {
                    zk.setData().forPath(path, data);
                }
            }
        } catch (Exception e) {
            LOG.warn("elastorm scheduler: cannot publish {} ({})", path, e.toString());
        }
    }
}
