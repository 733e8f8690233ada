package elastorm.jvm;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileUtil;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSCluster.DataNodeProperties;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.config.Configurator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * elastorm's own HDFS: one NameNode and N DataNodes (Hadoop's MiniDFSCluster, the real
 * NameNode and DataNode code in one JVM) on fixed loopback ports, WebHDFS on, plus a
 * loopback control endpoint to stop and start the NameNode or one DataNode (the fault
 * tests' "NameNode stopped for 20 s" and "a DataNode killed").
 *
 * <p>Arguments, all {@code key=value}: {@code base} (data directory), {@code nn} (NameNode
 * RPC port), {@code http} (NameNode HTTP, WebHDFS), {@code datanodes}, {@code dn} (first
 * DataNode port: DataNode i uses {@code dn+3i} data transfer, {@code +1} HTTP, {@code +2}
 * IPC), {@code replication}, {@code control} (the control endpoint's port).
 *
 * <p>Control endpoint (HTTP on 127.0.0.1): {@code GET /status}; {@code POST
 * /namenode/stop}, {@code /namenode/start}, {@code /datanode/<i>/kill}, {@code
 * /datanode/<i>/start}. Killing a DataNode shuts it down in-process without decommission:
 * the NameNode learns of it only from missed heartbeats, as after a crash.
 */
public final class HdfsCluster {
  private static final Logger LOG = LoggerFactory.getLogger(HdfsCluster.class);
  private static final String LOOPBACK = "127.0.0.1";

  private final MiniDFSCluster cluster;
  private final int firstDataNodePort;
  private final int dataNodes;
  /** DataNodes killed through the control endpoint, by index, to start them again. */
  private final Map<Integer, DataNodeProperties> killed = new HashMap<>();

  private HdfsCluster(MiniDFSCluster cluster, int firstDataNodePort, int dataNodes) {
    this.cluster = cluster;
    this.firstDataNodePort = firstDataNodePort;
    this.dataNodes = dataNodes;
  }

  public static void main(String[] argv) {
    try {
      run(argv);
    } catch (Throwable e) {
      // MiniDFSCluster's threads would keep a half-started JVM alive: exit instead.
      LOG.error("HDFS failed to start", e);
      System.exit(1);
    }
  }

  private static void run(String[] argv) throws Exception {
    Map<String, String> args = new TreeMap<>();
    for (String arg : argv) {
      int eq = arg.indexOf('=');
      if (eq < 0) {
        throw new IllegalArgumentException("expected key=value, got " + arg);
      }
      args.put(arg.substring(0, eq), arg.substring(eq + 1));
    }
    // One line per DataNode directory lock (thousands at start-up) drowns the log.
    Configurator.setLevel(
        "org.apache.hadoop.hdfs.server.datanode.fsdataset.impl.FsDatasetImpl", Level.WARN);
    File base = new File(required(args, "base"));
    // Jetty unpacks the web apps into java.io.tmpdir: keep them with the data, not in /tmp.
    File tmp = new File(base, "tmp");
    FileUtil.fullyDelete(tmp); // an earlier run's, left by a kill -9
    if (!tmp.mkdirs()) {
      throw new IOException("cannot create " + tmp);
    }
    System.setProperty("java.io.tmpdir", tmp.getAbsolutePath());
    int dataNodes = Integer.parseInt(required(args, "datanodes"));
    int firstDn = Integer.parseInt(required(args, "dn"));
    Configuration conf = configuration(base, Integer.parseInt(required(args, "replication")));
    Configuration[] overlays = new Configuration[dataNodes];
    for (int i = 0; i < dataNodes; i++) {
      overlays[i] = dataNodeOverlay(firstDn + 3 * i);
    }
    // An existing name directory is kept (checkpoints outlive `elastorm hdfs down`);
    // `elastorm hdfs down --wipe` deletes it and the next start formats a new one.
    boolean format = !new File(base, "name-0-1/current/VERSION").exists();
    LOG.info("starting MiniDFSCluster in {} (format: {})", base, format);
    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf, base)
            .nameNodePort(Integer.parseInt(required(args, "nn")))
            .nameNodeHttpPort(Integer.parseInt(required(args, "http")))
            .numDataNodes(dataNodes)
            .checkDataNodeAddrConfig(true)
            .dataNodeConfOverlays(overlays)
            .format(format)
            .waitSafeMode(true)
            .build();
    cluster.waitActive();
    HdfsCluster hdfs = new HdfsCluster(cluster, firstDn, dataNodes);
    CountDownLatch done = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  LOG.info("shutting down MiniDFSCluster");
                  cluster.shutdown();
                  done.countDown();
                }));
    hdfs.serve(Integer.parseInt(required(args, "control")));
    LOG.info("HDFS up: {}", hdfs.status());
    done.await();
  }

  private static String required(Map<String, String> args, String key) {
    String value = args.get(key);
    if (value == null) {
      throw new IllegalArgumentException("missing argument " + key + "=...");
    }
    return value;
  }

  /** The cluster's configuration: loopback only, WebHDFS on, quick failure detection. */
  static Configuration configuration(File base, int replication) {
    Configuration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getAbsolutePath());
    conf.setInt("dfs.replication", replication);
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.set("dfs.namenode.rpc-bind-host", LOOPBACK);
    conf.set("dfs.namenode.http-bind-host", LOOPBACK);
    conf.setLong("dfs.namenode.safemode.extension", 0);
    // A DataNode that stops heartbeating is stale after 3 s (reads and writes avoid it)
    // and dead after 2 * 5 s + 10 * 1 s = 20 s, instead of HDFS's 10.5 minutes.
    conf.setLong("dfs.heartbeat.interval", 1);
    conf.setInt("dfs.namenode.heartbeat.recheck-interval", 5000);
    conf.setLong("dfs.namenode.stale.datanode.interval", 3000);
    conf.setBoolean("dfs.namenode.avoid.read.stale.datanode", true);
    conf.setBoolean("dfs.namenode.avoid.write.stale.datanode", true);
    conf.setFloat("dfs.namenode.write.stale.datanode.ratio", 1.0f);
    // With 3 DataNodes and replication 3 no spare can replace a failed pipeline node:
    // keep writing to the survivors (the NameNode re-replicates when one comes back).
    conf.setBoolean("dfs.client.block.write.replace-datanode-on-failure.best-effort", true);
    return conf;
  }

  /** DataNode ports: data transfer {@code port}, HTTP {@code port+1}, IPC {@code port+2}. */
  static Configuration dataNodeOverlay(int port) {
    Configuration overlay = new Configuration(false);
    overlay.set("dfs.datanode.address", LOOPBACK + ":" + port);
    overlay.set("dfs.datanode.http.address", LOOPBACK + ":" + (port + 1));
    overlay.set("dfs.datanode.ipc.address", LOOPBACK + ":" + (port + 2));
    return overlay;
  }

  private void serve(int port) throws IOException {
    HttpServer server =
        HttpServer.create(new InetSocketAddress(InetAddress.getByName(LOOPBACK), port), 8);
    server.createContext("/", this::handle);
    server.start();
    LOG.info("control endpoint on {}:{}", LOOPBACK, port);
  }

  private void handle(HttpExchange exchange) throws IOException {
    String path = exchange.getRequestURI().getPath();
    String method = exchange.getRequestMethod();
    int code = 200;
    String body;
    try {
      if (method.equals("GET") && path.equals("/status")) {
        body = status();
      } else if (method.equals("POST")) {
        body = command(path.split("/"));
      } else {
        code = 404;
        body = error("unknown request " + method + " " + path);
      }
    } catch (IllegalArgumentException e) {
      code = 400;
      body = error(e.getMessage());
    } catch (Exception e) {
      LOG.warn("control request {} {} failed", method, path, e);
      code = 500;
      body = error(e.toString());
    }
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(code, bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }

  /** Run {@code /namenode/<stop|start>} or {@code /datanode/<i>/<kill|start>}. */
  private synchronized String command(String[] parts) throws IOException {
    if (parts.length == 3 && parts[1].equals("namenode")) {
      if (parts[2].equals("stop")) {
        if (cluster.getNameNode(0) != null) {
          LOG.info("control: stopping the NameNode");
          cluster.shutdownNameNode(0);
        }
        return status();
      }
      if (parts[2].equals("start")) {
        if (cluster.getNameNode(0) == null) {
          LOG.info("control: starting the NameNode");
          cluster.restartNameNode(0, false);
        }
        return status();
      }
    }
    if (parts.length == 4 && parts[1].equals("datanode")) {
      int index = dataNodeIndex(parts[2]);
      if (parts[3].equals("kill")) {
        killDataNode(index);
        return status();
      }
      if (parts[3].equals("start")) {
        DataNodeProperties props = killed.remove(index);
        if (props != null) {
          LOG.info("control: starting DataNode {}", index);
          cluster.restartDataNode(props, true);
        }
        return status();
      }
    }
    throw new IllegalArgumentException("unknown command " + String.join("/", parts));
  }

  private int dataNodeIndex(String text) {
    int index;
    try {
      index = Integer.parseInt(text);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("DataNode index must be a number, got " + text);
    }
    if (index < 0 || index >= dataNodes) {
      throw new IllegalArgumentException(
          "DataNode index " + index + " out of range 0.." + (dataNodes - 1));
    }
    return index;
  }

  private void killDataNode(int index) {
    if (killed.containsKey(index)) {
      return;
    }
    DataNode running = running(index);
    if (running == null) {
      throw new IllegalStateException("DataNode " + index + " is not running");
    }
    LOG.info("control: killing DataNode {} ({})", index, running.getDatanodeId());
    killed.put(index, cluster.stopDataNode(running.getDatanodeId().getXferAddr()));
  }

  /** The running DataNode whose data transfer port is DataNode {@code index}'s, if any. */
  private DataNode running(int index) {
    for (DataNode dn : cluster.getDataNodes()) {
      if (dn.getXferPort() == firstDataNodePort + 3 * index) {
        return dn;
      }
    }
    return null;
  }

  /**
   * {@code {"namenode": N, "datanodes": [D, ...]}}: N is {@code serving} (out of safe mode,
   * DataNodes registered), {@code starting} or {@code stopped}; D is {@code up} or {@code
   * killed}.
   */
  private synchronized String status() {
    StringBuilder out = new StringBuilder("{\"namenode\": ");
    String namenode =
        cluster.getNameNode(0) == null
            ? "stopped"
            : cluster.isNameNodeUp(0) ? "serving" : "starting";
    out.append('"').append(namenode).append('"');
    out.append(", \"datanodes\": [");
    for (int i = 0; i < dataNodes; i++) {
      out.append(i == 0 ? "" : ", ");
      out.append(running(i) != null ? "\"up\"" : "\"killed\"");
    }
    return out.append("]}").toString();
  }

  private static String error(String message) {
    String safe = String.valueOf(message).replace("\\", "\\\\").replace("\"", "\\\"");
    return "{\"error\": \"" + safe.replace("\n", " ") + "\"}";
  }
}
