package org.ucx4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicBoolean;
import org.ucx4j.internal.engine.Engine;

/**
 * Native memory registered with UCX for one-sided access (RMA). Create with {@link Ucx#registerMemory} (your
 * segment) or {@link Ucx#allocateMemory} (ucx4j allocates, and frees at close). Hand {@link #packRemoteKey()}'s bytes
 * to a peer (any channel: a tag message, an active message, a file); the peer turns them into a {@link RemoteKey}
 * with {@link Endpoint#unpackRemoteKey} and can then {@code put}/{@code get} this memory without this side doing
 * anything. Closing unregisters it; the worker's close unregisters what is left.
 */
public final class MemoryRegion implements AutoCloseable {
    private final Engine engine;
    private final MemorySegment segment;
    private final Arena owned;
    private final long memh;
    private final AtomicBoolean closed = new AtomicBoolean();

    MemoryRegion(Engine engine, MemorySegment segment, Arena owned) {
        this.engine = engine;
        this.segment = segment;
        this.owned = owned;
        try {
            this.memh = engine.memMap(segment.address(), segment.byteSize());
        } catch (RuntimeException e) {
            if (owned != null) {
                owned.close();
            }
            throw e;
        }
    }

    /** The registered memory. */
    public MemorySegment segment() {
        return segment;
    }

    public long size() {
        return segment.byteSize();
    }

    /**
     * This region's remote key for peers: UCX's packed key inside a ucx4j envelope (base address, size, checksum),
     * so a corrupted or truncated copy is refused by {@link Endpoint#unpackRemoteKey} instead of reaching UCX.
     */
    public byte[] packRemoteKey() {
        if (closed.get()) {
            throw new IllegalStateException("memory region is closed");
        }
        return RemoteKey.envelope(segment.address(), segment.byteSize(), engine.rkeyPack(memh));
    }

    public boolean isClosed() {
        return closed.get();
    }

    /** Unregisters the memory (and frees it if ucx4j allocated it). Idempotent. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        try {
            engine.memUnmap(memh);
        } catch (UcxException e) {
            // the worker is closing: it unregisters what is left
        } finally {
            if (owned != null) {
                owned.close();
            }
        }
    }

    @Override
    public String toString() {
        return "MemoryRegion[" + segment.byteSize() + " B at 0x" + Long.toHexString(segment.address())
                + (closed.get() ? ", closed" : "") + "]";
    }
}
