package elastorm.jvm;

import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.storm.generated.GlobalStreamId;
import org.apache.storm.grouping.CustomStreamGrouping;
import org.apache.storm.task.WorkerTopologyContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Sends each tuple to the task named in one of its fields (elastorm's routing table
 * chose it), or to no task of this subscriber when that field is null.
 *
 * <p>Direct grouping does the same but needs a stream of its own, so an operator
 * feeding both a keyed operator and a plainly grouped one emits every row twice. With
 * this grouping one emit serves both: the keyed subscriber reads the task field, the
 * others group by their own fields. Order per sender and receiver task stays FIFO, as
 * with any grouping. A task outside the subscriber's tasks is a routing bug: the tuple
 * is dropped with an error in the worker log rather than killing the worker.
 */
public class TaskFieldGrouping implements CustomStreamGrouping {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(TaskFieldGrouping.class);

    private final String field;
    private int index = -1;
    private Set<Integer> targets = Collections.emptySet();

    public TaskFieldGrouping(String field) {
        this.field = field;
    }

    @Override
    public void prepare(WorkerTopologyContext context, GlobalStreamId stream, List<Integer> targetTasks) {
        if (!context.getComponentOutputFields(stream).contains(field)) {
            throw new IllegalArgumentException(
                "TaskFieldGrouping: stream " + stream + " has no field '" + field + "'");
        }
        index = context.getComponentOutputFields(stream).fieldIndex(field);
        targets = new HashSet<>(targetTasks);
    }

    @Override
    public List<Integer> chooseTasks(int taskId, List<Object> values) {
        Object task = values.get(index);
        if (task == null) {
            return Collections.emptyList();
        }
        int target = ((Number) task).intValue();
        if (!targets.contains(target)) {
            LOG.error("TaskFieldGrouping: task {} from task {} is not a subscriber ({}); dropped",
                      target, taskId, targets);
            return Collections.emptyList();
        }
        return Collections.singletonList(target);
    }
}
