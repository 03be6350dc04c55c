package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED;
import static org.ucx4j.internal.ffi.Structs.IOV_BUFFER;
import static org.ucx4j.internal.ffi.Structs.IOV_LENGTH;
import static org.ucx4j.internal.ffi.Structs.UCP_DT_IOV;

import java.lang.foreign.MemorySegment;
import java.util.List;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Ucp;

/**
 * Builds active-message sends: the wire header (prefix + user header), an iov table for frames and copies of heap
 * data go into one malloc'd block the op owns and frees on completion; native payloads are sent in place.
 */
public final class AmSend {
    private AmSend() {}

    /** A plain active message (kind {@link AmWire#PLAIN}); a raw endpoint sends the header exactly as given. */
    public static Op message(EndpointCore ep, MemorySegment header, MemorySegment payload, boolean blocking) {
        return build(ep, AmWire.PLAIN, header, header.byteSize(), payload, null, blocking);
    }

    /** A size-prefixed object (kind {@link AmWire#OBJECT}): its 8-byte size is the header, written in place. */
    public static Op object(EndpointCore ep, MemorySegment payload, boolean blocking) {
        return build(ep, AmWire.OBJECT, null, 8, payload, null, blocking);
    }

    /**
     * Frames (kind {@link AmWire#FRAMES}): a header with count, sizes and memory types (written in place), then the
     * frames.
     */
    public static Op frames(EndpointCore ep, List<MemorySegment> frames, boolean blocking) {
        long headerLength = 4L + (long) frames.size() * AmWire.FRAME_ENTRY;
        return build(ep, AmWire.FRAMES, null, headerLength, null, frames, blocking);
    }

    /**
     * Refuses a header longer than UCX takes on this worker ({@link Engine#maxAmHeader}), before anything is
     * allocated or posted.
     */
    static void checkHeader(EndpointCore ep, long headerLength, byte kind) {
        long max = ep.engine.maxAmHeader;
        if (headerLength > max) {
            long prefix = ep.raw ? 0 : AmWire.PREFIX;
            throw new IllegalArgumentException((kind == AmWire.FRAMES ? "a frames header (4 B + "
                    + AmWire.FRAME_ENTRY + " B a frame)" : "an active-message header") + " of " + (headerLength - prefix)
                    + " B" + (prefix == 0 ? "" : " (+" + prefix + " B of ucx4j's)") + " is longer than this worker's "
                    + "transports take: " + max + " B (ucp_worker_attr_t.max_am_header)"
                    + (kind == AmWire.FRAMES ? "; send fewer frames per message" : ""));
        }
    }

    /** Test hook: an active message of any kind with a header exactly as given (after the prefix). */
    public static Op forged(EndpointCore ep, byte kind, MemorySegment header, MemorySegment payload) {
        return build(ep, kind, header, header.byteSize(), payload, null, false);
    }

    /**
     * One block for the wire header, the iov table and heap copies. {@code header} null: the kind's own header
     * ({@code userHeaderLength} bytes) is written here, from {@code single} (an object's size) or {@code frames}
     * (their count and sizes). One payload ({@code single}) or a list of frames sent as an iov.
     */
    private static Op build(EndpointCore ep, byte kind, MemorySegment header, long userHeaderLength,
            MemorySegment single, List<MemorySegment> frames, boolean blocking) {
        boolean iov = frames != null;
        if (ep.raw && kind != AmWire.PLAIN) {
            throw new IllegalStateException("frames and objects need a ucx4j peer; a raw endpoint sends plain "
                    + "active messages only");
        }
        long prefix = ep.raw ? 0 : AmWire.PREFIX;
        long headerLength = prefix + userHeaderLength;
        checkHeader(ep, headerLength, kind);
        int n = iov ? frames.size() : 1;
        long table = iov ? n * UCP_DT_IOV.byteSize() : 0;
        long copies = 0;
        long total = 0;
        for (int i = 0; i < n; i++) {
            MemorySegment p = iov ? frames.get(i) : single;
            total += p.byteSize();
            if (!p.isNative()) {
                copies += p.byteSize();
            }
        }
        long size = align(headerLength) + table + copies;
        long block = Ucp.malloc(Math.max(1, size));
        if (block == 0) {
            throw new OutOfMemoryError("malloc(" + size + ") failed");
        }
        long buffer = 0, count = 0;
        try {
            MemorySegment b = NativeAccess.view(block, size);
            if (!ep.raw) {
                AmWire.prefixAt(b, ep.peerConnId, kind);
            }
            if (header != null) {
                MemorySegment.copy(header, 0, b, prefix, userHeaderLength);
            } else if (kind == AmWire.OBJECT) {
                b.set(JAVA_LONG_UNALIGNED, prefix, single.byteSize());
            } else { // FRAMES
                b.set(JAVA_INT_UNALIGNED, prefix, n);
                for (int i = 0; i < n; i++) {
                    long at = prefix + 4L + (long) i * AmWire.FRAME_ENTRY;
                    b.set(JAVA_LONG_UNALIGNED, at, frames.get(i).byteSize());
                    b.set(JAVA_BYTE, at + 8, AmWire.MEMORY_TYPE_HOST);
                }
            }
            long tableAt = align(headerLength);
            long copyAt = tableAt + table;
            for (int i = 0; i < n; i++) {
                MemorySegment p = iov ? frames.get(i) : single;
                long address;
                if (p.isNative()) {
                    address = p.address();
                } else {
                    MemorySegment.copy(p, 0, b, copyAt, p.byteSize());
                    address = block + copyAt;
                    copyAt += p.byteSize();
                }
                if (iov) {
                    b.set(JAVA_LONG, tableAt + i * UCP_DT_IOV.byteSize() + IOV_BUFFER, address);
                    b.set(JAVA_LONG, tableAt + i * UCP_DT_IOV.byteSize() + IOV_LENGTH, p.byteSize());
                } else {
                    buffer = address;
                    count = p.byteSize();
                }
            }
            if (iov) {
                buffer = n == 0 ? 0 : block + tableAt;
                count = n;
            }
        } catch (RuntimeException | Error e) { // a segment closed under us, say: the block is ours to free
            Ucp.free(block);
            throw e;
        }
        Engine e = ep.engine;
        Op op = e.amSend(ep, ep.raw ? AmWire.ID_RAW : AmWire.ID_UCX4J, block, headerLength, buffer, count,
                iov && n > 0, total, block, blocking);
        op.what = AmWire.sendName(kind);
        return op;
    }

    private static long align(long v) {
        return (v + 15) & ~15L;
    }
}
