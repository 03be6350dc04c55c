package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * Stream bytes a peer sent before its graceful close that no receive had taken, copied out of UCX before the
 * endpoint closes (UCX drops an endpoint's queued stream data with it), so that later stream receives still read
 * them, as a socket's reads do after its peer's FIN. Native memory, as UCX's was (not the Java heap, which may be
 * far smaller), freed once the holder is unreachable. Owner thread only.
 */
final class HeldStream {
    private final java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofAuto();
    private final ArrayDeque<MemorySegment> chunks = new ArrayDeque<>();
    private long headOffset;
    private long available;

    /** Copies what UCX queued on {@code ep} and gives UCX its buffers back; null when nothing was queued. */
    static HeldStream drain(long ep, MemorySegment lengthOut) {
        HeldStream held = null;
        long data;
        while ((data = Ucp.streamRecvDataNb(ep, lengthOut.address())) != 0 && !Status.isError(data)) {
            long length = lengthOut.get(JAVA_LONG, 0);
            try {
                if (length > 0) {
                    if (held == null) {
                        held = new HeldStream();
                    }
                    held.add(NativeAccess.view(data, length));
                }
            } finally {
                Ucp.streamDataRelease(ep, data);
            }
        }
        return held;
    }

    private void add(MemorySegment data) {
        chunks.add(arena.allocate(data.byteSize()).copyFrom(data));
        available += data.byteSize();
    }

    /** Puts {@code data} back before what {@code held} (null: nothing) has; returns the holder. */
    static HeldStream pushFront(HeldStream held, MemorySegment data) {
        HeldStream h = held != null ? held : new HeldStream();
        if (h.headOffset > 0) { // the head's unread part becomes a chunk of its own
            h.chunks.addFirst(h.chunks.pollFirst().asSlice(h.headOffset));
            h.headOffset = 0;
        }
        h.chunks.addFirst(h.arena.allocate(data.byteSize()).copyFrom(data));
        h.available += data.byteSize();
        return h;
    }

    long available() {
        return available;
    }

    /**
     * Moves up to {@code length} bytes to {@code address}, or exactly {@code length} with {@code all}; -1 (and
     * nothing moved) when that many are not held.
     */
    long take(long address, long length, boolean all) {
        if (available == 0 || all && available < length) {
            return -1;
        }
        long n = Math.min(length, available);
        MemorySegment to = NativeAccess.view(address, n);
        long done = 0;
        while (done < n) {
            MemorySegment head = chunks.peekFirst();
            long part = Math.min(n - done, head.byteSize() - headOffset);
            MemorySegment.copy(head, headOffset, to, done, part);
            done += part;
            headOffset += part;
            if (headOffset == head.byteSize()) {
                chunks.pollFirst();
                headOffset = 0;
            }
        }
        available -= n;
        return n;
    }
}
