package org.ucx4j.internal.engine;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.MemoryAllocator;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Ucp;

/**
 * Eager active-message payloads kept where UCX put them instead of copied into receiver-allocated memory: a
 * message that came in fragments is assembled by UCX into a buffer of its own, which UCX hands over
 * ({@code UCP_AM_RECV_ATTR_FLAG_DATA}) and which ucx4j can keep, until {@code ucp_am_data_release}. Copying it once
 * more into a pool block cost the receiver a second {@code memcpy} of every such message (UCX 1.20: 64 KiB to
 * 512 KiB messages went that way, at 0.6-0.7x of {@code ucp_am_bw}).
 * <p>
 * The release must run on the worker's owner thread, but a message is closed by any thread: {@link #free} pushes the
 * payload on a lock-free stack linked through the payloads' own first 8 bytes (nothing allocated), and the owner
 * releases them ({@link #drain}) on its next progress turn; one closed by the owner itself, outside UCX's progress
 * call, goes back at once (a call that progresses the worker outside the duty cycle marks itself as in progress:
 * {@link Engine#progressNested}). The owner tracks which payloads are out (an open-addressing set of their addresses,
 * owner-thread only), and payloads are viewed in an arena of their own: when the {@code Ucx} closes with some still
 * open, that arena is closed first, so an application that kept one fails on access instead of reading memory UCX
 * gave back, and then they are released before the worker goes (left to UCX, a message's buffer would never be
 * freed).
 * <p>
 * UCX also hands over, with the same flag, a single-fragment message that lies in a transport's receive descriptor
 * (a shared-memory FIFO element's buffer, an InfiniBand receive buffer). With ucx4j's shared-memory segments (32 KiB
 * + 64 B) such a payload is below {@link #MIN}; one kept with larger segments configured is still handled as UCX allows (its transport replaces the descriptor, and
 * {@code ucp_am_data_release} gives it back), and the arena keeps it from being read after the worker is gone.
 * Off with {@code UcxOptions.withUcxBuffers(false)}, with checked messages, and with a user's allocator.
 */
final class HeldData implements MemoryAllocator {
    private static final Logger LOG = LoggerFactory.getLogger(HeldData.class);
    /**
     * Smallest payload kept: one byte more than ucx4j's shared-memory segment (32 KiB + 64 B, {@code LibC}), so a
     * payload kept never lies in a single FIFO element; larger shared-memory messages come in fragments.
     */
    static final long MIN = 32 * 1024 + 64 + 1;
    private final AtomicLong released = new AtomicLong(); // top of the stack of payloads to release, 0 when empty
    private final AtomicInteger freeing = new AtomicInteger();
    private volatile boolean closed;
    /** Where payloads are viewed: closed before what is still out goes back to UCX. */
    private final Arena views = Arena.ofShared();
    private final Engine engine;
    /** The payloads out (owner thread). */
    private final AddressSet out = new AddressSet();

    HeldData(Engine engine) {
        this.engine = engine;
    }

    /** Whether UCX's {@code data} of {@code length} bytes may be kept: large enough, and aligned as malloc's. */
    static boolean keepable(long data, long length) {
        return length >= MIN && (data & 15) == 0;
    }

    /** The payload over UCX's {@code data}, to be kept ({@link #keep}). */
    MemorySegment view(long data, long length) {
        return NativeAccess.view(data, length, views);
    }

    /**
     * Keeps UCX's {@code data} (owner thread, in UCX's callback, which then returns INPROGRESS): the last step of
     * taking it, so nothing that fails before leaves an address here that UCX frees.
     */
    void keep(long data) {
        out.add(data);
    }

    /** Gives one payload back to UCX and forgets it (owner thread, outside UCX's progress call). */
    private void release(long worker, long p) {
        if (!out.remove(p)) {
            throw new IllegalStateException("ucx4j: UCX's buffer 0x" + Long.toHexString(p) + " was not kept");
        }
        Ucp.amDataRelease(worker, p);
    }

    @Override
    public MemorySegment allocate(long bytes) {
        throw new UnsupportedOperationException("UCX's own buffers are not allocated here");
    }

    /** A message is done with its payload (any thread): released on the owner's next turn; nothing once closed. */
    @Override
    public void free(MemorySegment payload) {
        freeing.getAndIncrement(); // a full fence: either close sees this thread, or this thread sees closed
        try {
            if (closed) {
                return; // the worker is gone: UCX freed or forgot it
            }
            long p = payload.address();
            if (engine.ownsOutsideProgress()) {
                // at once: UCX's next assembly then reuses this buffer, still in cache (a consumer that closes each
                // message before the next on the worker's thread, as the benchmarks' receivers do)
                release(engine.worker, p);
                return;
            }
            long head;
            do {
                head = released.get();
                NativeAccess.setLong(p, head);
            } while (!released.compareAndSet(head, p));
        } finally {
            freeing.getAndDecrement();
        }
    }

    /** Whether payloads wait for their release (a plain volatile read: checked every progress turn). */
    boolean pending() {
        return released.get() != 0;
    }

    /** Releases the payloads closed since the last turn (owner thread, outside UCX's progress call). */
    int drain(long worker) {
        long p = released.getAndSet(0);
        int n = 0;
        while (p != 0) {
            long next = NativeAccess.getLong(p);
            release(worker, p);
            p = next;
            n++;
        }
        return n;
    }

    /**
     * Before the worker is destroyed (owner thread): releases what is closed, then, once no thread can read them any
     * more, the payloads still open; later frees do nothing. Returns how many were still open and went back.
     */
    int close(long worker) {
        closed = true;
        while (freeing.get() != 0) {
            Thread.onSpinWait(); // a free under way lasts a few instructions
        }
        drain(worker);
        int open = out.size();
        try {
            views.close(); // from here a payload kept by the application fails on access
        } catch (IllegalStateException e) { // one is in use by a native call right now: its memory must stay
            LOG.warn("ucx4j: {} active-message payloads still open at close stay allocated: {}", open, e.toString());
            return 0;
        }
        for (long p : out.toArray()) {
            release(worker, p);
        }
        return open;
    }

    @Override
    public String toString() {
        return "UCX's own receive buffers";
    }
}
