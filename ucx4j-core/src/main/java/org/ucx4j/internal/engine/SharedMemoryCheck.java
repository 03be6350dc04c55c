package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.UcxException;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * The shared-memory self-check of one worker. UCX's shared-memory transports (uct_mm: posix, sysv, xpmem) give each
 * worker one receive FIFO that every same-host peer writes into: a sender claims a slot (moves the FIFO head), copies
 * the message in, then marks the slot written. A peer killed between claim and mark leaves a slot that is never
 * written, and the receiver reads its FIFO strictly in order: from then on no shared-memory message from any peer is
 * ever received (the senders' eager sends complete, their receives here never do). UCX has no recovery for it (seen
 * with UCX 1.13.1 in roughly every second kill of a peer flooding 30 KB messages).
 * <p>
 * The check: a second, private worker of the same context (the canary) sends a small tagged message (connection id
 * 0, which no endpoint has) to this worker over the same transports a ucx4j peer uses; if it is not received within
 * {@link #OVERDUE_NANOS} while the worker progresses, the FIFO is wedged, and every endpoint with a shared-memory
 * lane fails instead of waiting forever. Owner thread only, except {@link #failure} and {@link #onFailure}.
 */
final class SharedMemoryCheck {
    private static final Logger LOG = LoggerFactory.getLogger(SharedMemoryCheck.class);
    private static final long TAG = EndpointCore.PRIVATE_BIT;
    private static final long OVERDUE_NANOS = TimeUnit.SECONDS.toNanos(2);
    private static final int MIN_TURNS = 50;
    private static final Pattern SHM_LANE = Pattern.compile("\\d+:(posix|sysv|xpmem)/");

    private final Engine engine;
    private final long context;
    /** A request parameter of its own; the canary's message out (0..7) and in (8..15), the probe's tag info (16..31). */
    private final MemorySegment param, buffer;
    private long canaryWorker, canaryEp, canarySend;
    /** When the canary in flight was sent (nanoTime), 0 when none is. */
    private long sentAt;
    private int turns;
    private final ArrayDeque<SafeFuture<Boolean>> waiters = new ArrayDeque<>();
    private volatile UcxException wedged;
    /** Completed (on the owner thread) with {@link #wedged} when the check finds the FIFO wedged. */
    private final CompletableFuture<UcxException> failed = new CompletableFuture<>();

    SharedMemoryCheck(Engine engine, long context, Arena arena) {
        this.engine = engine;
        this.context = context;
        this.param = arena.allocate(UCP_REQUEST_PARAM);
        this.buffer = arena.allocate(32, 8);
    }

    /** A canary is out: {@link #poll} after each progress call. */
    boolean inFlight() {
        return sentAt != 0;
    }

    /** Why same-host peers cannot reach this worker any more (its shared-memory FIFO is wedged), or null. */
    UcxException failure() {
        return wedged;
    }

    /** Runs {@code action} once, on the callback executor, when (or if already) the FIFO is found wedged. */
    void onFailure(Consumer<? super UcxException> action) {
        failed.thenAcceptAsync(action, engine.executor).exceptionally(t -> {
            LOG.warn("ucx4j: worker {}: shared-memory failure callback threw", engine.name, t);
            return null;
        });
    }

    /**
     * Completes {@code f} with true if a message sent through this worker's own shared-memory FIFO arrives, false
     * if it does not within 2 s of progress (the FIFO is wedged: endpoints with a shared-memory lane have failed).
     */
    void check(SafeFuture<Boolean> f) {
        if (wedged != null) {
            f.complete(false);
            return;
        }
        waiters.add(f);
        start();
    }

    /** A peer that may have written into this worker's FIFO died: check the FIFO. */
    void suspect(EndpointCore c) {
        if (wedged == null && !engine.stopRequested && (c.raw || Handshake.isLocal(c.peerHost))) {
            LOG.debug("ucx4j: same-host peer {} died; checking this worker's shared-memory FIFO", c.peer);
            start();
        }
    }

    private void start() {
        if (sentAt != 0) {
            return; // one in flight answers every waiter
        }
        try {
            if (canaryWorker == 0) {
                createCanary();
            }
            param.set(JAVA_INT, RP_OP_ATTR_MASK, 0);
            long r = Ucp.tagSendNbx(canaryEp, buffer.address(), 8, TAG, param.address());
            if (Status.isError(r)) {
                throw UcxException.of((int) r, "shared-memory check: send");
            }
            canarySend = r;
            sentAt = System.nanoTime();
            turns = 0;
        } catch (RuntimeException e) {
            LOG.warn("ucx4j: could not check the shared-memory FIFO of {}: {}", engine.name, e.toString());
            SafeFuture<Boolean> w;
            while ((w = waiters.poll()) != null) {
                w.completeExceptionally(e);
            }
        }
    }

    private void createCanary() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            canaryWorker = Engine.createWorker(context, "shared-memory check: ucp_worker_create");
            MemorySegment addr = a.allocateFrom(JAVA_BYTE, engine.workerAddress());
            MemorySegment ep = a.allocate(UCP_EP_PARAMS);
            ep.set(JAVA_LONG, EP_FIELD_MASK, UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE);
            ep.set(JAVA_LONG, EP_ADDRESS, addr.address());
            // the error mode of ucx4j's own endpoints, so UCX picks the transports their peers use
            ep.set(JAVA_INT, EP_ERR_MODE, engine.peerErrorHandling ? UCP_ERR_HANDLING_MODE_PEER
                    : UCP_ERR_HANDLING_MODE_NONE);
            int st = Ucp.epCreate(canaryWorker, ep.address(), out.address());
            if (st != Status.OK) { // no half-made canary: a later check or the close would use a NULL endpoint
                Ucp.workerDestroy(canaryWorker);
                canaryWorker = 0;
                Engine.check(st, "shared-memory check: ucp_ep_create");
            }
            canaryEp = out.get(JAVA_LONG, 0);
        }
    }

    /** After each progress call while the canary is out: arrived, or overdue. */
    void poll() {
        Ucp.workerProgress(canaryWorker);
        if (canarySend != 0 && Ucp.requestCheckStatus(canarySend) != Status.INPROGRESS) {
            Ucp.requestFree(canarySend);
            canarySend = 0;
        }
        long msg = Ucp.tagProbeNb(engine.worker, TAG, -1L, true, buffer.address() + 16);
        boolean arrived = msg != 0;
        if (arrived) {
            param.set(JAVA_INT, RP_OP_ATTR_MASK, 0);
            long r = Ucp.tagMsgRecvNbx(engine.worker, buffer.address() + 8, 8, msg, param.address());
            if (r != 0 && !Status.isError(r)) {
                Ucp.requestFree(r); // an 8-byte eager message is received at once; never left behind anyway
            }
        } else if (++turns < MIN_TURNS || System.nanoTime() - sentAt < OVERDUE_NANOS) {
            return;
        }
        sentAt = 0;
        if (!arrived) {
            fifoWedged();
        }
        SafeFuture<Boolean> w;
        while ((w = waiters.poll()) != null) {
            w.complete(arrived);
        }
    }

    /** The FIFO is wedged: fail every endpoint with a shared-memory lane, refuse same-host peers from now on. */
    private void fifoWedged() {
        UcxException e = UcxException.of(Status.ERR_IO_ERROR, "this worker's shared-memory receive FIFO is wedged: "
                + "a same-host peer was killed while writing a message into it, and UCX reads the FIFO in order, so "
                + "no shared-memory message from any peer can be received any more (a UCX limitation); reopen the "
                + "Ucx");
        wedged = e;
        LOG.error("ucx4j: worker {}: {}", engine.name, e.getMessage());
        failed.complete(e); // callbacks are handed to the executor: no user code on this thread
        for (EndpointCore c : engine.connections.eps) {
            if (c != null && c.state == EndpointCore.OPEN && c.handle != 0
                    && SHM_LANE.matcher(Ucp.capture(f -> Ucp.epPrintInfo(c.handle, f))).find()) {
                c.failure = e;
                engine.connections.abortOnOwner(c, e);
            }
        }
    }

    /** Closes the canary's endpoint and worker (the worker is shutting down). */
    void destroy() {
        if (canaryWorker == 0) {
            return;
        }
        if (canarySend != 0) {
            Ucp.requestCancel(canaryWorker, canarySend);
            Ucp.requestFree(canarySend);
            canarySend = 0;
        }
        param.set(JAVA_INT, RP_OP_ATTR_MASK, UCP_OP_ATTR_FIELD_FLAGS);
        // forced only where UCX allows it (peer error handling); else a flushing close, bounded below
        param.set(JAVA_INT, RP_FLAGS, engine.peerErrorHandling ? UCP_EP_CLOSE_FLAG_FORCE : 0);
        long r = canaryEp == 0 ? 0 : Ucp.epCloseNbx(canaryEp, param.address());
        if (r != 0 && !Status.isError(r)) {
            for (int i = 0; i < 10_000 && Ucp.requestCheckStatus(r) == Status.INPROGRESS; i++) {
                Ucp.workerProgress(canaryWorker);
            }
            Ucp.requestFree(r);
        }
        Ucp.workerDestroy(canaryWorker);
        canaryWorker = 0;
        canaryEp = 0;
        sentAt = 0;
        UcxException closed = engine.closedError("shared-memory check");
        SafeFuture<Boolean> w;
        while ((w = waiters.poll()) != null) {
            w.completeExceptionally(closed);
        }
    }
}
