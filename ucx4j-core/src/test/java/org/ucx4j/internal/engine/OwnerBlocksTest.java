package org.ucx4j.internal.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.ucx4j.PooledAllocator;

/** The worker's own receive blocks in front of the pool: kept for the owner thread only, bounded, given back. */
class OwnerBlocksTest {
    private boolean owner = true;

    @Test
    void aBlockFreedOnTheOwnerThreadIsHandedOutAgainWithoutThePool() {
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            OwnerBlocks blocks = new OwnerBlocks(pool, () -> owner);
            MemorySegment a = blocks.allocate(8);
            a.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, 42);
            blocks.free(a);
            assertEquals(1, blocks.kept());
            assertEquals(0, pool.cachedBytes(), "the pool never saw it");
            MemorySegment b = blocks.allocate(12); // the same 16-byte class
            assertEquals(a.address(), b.address());
            assertEquals(12, b.byteSize());
            assertEquals(0, blocks.kept());
            assertEquals(0, pool.cachedBytes());
            blocks.free(b);
            blocks.close();
        }
    }

    @Test
    void aBlockFreedOffTheOwnerThreadGoesToThePool() {
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            OwnerBlocks blocks = new OwnerBlocks(pool, () -> owner);
            MemorySegment a = blocks.allocate(100);
            owner = false;
            blocks.free(a);
            assertEquals(0, blocks.kept());
            assertEquals(128, pool.cachedBytes());
            owner = true;
            MemorySegment b = blocks.allocate(100); // nothing kept: the pool's block
            assertEquals(a.address(), b.address());
            assertEquals(0, pool.cachedBytes());
            owner = false; // nor does another thread take kept blocks
            blocks.free(b);
            owner = true;
            MemorySegment c = blocks.allocate(100);
            blocks.free(c);
            owner = false;
            MemorySegment d = blocks.allocate(100);
            assertNotEquals(c.address(), d.address());
            blocks.free(d);
            owner = true;
            blocks.close();
        }
    }

    @Test
    void eachClassKeepsAFewSmallBlocksAndTheRestGoToThePool() {
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            OwnerBlocks blocks = new OwnerBlocks(pool, () -> owner);
            List<MemorySegment> small = new ArrayList<>();
            for (int i = 0; i <= OwnerBlocks.DEPTH; i++) {
                small.add(blocks.allocate(16));
            }
            small.forEach(blocks::free);
            assertEquals(OwnerBlocks.DEPTH, blocks.kept());
            assertEquals(16, pool.cachedBytes(), "the one past the depth");
            long largest = 1L << OwnerBlocks.MAX_CLASS;
            blocks.free(blocks.allocate(largest));
            assertEquals(OwnerBlocks.DEPTH + 1, blocks.kept());
            blocks.free(blocks.allocate(largest + 1)); // the next class up: not kept
            assertEquals(OwnerBlocks.DEPTH + 1, blocks.kept());
            assertEquals(16 + 2 * largest, pool.cachedBytes());
            blocks.close();
        }
    }

    @Test
    void closingGivesTheKeptBlocksBackAndLaterFreesGoToThePool() {
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            OwnerBlocks blocks = new OwnerBlocks(pool, () -> owner);
            MemorySegment a = blocks.allocate(8), b = blocks.allocate(1000), late = blocks.allocate(8);
            blocks.free(a);
            blocks.free(b);
            assertEquals(0, pool.cachedBytes());
            blocks.close();
            assertEquals(0, blocks.kept());
            assertEquals(16 + 1024, pool.cachedBytes());
            blocks.free(late);
            assertEquals(0, blocks.kept());
            assertEquals(16 + 1024 + 16, pool.cachedBytes());
            MemorySegment again = blocks.allocate(8); // from the pool now
            assertEquals(16 + 1024, pool.cachedBytes());
            blocks.free(again);
        }
    }
}
