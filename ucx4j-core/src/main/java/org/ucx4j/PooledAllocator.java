package org.ucx4j;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicLong;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Ucp;

/**
 * The default host allocator for received messages: blocks of 64 KiB and more are kept in power-of-two size classes
 * and reused, up to a cap on cached bytes, so a stream of large messages does not pay for fresh pages (page faults,
 * {@code mmap}/{@code munmap}) on every message; smaller requests go to malloc. A freed block is the next one
 * handed out (last in, first out), so a message usually lands in memory that is still in the CPU's caches.
 * Lock-free and thread-safe.
 * {@link Ucx} creates one per instance unless {@link UcxOptions#withAllocator} names another, and empties it at close.
 */
public final class PooledAllocator implements MemoryAllocator, AutoCloseable {
    private static final int MIN_CLASS = 16; // 64 KiB
    private static final int MAX_CLASS = 26; // 64 MiB
    private final long maxCachedBytes;
    private final AtomicLong cached = new AtomicLong();
    private volatile boolean closed;
    @SuppressWarnings("unchecked")
    private final ConcurrentLinkedDeque<MemorySegment>[] free = new ConcurrentLinkedDeque[MAX_CLASS + 1];

    /** Caches at most {@code maxCachedBytes} of freed blocks. */
    public PooledAllocator(long maxCachedBytes) {
        if (maxCachedBytes < 0) {
            throw new IllegalArgumentException("negative cache size " + maxCachedBytes);
        }
        this.maxCachedBytes = maxCachedBytes;
        for (int c = MIN_CLASS; c <= MAX_CLASS; c++) {
            free[c] = new ConcurrentLinkedDeque<>();
        }
    }

    /** The size class of a request: log2 of the block it is carved from, or -1 when not pooled. */
    private static int sizeClass(long bytes) {
        if (bytes < (1L << MIN_CLASS) || bytes > (1L << MAX_CLASS)) {
            return -1;
        }
        return 64 - Long.numberOfLeadingZeros(bytes - 1);
    }

    @Override
    public MemorySegment allocate(long bytes) {
        int c = sizeClass(bytes);
        if (c < 0) {
            return MemoryAllocator.malloc().allocate(bytes);
        }
        MemorySegment block = free[c].pollFirst(); // last in, first out: the block most likely still in cache
        if (block != null) {
            cached.addAndGet(-block.byteSize());
        } else {
            long p = Ucp.malloc(1L << c);
            if (p == 0) {
                throw new OutOfMemoryError("malloc(" + (1L << c) + ") failed");
            }
            block = NativeAccess.view(p, 1L << c);
        }
        return block.asSlice(0, bytes);
    }

    @Override
    public void free(MemorySegment segment) {
        int c = sizeClass(segment.byteSize());
        if (c < 0) {
            MemoryAllocator.malloc().free(segment);
            return;
        }
        long size = 1L << c;
        if (!closed && cached.addAndGet(size) <= maxCachedBytes) {
            free[c].addFirst(NativeAccess.view(segment.address(), size));
            if (closed) { // raced with close(): give back what close may have missed
                drain(c);
            }
        } else if (closed) {
            Ucp.free(segment.address());
        } else {
            cached.addAndGet(-size);
            Ucp.free(segment.address());
        }
    }

    /** Bytes held in the cache now. */
    public long cachedBytes() {
        return cached.get();
    }

    /** Frees every cached block and stops caching: blocks still in use are freed when they come back. */
    @Override
    public void close() {
        closed = true;
        for (int c = MIN_CLASS; c <= MAX_CLASS; c++) {
            drain(c);
        }
    }

    private void drain(int c) {
        MemorySegment b;
        while ((b = free[c].poll()) != null) {
            cached.addAndGet(-b.byteSize());
            Ucp.free(b.address());
        }
    }

    @Override
    public String toString() {
        return "pooled(" + maxCachedBytes + " B cache)";
    }
}
