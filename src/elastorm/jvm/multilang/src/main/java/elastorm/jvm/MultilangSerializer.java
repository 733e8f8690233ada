package elastorm.jvm;

import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.storm.multilang.JsonSerializer;
import org.apache.storm.multilang.NoOutputException;
import org.apache.storm.multilang.ShellMsg;

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
 * registered") as soon as it crosses from one worker to another. Everything else
 * is inherited unchanged.
 */
public class MultilangSerializer extends JsonSerializer {
    private static final long serialVersionUID = 1L;
    private static final Method READ_MESSAGE;

    static {
        try {
            READ_MESSAGE = JsonSerializer.class.getDeclaredMethod("readMessage");
            READ_MESSAGE.setAccessible(true);
        } catch (NoSuchMethodException e) {
            throw new IllegalStateException("unsupported Storm version: no JsonSerializer.readMessage", e);
        }
    }

    @Override
    public ShellMsg readShellMsg() throws IOException, NoOutputException {
        Map<?, ?> msg = readMessage();
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
        Object anchors = msg.get("anchors");
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

    private Map<?, ?> readMessage() throws IOException, NoOutputException {
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
