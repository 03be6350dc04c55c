package org.ucx4j.internal.engine;

import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import org.ucx4j.MemoryAllocator;

/**
 * One received active message: the user header (copied), and the payload in memory the receiver's allocator gave.
 * {@link #free} gives the payload back once (any thread).
 */
public final class AmData implements Runnable {
    final byte kind;
    final byte[] header;
    final MemorySegment payload;
    /** What the allocator gave (at least the payload's length): what goes back to it. */
    private final MemorySegment block;
    final MemoryAllocator allocator;
    final EndpointCore ep;
    private volatile boolean freed;
    private static final VarHandle FREED;

    static {
        try {
            FREED = MethodHandles.lookup().findVarHandle(AmData.class, "freed", boolean.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    AmData(byte kind, byte[] header, MemorySegment block, long length, MemoryAllocator allocator, EndpointCore ep) {
        this.kind = kind;
        this.header = header;
        this.block = block;
        this.payload = block.byteSize() == length ? block : block.asSlice(0, length);
        this.allocator = allocator;
        this.ep = ep;
    }

    public byte[] header() {
        return header;
    }

    public MemorySegment payload() {
        return payload;
    }

    /** The endpoint it came on; null for a message from a raw peer (worker-level). */
    public EndpointCore endpoint() {
        return ep;
    }

    public boolean isFreed() {
        return freed;
    }

    /**
     * Hands this message to its endpoint's handler (owner thread): queued as the engine's deferred work itself, so a
     * message for a handler allocates nothing more.
     */
    @Override
    public void run() {
        AmReceiver.handle(ep, this);
    }

    /** Gives the payload back to its allocator; idempotent. */
    public void free() {
        if (FREED.compareAndSet(this, false, true)) {
            allocator.free(block);
        }
    }
}
