package org.apache.spark.shuffle.ucx4j;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The block-fetch protocol, carried in ucx4j active messages on handshaken (and, with {@code spark.authenticate},
 * authenticated) endpoints. Every message has a 13-byte header: kind (1 byte), request id (8), block index (4),
 * little-endian.
 * <ul>
 * <li>{@code FETCH}: reducer to server, index = number of blocks; payload = the block ids, UTF-8, one per line.</li>
 * <li>{@code BLOCK}: server to reducer, one per block, in any order; payload = the block's bytes as Spark wrote
 * them (compressed/encrypted per Spark's settings), sent from a mapping of the shuffle file.</li>
 * <li>{@code ERROR}: server to reducer for a block it cannot serve; payload = the reason, UTF-8.</li>
 * </ul>
 */
final class Wire {

    static final byte FETCH = 1;
    static final byte BLOCK = 2;
    static final byte ERROR = 3;
    static final int HEADER = 13;

    private Wire() {
    }

    static byte[] header(byte kind, long requestId, int index) {
        ByteBuffer b = ByteBuffer.allocate(HEADER).order(ByteOrder.LITTLE_ENDIAN);
        b.put(kind).putLong(requestId).putInt(index);
        return b.array();
    }

    /** Decoded header of a received message. */
    record Header(byte kind, long requestId, int index) {
        static Header parse(byte[] h) {
            if (h.length != HEADER) {
                throw new IllegalArgumentException("ucx4j shuffle: bad message header length " + h.length);
            }
            ByteBuffer b = ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN);
            return new Header(b.get(), b.getLong(), b.getInt());
        }
    }
}
