package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Test payloads whose every byte depends on its offset and a seed, so misplaced bytes are caught: the bytes come
 * from a mixing hash of the offset, so no long run of them repeats at any shift (a fragment delivered twice or in
 * the wrong place, whatever its size, does not match).
 */
final class Data {
    private Data() {}

    /** The pattern's byte at offset {@code i} for {@code seed}: splitmix64's finalizer of the two. */
    static byte at(long i, int seed) {
        long z = i + seed * 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return (byte) (z ^ (z >>> 31));
    }

    static MemorySegment pattern(Arena arena, long size, int seed) {
        MemorySegment s = arena.allocate(Math.max(1, size)).asSlice(0, size);
        fill(s, size, seed);
        return s;
    }

    /** Writes {@link #pattern}'s bytes into the first {@code size} bytes of {@code s}. */
    static void fill(MemorySegment s, long size, int seed) {
        for (long i = 0; i < size; i++) {
            s.set(ValueLayout.JAVA_BYTE, i, at(i, seed));
        }
    }

    static void verify(MemorySegment s, long size, int seed) {
        assertEquals(size, s.byteSize(), "size");
        for (long i = 0; i < size; i++) {
            byte expect = at(i, seed);
            byte got = s.get(ValueLayout.JAVA_BYTE, i);
            if (got != expect) {
                assertEquals(expect, got, "byte " + i + " of " + size);
            }
        }
    }

    /**
     * Options under which tag, stream and active messages of 64 KiB and more go by rendezvous on every UCX version,
     * for tests whose subject is a send that waits for its receive, or a receive that is matched before its data
     * lands. UCX's own threshold moves between versions: 1.16 and later send up to ~540 KiB eagerly over shared
     * memory, and 1.18 over shared memory without CMA (as with ucx4j's peer error handling) puts it at hundreds of
     * megabytes, and sends every active message eagerly.
     */
    static UcxOptions rendezvous() {
        return UcxOptions.defaults().with("RNDV_THRESH", "64k");
    }

    /** Waits up to 10 s for {@code condition}; fails the test if it never holds. */
    static void eventually(java.util.function.BooleanSupplier condition) throws InterruptedException {
        long until = System.nanoTime() + 10_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > until) {
                throw new AssertionError("condition never held within 10 s");
            }
            Thread.sleep(5);
        }
    }
}
