package org.apache.spark.shuffle.ucx4j;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The block-fetch protocol, carried in ucx4j active messages on handshaken (and, with {@code spark.authenticate},
 * authenticated) endpoints. Every message starts with a 13-byte header: kind (1 byte), request id (8), block index
 * (4), little-endian; a {@code PART} adds the part's offset in its block (8) and the block's size (8).
 * <ul>
 * <li>{@code FETCH}: reducer to server, index = number of blocks; payload = the block ids, UTF-8, one per line.</li>
 * <li>{@code FETCH_TO_DISK}: the same, for blocks Spark wants written to disk as they arrive
 * ({@code spark.network.maxRemoteBlockSizeFetchToMem}): the server answers each block with {@code PART}s.</li>
 * <li>{@code BLOCK}: server to reducer, one per block, in any order; payload = the block's bytes as Spark wrote
 * them (compressed/encrypted per Spark's settings), sent from a mapping of the shuffle file.</li>
 * <li>{@code PART}: server to reducer, one slice of a block at a given offset, at least one per block (an empty
 * block is one empty part); parts may land out of order, and the server keeps only a few in flight.</li>
 * <li>{@code ERROR}: server to reducer for a block it cannot serve; payload = the reason, UTF-8.</li>
 * <li>{@code GOAWAY}: server to reducer, request id 0: this server is being replaced (its executor reopened its
 * UCX instance); it still answers requests already made, and the reducer sends new ones to the executor's new
 * address, which it asks the driver for. Payload empty.</li>
 * </ul>
 */
final class Wire {

    static final byte FETCH = 1;
    static final byte BLOCK = 2;
    static final byte ERROR = 3;
    static final byte FETCH_TO_DISK = 4;
    static final byte PART = 5;
    static final byte GOAWAY = 6;
    static final int HEADER = 13;
    static final int PART_HEADER = HEADER + 16;

    private Wire() {
    }

    static byte[] header(byte kind, long requestId, int index) {
        ByteBuffer b = ByteBuffer.allocate(HEADER).order(ByteOrder.LITTLE_ENDIAN);
        b.put(kind).putLong(requestId).putInt(index);
        return b.array();
    }

    static byte[] partHeader(long requestId, int index, long offset, long blockSize) {
        ByteBuffer b = ByteBuffer.allocate(PART_HEADER).order(ByteOrder.LITTLE_ENDIAN);
        b.put(PART).putLong(requestId).putInt(index).putLong(offset).putLong(blockSize);
        return b.array();
    }

    /** Decoded header of a received message; {@code offset} and {@code blockSize} are 0 except in a part. */
    record Header(byte kind, long requestId, int index, long offset, long blockSize) {
        static Header parse(byte[] h) {
            boolean part = h.length == PART_HEADER && h[0] == PART;
            if (h.length != HEADER && !part) {
                throw new IllegalArgumentException("ucx4j shuffle: bad message header length " + h.length);
            }
            ByteBuffer b = ByteBuffer.wrap(h).order(ByteOrder.LITTLE_ENDIAN);
            Header r = new Header(b.get(), b.getLong(), b.getInt(), part ? b.getLong() : 0, part ? b.getLong() : 0);
            if (part && (r.offset < 0 || r.blockSize < 0 || r.offset > r.blockSize)) {
                throw new IllegalArgumentException("ucx4j shuffle: bad part " + r.offset + " of " + r.blockSize);
            }
            return r;
        }
    }
}
