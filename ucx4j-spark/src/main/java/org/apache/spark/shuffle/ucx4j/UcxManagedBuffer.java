package org.apache.spark.shuffle.ucx4j;

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.spark.network.buffer.ManagedBuffer;
import org.ucx4j.AmMessage;

import io.netty.buffer.ByteBufInputStream;
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

    @Override
    public InputStream createInputStream() {
        return new ByteBufInputStream(Unpooled.wrappedBuffer(nioByteBuffer()));
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
