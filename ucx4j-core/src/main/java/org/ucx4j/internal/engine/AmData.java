package org.ucx4j.internal.engine;

import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import org.ucx4j.MemoryAllocator;

/**
 * One received active message: the user header (copied), and the payload in memory the receiver's allocator gave,
 * or, for an object that arrived whole and is received through a future, in the array that receive hands back
 * ({@link #object}). {@link #free} gives the payload back once (any thread).
 */
public final class AmData implements Runnable {
    final byte kind;
    final byte[] header;
    /** Null for an object received into {@link #object}. */
    final MemorySegment payload;
    private final byte[] object;
    /** What the allocator gave (at least the payload's length): what goes back to it. */
    private final MemorySegment block;
    final MemoryAllocator allocator;
    final EndpointCore ep;
    private volatile boolean freed;
    /** Set once an arena of its own owns the payload ({@code withCheckedMessages}): it is freed only through it. */
    private volatile boolean bound;
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
        this.object = null;
    }

    /**
     * An object received whole into {@code object}, the array its receive hands back, for a receive that waits on a
     * future (an inbox keeps such an object as the bare array).
     */
    AmData(byte[] object, EndpointCore ep) {
        this.kind = AmWire.OBJECT;
        this.header = AmReceiver.NO_BYTES;
        this.payload = null;
        this.block = null;
        this.allocator = null;
        this.ep = ep;
        this.object = object;
    }

    public byte[] header() {
        return header;
    }

    public MemorySegment payload() {
        return payload != null ? payload : MemorySegment.ofArray(object);
    }

    /** The payload's length in bytes. */
    public long length() {
        return payload != null ? payload.byteSize() : object.length;
    }

    /** {@return the object's bytes: the array it was received into, or a copy of the payload} */
    public byte[] objectBytes() {
        return object != null ? object : payload.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
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

    /**
     * An arena of the message's own now owns the payload and frees it when it closes, which it refuses while a native
     * call or an I/O operation uses the payload: the engine then no longer frees it itself (see
     * {@link AmReceiver#handle}).
     */
    public void bindToArena() {
        bound = true;
    }

    /** Gives the payload back unless an arena owns it ({@link #bindToArena}): a handler that threw is done with it. */
    void freeUnlessBound() {
        if (!bound) {
            free();
        }
    }

    /** Gives the payload back to its allocator; idempotent. */
    public void free() {
        if (FREED.compareAndSet(this, false, true) && allocator != null) {
            allocator.free(block);
        }
    }
}
