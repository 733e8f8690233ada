package elastorm.jvm;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.storm.Config;
import org.apache.storm.LocalCluster;

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
            System.out.println("ELASTORM-LOCAL-READY nimbus=127.0.0.1:" + nimbusPort);
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            while (in.readLine() != null) {
                // Any line is ignored; EOF means the parent is gone or asked us to stop.
            }
            System.out.println("ELASTORM-LOCAL-STOPPING");
            System.out.flush();
        }
        // LocalCluster leaves non-daemon threads behind (Thrift server, ZK clients).
        System.exit(0);
    }
}
