package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.spark.network.buffer.ManagedBuffer;
import org.ucx4j.AmMessage;

import io.netty.buffer.Unpooled;

/**
 * A fetched block in the native memory ucx4j allocated for it (no heap copy). Reference counted like Spark's other
 * buffers: it starts with one reference, and the memory goes back to ucx4j's pool when the last one is released.
 */
final class UcxManagedBuffer extends ManagedBuffer {
    private final AmMessage message;
    private final AtomicInteger refs = new AtomicInteger(1);

    UcxManagedBuffer(AmMessage message) {
        this.message = message;
    }

    @Override
    public long size() {
        return message.payloadLength();
    }

    @Override
    public ByteBuffer nioByteBuffer() {
        if (refs.get() <= 0) {
            throw new IllegalStateException("ucx4j shuffle block buffer already released");
        }
        return message.payload().asByteBuffer().asReadOnlyBuffer();
    }

    /** Reads the native bytes in place; unlike {@link #nioByteBuffer()} this works for blocks over 2 GiB. */
    @Override
    public InputStream createInputStream() {
        if (refs.get() <= 0) {
            throw new IllegalStateException("ucx4j shuffle block buffer already released");
        }
        MemorySegment bytes = message.payload();
        return new InputStream() {
            private long pos;

            @Override
            public int read() throws IOException {
                pin();
                try {
                    return pos < bytes.byteSize() ? bytes.get(ValueLayout.JAVA_BYTE, pos++) & 0xff : -1;
                } finally {
                    release();
                }
            }

            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                java.util.Objects.checkFromIndexSize(off, len, b.length);
                pin();
                try {
                    if (len == 0) {
                        return 0;
                    }
                    long n = Math.min(len, bytes.byteSize() - pos);
                    if (n <= 0) {
                        return -1;
                    }
                    MemorySegment.copy(bytes, ValueLayout.JAVA_BYTE, pos, b, off, (int) n);
                    pos += n;
                    return (int) n;
                } finally {
                    release();
                }
            }

            @Override
            public long skip(long n) {
                long k = Math.max(0, Math.min(n, bytes.byteSize() - pos));
                pos += k;
                return k;
            }

            /**
             * Holds a reference for one read: a release on another thread (a task's cleanup while a consumer thread
             * still reads) then frees the memory after the copy, never under it. Released memory is refused.
             */
            private void pin() throws IOException {
                if (refs.getAndUpdate(n -> n > 0 ? n + 1 : n) <= 0) {
                    throw new IOException("ucx4j shuffle block buffer released while being read");
                }
            }

            @Override
            public int available() {
                return (int) Math.min(Integer.MAX_VALUE, bytes.byteSize() - pos);
            }
        };
    }

    @Override
    public ManagedBuffer retain() {
        if (refs.getAndUpdate(n -> n > 0 ? n + 1 : n) <= 0) {
            throw new IllegalStateException("ucx4j shuffle block buffer already released");
        }
        return this;
    }

    @Override
    public ManagedBuffer release() {
        int left = refs.updateAndGet(n -> n > 0 ? n - 1 : n);
        if (left == 0 && refs.compareAndSet(0, -1)) {
            message.close();
        }
        return this;
    }

    @Override
    public Object convertToNetty() {
        return Unpooled.wrappedBuffer(nioByteBuffer());
    }

    @Override
    public Object convertToNettyForSsl() {
        return convertToNetty();
    }

    @Override
    public String toString() {
        return "UcxManagedBuffer[" + size() + " bytes, refs=" + refs.get() + "]";
    }
}
