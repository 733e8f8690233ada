package elastorm.jvm;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.storm.multilang.NoOutputException;
import org.apache.storm.shade.net.minidev.json.JSONAware;
import org.apache.storm.shade.net.minidev.json.JSONValue;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;

/**
 * The multilang messages as MessagePack, the framing pystorm's {@code MsgpackSerializer}
 * uses ({@code streamparse_run -s msgpack}): one msgpack value per message, no
 * delimiter. Reads plain Java values ({@link HashMap}, {@link ArrayList}, {@link Long},
 * {@link Double}, {@link String}, ...), writes any value JSON could carry.
 */
public final class MsgpackCodec {
    private final MessagePacker packer;
    private final MessageUnpacker unpacker;

    public MsgpackCodec(OutputStream toSubprocess, InputStream fromSubprocess) {
        this.packer = MessagePack.newDefaultPacker(toSubprocess);
        this.unpacker = MessagePack.newDefaultUnpacker(fromSubprocess);
    }

    /** Write one message and flush it to the subprocess. */
    public void write(Object message) throws IOException {
        pack(message);
        packer.flush();
    }

    /** Read one message; the subprocess closing its end is a {@link NoOutputException}. */
    public Object read() throws IOException, NoOutputException {
        if (!unpacker.hasNext()) {
            throw new NoOutputException("Pipe to subprocess seems to be broken!");
        }
        return unpack();
    }

    private void pack(Object value) throws IOException {
        if (value == null) {
            packer.packNil();
        } else if (value instanceof String) {
            packer.packString((String) value);
        } else if (value instanceof Integer || value instanceof Long
                || value instanceof Short || value instanceof Byte) {
            packer.packLong(((Number) value).longValue());
        } else if (value instanceof Double || value instanceof Float) {
            packer.packDouble(((Number) value).doubleValue());
        } else if (value instanceof Boolean) {
            packer.packBoolean((Boolean) value);
        } else if (value instanceof Map) {
            Map<?, ?> map = (Map<?, ?>) value;
            packer.packMapHeader(map.size());
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                pack(String.valueOf(entry.getKey()));
                pack(entry.getValue());
            }
        } else if (value instanceof Collection) {
            Collection<?> items = (Collection<?>) value;
            packer.packArrayHeader(items.size());
            for (Object item : items) {
                pack(item);
            }
        } else if (value instanceof Object[]) {
            Object[] items = (Object[]) value;
            packer.packArrayHeader(items.length);
            for (Object item : items) {
                pack(item);
            }
        } else if (value instanceof byte[]) {
            byte[] bytes = (byte[]) value;
            packer.packBinaryHeader(bytes.length);
            packer.writePayload(bytes);
        } else if (value instanceof BigInteger) {
            packer.packBigInteger((BigInteger) value);
        } else if (value instanceof JSONAware) { // the TopologyContext of the handshake
            pack(JSONValue.parse(((JSONAware) value).toJSONString()));
        } else {
            packer.packString(String.valueOf(value)); // as JSON would (toString)
        }
    }

    private Object unpack() throws IOException {
        MessageFormat format = unpacker.getNextFormat();
        switch (format.getValueType()) {
            case NIL:
                unpacker.unpackNil();
                return null;
            case BOOLEAN:
                return unpacker.unpackBoolean();
            case INTEGER:
                return format == MessageFormat.UINT64 ? unpacker.unpackBigInteger() : unpacker.unpackLong();
            case FLOAT:
                return unpacker.unpackDouble();
            case STRING:
                return unpacker.unpackString();
            case BINARY:
                return unpacker.readPayload(unpacker.unpackBinaryHeader());
            case ARRAY: {
                int n = unpacker.unpackArrayHeader();
                List<Object> list = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    list.add(unpack());
                }
                return list;
            }
            case MAP: {
                int n = unpacker.unpackMapHeader();
                Map<Object, Object> map = new HashMap<>(Math.max(4, n * 2));
                for (int i = 0; i < n; i++) {
                    Object key = unpack();
                    map.put(key, unpack());
                }
                return map;
            }
            default:
                throw new IOException("elastorm multilang: unsupported msgpack value " + format);
        }
    }
}
