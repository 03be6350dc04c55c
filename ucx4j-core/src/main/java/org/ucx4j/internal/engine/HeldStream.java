package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * Stream bytes a peer sent before its graceful close that no receive had taken, copied out of UCX before the
 * endpoint closes (UCX drops an endpoint's queued stream data with it), so that later stream receives still read
 * them, as a socket's reads do after its peer's FIN. Owner thread only.
 */
final class HeldStream {
    private final ArrayDeque<byte[]> chunks = new ArrayDeque<>();
    private int headOffset;
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
        for (long off = 0; off < data.byteSize(); ) {
            int n = (int) Math.min(data.byteSize() - off, 1 << 30);
            chunks.add(data.asSlice(off, n).toArray(JAVA_BYTE));
            available += n;
            off += n;
        }
    }

    /** Puts {@code data} back before what {@code held} (null: nothing) has; returns the holder. */
    static HeldStream pushFront(HeldStream held, MemorySegment data) {
        HeldStream h = held != null ? held : new HeldStream();
        if (h.headOffset > 0) { // the head's unread part becomes a chunk of its own
            byte[] head = h.chunks.pollFirst();
            h.chunks.addFirst(java.util.Arrays.copyOfRange(head, h.headOffset, head.length));
            h.headOffset = 0;
        }
        HeldStream front = new HeldStream();
        front.add(data);
        for (java.util.Iterator<byte[]> it = front.chunks.descendingIterator(); it.hasNext(); ) {
            h.chunks.addFirst(it.next());
        }
        h.available += front.available;
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
            byte[] head = chunks.peekFirst();
            int part = (int) Math.min(n - done, head.length - headOffset);
            MemorySegment.copy(head, headOffset, to, JAVA_BYTE, done, part);
            done += part;
            headOffset += part;
            if (headOffset == head.length) {
                chunks.pollFirst();
                headOffset = 0;
            }
        }
        available -= n;
        return n;
    }
}
