package elastorm.jvm;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.storm.generated.ComponentObject;
import org.apache.storm.generated.StormTopology;
import org.apache.storm.multilang.BoltMsg;
import org.apache.storm.multilang.JsonSerializer;
import org.apache.storm.multilang.NoOutputException;
import org.apache.storm.multilang.ShellMsg;
import org.apache.storm.multilang.SpoutMsg;
import org.apache.storm.task.TopologyContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Storm's multilang JSON serializer with direct emits that work.
 *
 * <p>Storm 2.7+ parses multilang JSON with json-smart, which yields an {@code Integer}
 * for a small number, but {@code JsonSerializer.readShellMsg} casts the {@code task}
 * of an emit to {@code Long}: every direct emit from a Python component fails with a
 * ClassCastException and kills the worker. elastorm routes key groups with direct
 * emits, so it sets {@code topology.multilang.serializer} to this class, which reads
 * every number as a {@link Number}.
 *
 * <p>It also turns the json-smart {@code JSONArray}/{@code JSONObject} values of an
 * emitted tuple into plain {@link ArrayList}/{@link HashMap}: json-smart's classes
 * are not registered with Kryo, so a tuple holding a list dies ("Class is not
 * registered") as soon as it crosses from one worker to another.
 *
 * <p>Two things make the pipe cheaper (issue 15):
 * <ul>
 * <li><b>Batches</b>: a message {@code {"command": "batch", "batch": [msg, ...]}} from
 * the Python side (elastorm's {@code BatchingSerializer}) is unpacked here into its
 * messages, in order, so the ShellBolt/ShellSpout and Storm see individual emits.
 * The other way, once the Python side has said it unpacks ({@code
 * {"command": "elastorm_wire"}}), the tuples for a bolt go out the same way: up to
 * {@code elastorm.multilang.batch_size} per message, none held longer than
 * {@code elastorm.multilang.linger_ms}; a heartbeat or task ids flush them first.
 * <li><b>No acks when Storm tracks nothing</b>: with {@code topology.acker.executors}
 * set to 0, Storm acks every spout tuple on emit and a bolt's ack only releases the
 * tuple from the ShellBolt's map of pending inputs. Then this serializer releases
 * each tuple itself as it writes it to the subprocess (a synthetic {@code ack}
 * returned by the next {@link #readShellMsg}), drops the acks and fails the Python
 * side still sends (the tuple is already released), and drops anchors (there is
 * no tuple tree to grow). The Python side need not send an ack per tuple.
 * <li><b>MessagePack</b>: a component started with {@code streamparse_run -s msgpack}
 * (pystorm's {@code MsgpackSerializer}) talks msgpack from the handshake on
 * ({@link MsgpackCodec}); this serializer reads that flag from the component's own
 * command in the topology, so the two ends cannot disagree.
 * </ul>
 */
public class MultilangSerializer extends JsonSerializer {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(MultilangSerializer.class);
    private static final Method READ_MESSAGE;
    private static final Method WRITE_MESSAGE;
    /** Times the batches' linger (one daemon thread per worker); hands flushes to FLUSH. */
    private static final ScheduledExecutorService LINGER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "elastorm-multilang-linger");
        t.setDaemon(true);
        return t;
    });
    /**
     * Writes batches whose linger ran out. A write blocks while that subprocess's pipe
     * is full, so it must not hold up the timer or another subprocess's batches: a
     * cached pool (daemon threads, ended after a minute idle).
     */
    private static final ExecutorService FLUSH = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "elastorm-multilang-flush");
        t.setDaemon(true);
        return t;
    });

    static {
        try {
            READ_MESSAGE = JsonSerializer.class.getDeclaredMethod("readMessage");
            READ_MESSAGE.setAccessible(true);
            WRITE_MESSAGE = JsonSerializer.class.getDeclaredMethod("writeMessage", Object.class);
            WRITE_MESSAGE.setAccessible(true);
        } catch (NoSuchMethodException e) {
            throw new IllegalStateException("unsupported Storm version: no JsonSerializer.readMessage", e);
        }
    }

    /** Tuples written to the subprocess and released on delivery: acks to return. */
    private final ConcurrentLinkedQueue<ShellMsg> released = new ConcurrentLinkedQueue<>();
    /** The rest of a batch that {@link #readShellMsg} has started to return. */
    private final ArrayDeque<ShellMsg> unpacked = new ArrayDeque<>();
    private boolean releaseOnDelivery;
    /** Set once the Python side said it unpacks batches; read by the writer thread. */
    private volatile boolean peerUnpacks;
    private int maxBatch = 100;
    private long lingerMicros = 1000;
    /** Tuples for the subprocess not written yet (guarded by {@code this}). */
    private List<Object> outbox = new ArrayList<>();
    private transient OutputStream toSubprocess;
    private transient InputStream fromSubprocess;
    /** The msgpack framing, or null for JSON (JsonSerializer's, reached by reflection). */
    private transient MsgpackCodec msgpack;

    @Override
    public void initialize(OutputStream processIn, InputStream processOut) {
        toSubprocess = processIn;
        fromSubprocess = processOut;
        super.initialize(processIn, processOut);
    }

    @Override
    public Number connect(Map<String, Object> conf, TopologyContext context)
            throws IOException, NoOutputException {
        Object ackers = conf.get("topology.acker.executors");
        releaseOnDelivery = ackers instanceof Number && ((Number) ackers).intValue() == 0;
        Object batch = conf.get("elastorm.multilang.batch_size");
        if (batch instanceof Number) {
            maxBatch = Math.max(1, ((Number) batch).intValue());
        }
        Object lingerMs = conf.get("elastorm.multilang.linger_ms");
        if (lingerMs instanceof Number) {
            lingerMicros = Math.max(0L, (long) (((Number) lingerMs).doubleValue() * 1000));
        }
        if (!"msgpack".equals(encodingOf(context))) {
            return super.connect(conf, context);
        }
        msgpack = new MsgpackCodec(toSubprocess, fromSubprocess);
        Map<String, Object> setup = new HashMap<>(4);
        setup.put("pidDir", context.getPIDDir());
        setup.put("conf", conf);
        setup.put("context", context);
        writeMessage(setup);
        return (Number) readMessage().get("pid");
    }

    /** The {@code -s}/{@code --serializer} the component's Python side starts with
     * (the last one wins, as in streamparse_run's argparse); {@code json} if none. */
    static String encodingOf(TopologyContext context) {
        StormTopology topology = context.getRawTopology();
        String id = context.getThisComponentId();
        ComponentObject object = null;
        if (topology.get_bolts() != null && topology.get_bolts().containsKey(id)) {
            object = topology.get_bolts().get(id).get_bolt_object();
        } else if (topology.get_spouts() != null && topology.get_spouts().containsKey(id)) {
            object = topology.get_spouts().get(id).get_spout_object();
        }
        return object != null && object.is_set_shell() ? serializerFlag(object.get_shell().get_script()) : "json";
    }

    static String serializerFlag(String script) {
        String encoding = "json";
        String[] args = script == null ? new String[0] : script.trim().split("\\s+");
        for (int i = 0; i < args.length; i++) {
            if (("-s".equals(args[i]) || "--serializer".equals(args[i])) && i + 1 < args.length) {
                encoding = args[i + 1];
            } else if (args[i].startsWith("--serializer=")) {
                encoding = args[i].substring("--serializer=".length());
            }
        }
        return encoding;
    }

    @Override
    public void writeBoltMsg(BoltMsg msg) throws IOException {
        boolean heartbeat = "__heartbeat".equals(msg.getStream());
        Map<String, Object> tuple = new HashMap<>(8);
        tuple.put("id", msg.getId());
        tuple.put("comp", msg.getComp());
        tuple.put("stream", msg.getStream());
        tuple.put("task", msg.getTask());
        tuple.put("tuple", msg.getTuple());
        if (!peerUnpacks || maxBatch <= 1 || heartbeat) {
            synchronized (this) {
                flushOutbox();
                writeMessage(tuple);
            }
        } else {
            synchronized (this) {
                outbox.add(tuple);
                if (outbox.size() >= maxBatch) {
                    flushOutbox();
                } else if (outbox.size() == 1) {
                    List<Object> batch = outbox;
                    LINGER.schedule(
                        () -> FLUSH.execute(() -> lingerFlush(batch)), lingerMicros, TimeUnit.MICROSECONDS);
                }
            }
        }
        if (releaseOnDelivery && !heartbeat) {
            ShellMsg ack = new ShellMsg();
            ack.setCommand("ack");
            ack.setId(msg.getId());
            released.add(ack);
        }
    }

    @Override
    public synchronized void writeTaskIds(List<Integer> taskIds) throws IOException {
        flushOutbox();
        writeMessage(taskIds);
    }

    @Override
    public synchronized void writeSpoutMsg(SpoutMsg msg) throws IOException {
        Map<String, Object> message = new HashMap<>(4);
        message.put("command", msg.getCommand());
        message.put("id", msg.getId());
        writeMessage(message);
    }

    /** The linger of {@code batch} ran out: write it unless it has gone already. */
    private synchronized void lingerFlush(List<Object> batch) {
        if (batch == outbox && !outbox.isEmpty()) {
            try {
                flushOutbox();
            } catch (IOException e) {
                LOG.warn("elastorm multilang: writing a batch failed: {}", e.toString());
            }
        }
    }

    /** Write the held tuples as one {@code batch} message (caller holds {@code this}). */
    private void flushOutbox() throws IOException {
        if (outbox.isEmpty()) {
            return;
        }
        Map<String, Object> message = new HashMap<>(4);
        message.put("command", "batch");
        message.put("batch", outbox);
        outbox = new ArrayList<>();
        writeMessage(message);
    }

    @Override
    public ShellMsg readShellMsg() throws IOException, NoOutputException {
        while (true) {
            ShellMsg ack = released.poll();
            if (ack != null) {
                return ack;
            }
            ShellMsg next = unpacked.poll();
            if (next == null) {
                Map<?, ?> msg = readMessage();
                if ("batch".equals(msg.get("command"))) {
                    for (Object item : (List<?>) msg.get("batch")) {
                        unpacked.add(toShellMsg((Map<?, ?>) item));
                    }
                    continue;
                }
                next = toShellMsg(msg);
            }
            String command = next.getCommand();
            if ("elastorm_wire".equals(command)) {
                peerUnpacks = true;
                continue;
            }
            if (releaseOnDelivery && ("ack".equals(command) || "fail".equals(command))) {
                continue; // released when written
            }
            return next;
        }
    }

    /** One multilang message as Storm's {@link ShellMsg}. */
    private ShellMsg toShellMsg(Map<?, ?> msg) {
        ShellMsg shellMsg = new ShellMsg();
        String command = (String) msg.get("command");
        shellMsg.setCommand(command);
        shellMsg.setId(msg.get("id"));
        shellMsg.setMsg((String) msg.get("msg"));
        String stream = (String) msg.get("stream");
        shellMsg.setStream(stream == null ? "default" : stream);
        Object task = msg.get("task");
        shellMsg.setTask(task instanceof Number ? ((Number) task).longValue() : 0L);
        Object needTaskIds = msg.get("need_task_ids");
        shellMsg.setNeedTaskIds(needTaskIds == null || Boolean.TRUE.equals(needTaskIds));
        Object tuple = msg.get("tuple");
        if (tuple instanceof List) {
            List<Object> values = new ArrayList<>(((List<?>) tuple).size());
            for (Object value : (List<?>) tuple) {
                values.add(plain(value));
            }
            shellMsg.setTuple(values);
        }
        Object anchors = releaseOnDelivery ? null : msg.get("anchors");
        if (anchors instanceof String) {
            shellMsg.addAnchor((String) anchors);
        } else if (anchors instanceof List) {
            for (Object anchor : (List<?>) anchors) {
                shellMsg.addAnchor(String.valueOf(anchor));
            }
        }
        Object name = msg.get("name");
        if (name instanceof String) {
            shellMsg.setMetricName((String) name);
        }
        shellMsg.setMetricParams(msg.get("params"));
        Object level = msg.get("level");
        if ("log".equals(command) && level instanceof Number) {
            shellMsg.setLogLevel(((Number) level).intValue());
        }
        return shellMsg;
    }

    /** A value with every json-smart list or map replaced by a plain Java one. */
    static Object plain(Object value) {
        if (value instanceof List) {
            List<Object> list = new ArrayList<>(((List<?>) value).size());
            for (Object item : (List<?>) value) {
                list.add(plain(item));
            }
            return list;
        }
        if (value instanceof Map) {
            Map<Object, Object> map = new HashMap<>();
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                map.put(entry.getKey(), plain(entry.getValue()));
            }
            return map;
        }
        return value;
    }

    private void writeMessage(Object message) throws IOException {
        if (msgpack != null) {
            msgpack.write(message);
            return;
        }
        try {
            WRITE_MESSAGE.invoke(this, message);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof IOException) {
                throw (IOException) cause;
            }
            throw new IllegalStateException(cause);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private Map<?, ?> readMessage() throws IOException, NoOutputException {
        if (msgpack != null) {
            return (Map<?, ?>) msgpack.read();
        }
        try {
            return (Map<?, ?>) READ_MESSAGE.invoke(this);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof IOException) {
                throw (IOException) cause;
            }
            if (cause instanceof NoOutputException) {
                throw (NoOutputException) cause;
            }
            throw new IllegalStateException(cause);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }
}
