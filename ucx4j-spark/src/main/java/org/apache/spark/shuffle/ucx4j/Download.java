package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.TreeMap;

import org.apache.spark.network.shuffle.DownloadFile;
import org.apache.spark.network.shuffle.DownloadFileWritableChannel;

/**
 * A block being written to one of Spark's download files from parts that may land in any order: each part is
 * written as soon as every byte before it is, parts that came early wait (the server bounds how many are in flight).
 * Not thread-safe: its request serializes access.
 */
final class Download {
    final DownloadFile file;
    final DownloadFileWritableChannel channel;
    private final long size;
    private final String blockId;
    private long next;
    private final TreeMap<Long, Part> early = new TreeMap<>();

    /** One part: its offset, the block's size as the sender stated it, the bytes, and what owns them. */
    record Part(long offset, long blockSize, MemorySegment bytes, AutoCloseable owner) {
        void close() {
            try {
                owner.close();
            } catch (Exception ignored) {
                // giving memory back does not fail
            }
        }
    }

    Download(DownloadFile file, DownloadFileWritableChannel channel, long size, String blockId) {
        this.file = file;
        this.channel = channel;
        this.size = size;
        this.blockId = blockId;
    }

    /**
     * Takes a part (and eventually closes it): true once the whole block is written. A part that does not fit the
     * block (beyond its end, a different size, overlapping what is written or held) is refused.
     */
    /** Whether {@code [offset, offset + length)} meets a part already held (or starts where one does). */
    private boolean overlapsHeld(long offset, long length) {
        var before = early.floorEntry(offset);
        if (before != null && (before.getKey() == offset
                || before.getKey() + before.getValue().bytes().byteSize() > offset)) {
            return true;
        }
        Long after = early.higherKey(offset);
        return after != null && after < offset + length;
    }

    boolean accept(Part p) throws IOException {
        long length = p.bytes().byteSize();
        if (p.blockSize() != size || p.offset() < next || length > size - p.offset() || overlapsHeld(p.offset(), length)) {
            p.close();
            throw new IOException("ucx4j shuffle: inconsistent part of " + blockId + ": " + length + " bytes at "
                    + p.offset() + " of " + p.blockSize() + " (block of " + size + ", " + next + " written)");
        }
        early.put(p.offset(), p);
        for (Part part; (part = early.remove(next)) != null; ) {
            try {
                ByteBuffer bytes = part.bytes().asByteBuffer();
                while (bytes.hasRemaining()) {
                    channel.write(bytes);
                }
                next += part.bytes().byteSize();
            } finally {
                part.close();
            }
        }
        return next == size && early.isEmpty();
    }

    /** Drops the partial file and any parts held. */
    void discard() {
        early.values().forEach(Part::close);
        early.clear();
        try {
            channel.close();
        } catch (IOException ignored) {
            // the file goes anyway
        }
        file.delete();
    }
}
