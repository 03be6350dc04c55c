package org.ucx4j;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import org.ucx4j.internal.engine.SizeClass;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Ucp;

/**
 * The default host allocator for received messages: blocks are kept in power-of-two size classes (16 B to 64 MiB)
 * and reused, up to a cap on cached bytes, so a message pays neither a malloc/free pair (two native calls, one of
 * them on the progress thread inside UCX's callback) nor, when large, fresh pages (page faults, {@code mmap}/
 * {@code munmap}). A freed block is the next one handed out (last in, first out), so a message usually lands in
 * memory that is still in the CPU's caches.
 * <p>
 * Thread-safe, lock-free, and it allocates nothing on the Java heap beyond the segment it hands out: each size class
 * is a stack linked through the cached blocks themselves (a cached block's first 8 bytes hold the next one's
 * address). Any thread may free. One thread at a time takes from the cache (normally the worker's progress thread);
 * another that comes meanwhile gets fresh memory instead of waiting, which also keeps the stack free of the ABA
 * problem of concurrent lock-free pops.
 * <p>
 * {@link Ucx} creates one per instance unless {@link UcxOptions#withAllocator} names another, and empties it at close.
 * Each {@code Ucx} whose messages it holds also keeps a few small blocks of its own in front of it (messages of up to
 * 32 KiB closed on the thread that drives the worker, four blocks per size class, 256 KiB at most), outside the cap
 * and {@link #cachedBytes()}, and gives them back to the pool when it closes; with a cap of 0 it keeps none.
 */
public final class PooledAllocator implements MemoryAllocator, AutoCloseable {
    private static final int MIN_CLASS = SizeClass.MIN;
    private static final int MAX_CLASS = SizeClass.MAX;
    private final long maxCachedBytes;
    private final AtomicLong cached = new AtomicLong();
    /** Per size class, the address of the most recently freed block, 0 when none is cached. */
    private final AtomicLongArray heads = new AtomicLongArray(MAX_CLASS + 1);
    private final AtomicBoolean taking = new AtomicBoolean();
    private volatile boolean closed;

    /**
     * Caches at most {@code maxCachedBytes} of freed blocks.
     *
     * @param maxCachedBytes the cap, counted in whole blocks (a request's size rounded up to a power of two); 0
     *        caches nothing
     * @throws IllegalArgumentException if {@code maxCachedBytes} is negative
     */
    public PooledAllocator(long maxCachedBytes) {
        if (maxCachedBytes < 0) {
            throw new IllegalArgumentException("negative cache size " + maxCachedBytes);
        }
        this.maxCachedBytes = maxCachedBytes;
    }

    @Override
    public MemorySegment allocate(long bytes) {
        int c = SizeClass.of(bytes);
        if (c < 0) {
            return MemoryAllocator.malloc().allocate(bytes);
        }
        long p = take(c);
        if (p == 0) {
            p = Ucp.malloc(1L << c);
            if (p == 0) {
                throw new OutOfMemoryError("malloc(" + (1L << c) + ") failed");
            }
        }
        return NativeAccess.view(p, bytes);
    }

    /** A cached block of class {@code c}, or 0 when none is cached or another thread is taking one now. */
    private long take(int c) {
        if (heads.get(c) == 0 || !taking.compareAndSet(false, true)) {
            return 0;
        }
        try {
            long p = pop(c);
            if (p != 0) {
                cached.addAndGet(-(1L << c));
            }
            return p;
        } finally {
            taking.set(false);
        }
    }

    /** Unlinks the top block of class {@code c}; only while holding {@link #taking}. */
    private long pop(int c) {
        long p;
        do {
            p = heads.get(c);
            if (p == 0) {
                return 0;
            }
        } while (!heads.compareAndSet(c, p, NativeAccess.getLong(p)));
        return p;
    }

    @Override
    public void free(MemorySegment segment) {
        int c = SizeClass.of(segment.byteSize());
        if (c < 0) {
            MemoryAllocator.malloc().free(segment);
            return;
        }
        long p = segment.address();
        long size = 1L << c;
        if (!closed) {
            if (cached.addAndGet(size) <= maxCachedBytes) {
                long head;
                do {
                    head = heads.get(c);
                    NativeAccess.setLong(p, head);
                } while (!heads.compareAndSet(c, head, p));
                if (closed) { // raced with close(): give back what close may have missed
                    drain(c);
                }
                return;
            }
            cached.addAndGet(-size); // over the cap: not kept (counted back even if close() ran meanwhile)
        }
        Ucp.free(p);
    }

    /** {@return the most bytes the cache holds, as given to the constructor} */
    public long maxCachedBytes() {
        return maxCachedBytes;
    }

    /** {@return the bytes held in the cache now, counted in whole blocks} */
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
        while (!taking.compareAndSet(false, true)) {
            Thread.onSpinWait(); // a take in progress lasts a few instructions
        }
        try {
            long p;
            while ((p = pop(c)) != 0) {
                cached.addAndGet(-(1L << c));
                Ucp.free(p);
            }
        } finally {
            taking.set(false);
        }
    }

    @Override
    public String toString() {
        return "pooled(" + maxCachedBytes + " B cache)";
    }
}
