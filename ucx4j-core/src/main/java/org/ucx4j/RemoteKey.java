package org.ucx4j;

import java.util.concurrent.CompletableFuture;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.zip.CRC32C;
import org.ucx4j.internal.engine.Engine;

/**
 * A peer's {@link MemoryRegion}, unpacked on one endpoint: the target of {@link Endpoint#put} and
 * {@link Endpoint#get}. Every access is checked against the region's bounds. Close it (after its operations
 * completed) to release UCX's key; closing the endpoint's worker releases what is left.
 */
public final class RemoteKey implements AutoCloseable {
    private static final int MAGIC = 0x4B523455; // "U4RK" little-endian
    private static final byte VERSION = 1;
    private static final int HEADER = 4 + 4 + 8 + 8 + 4;

    private final Endpoint endpoint;
    private final Engine engine;
    private final long remoteAddress;
    private final long size;
    private final long rkey;
    private final AtomicBoolean closed = new AtomicBoolean();
    /**
     * Puts and gets between their check of the key ({@link #acquire}) and their posting or queueing: a close waits
     * for them, so its flush, queued after them, covers them, and none is posted with a destroyed key.
     */
    private final java.util.concurrent.atomic.AtomicInteger users = new java.util.concurrent.atomic.AtomicInteger();

    RemoteKey(Endpoint endpoint, Engine engine, long remoteAddress, long size, long rkey) {
        this.endpoint = endpoint;
        this.engine = engine;
        this.remoteAddress = remoteAddress;
        this.size = size;
        this.rkey = rkey;
    }

    /** {@return the size of the remote region in bytes} */
    public long size() {
        return size;
    }

    /** {@return the remote region's base address (in the peer's address space)} */
    public long remoteAddress() {
        return remoteAddress;
    }

    /** {@return the endpoint this key was unpacked on; it can be used on that endpoint only} */
    public Endpoint endpoint() {
        return endpoint;
    }

    /** {@return true once {@link #close()} was called (UCX's key may be released a little later)} */
    public boolean isClosed() {
        return closed.get();
    }

    /**
     * Flushes the endpoint (so nothing in flight still uses the key), or waits for an endpoint being closed to be
     * released (bounded), then releases the key. Idempotent. Returns after at most ~5 s of flushing: a flush still
     * under way then (a slow peer) leaves the endpoint alone, and the key goes once the flush ends or fails.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        for (int spins = 0; users.get() != 0; spins++) { // an operation that passed its check is being posted
            if (spins < 100) {
                Thread.onSpinWait();
            } else {
                Thread.yield();
            }
        }
        try {
            if (endpoint.isAlive()) {
                CompletableFuture<Long> flushed = endpoint.flushAsync();
                var done = new org.ucx4j.internal.engine.EngineFuture<Void>(engine); // a timeout cancels this one
                flushed.whenComplete((v, e) -> done.complete(null));
                try {
                    engine.awaitFuture(done, java.util.concurrent.TimeUnit.SECONDS.toNanos(5), "remote key flush");
                } catch (UcxTimeoutException slow) {
                    flushed.whenCompleteAsync((v, e) -> destroy(), r -> Thread.ofVirtual().start(r));
                    return;
                }
            } else if (!endpoint.isClosed()) {
                // closing (flushing, or aborting after a failure): puts and gets still in flight may use the key
                // until the endpoint is released, which a close bounds
                var released = new org.ucx4j.internal.engine.EngineFuture<Void>(engine); // a timeout cancels
                endpoint.core().closedFuture().whenComplete((v, e) -> released.complete(null)); // this one only
                engine.awaitFuture(released, java.util.concurrent.TimeUnit.SECONDS.toNanos(15), "remote key release");
            }
        } catch (UcxException e) {
            // endpoint gone, or its release timed out: its operations are failed or aborted
        }
        destroy();
    }

    private void destroy() {
        try {
            engine.rkeyDestroy(rkey);
        } catch (UcxException e) {
            // the worker is closing: it releases what is left
        }
    }

    /**
     * The UCX handle for an access of {@code length} bytes at {@code offset}, bounds and open checked; the key is
     * then in use, and cannot be released, until {@link #release()}, which the caller owes once the operation is
     * posted or queued (or failed).
     */
    long acquire(long offset, long length) {
        if (offset < 0 || length < 0 || offset > size - length) {
            throw new IndexOutOfBoundsException("remote access of " + length + " bytes at offset " + offset
                    + " is outside the remote region of " + size + " bytes");
        }
        users.getAndIncrement();
        if (closed.get()) { // (a close sets it before it looks at users: one of the two sees the other)
            users.getAndDecrement();
            throw new IllegalStateException("remote key is closed");
        }
        return rkey;
    }

    /** Ends the use {@link #acquire} began. */
    void release() {
        users.getAndDecrement();
    }

    // ---- envelope: magic, version, 3 zero bytes, base address, size, packed length, packed key, CRC32C

    /** UCX's packed remote key starts with the 64-bit map of its memory domains (UCX 1.13 to 1.20). */
    private static final int MIN_PACKED = 8;

    static byte[] envelope(long address, long size, byte[] packed) {
        byte[] out = new byte[HEADER + packed.length + 4];
        MemorySegment s = MemorySegment.ofArray(out);
        s.set(JAVA_INT_UNALIGNED, 0, MAGIC);
        s.set(JAVA_BYTE, 4, VERSION);
        s.set(JAVA_LONG_UNALIGNED, 8, address);
        s.set(JAVA_LONG_UNALIGNED, 16, size);
        s.set(JAVA_INT_UNALIGNED, 24, packed.length);
        System.arraycopy(packed, 0, out, HEADER, packed.length);
        s.set(JAVA_INT_UNALIGNED, HEADER + packed.length, crc(out, HEADER + packed.length));
        return out;
    }

    /** Checks an envelope; returns {address, size} and puts UCX's packed key in {@code packedOut[0]}. */
    static long[] open(byte[] bytes, byte[][] packedOut) {
        if (bytes == null) {
            throw new NullPointerException("remote key bytes");
        }
        if (bytes.length < HEADER + 4) {
            throw new IllegalArgumentException("remote key refused: " + bytes.length + " bytes is too short to be a "
                    + "ucx4j remote key (truncated?)");
        }
        MemorySegment s = MemorySegment.ofArray(bytes);
        if (s.get(JAVA_INT_UNALIGNED, 0) != MAGIC) {
            throw new IllegalArgumentException("remote key refused: not a ucx4j remote key (bad magic)");
        }
        if (s.get(JAVA_BYTE, 4) != VERSION) {
            throw new IllegalArgumentException("remote key refused: envelope version " + s.get(JAVA_BYTE, 4)
                    + ", this ucx4j reads version " + VERSION);
        }
        int packedLength = s.get(JAVA_INT_UNALIGNED, 24);
        if (packedLength < 0 || packedLength != bytes.length - HEADER - 4) {
            throw new IllegalArgumentException("remote key refused: length field says " + packedLength
                    + " key bytes, " + (bytes.length - HEADER - 4) + " present (truncated or corrupted)");
        }
        if (packedLength < MIN_PACKED) {
            throw new IllegalArgumentException("remote key refused: " + packedLength + " key bytes, UCX's packed keys"
                    + " have at least " + MIN_PACKED);
        }
        if (s.get(JAVA_INT_UNALIGNED, HEADER + packedLength) != crc(bytes, HEADER + packedLength)) {
            throw new IllegalArgumentException("remote key refused: checksum mismatch (corrupted)");
        }
        long size = s.get(JAVA_LONG_UNALIGNED, 16);
        if (size < 0) {
            throw new IllegalArgumentException("remote key refused: negative region size");
        }
        packedOut[0] = Arrays.copyOfRange(bytes, HEADER, HEADER + packedLength);
        return new long[] {s.get(JAVA_LONG_UNALIGNED, 8), size};
    }

    private static int crc(byte[] b, int length) {
        CRC32C c = new CRC32C();
        c.update(b, 0, length);
        return (int) c.getValue();
    }

    @Override
    public String toString() {
        return "RemoteKey[" + size + " B at 0x" + Long.toHexString(remoteAddress) + " via " + endpoint
                + (closed.get() ? ", closed" : "") + "]";
    }
}
