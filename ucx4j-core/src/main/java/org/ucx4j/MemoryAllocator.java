package org.ucx4j;

import java.lang.foreign.MemorySegment;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Ucp;

/**
 * Allocates the memory that receiver-allocated messages (active messages, frames, objects) land in. Called on the
 * worker's progress thread when a message arrives, so it must be quick and thread-safe; {@link #free} is called when
 * the message is closed, on whatever thread closes it. Register one per memory type with
 * {@link UcxOptions#withAllocator}.
 */
public interface MemoryAllocator {
    /**
     * Writable native memory of at least {@code bytes} bytes (a zero-length request may return a zero-length
     * segment); anything else (a heap or read-only segment) is given back and its message dropped. A
     * larger block (rounded up to a page, say) is fine: the message sees its first {@code bytes} bytes, and
     * {@link #free} gets the whole segment back.
     *
     * @param bytes the message's payload length, 0 or more
     * @return the memory; this allocator owns it until {@link #free} gives it back
     * @throws OutOfMemoryError (or any other exception) when it cannot allocate: the message is then dropped, and
     *         the receive that would have got it fails with {@link MessageDroppedException}
     */
    MemorySegment allocate(long bytes);

    /**
     * Gives back a segment this allocator returned (the same address and size).
     *
     * @param segment a segment {@link #allocate} returned, the whole of it, not only the message's part
     */
    void free(MemorySegment segment);

    /**
     * {@return an allocator over libc {@code malloc}/{@code free}, which keeps nothing} (The default host allocator
     * is a {@link PooledAllocator}.)
     */
    static MemoryAllocator malloc() {
        return Malloc.INSTANCE;
    }

    /** libc malloc/free. */
    final class Malloc implements MemoryAllocator {
        static final Malloc INSTANCE = new Malloc();

        private Malloc() {}

        @Override
        public MemorySegment allocate(long bytes) {
            if (bytes == 0) {
                return MemorySegment.NULL;
            }
            long p = Ucp.malloc(bytes);
            if (p == 0) {
                throw new OutOfMemoryError("malloc(" + bytes + ") failed");
            }
            return NativeAccess.view(p, bytes);
        }

        @Override
        public void free(MemorySegment segment) {
            if (segment.address() != 0) {
                Ucp.free(segment.address());
            }
        }

        @Override
        public String toString() {
            return "malloc";
        }
    }
}
