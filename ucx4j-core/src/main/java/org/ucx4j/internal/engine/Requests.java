package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.MemorySegment;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.CanceledException;
import org.ucx4j.UcxException;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * How operations become UCX requests and how they end, on the worker's owner thread: each op kind's nbx call
 * ({@link #post}), the outcome of that call ({@link #posted}), completion by UCX's callback ({@link #completeSlot})
 * or at once ({@link #complete}), the pending lists that a close or a peer failure cancels, and the mapping of UCX
 * statuses to ucx4j's exceptions ({@link #errorFor}). The {@link Engine} decides when the owner runs; this class
 * what it does with an op.
 */
final class Requests {
    private static final Logger LOG = LoggerFactory.getLogger(Engine.class); // the engine's failures, as before

    private final Engine engine;
    private final OpSlots slots;
    private final long worker;
    private final MemorySegment reqParam, scratch, lenOut;
    /** Worker-level receives still pending (canceled at close). */
    final PendingOps workerRecvs = new PendingOps();

    Requests(Engine engine, MemorySegment scratch, MemorySegment lenOut) {
        this.engine = engine;
        this.slots = engine.slots;
        this.worker = engine.worker;
        this.reqParam = engine.reqParam;
        this.scratch = scratch;
        this.lenOut = lenOut;
    }

    /** Owner thread: an op handed over by another thread: cancelled if asked before it started, else posted. */
    void dispatch(Op op) {
        if (op.done) {
            return;
        }
        if (op.slot >= 0 || op.request != 0) {
            if (op.cancelRequested) {
                cancelOnOwner(op);
            }
            return;
        }
        if (op.cancelRequested) {
            canceledBeforeStart(op);
            return;
        }
        post(op);
    }

    /**
     * Ends an op that was canceled (withdrawn, timed out, interrupted) before UCX saw it. The receive of a probed
     * message gives its handle back ({@code Op.onWithdrawn}), so the message, which only that handle can take, is
     * received by the next try instead of being lost.
     */
    static void canceledBeforeStart(Op op) {
        endedBeforeStart(op, new CanceledException(op.what + " canceled before it started ("
                + Status.name(Status.ERR_CANCELED) + ")", Status.ERR_CANCELED));
    }

    /** Ends an op taken back before UCX saw it (by whoever took it out of the queue) with {@code error}. */
    static void endedBeforeStart(Op op, UcxException error) {
        if (op.request != 0) { // UCX holds it: never to be ended here (its memory is UCX's to write)
            TestHooks.endedWhileUcxHeld.incrementAndGet();
        }
        freeOwned(op);
        Runnable giveBack = op.onWithdrawn;
        op.onWithdrawn = null;
        if (giveBack != null) {
            giveBack.run();
        }
        op.finish(0, 0, error);
    }

    /** Fails {@code op} at once if its endpoint cannot take it (closed, failed, not yet open): true then. */
    private boolean refused(Op op) {
        UcxException bad = op.ep.unusable(op.what);
        if (bad == null) {
            return false;
        }
        failNow(op, bad);
        return true;
    }

    /**
     * Whether a tag receive for {@code ep} may take a message that came over a socket (a TCP lane), whose rendezvous
     * reply UCX would send inside the receive call: its own endpoint's, or, for a worker-level receive (null) or a raw
     * endpoint's (tags as given), any endpoint's.
     */
    static boolean mayTakeFromSocket(EndpointCore ep) {
        return ep == null || ep.raw || ep.socketLane;
    }

    /** Takes a slot for {@code op} and sets the request parameters for a send-style callback naming it. */
    private int withSendCallback(Op op) {
        int slot = slots.alloc(op);
        // the buffer is host memory: said, so that a UCX built with CUDA does not detect it per operation
        engine.setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
                Upcalls.SEND.address(), engine.userData(slot), 0);
        return slot;
    }

    /**
     * A send's slot and request parameters without a callback ({@code extraAttrs}: more fields set): UCX's
     * completion is found by whoever drives the worker, oldest send first ({@link Engine#addRingPolled}), as for
     * sends made inside a call, where a callback would be an upcall per send that does not finish in the call.
     */
    private int polledSend(Op op, int extraAttrs, int flags) {
        int slot = slots.alloc(op);
        // the buffer is host memory: said, so that a UCX built with CUDA does not detect it per operation
        engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | extraAttrs, 0, 0, flags);
        return slot;
    }

    /** {@link #posted} for a {@link #polledSend}: one still in flight joins the ring. */
    private void postedPolled(Op op, int slot, long r) {
        if (posted(op, slot, r, op.bytes(), op.kind == Op.TAG_SEND ? op.tag : 0)) {
            op.polled = true;
            engine.addRingPolled(op);
        }
    }

    /**
     * Whether a tag or stream receive about to wait in UCX goes without a callback, tested by whoever drives the
     * worker (no upcall): a blocking one of the thread driving the worker (owner or borrower), which it tests as it
     * waits; an asynchronous one when the ring of polled receives takes it ({@link Engine#mayPollReceive}). Any
     * other completes through its callback, inside UCX's progress call.
     */
    private boolean pollsReceive(Op op) {
        return op.blocking ? op.waiter == engine.owner : engine.mayPollReceive(op);
    }

    /** Owner thread: makes the nbx call of {@code op}'s kind (a task just runs). */
    void post(Op op) {
        Thread me = Thread.currentThread();
        // for tests: who posts; the progress thread's own posts (the common case) write nothing
        if (me != engine.progressThread && TestHooks.lastPoster != me) {
            TestHooks.lastPoster = me;
        }
        if (op.bytes() >= PeerStats.LARGE) {
            op.startedAt = System.nanoTime();
        }
        if (Jfr.AVAILABLE && Jfr.transfers && op.kind != Op.TASK) {
            op.jfr = Jfr.begin();
        }
        switch (op.kind) {
            case Op.TASK -> runTask(op);
            case Op.TAG_SEND -> {
                if (refused(op)) {
                    return;
                }
                int slot = polledSend(op, op.ep.tagSendAttrs(), 0);
                long r = Ucp.tagSendNbx(op.ep.handle, op.address, op.length, op.tag, reqParam.address());
                postedPolled(op, slot, r);
            }
            case Op.TAG_RECV -> {
                // a probed message is the worker's, whatever became of the endpoint: received all the same, so
                // UCX's descriptor of it never leaks
                long msg = op.probed;
                long len = op.tag, stag = op.mask; // what probedRecv recorded
                if (op.ep != null && msg == 0) {
                    UcxException bad = op.ep.unusable(op.what);
                    if (bad != null) {
                        // what a peer sent before its graceful close waits in the worker's queue: still received
                        msg = op.ep.keepsArrived() ? Ucp.tagProbeNb(worker, op.tag, op.mask, true,
                                scratch.address()) : 0;
                        if (msg == 0) {
                            failNow(op, bad);
                            return;
                        }
                        len = scratch.get(JAVA_LONG, TRI_LENGTH);
                        stag = scratch.get(JAVA_LONG, TRI_SENDER_TAG);
                    }
                }
                int slot = slots.alloc(op);
                if (engine.recvInfoAtOnce && msg == 0) {
                    // UCX >= 1.16: one call takes a message that waits (length and tag in recv_info, no upcall)
                    // or queues the receive, polled or with a callback (pollsReceive)
                    op.polled = pollsReceive(op);
                    engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_RECV_INFO
                            | (op.polled ? 0 : UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA),
                            op.polled ? 0 : Upcalls.TAG_RECV.address(), op.polled ? 0 : engine.userData(slot), 0);
                    reqParam.set(JAVA_LONG, RP_RECV_INFO, scratch.address());
                    long r = Ucp.tagRecvNbx(worker, op.address, op.length, op.tag, op.mask, reqParam.address(),
                            !op.polled || mayTakeFromSocket(op.ep));
                    boolean now = r == 0;
                    if (posted(op, slot, r, now ? scratch.get(JAVA_LONG, TRI_LENGTH) : 0,
                            now ? scratch.get(JAVA_LONG, TRI_SENDER_TAG) : 0)) {
                        linkPending(op);
                    }
                    return;
                }
                // A message already waiting (or one a user's probe took) is received by its handle: the probe
                // reports its length and tag, so immediate completion is fine and needs no upcall.
                if (msg == 0) {
                    msg = Ucp.tagProbeNb(worker, op.tag, op.mask, true, scratch.address());
                    len = scratch.get(JAVA_LONG, TRI_LENGTH);
                    stag = scratch.get(JAVA_LONG, TRI_SENDER_TAG);
                }
                if (msg != 0) {
                    engine.setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA
                            | UCP_OP_ATTR_FIELD_MEMORY_TYPE, Upcalls.TAG_RECV.address(), engine.userData(slot), 0);
                    long r;
                    // its callback may run inside the call: a rendezvous message whose endpoint closed here ends
                    // canceled at once, and what its completion runs must be refused a blocking call there
                    boolean was = engine.beginCallbacks();
                    try {
                        r = Ucp.tagMsgRecvNbx(worker, op.address, op.length, msg, reqParam.address());
                    } finally {
                        engine.endCallbacks(was);
                    }
                    if (posted(op, slot, r, len, stag)) {
                        linkPending(op);
                    }
                    return;
                }
                // Otherwise the receive waits in UCX. UCX before 1.16 reports no length/tag for an immediately
                // completed tag receive (recv_info is filled from 1.16), so immediate completion is refused: a
                // request always comes back, polled or with a callback (pollsReceive).
                op.polled = pollsReceive(op);
                if (op.polled) {
                    engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL, 0, 0, 0);
                } else {
                    engine.setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA
                            | UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL, Upcalls.TAG_RECV.address(),
                            engine.userData(slot), 0);
                }
                // the probe just missed, and nothing progressed since: UCX only queues the request
                long r = Ucp.tagRecvQueued(worker, op.address, op.length, op.tag, op.mask, reqParam.address());
                if (posted(op, slot, r, 0, 0)) {
                    linkPending(op);
                }
            }
            case Op.STREAM_SEND -> {
                if (refused(op)) {
                    return;
                }
                int slot = polledSend(op, 0, 0);
                long r = Ucp.streamSendNbx(op.ep.handle, op.address, op.length, reqParam.address());
                postedPolled(op, slot, r);
            }
            case Op.STREAM_RECV -> {
                UcxException bad = op.ep.unusable(op.what);
                if (bad != null) {
                    // bytes the peer streamed before its graceful close are read as a socket's after a FIN
                    HeldStream held = op.ep.keepsArrived() ? op.ep.heldStream : null;
                    long n = held == null ? -1
                            : held.take(op.address, op.length, (op.mask & UCP_STREAM_RECV_FLAG_WAITALL) != 0);
                    if (n < 0) {
                        failNow(op, bad);
                    } else {
                        if (held.available() == 0) {
                            op.ep.heldStream = null; // its native memory goes with the next collection
                        }
                        complete(op, Status.OK, n, 0);
                    }
                    return;
                }
                long source = op.ep.loopback ? (op.ep.twin == null ? 0 : op.ep.twin.handle) : op.ep.handle;
                if (source == 0) { // the loopback's other end is not open yet
                    if (op.ep.waitingForTwin == null) {
                        op.ep.waitingForTwin = new java.util.ArrayDeque<>();
                    }
                    op.ep.waitingForTwin.add(op);
                    return;
                }
                int slot = slots.alloc(op);
                // polled (no upcall) as a tag receive is: the driving thread's own blocking receive, or one on the
                // ring of asynchronous receives
                op.polled = pollsReceive(op);
                engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | (op.polled ? UCP_OP_ATTR_FIELD_FLAGS
                        : UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS),
                        Upcalls.STREAM_RECV.address(), engine.userData(slot), (int) op.mask);
                lenOut.set(JAVA_LONG, 0, -1);
                long r = Ucp.streamRecvNbx(source, op.address, op.length, lenOut.address(),
                        reqParam.address());
                long took = lenOut.get(JAVA_LONG, 0);
                if (took >= 0 && r != 0 && (Status.isError(r) || Long.compareUnsigned(r, 4096) < 0)) {
                    // completed at once, its bytes in the buffer, but UCX (1.16 to 1.20 and master, built without
                    // assertions) returned the status its recycled request held, never set for a stream receive:
                    // what a tag receive or a cancel left there (StressTest: UCS_ERR_MESSAGE_TRUNCATED; traced in
                    // docs/ucx-faults). UCX writes the length only once the bytes are in
                    r = 0;
                }
                if (posted(op, slot, r, r == 0 ? took : 0, 0)) {
                    linkPending(op);
                }
            }
            case Op.AM_SEND -> {
                if (refused(op)) {
                    return;
                }
                // contiguous bytes are UCX's default datatype; only a frame list needs the iov one
                int flags = op.datatype == UCP_DATATYPE_IOV ? 0 : op.ep.amSendFlags(op.headerLength, op.length);
                int slot = polledSend(op, (op.datatype == UCP_DATATYPE_IOV ? UCP_OP_ATTR_FIELD_DATATYPE : 0)
                        | (flags != 0 ? UCP_OP_ATTR_FIELD_FLAGS : 0), flags);
                reqParam.set(JAVA_LONG, RP_DATATYPE, op.datatype);
                long r = Ucp.amSendNbx(op.ep.handle, op.amId, op.header, op.headerLength, op.address, op.length,
                        reqParam.address());
                postedPolled(op, slot, r);
            }
            case Op.PUT, Op.GET -> {
                if (refused(op)) {
                    return;
                }
                int slot = withSendCallback(op);
                long r = op.kind == Op.PUT
                        ? Ucp.putNbx(op.ep.handle, op.address, op.length, op.tag, op.rkey, reqParam.address())
                        : Ucp.getNbx(op.ep.handle, op.address, op.length, op.tag, op.rkey, reqParam.address());
                if (posted(op, slot, r, op.length, 0)) {
                    op.ep.pending.add(op);
                }
            }
            case Op.RMA_FLUSH -> {
                if (op.ep != null && refused(op)) {
                    return;
                }
                int slot = withSendCallback(op);
                long r = op.ep != null ? Ucp.epFlushNbx(op.ep.handle, reqParam.address())
                        : Ucp.workerFlushNbx(worker, reqParam.address());
                if (posted(op, slot, r, 0, 0)) {
                    countFlush(op);
                }
            }
            case Op.FLUSH -> {
                if (op.ep.state != EndpointCore.CLOSING || op.ep.handle == 0) {
                    // nothing to flush; an endpoint aborted or failed before its close fails the flush, so the
                    // close says no goodbye (its peer must not take a cut connection for a graceful close)
                    op.finish(0, 0, op.ep.state == EndpointCore.CLOSING ? null : op.ep.unusable("close"));
                    return;
                }
                int slot = withSendCallback(op);
                long r = Ucp.epFlushNbx(op.ep.handle, reqParam.address());
                if (posted(op, slot, r, 0, 0)) {
                    countFlush(op);
                }
            }
            case Op.CLOSE -> {
                // UCX allows a forced close only on endpoints that handle peer errors: without, it refuses one
                // (UCS_ERR_INVALID_PARAM, 1.13 to 1.20) and the endpoint would stay open in UCX until the worker
                // goes, so those close by flushing, bounded by Connections.abortOnOwner
                int slot = slots.alloc(op);
                boolean force = engine.peerErrorHandling;
                engine.setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
                        Upcalls.SEND.address(), engine.userData(slot), force ? UCP_EP_CLOSE_FLAG_FORCE : 0);
                long r;
                boolean was = engine.beginCallbacks(); // a forced close ends what is pending inside the call
                try {
                    TestHooks.endpointClosesPosted.incrementAndGet();
                    op.ep.closePosted = true;
                    r = Ucp.epCloseNbx(op.ep.handle, reqParam.address());
                    // polled receives among them (stream receives: no cancel reaches those) end without an event:
                    // finished now, still inside the mark, before the close itself completes
                    engine.testPolledNow();
                } finally {
                    engine.endCallbacks(was);
                }
                posted(op, slot, r, 0, 0);
            }
            default -> throw new IllegalStateException("unknown op kind " + op.kind);
        }
    }

    void runTask(Op op) {
        try {
            op.task.run();
            op.finish(0, 0, null);
        } catch (UcxException e) {
            op.finish(0, 0, e);
        } catch (Throwable t) {
            LOG.error("ucx4j task failed on {}", engine.name, t);
            op.finish(0, 0, new UcxException("internal error: " + t, 0, t));
        }
    }

    void failNow(Op op, UcxException e) {
        Object waiting = op.kind == Op.TASK ? op.keepAlive : null; // a future the task was to complete (amTake)
        freeOwned(op);
        op.finish(0, 0, e);
        if (waiting instanceof java.util.concurrent.CompletableFuture<?> f) {
            f.completeExceptionally(e); // the task will not run: its future fails with it
        }
    }

    void linkPending(Op op) {
        if (op.polled) {
            engine.addPolled(op);
        }
        (op.ep != null ? op.ep.pending : workerRecvs).add(op);
    }

    private void unlinkPending(Op op) {
        if (op.polled) {
            engine.removePolled(op);
        }
        (op.ep != null ? op.ep.pending : workerRecvs).remove(op);
    }

    /**
     * Records the outcome of an nbx call; true while the op is still in flight. Once an op has finished, its
     * waiter may already be reusing it, so the owner must not touch it again: "still in its slot" is the test.
     */
    boolean posted(Op op, int slot, long r, long immediateLength, long immediateTag) {
        if (r == 0) {
            slots.release(slot);
            complete(op, Status.OK, immediateLength, immediateTag);
            return false;
        }
        if (Status.isError(r)) {
            slots.release(slot);
            complete(op, (int) r, 0, 0);
            return false;
        }
        if (slots.get(slot) != op) {
            return false; // completed (and the request freed) by its callback inside the nbx call
        }
        op.request = r;
        return true;
    }

    /**
     * A flush UCX holds, of an endpoint or of the worker (every endpoint): closes wait until it ends
     * ({@link Connections#abortOnOwner}).
     */
    private void countFlush(Op op) {
        op.countedFlush = true;
        if (op.ep != null) {
            op.ep.flushesInUcx++;
        } else {
            engine.connections.workerFlushesInUcx++;
        }
    }

    /** Ends a flush op; a close that waits for it goes once its waiter has heard. */
    private void finishFlush(Op op, UcxException error) {
        boolean counted = op.countedFlush;
        EndpointCore ep = op.ep; // read first: a finished op may be reused at once
        op.countedFlush = false;
        op.finish(0, 0, error);
        if (counted) {
            if (ep != null) {
                engine.connections.flushEnded(ep);
            } else {
                engine.connections.workerFlushEnded();
            }
        }
    }

    /** Ends an op on the owner thread: frees UCX's request and staging memory, maps the status, wakes the caller. */
    private void complete(Op op, int status, long length, long tag) {
        if (op.request != 0) {
            Ucp.requestFree(op.request);
            op.request = 0;
        }
        unlinkPending(op);
        switch (op.kind) {
            case Op.FLUSH -> finishFlush(op, status == Status.OK ? null : UcxException.of(status, op.what));
            case Op.CLOSE -> op.finish(0, 0, status == Status.OK ? null : UcxException.of(status, op.what));
            case Op.RMA_FLUSH -> finishFlush(op, status == Status.OK ? null : errorFor(op, status));
            case Op.AM_DATA -> engine.amReceiver.pulled(op, status);
            default -> {
                if (status == Status.OK) {
                    if (op.copyBack != null) {
                        MemorySegment.copy(NativeAccess.view(op.owned, length), JAVA_BYTE, 0, op.copyBack, 0,
                                (int) length);
                    }
                    freeOwned(op);
                    EndpointCore ep = op.ep;
                    boolean message = op.kind == Op.TAG_RECV || op.kind == Op.STREAM_RECV;
                    boolean receive = message || op.kind == Op.GET;
                    if (ep != null) { // counted before the caller wakes, so it sees its own transfer
                        if (receive) {
                            ep.stats.received(length, op.startedAt);
                        } else {
                            ep.stats.sent(length, op.startedAt);
                        }
                    }
                    op.finish(length, tag, null);
                    if (ep != null && message) { // not op.kind: a finished blocking op may be reused at once
                        receiveCompleted(ep);
                    }
                } else {
                    if (op.kind == Op.STREAM_RECV && length > 0 && op.ep != null && op.ep.keepsArrived()) {
                        // an exact-length receive the peer's goodbye cut short: its bytes stay for later receives
                        op.ep.heldStream = HeldStream.pushFront(op.ep.heldStream,
                                NativeAccess.view(op.address, length));
                    }
                    freeOwned(op);
                    op.finish(0, 0, errorFor(op, status));
                }
            }
        }
    }

    /**
     * Frees, unread, the messages the worker holds for {@code tag}/{@code mask} (owner thread, outside UCX's
     * callbacks): a receive of length 0 takes each one, an eager message's data is dropped and a rendezvous
     * message from an endpoint already closed here ends canceled, with nothing sent. Returns how many went.
     */
    int dropWaiting(long tag, long mask) {
        int n = 0;
        long msg;
        while ((msg = Ucp.tagProbeNb(worker, tag, mask, true, scratch.address())) != 0) {
            engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE, 0, 0, 0);
            long r = Ucp.tagMsgRecvNbx(worker, scratch.address(), 0, msg, reqParam.address());
            if (r != 0 && !Status.isError(r)) {
                Ucp.requestFree(r); // UCX releases it once it ends
            }
            n++;
        }
        return n;
    }

    /**
     * Copies the stream bytes for {@code c} that UCX queued out of UCX, before their endpoint closes (owner thread):
     * on its own UCX endpoint, or a loopback end's on its twin's.
     */
    void holdStream(EndpointCore c) {
        long source = c.loopback ? (c.twin == null ? 0 : c.twin.handle) : c.handle;
        if (source != 0 && c.heldStream == null) {
            c.heldStream = HeldStream.drain(source, lenOut);
        }
    }

    /** Owner thread: counts a received message, and closes as armed by closeAfterReceives. */
    void receiveCompleted(EndpointCore ep) {
        ep.receivesCompleted++;
        checkCloseAfter(ep);
    }

    /** Owner thread: starts the graceful close armed by closeAfterReceives once enough receives completed. */
    void checkCloseAfter(EndpointCore ep) {
        long at = ep.closeAfter;
        if (at >= 0 && ep.receivesCompleted >= at) {
            ep.closeAfter = -1;
            Runnable action = ep.closeAfterAction;
            if (action != null) {
                engine.executor.execute(action);
            }
        }
    }

    UcxException errorFor(Op op, int status) {
        if (status == Status.ERR_MESSAGE_TRUNCATED && (op.kind == Op.TAG_RECV || op.kind == Op.STREAM_RECV)) {
            // also on an endpoint whose peer closed: the message was there, the buffer too small
            return UcxException.of(status, op.what + ": the message is longer than the " + op.length
                    + "-byte buffer");
        }
        EndpointCore ep = op.ep;
        if (ep != null) {
            UcxException f = ep.failure;
            if (f != null) {
                return ep.unusable(op.what);
            }
            if (ep.closedLocally && (status == Status.ERR_CANCELED || status == Status.ERR_NOT_CONNECTED)) {
                return ep.unusable(op.what);
            }
        }
        if (status == Status.ERR_CANCELED && engine.stopRequested) {
            return new CanceledException(op.what + " canceled: the UCX worker was closed ("
                    + Status.name(status) + ")", status);
        }
        if (status == Status.ERR_SHMEM_SEGMENT && (op.kind == Op.GET || op.kind == Op.PUT)) {
            // UCX (1.20) maps a same-host peer's region when first used: it fails once the peer exited
            return new org.ucx4j.ConnectionResetException(op.what + ": " + Status.describe(status)
                    + ": the peer's shared memory could not be mapped (has the peer exited?)", status);
        }
        return UcxException.of(status, op.what);
    }

    static void freeOwned(Op op) {
        if (op.owned != 0) {
            Ucp.free(op.owned);
            op.owned = 0;
        }
    }

    void cancelOnOwner(Op op) {
        if (op.done || op.request == 0) {
            if (!op.done && op.slot < 0) {
                dispatch(op); // not posted yet: dispatch sees cancelRequested
            }
            return;
        }
        if (op.kind == Op.TAG_RECV) {
            boolean was = engine.beginCallbacks(); // its completion may run inside the cancel, with dependents
            try {
                Ucp.requestCancel(worker, op.request);
                if (op.polled) {
                    engine.pollRecv(op); // UCX completed it inside the cancel (no callback, no event): finished now
                }
            } finally {
                engine.endCallbacks(was);
            }
        } else if (op.ep != null && op.kind != Op.RMA_FLUSH) {
            // UCX cannot cancel a send (or a stream receive, a put, a get) in flight: abort the endpoint, which
            // purges it; a flush holds no caller memory and is left to complete (Engine.leftToUcx)
            engine.connections.abortOnOwner(op.ep, null);
        }
    }

    /** An operation's callback (an upcall): completes the op in {@code slot} unless it is no longer there. */
    /**
     * Ends the sends still pending on an endpoint UCX has destroyed in a forced close (owner thread, outside UCX's
     * callbacks); how many. UCX aborted them but may keep their requests (see Connections#released): each fails as
     * canceled with the endpoint's close (errorFor names its failure), and its request goes back to UCX, which
     * returns it to its pool when it ends, with no callback. Receives, pulls and flushes are left to their own ends.
     */
    int endSendsUcxKept(EndpointCore c) {
        java.util.List<Op> ops = new java.util.ArrayList<>(java.util.Arrays.asList(c.pending.snapshot()));
        engine.polledSends(c, ops); // polled sends are on the send ring only
        int n = 0;
        for (Op op : ops) {
            if (!op.done && op.request != 0 && op.slot >= 0 && slots.get(op.slot) == op
                    && (op.kind == Op.TAG_SEND || op.kind == Op.STREAM_SEND || op.kind == Op.AM_SEND)) {
                completeSlot(op.slot, op.request, Status.ERR_CANCELED, 0, 0);
                n++;
            }
        }
        return n;
    }

    void completeSlot(int slot, long request, int status, long length, long tag) {
        Op op = slots.get(slot);
        if (op != null && op.requestReleased && op.request == request) { // inside the worker's destroy: UCX's now
            slots.release(slot);
            op.request = 0;
            return;
        }
        if (op == null || (op.request != request && op.request != 0)) {
            Ucp.requestFree(request);
            return;
        }
        op.request = request;
        slots.release(slot);
        complete(op, status, length < 0 ? op.bytes() : length, tag);
    }
}
