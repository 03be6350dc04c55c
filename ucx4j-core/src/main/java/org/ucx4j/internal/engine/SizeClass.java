package org.ucx4j.internal.engine;

/**
 * The power-of-two size classes of {@link org.ucx4j.PooledAllocator}'s blocks (16 B to 64 MiB), shared with the
 * worker's {@link OwnerBlocks}, which hands the pool's blocks out again and must see the same class in a segment.
 */
public final class SizeClass {
    /** 16 B: room for the pool's link, malloc's own alignment. */
    public static final int MIN = 4;
    /** 64 MiB. */
    public static final int MAX = 26;

    private SizeClass() {}

    /** The class of a request: log2 of the block it is carved from, or -1 when not pooled. */
    public static int of(long bytes) {
        if (bytes <= 0 || bytes > (1L << MAX)) {
            return -1;
        }
        return Math.max(MIN, 64 - Long.numberOfLeadingZeros(bytes - 1));
    }
}
