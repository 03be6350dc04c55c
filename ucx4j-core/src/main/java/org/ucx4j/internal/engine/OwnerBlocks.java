package org.ucx4j.internal.engine;

import java.lang.foreign.MemorySegment;
import java.util.function.BooleanSupplier;
import org.ucx4j.MemoryAllocator;
import org.ucx4j.PooledAllocator;
import org.ucx4j.internal.ffi.NativeAccess;

/**
 * A worker's own few small receive blocks in front of a {@link PooledAllocator}: a message closed on the thread
 * that drives the worker (a caller-mode owner, a handler, a borrower) leaves its block here, and the next message
 * that arrives lands in it, with no atomic operation either way. The pool's lock-free stacks cost each message six
 * locked instructions (four to take a block, two to give it back); between two processes each one also waits for
 * the stores of a send just made into the peer's shared-memory FIFO to drain (docs/performance.md, "Owner-thread
 * receive blocks").
 * <p>
 * Owner thread only for everything but {@link #free}, which any thread calls: a block freed elsewhere goes straight
 * to the pool. Each class up to {@link #MAX_CLASS} keeps {@link #DEPTH} blocks at most (256 KiB in all), which
 * count as in use to the pool; {@link #close} hands them back when the worker goes, and later frees go to the pool.
 */
final class OwnerBlocks implements MemoryAllocator {
    /** Largest class kept: 32 KiB, an eager message over shared memory. */
    static final int MAX_CLASS = 15;
    /** Blocks kept per class. */
    static final int DEPTH = 4;
    private final PooledAllocator pool;
    private final BooleanSupplier onOwner;
    private final long[] blocks = new long[(MAX_CLASS + 1) * DEPTH];
    private final int[] counts = new int[MAX_CLASS + 1];
    /** Set by {@link #close} (owner thread); volatile for a thread that owns the worker after it. */
    private volatile boolean closed;

    /** Blocks of {@code pool}, kept for the thread {@code onOwner} says drives the worker now. */
    OwnerBlocks(PooledAllocator pool, BooleanSupplier onOwner) {
        this.pool = pool;
        this.onOwner = onOwner;
    }

    @Override
    public MemorySegment allocate(long bytes) {
        int c = SizeClass.of(bytes);
        if (c >= 0 && c <= MAX_CLASS && counts[c] > 0 && onOwner.getAsBoolean() && !closed) {
            int n = --counts[c];
            return NativeAccess.view(blocks[c * DEPTH + n], bytes);
        }
        return pool.allocate(bytes);
    }

    @Override
    public void free(MemorySegment segment) {
        int c = SizeClass.of(segment.byteSize());
        if (c >= 0 && c <= MAX_CLASS && onOwner.getAsBoolean() && !closed && counts[c] < DEPTH) {
            blocks[c * DEPTH + counts[c]++] = segment.address();
            return;
        }
        pool.free(segment);
    }

    /** Blocks kept now (tests). */
    int kept() {
        int n = 0;
        for (int k : counts) {
            n += k;
        }
        return n;
    }

    /** The worker goes (owner thread): the kept blocks go back to the pool, and so does every later free. */
    void close() {
        closed = true;
        for (int c = SizeClass.MIN; c <= MAX_CLASS; c++) {
            while (counts[c] > 0) {
                pool.free(NativeAccess.view(blocks[c * DEPTH + --counts[c]], 1L << c));
            }
        }
    }

    @Override
    public String toString() {
        return pool.toString();
    }
}
