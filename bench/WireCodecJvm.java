import elastorm.jvm.MsgpackCodec;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.storm.shade.net.minidev.json.JSONValue;

/**
 * JVM-side cost of the multilang codecs (bench/wire_codec.py is the Python side):
 * json-smart, as Storm's JsonSerializer uses it, against elastorm's MsgpackCodec, for
 * a batch of 100 input tuples written to a bolt and a batch of 100 emits read back.
 *
 * Usage (after `elastorm setup`):
 *   java -cp .elastorm/jvm/elastorm-multilang/classes:.elastorm/storm-2.8.3/lib-worker/'*' \
 *       bench/WireCodecJvm.java
 * Best of 5 rounds of 20,000 batches each, microseconds per batch.
 */
public class WireCodecJvm {
    public static void main(String[] args) throws Exception {
        List<Object> data = List.of(3, "router:5", 123456, "k17",
            List.of("k17", 1764000000.123456), 1764000000.1234567);
        List<Object> in = new ArrayList<>();
        List<Object> out = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            Map<String, Object> tuple = new HashMap<>();
            tuple.put("id", "-6955786537413359385");
            tuple.put("comp", "router");
            tuple.put("stream", "elastorm");
            tuple.put("task", 5);
            tuple.put("tuple", List.of(data, 5));
            in.add(tuple);
            Map<String, Object> emit = new HashMap<>();
            emit.put("command", "emit");
            emit.put("tuple", List.of(data, 5));
            emit.put("stream", "elastorm");
            emit.put("task", 7);
            emit.put("need_task_ids", false);
            out.add(emit);
        }
        Map<String, Object> batchIn = Map.of("command", "batch", "batch", in);
        Map<String, Object> batchOut = Map.of("command", "batch", "batch", out);
        String outJson = JSONValue.toJSONString(batchOut);
        ByteArrayOutputStream packed = new ByteArrayOutputStream();
        new MsgpackCodec(packed, new ByteArrayInputStream(new byte[0])).write(batchOut);
        byte[] outPacked = packed.toByteArray();
        System.out.printf("batch of 100 in: %d bytes JSON, %d msgpack; batch of 100 out: %d bytes JSON, %d msgpack%n",
            JSONValue.toJSONString(batchIn).length(), sizeOf(batchIn), outJson.length(), outPacked.length);
        int n = 20000;
        double jsonWrite = best(n, () -> JSONValue.toJSONString(batchIn).getBytes("UTF-8"));
        double packWrite = best(n, () -> {
            ByteArrayOutputStream sink = new ByteArrayOutputStream(16384);
            new MsgpackCodec(sink, new ByteArrayInputStream(new byte[0])).write(batchIn);
            return sink;
        });
        double jsonRead = best(n, () -> JSONValue.parse(new String(outJson.getBytes("UTF-8"), "UTF-8")));
        double packRead = best(n, () ->
            new MsgpackCodec(new ByteArrayOutputStream(), new ByteArrayInputStream(outPacked)).read());
        System.out.printf("write batch of 100 in: json-smart %.1f us, msgpack %.1f us%n", jsonWrite, packWrite);
        System.out.printf("read batch of 100 out: json-smart %.1f us, msgpack %.1f us%n", jsonRead, packRead);
    }

    interface Work { Object run() throws Exception; }

    static Object sink;

    static double best(int n, Work work) throws Exception {
        double best = Double.MAX_VALUE;
        for (int round = 0; round < 5; round++) {
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                sink = work.run();
            }
            best = Math.min(best, (System.nanoTime() - t0) / 1e3 / n);
        }
        return best;
    }

    static int sizeOf(Object message) throws Exception {
        ByteArrayOutputStream sink = new ByteArrayOutputStream();
        new MsgpackCodec(sink, new ByteArrayInputStream(new byte[0])).write(message);
        return sink.size();
    }
}
