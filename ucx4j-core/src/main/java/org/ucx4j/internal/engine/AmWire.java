package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED;

import java.lang.foreign.MemorySegment;
import org.ucx4j.internal.ffi.NativeAccess;

/**
 * ucx4j's active-message wire format. Messages between ucx4j endpoints use AM id {@link #ID_UCX4J} and a header
 * that starts with an 8-byte prefix: the receiving side's connection id (int, little-endian), the kind (byte) and
 * three zero bytes; the user header follows. Raw peers use AM id {@link #ID_RAW} with the header exactly as given.
 *
 * <p>Frames: the user header is {@code int count} then per frame {@code long size, byte memoryType}; the payload is
 * the frames back to back. Objects: the user header is {@code long size}; the payload is the bytes.
 */
public final class AmWire {
    private AmWire() {}

    public static final int ID_RAW = 0;
    public static final int ID_UCX4J = 21;
    public static final int PREFIX = 8;
    public static final byte PLAIN = 0, FRAMES = 1, OBJECT = 2;

    /** The operation name of a send of {@code kind} (errors and JFR events). */
    static String sendName(byte kind) {
        return kind == FRAMES ? "frames send" : kind == OBJECT ? "object send" : "active message send";
    }

    /** The operation name of a receive of {@code kind} (errors and JFR events). */
    static String receiveName(byte kind) {
        return kind == FRAMES ? "frames receive" : kind == OBJECT ? "object receive" : "active message receive";
    }
    static final int KINDS = 3;
    /** A frame's entry in a frames header: its size (8 B) and its UCX memory type (1 B). */
    public static final int FRAME_ENTRY = 9;
    /** {@code UCS_MEMORY_TYPE_HOST}: the memory type ucx4j's senders write for every frame, and all it receives. */
    static final byte MEMORY_TYPE_HOST = (byte) org.ucx4j.internal.ffi.Structs.UCS_MEMORY_TYPE_HOST;

    /**
     * Why a message of this kind cannot be taken (caps, malformed header), or null. The user header's
     * {@code headerLength} bytes are read at {@code header} in {@code base}: where UCX has them
     * ({@link NativeAccess#everywhere()} and an address: nothing is allocated), or a copy that the receiver goes on
     * to use (a frames header: a same-host peer can still write a header UCX left in its shared-memory FIFO, so
     * what is checked must be what is read afterwards).
     */
    static String refusal(byte kind, MemorySegment base, long header, long headerLength, long payloadLength,
            int maxFrames, long maxBytes) {
        if (Long.compareUnsigned(payloadLength, maxBytes) > 0) { // UCX's size_t: 2^63 and more too
            return "message of " + Long.toUnsignedString(payloadLength) + " bytes exceeds the receive cap of "
                    + maxBytes + " bytes";
        }
        switch (kind) {
            case FRAMES -> {
                if (headerLength < 4) {
                    return "frame header truncated (" + headerLength + " bytes)";
                }
                int count = base.get(JAVA_INT_UNALIGNED, header);
                if (count < 0 || count > maxFrames) {
                    return "frame header claims " + Integer.toUnsignedString(count) + " frames, cap is " + maxFrames;
                }
                if (headerLength != 4L + (long) count * FRAME_ENTRY) {
                    return "frame header of " + headerLength + " bytes does not describe " + count
                            + " frames";
                }
                long total = 0;
                for (int i = 0; i < count; i++) {
                    long entry = header + 4 + (long) i * FRAME_ENTRY;
                    byte memoryType = base.get(JAVA_BYTE, entry + 8);
                    if (memoryType != MEMORY_TYPE_HOST) { // a later sender's device frame: refused, not misread
                        return "frame " + i + " is of memory type " + memoryType + " (UCS_MEMORY_TYPE_HOST, "
                                + MEMORY_TYPE_HOST + ", is the only one this build receives)";
                    }
                    long size = base.get(JAVA_LONG_UNALIGNED, entry);
                    if (size < 0 || size > maxBytes - total) { // total <= maxBytes: no overflow
                        total = -1;
                    } else {
                        total += size;
                    }
                    if (total < 0) {
                        return "frame header claims " + Long.toUnsignedString(size) + " bytes for frame " + i
                                + ", cap is " + maxBytes + " bytes in all";
                    }
                }
                if (total != payloadLength) {
                    return "frame header claims " + total + " bytes, message carries " + payloadLength;
                }
            }
            case OBJECT -> {
                if (headerLength != 8) {
                    return "object header of " + headerLength + " bytes (expected 8)";
                }
                long size = base.get(JAVA_LONG_UNALIGNED, header);
                if (size != payloadLength) {
                    return "object header claims " + Long.toUnsignedString(size) + " bytes, message carries "
                            + payloadLength;
                }
                if (size > Integer.MAX_VALUE - 8) {
                    return "object of " + size + " bytes does not fit a byte[]";
                }
            }
            case PLAIN -> {
            }
            default -> {
                return "unknown message kind " + kind;
            }
        }
        return null;
    }

    /** Frame sizes from a frames header that passed {@link #refusal}. */
    public static long[] frameSizes(byte[] header) {
        MemorySegment h = MemorySegment.ofArray(header);
        int count = h.get(JAVA_INT_UNALIGNED, 0);
        long[] sizes = new long[count];
        for (int i = 0; i < count; i++) {
            sizes[i] = h.get(JAVA_LONG_UNALIGNED, 4L + (long) i * FRAME_ENTRY);
        }
        return sizes;
    }

    /** Writes the 8-byte prefix at {@code at}. */
    static void prefixAt(MemorySegment at, int receiverConnId, byte kind) {
        at.set(JAVA_INT_UNALIGNED, 0, receiverConnId);
        at.set(JAVA_BYTE, 4, kind);
        at.set(JAVA_BYTE, 5, (byte) 0);
        at.set(JAVA_BYTE, 6, (byte) 0);
        at.set(JAVA_BYTE, 7, (byte) 0);
    }
}
