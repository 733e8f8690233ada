package elastorm.jvm;

import java.util.Arrays;
import java.util.Map;
import org.apache.storm.task.OutputCollector;
import org.apache.storm.task.TopologyContext;
import org.apache.storm.topology.OutputFieldsDeclarer;
import org.apache.storm.topology.base.BaseRichBolt;
import org.apache.storm.tuple.Fields;
import org.apache.storm.tuple.Tuple;
import org.apache.storm.utils.TupleUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * elastorm's relay: forwards what keyed tasks send on {@code elastorm_relay}
 * ({@code to_task, message, sender}) to {@code to_task} on the direct stream
 * {@code elastorm} as {@code (message, sender)}, untouched.
 *
 * <p>Why a relay at all: the edges out of a keyed task (checkpoints to their holders,
 * trims and processedAllReplay back to emitters) close cycles, and a cycle of bounded
 * queues deadlocks under backpressure; a keyed task that sends only to the relay never
 * blocks on it. Why in the JVM: the message is never decoded here, so a Python process
 * (two multilang crossings and a JSON or msgpack round trip per message) bought
 * nothing. Its tasks are fed by a fields grouping on {@code sender}, so each sender's
 * messages keep their order (one FIFO in, one per target out) and checkpoint traffic
 * spreads over as many tasks as the topology gives the relay.
 */
public class RelayBolt extends BaseRichBolt {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(RelayBolt.class);
    static final String STREAM = "elastorm";

    private transient OutputCollector collector;

    @Override
    public void prepare(Map<String, Object> conf, TopologyContext context, OutputCollector collector) {
        this.collector = collector;
    }

    @Override
    public void execute(Tuple tuple) {
        if (TupleUtils.isTick(tuple)) {
            return; // elastorm sets a tick frequency for every component; the relay needs none
        }
        if (tuple.size() != 3 || !(tuple.getValue(0) instanceof Number)) {
            LOG.error("relay: not a (to_task, message, sender) tuple from {}:{}; dropped",
                      tuple.getSourceComponent(), tuple.getSourceStreamId());
            collector.ack(tuple);
            return;
        }
        int toTask = ((Number) tuple.getValue(0)).intValue();
        collector.emitDirect(toTask, STREAM, Arrays.asList(tuple.getValue(1), tuple.getValue(2)));
        collector.ack(tuple);
    }

    @Override
    public void declareOutputFields(OutputFieldsDeclarer declarer) {
        declarer.declareStream(STREAM, true, new Fields("message", "sender"));
    }
}
