package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.network.buffer.NioManagedBuffer;
import org.apache.spark.network.shuffle.DownloadFile;
import org.apache.spark.network.shuffle.DownloadFileWritableChannel;
import org.junit.jupiter.api.Test;

/** A to-disk block put together from parts in any order; bad parts refused; every part's memory given back. */
class DownloadTest {
    private final AtomicInteger closed = new AtomicInteger();

    @Test
    void partsInAnyOrderMakeTheBlockExactly() throws IOException {
        byte[] block = new byte[10_000];
        new Random(7).nextBytes(block);
        MemDownload file = new MemDownload();
        Download d = new Download(file, file.openForWriting(), block.length, "shuffle_0_1_2");
        int[] order = {3, 0, 4, 1, 2}; // parts of 2500, 2500, 2500, 2500 and an empty one at the end
        long[] offsets = {0, 2500, 5000, 7500, 10_000};
        boolean done = false;
        for (int k = 0; k < order.length; k++) {
            int i = order[k];
            int len = i == 4 ? 0 : 2500;
            done = d.accept(part(offsets[i], block.length, Arrays.copyOfRange(block, (int) offsets[i],
                    (int) offsets[i] + len)));
            assertEquals(k == order.length - 1, done, "complete only after the last part, at step " + k);
        }
        assertTrue(done);
        assertArrayEquals(block, file.bytes.toByteArray());
        assertEquals(order.length, closed.get(), "every part's memory given back");
    }

    @Test
    void anEmptyBlockIsOneEmptyPart() throws IOException {
        MemDownload file = new MemDownload();
        Download d = new Download(file, file.openForWriting(), 0, "b");
        assertTrue(d.accept(part(0, 0, new byte[0])));
        assertEquals(0, file.bytes.size());
    }

    @Test
    void inconsistentPartsAreRefusedAndDiscardFreesWhatIsHeld() throws IOException {
        MemDownload file = new MemDownload();
        Download d = new Download(file, file.openForWriting(), 100, "b");
        assertFalse(d.accept(part(50, 100, new byte[10]))); // early: held
        assertThrows(IOException.class, () -> d.accept(part(95, 100, new byte[10]))); // past the end
        assertThrows(IOException.class, () -> d.accept(part(0, 200, new byte[10]))); // another size
        assertThrows(IOException.class, () -> d.accept(part(50, 100, new byte[10]))); // twice
        assertThrows(IOException.class, () -> d.accept(part(55, 100, new byte[10]))); // inside a held part
        assertThrows(IOException.class, () -> d.accept(part(45, 100, new byte[10]))); // running into one
        assertEquals(5, closed.get(), "refused parts are given back at once");
        assertFalse(d.accept(part(40, 100, new byte[10]))); // right before it: fine, held
        d.discard();
        assertEquals(7, closed.get(), "the held parts are given back");
        assertTrue(file.deleted);
    }

    private Download.Part part(long offset, long blockSize, byte[] bytes) {
        return new Download.Part(offset, blockSize, MemorySegment.ofArray(bytes), closed::incrementAndGet);
    }

    /** A download file in memory. */
    private static final class MemDownload implements DownloadFile {
        final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        boolean deleted;

        @Override
        public boolean delete() {
            deleted = true;
            return true;
        }

        @Override
        public DownloadFileWritableChannel openForWriting() {
            return new DownloadFileWritableChannel() {
                boolean open = true;

                @Override
                public ManagedBuffer closeAndRead() {
                    open = false;
                    return new NioManagedBuffer(ByteBuffer.wrap(bytes.toByteArray()));
                }

                @Override
                public int write(ByteBuffer src) {
                    int n = src.remaining();
                    byte[] b = new byte[n];
                    src.get(b);
                    bytes.writeBytes(b);
                    return n;
                }

                @Override
                public boolean isOpen() {
                    return open;
                }

                @Override
                public void close() {
                    open = false;
                }
            };
        }

        @Override
        public String path() {
            return "memory";
        }
    }
}
