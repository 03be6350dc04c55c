package org.ucx4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicBoolean;
import org.ucx4j.internal.engine.Engine;

/**
 * Native memory registered with UCX for one-sided access (RMA). Create with {@link Ucx#registerMemory} (your
 * segment) or {@link Ucx#allocateMemory} (UCX allocates, from shared memory where it can, and frees at close:
 * the fastest choice for peers on the same host, which then read and write it directly). Hand
 * {@link #packRemoteKey()}'s bytes to a peer (any channel: a tag message, an active message, a file); the peer
 * turns them into a {@link RemoteKey} with {@link Endpoint#unpackRemoteKey} and can then {@code put}/{@code get}
 * this memory without this side doing anything. Closing unregisters it; the worker's close unregisters what is left.
 */
public final class MemoryRegion implements AutoCloseable {
    private final Engine engine;
    private final MemorySegment segment;
    private final Arena owned;
    private final long memh;
    private final AtomicBoolean closed = new AtomicBoolean();

    /** Registers the caller's segment. */
    MemoryRegion(Engine engine, MemorySegment segment) {
        this.engine = engine;
        this.segment = segment;
        this.owned = null;
        this.memh = engine.memMap(segment.address(), segment.byteSize());
    }

    /** Has UCX allocate and register {@code size} bytes; the segment is valid until the region or worker closes. */
    MemoryRegion(Engine engine, long size) {
        this.engine = engine;
        this.owned = Arena.ofShared();
        Engine.Allocation a;
        try {
            a = engine.memAllocate(size, owned);
        } catch (RuntimeException | Error e) {
            owned.close();
            throw e;
        }
        this.memh = a.memh();
        this.segment = a.segment();
        segment.fill((byte) 0); // UCX's shared-memory allocators zero it; its heap fallback may not
    }

    /** {@return the registered memory} */
    public MemorySegment segment() {
        return segment;
    }

    /** {@return the registered memory's size in bytes} */
    public long size() {
        return segment.byteSize();
    }

    /**
     * This region's remote key for peers: UCX's packed key inside a ucx4j envelope (base address, size, checksum),
     * so a corrupted or truncated copy is refused by {@link Endpoint#unpackRemoteKey} instead of reaching UCX.
     *
     * @return the packed key, a new array each call
     * @throws IllegalStateException if the region is closed, or its {@code Ucx} was opened without RMA
     *     ({@link UcxOptions#withRma})
     */
    public byte[] packRemoteKey() {
        if (closed.get()) {
            throw new IllegalStateException("memory region is closed");
        }
        engine.checkRma("packRemoteKey");
        return RemoteKey.envelope(segment.address(), segment.byteSize(), engine.rkeyPack(memh));
    }

    /** {@return true once this region is closed} */
    public boolean isClosed() {
        return closed.get();
    }

    /**
     * Unregisters the memory (and frees it if ucx4j allocated it). Idempotent. Memory ucx4j allocated that an
     * operation is using right now (an I/O call reading into {@link #segment()}, say) is not freed under it: the
     * close throws {@link IllegalStateException} and the region stays open, to be closed once that ends. So does a
     * close that UCX refuses, or that a caller-mode owner thread busy elsewhere does not take within 10 s: the
     * {@link UcxException} says why, and the region stays registered until closed again (or its {@code Ucx} is).
     * The close does not wait for ucx4j's own asynchronous operations on the segment (a receive or get into it, a
     * send from it): as with any memory handed to them, keep the region open until their futures complete.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (owned != null) {
            try {
                owned.close(); // the segment goes before UCX frees the memory
            } catch (IllegalStateException e) {
                if (owned.scope().isAlive()) { // held by a native or I/O call, not closed by the worker's close
                    closed.set(false);
                    throw new IllegalStateException("memory region is in use by an operation on its segment ("
                            + e.getMessage() + "); close it when that has ended", e);
                }
            }
        }
        try {
            engine.memUnmap(memh);
        } catch (EndpointClosedException e) {
            // the worker is closing: it unregisters what is left
        } catch (UcxException e) { // still registered (the owner did not answer in time, UCX refused): say so
            closed.set(false);
            throw e;
        }
    }

    @Override
    public String toString() {
        return "MemoryRegion[" + segment.byteSize() + " B at 0x" + Long.toHexString(segment.address())
                + (closed.get() ? ", closed" : "") + "]";
    }
}
