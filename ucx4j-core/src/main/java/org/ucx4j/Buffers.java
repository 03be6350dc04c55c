package org.ucx4j;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.Objects;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Ucp;

/** Checks user buffers and turns them into (address, length) pairs UCX can use. */
final class Buffers {
    private Buffers() {}

    static MemorySegment segment(MemorySegment seg, boolean forReceive) {
        Objects.requireNonNull(seg, "buffer");
        if (!seg.isNative()) {
            throw new IllegalArgumentException("heap memory segment: UCX needs native memory (Arena.allocate or a "
                    + "direct ByteBuffer), or pass a byte[] to have it copied");
        }
        if (forReceive && seg.isReadOnly()) {
            throw new IllegalArgumentException("read-only memory segment cannot receive data");
        }
        return alive(seg);
    }

    /** The bytes between position and limit of a direct buffer. */
    static MemorySegment segment(ByteBuffer buf, boolean forReceive) {
        Objects.requireNonNull(buf, "buffer");
        if (!buf.isDirect()) {
            throw new IllegalArgumentException("heap ByteBuffer: UCX needs a direct ByteBuffer, or pass a byte[] to "
                    + "have it copied");
        }
        if (forReceive && buf.isReadOnly()) {
            throw new IllegalArgumentException("read-only ByteBuffer cannot receive data");
        }
        return alive(MemorySegment.ofBuffer(buf));
    }

    /** UCX must never see memory whose arena was closed: it may be unmapped or reused. */
    static MemorySegment alive(MemorySegment seg) {
        if (!seg.scope().isAlive()) {
            throw new IllegalStateException("the memory segment's arena is already closed");
        }
        return seg;
    }

    /** A malloc'd copy of {@code array} (at least one byte so the address is never NULL). */
    static long copyIn(byte[] array) {
        Objects.requireNonNull(array, "buffer");
        long p = Ucp.malloc(Math.max(1, array.length));
        if (p == 0) {
            throw new OutOfMemoryError("malloc(" + array.length + ") failed");
        }
        MemorySegment.copy(array, 0, NativeAccess.view(p, array.length), ValueLayout.JAVA_BYTE, 0, array.length);
        return p;
    }

    static long staging(byte[] array) {
        Objects.requireNonNull(array, "buffer");
        long p = Ucp.malloc(Math.max(1, array.length));
        if (p == 0) {
            throw new OutOfMemoryError("malloc(" + array.length + ") failed");
        }
        return p;
    }

    /**
     * A timeout in nanoseconds, at most ~73 years: a longer one ({@code ChronoUnit.FOREVER}, whose nanoseconds do
     * not fit a long) waits that long, and deadlines computed from it cannot overflow.
     */
    static long nanos(java.time.Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("negative timeout: " + timeout);
        }
        return timeout.compareTo(LONGEST) >= 0 ? LONGEST.toNanos() : timeout.toNanos();
    }

    private static final java.time.Duration LONGEST = java.time.Duration.ofNanos(Long.MAX_VALUE / 4);
}
