package elastorm.jvm;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.Permission;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.storm.Config;
import org.apache.storm.LocalCluster;
import org.apache.storm.generated.TopologySummary;
import org.apache.storm.shade.net.minidev.json.JSONValue;

/**
 * elastorm's embedded local mode: an in-process Storm {@link LocalCluster} that
 * serves Nimbus over Thrift, so a topology reaches it through the same submit path
 * as production ({@code sparse submit}, streamparse's Thrift client), direct
 * streams included.
 *
 * <p>Usage: {@code LocalRunner <nimbusPort> <zkHost> <zkPort> <supervisors> <zkRoot>}.
 * Uses the real ZooKeeper server that elastorm's scripts started, under a root of
 * its own per run (a previous run's leader latch may linger until its session
 * expires). Prints
 * {@code ELASTORM-LOCAL-READY} when Nimbus accepts submissions and shuts the cluster
 * down when its standard input closes (the Python runner holds the pipe), so an
 * abandoned cluster never outlives its parent.
 *
 * <p>A keyed task's death does not end the cluster: in a real cluster Storm's
 * answer to a dead executor is to exit its worker JVM (and restart the worker);
 * here every worker is this JVM, so that exit would end the whole run. The
 * {@link KeyedTaskDeath} guard refuses the exit when the dying thread is an
 * executor of a keyed operator (one named in its topology's
 * {@code elastorm.operators}): that task stays dead, as a lost node, and
 * elastorm's controller restores its key groups on their checkpoint holders.
 * Any other executor's death still ends the cluster, as before.
 */
public final class LocalRunner {
    private LocalRunner() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: LocalRunner <nimbusPort> <zkHost> <zkPort> <supervisors> <zkRoot>");
            System.exit(2);
        }
        int nimbusPort = Integer.parseInt(args[0]);
        String zkHost = args[1];
        long zkPort = Long.parseLong(args[2]);
        int supervisors = Integer.parseInt(args[3]);
        String zkRoot = args[4];

        LocalCluster.Builder builder = new LocalCluster.Builder()
            .withNimbusDaemon()
            .withSupervisors(supervisors)
            .withPortsPerSupervisor(4)
            .withDaemonConf(Config.NIMBUS_THRIFT_PORT, nimbusPort)
            .withDaemonConf(Config.NIMBUS_SEEDS, Arrays.asList("127.0.0.1"))
            .withDaemonConf(Config.STORM_ZOOKEEPER_SERVERS, Arrays.asList(zkHost))
            .withDaemonConf(Config.STORM_ZOOKEEPER_PORT, zkPort)
            .withDaemonConf(Config.STORM_ZOOKEEPER_ROOT, zkRoot)
            .withDaemonConf(Config.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, true);
        try (LocalCluster cluster = builder.build()) {
            KeyedTaskDeath guard = new KeyedTaskDeath(cluster);
            System.setSecurityManager(guard);
            System.out.println("ELASTORM-LOCAL-READY nimbus=127.0.0.1:" + nimbusPort);
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            while (in.readLine() != null) {
                // Any line is ignored; EOF means the parent is gone or asked us to stop.
            }
            System.out.println("ELASTORM-LOCAL-STOPPING");
            System.out.flush();
            guard.stopping = true;
        }
        // LocalCluster leaves non-daemon threads behind (Thrift server, ZK clients).
        System.exit(0);
    }

    /**
     * Refuses {@code System.exit} from an executor thread of a keyed operator
     * (threads are named {@code <component>-executor[first, last]}), so a killed
     * keyed task's Python process leaves one dead task instead of no cluster.
     * Every other exit, and every exit once stopping, goes ahead.
     */
    static final class KeyedTaskDeath extends SecurityManager {
        private static final Pattern EXECUTOR = Pattern.compile("^(?:Thread-\\d+-)?(.+)-executor\\[");
        private final LocalCluster cluster;
        volatile boolean stopping;

        KeyedTaskDeath(LocalCluster cluster) {
            this.cluster = cluster;
        }

        @Override
        public void checkPermission(Permission perm) {
            // Everything else is allowed: this manager only guards exits.
        }

        @Override
        public void checkPermission(Permission perm, Object context) {
        }

        @Override
        public void checkExit(int status) {
            if (stopping) {
                return;
            }
            String thread = Thread.currentThread().getName();
            Matcher m = EXECUTOR.matcher(thread);
            if (m.find() && keyedComponents().contains(m.group(1))) {
                System.out.println("ELASTORM-LOCAL-KEYED-TASK-DIED " + thread
                    + ": left dead (a lost node); the LocalCluster goes on");
                System.out.flush();
                throw new SecurityException("a keyed task's death does not end the LocalCluster");
            }
        }

        /** The keyed operators of every running topology (their conf's elastorm.operators). */
        private Set<String> keyedComponents() {
            Set<String> keyed = new HashSet<>();
            try {
                for (TopologySummary t : cluster.getClusterInfo().get_topologies()) {
                    Object conf = JSONValue.parse(cluster.getTopologyConf(t.get_id()));
                    if (conf instanceof Map<?, ?> map && map.get("elastorm.operators") instanceof Map<?, ?> ops) {
                        ops.keySet().forEach(k -> keyed.add(String.valueOf(k)));
                    }
                }
            } catch (Exception e) {
                System.err.println("LocalRunner: cannot read the topologies' confs: " + e);
            }
            return keyed;
        }
    }
}
