package org.ucx4j.internal.engine;

import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.UcxException;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * The receiving side of active messages for one worker: UCX's callback lands here ({@link #arrived}), eager payloads
 * are copied into receiver-allocated memory at once, rendezvous ones are pulled within a budget of bytes in flight,
 * and finished messages go to their endpoint's inbox or handler in arrival order. Owner thread only.
 */
final class AmReceiver {
    private static final Logger LOG = LoggerFactory.getLogger(AmReceiver.class);
    static final byte[] NO_BYTES = new byte[0];

    private final Engine engine;
    private final org.ucx4j.MemoryAllocator allocator;
    private final int maxFrames;
    /** The longest frames header {@link #maxFrames} allows (a longer one is refused unread). */
    private final long maxFramesHeader;
    private final long maxMessageBytes;
    private final long pullBudget;
    /** Rendezvous active messages announced but not yet pulled, oldest first. */
    private final ArrayDeque<Op> heldPulls = new ArrayDeque<>();
    private final Runnable startPulls = this::startPulls;
    /** Finished pulls' operations, reused for the next ones (owner thread; see {@link #pullOp}). */
    private final Op[] spares = new Op[16];
    private int spareCount;
    private int pullsInFlight;
    private long bytesInFlight;
    private boolean pullsScheduled;
    /**
     * An endpoint may have held messages and no pull in flight (set when one arrives for such an endpoint or an
     * endpoint's last pull ends): only then does {@link #startPulls} look past the budget, so one busy peer with a
     * long queue costs no scan per pull.
     */
    private boolean idleEndpointMayWait;
    /** The pool's blocks kept for the worker's thread; null with a user's allocator. */
    final OwnerBlocks blocks;
    /** Where eager payloads that UCX assembled are kept (see {@link HeldData}); null with a user's allocator. */
    final HeldData held;
    /** Active messages from raw peers (AM id {@link AmWire#ID_RAW}). */
    final Inbox rawInbox = new Inbox(null);

    AmReceiver(Engine engine, Engine.Config cfg) {
        this.engine = engine;
        org.ucx4j.PooledAllocator pool = cfg.allocator() instanceof org.ucx4j.PooledAllocator p ? p : null;
        // with a pool that caches, small blocks freed on the worker's thread stay with it (no atomics; OwnerBlocks)
        this.blocks = pool != null && pool.maxCachedBytes() > 0 ? new OwnerBlocks(pool, engine::keepsBlocks) : null;
        this.allocator = blocks != null ? blocks : cfg.allocator();
        // with ucx4j's own pool, eager payloads UCX assembled stay in UCX's buffer; a user's allocator gets them all
        this.held = cfg.ucxBuffers() && pool != null ? new HeldData(engine) : null;
        this.maxFrames = cfg.maxFrames();
        this.maxFramesHeader = 4 + (long) maxFrames * AmWire.FRAME_ENTRY;
        this.maxMessageBytes = cfg.maxMessageBytes();
        this.pullBudget = cfg.pullBudget();
    }

    /** The inbox of {@code kind} on {@code ep}; raw peers' (worker-level) when {@code ep} is null. */
    Inbox inbox(EndpointCore ep, byte kind) {
        return ep == null ? rawInbox : ep.inboxes[kind];
    }

    /** Releases the announced messages never pulled (the worker is going). */
    void releaseHeld() {
        Op held;
        while ((held = heldPulls.poll()) != null) {
            Ucp.amDataRelease(engine.worker, held.address);
        }
    }

    /**
     * An active message arrived: find its inbox, check it against the caps before allocating anything, take the
     * payload into receiver-allocated memory (copied when eager, pulled by {@code ucp_am_recv_data_nbx} when
     * rendezvous) and deliver it. A message that cannot be taken becomes an error entry, so its receive fails.
     */
    int arrived(int amId, long header, long headerLength, long data, long length, long attr) {
        boolean rndv = (attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
        EndpointCore ep = null;
        byte kind = AmWire.PLAIN;
        long user = header, userLength = headerLength; // the sender's header: read in place, no segment
        if (amId == AmWire.ID_UCX4J) {
            if (headerLength < AmWire.PREFIX) {
                LOG.warn("ucx4j: dropped an active message with a {}-byte header (not from ucx4j)", headerLength);
                return rndv ? Status.ERR_INVALID_PARAM : Status.OK;
            }
            ep = engine.connections.byId(NativeAccess.getIntUnaligned(header) & 0x7fffffff);
            kind = NativeAccess.getByte(header + 4);
            user += AmWire.PREFIX;
            userLength -= AmWire.PREFIX;
            if (ep == null || ep.raw || kind < 0 || kind >= AmWire.KINDS) {
                // (a raw endpoint's peer sends plain UCX active messages: an id of one in a ucx4j header is forged,
                // and its inboxes have no reader)
                LOG.debug("ucx4j: dropped an active message for unknown connection or kind {}", kind);
                return rndv ? Status.ERR_NOT_CONNECTED : Status.OK;
            }
        }
        Inbox inbox = ep == null ? rawInbox : ep.inboxes[kind];
        // a frames header is copied before it is checked: the copy is what Frames reads its sizes from
        byte[] framesHeader = kind == AmWire.FRAMES && userLength <= maxFramesHeader
                ? NativeAccess.toArray(user, (int) userLength) : null;
        String refusal = Long.compareUnsigned(length, maxMessageBytes) > 0 || kind != AmWire.PLAIN
                ? framesHeader != null
                        ? AmWire.refusal(kind, MemorySegment.ofArray(framesHeader), 0, userLength, length, maxFrames,
                                maxMessageBytes)
                        : AmWire.refusal(kind, NativeAccess.everywhere(), user, userLength, length, maxFrames,
                                maxMessageBytes)
                : null;
        if (refusal != null) {
            LOG.warn("ucx4j: refused a message from {}: {}", ep == null ? "a raw peer" : ep.peer, refusal);
            deliverInOrder(ep, inbox, new org.ucx4j.MessageRefusedException("message refused: " + refusal + " ("
                    + Status.name(Status.ERR_EXCEEDS_LIMIT) + ")", Status.ERR_EXCEEDS_LIMIT,
                    kind == AmWire.PLAIN ? NativeAccess.toArray(user, (int) userLength) : NO_BYTES));
            return rndv ? Status.ERR_EXCEEDS_LIMIT : Status.OK;
        }
        if (rndv && ep != null && (ep.state == EndpointCore.FAILED || ep.state == EndpointCore.CLOSED)) {
            // announced by a peer this side already gave up on: a pull might never complete (see dropPulls)
            LOG.debug("ucx4j: dropped a rendezvous message announced on {} after it went away", ep.peer);
            return Status.ERR_CANCELED;
        }
        if (rndv && length == 0) {
            // a header too large for an eager send, with nothing to pull: UCX cannot pull 0 bytes (it would answer
            // the sender and keep the announcement forever), so it is taken as an eager message is, and UCX answers
            // the sender and frees the announcement when this returns OK
            rndv = false;
        }
        if (kind == AmWire.OBJECT && !rndv) {
            // straight into the array the receive hands back (the header, its size, was checked above): no receive
            // block, no second copy, nothing else allocated
            byte[] object;
            try {
                object = new byte[(int) length];
            } catch (OutOfMemoryError e) {
                deliverInOrder(ep, inbox, noMemory(ep, kind, NO_BYTES, length, e));
                return Status.OK;
            }
            NativeAccess.copy(data, object, object.length);
            received(ep, AmWire.OBJECT, length);
            deliverInOrder(ep, inbox, object); // the inbox keeps the array itself
            return Status.OK;
        }
        // an object's header is its size, known from the payload
        byte[] userHeader = framesHeader != null ? framesHeader : userLength == 0 || kind == AmWire.OBJECT ? NO_BYTES
                : NativeAccess.toArray(user, (int) userLength);
        if (rndv) {
            // announced only: its payload is pulled when a pull slot is free (see startPulls); memory is taken then
            Op op = null;
            try {
                op = pullOp();
                op.kind = Op.AM_DATA;
                op.what = AmWire.receiveName(kind);
                op.ep = ep;
                op.inbox = inbox;
                op.address = data;
                op.length = length;
                op.amId = kind;
                op.keepAlive = userHeader;
                heldPulls.add(op);
                if (ep != null) { // what arrives after it on this endpoint waits for it (raw peers: as UCX delivers)
                    inbox.inOrder.add(op);
                }
                schedulePulls(op);
            } catch (Throwable t) { // (no memory) nothing may keep UCX's announcement, which it frees on an error
                if (op != null) {
                    heldPulls.removeLastOccurrence(op);
                    inbox.inOrder.removeLastOccurrence(op);
                }
                LOG.error("ucx4j: could not hold a message of {} bytes from {}", length, ep, t);
                return Status.ERR_NO_MEMORY; // the sender's send fails with it
            }
            return Status.INPROGRESS;
        }
        // a message UCX assembled from fragments is kept in UCX's buffer (released when the message is closed)
        boolean keep = held != null && (attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0 && HeldData.keepable(data, length);
        AmData m = keep ? new AmData(kind, userHeader, held.view(data, length), length, held, ep)
                : take(ep, inbox, kind, userHeader, length, null);
        if (m == null) {
            return Status.OK;
        }
        if (!keep) {
            NativeAccess.copy(data, m.payload, length);
            deliverEager(ep, inbox, m);
            return Status.OK;
        }
        held.keep(data); // last: from here it is released once, by the message or at close, and UCX must keep it
        try {
            deliverEager(ep, inbox, m);
        } catch (Throwable t) { // UCX must not free a buffer that may be handed out already: it goes back on close
            LOG.error("ucx4j: delivering an active message failed", t);
        }
        return Status.INPROGRESS;
    }

    private void deliverEager(EndpointCore ep, Inbox inbox, AmData m) {
        received(ep, m.kind, m.length());
        deliverInOrder(ep, inbox, m);
    }

    /** An eager message arrived whole: its JFR event and its endpoint's statistics. */
    private static void received(EndpointCore ep, byte kind, long length) {
        if (Jfr.AVAILABLE && Jfr.transfers) {
            Jfr.TransferEvent ev = Jfr.begin();
            if (ev != null) {
                Jfr.end(ev, AmWire.receiveName(kind), length, 0, ep, "OK");
            }
        }
        if (ep != null) {
            ep.stats.received(length, 0);
        }
    }

    /** A finished message or error: out now, or after the unfinished pulls that arrived before it (owner thread). */
    private void deliverInOrder(EndpointCore ep, Inbox inbox, Object entry) {
        if (inbox.inOrder.isEmpty()) {
            handOut(ep, inbox, entry);
        } else {
            inbox.inOrder.add(entry);
        }
    }

    /** Delivers the inbox's waiting entries from the oldest up to the first pull still unfinished. */
    private void drainInOrder(EndpointCore ep, Inbox inbox) {
        Object head;
        while ((head = inbox.inOrder.peek()) != null) {
            if (head instanceof Op op) {
                if (!op.done) {
                    return;
                }
                inbox.inOrder.poll();
                AmData m = op.attachment;
                Object entry = op.error != null ? op.error : m;
                recycle(op);
                handOut(ep, inbox, entry);
            } else {
                inbox.inOrder.poll();
                handOut(ep, inbox, head);
            }
        }
    }

    /** A pull ended (op finished): its message or error goes out, in arrival order for ucx4j endpoints. */
    private void pullEnded(Op op) {
        if (op.ep != null) {
            drainInOrder(op.ep, op.inbox);
        } else {
            Inbox inbox = op.inbox;
            Object entry = op.error != null ? op.error : op.attachment;
            recycle(op);
            handOut(null, inbox, entry);
        }
    }

    /**
     * An operation for a pull: one that an earlier pull left behind, or a new one. A pull's operation is never
     * handed to the application (it is a blocking kind, whose completion completes no future), so the worker's
     * thread reuses it and a rendezvous message costs only the message the application gets.
     */
    private Op pullOp() {
        if (spareCount == 0) {
            Op op = new Op(engine);
            op.blocking = true;
            return op;
        }
        Op op = spares[--spareCount];
        spares[spareCount] = null;
        op.reuse(engine);
        return op;
    }

    /**
     * Keeps a finished pull's operation for the next (owner thread), once it has left every queue: out of its
     * slot and the ring of polled operations (its completion took it out), out of the held and in-order queues.
     */
    private void recycle(Op op) {
        op.attachment = null;
        op.inbox = null;
        op.ep = null;
        op.keepAlive = null;
        op.pullUncounted = false;
        op.pullOrphaned = false;
        if (spareCount < spares.length) {
            spares[spareCount++] = op;
        }
    }

    private void handOut(EndpointCore ep, Inbox inbox, Object entry) {
        if (entry instanceof AmData m) {
            deliver(ep, inbox, m);
            if (ep != null) {
                engine.requests.receiveCompleted(ep);
            }
        } else if (entry instanceof byte[]) { // an object, on its endpoint's object inbox (no handler takes those)
            inbox.deliver(entry);
            engine.requests.receiveCompleted(ep);
        } else if (ep != null && inbox == ep.inboxes[AmWire.PLAIN] && ep.amHandler != null) {
            // with a handler nobody receives from the inbox: the lost message is logged, not kept forever
            LOG.warn("ucx4j: {} lost an active message its handler will not see: {}", ep.peer, entry);
        } else {
            inbox.deliver(entry);
        }
    }

    /**
     * Receiver-allocated memory for a message; null if the allocator failed, and then an error entry goes to its
     * inbox, or ends {@code pull} (the held message that was to land there).
     */
    private AmData take(EndpointCore ep, Inbox inbox, byte kind, byte[] userHeader, long length, Op pull) {
        MemorySegment payload;
        try {
            payload = allocator.allocate(length);
            String bad = payload == null ? "null" : payload.byteSize() < length ? payload.byteSize() + " bytes"
                    : !payload.isNative() ? "a heap segment" : payload.isReadOnly() ? "a read-only segment"
                    : !payload.scope().isAlive() ? "a segment of a closed arena" : null;
            if (bad != null) { // UCX writes to the address: only writable native memory will do
                if (payload != null) {
                    giveBackQuietly(payload);
                }
                throw new IllegalStateException("allocator " + allocator + " returned " + bad + " for " + length
                        + " bytes (it must return writable native memory of at least that size)");
            }
        } catch (Throwable t) {
            UcxException e = noMemory(ep, kind, userHeader, length, t);
            if (pull != null) {
                pull.finish(0, 0, e);
            } else {
                deliverInOrder(ep, inbox, e);
            }
            return null;
        }
        return new AmData(kind, userHeader, payload, length, allocator, ep);
    }

    /** What a receive gets in place of a message of {@code length} bytes that no memory could be had for. */
    private static UcxException noMemory(EndpointCore ep, byte kind, byte[] userHeader, long length, Throwable t) {
        LOG.warn("ucx4j: could not allocate {} bytes for a message from {}: {}", length, ep, t.toString());
        return new org.ucx4j.MessageDroppedException("message of " + length + " bytes dropped: allocation failed: "
                + t + " (" + Status.name(Status.ERR_NO_MEMORY) + ")", Status.ERR_NO_MEMORY,
                kind == AmWire.PLAIN ? userHeader : NO_BYTES, t);
    }

    /** Returns a segment the allocator got wrong to it, as far as it takes it back. */
    private void giveBackQuietly(MemorySegment payload) {
        try {
            allocator.free(payload);
        } catch (Throwable t) {
            LOG.debug("ucx4j: allocator {} refused back its own segment: {}", allocator, t.toString());
        }
    }

    /**
     * Pulls announced rendezvous payloads, oldest first, while the bytes in flight stay within the pull budget
     * (owner thread, outside UCX's progress call); past the budget, the oldest payload of each endpoint that has
     * no pull in flight still starts, so a peer that stops progressing in the middle of its pulls (a stopped
     * process, a long pause) holds up only its own messages. Memory is allocated as each pull starts, so few
     * receive blocks are in use at once, and a consumer that frees each message soon gets the same cache-warm block
     * back from the LIFO pool. The pulls never wait for the application: a message is pulled whether or not anyone
     * receives.
     */
    private void startPulls() {
        pullsScheduled = false;
        if (engine.stopRequested) {
            return; // the worker closes: what is held is released (releaseHeld), not pulled
        }
        Op op;
        while ((op = heldPulls.peek()) != null && canPull(op)) {
            heldPulls.poll();
            startPull(op);
        }
        if (op == null || !idleEndpointMayWait) {
            return;
        }
        // the budget is spent: endpoints with nothing in flight still get one pull each
        idleEndpointMayWait = false;
        while ((op = nextForIdleEndpoint()) != null) {
            startPull(op);
        }
    }

    /**
     * Removes and returns the oldest held message whose endpoint has no pull in flight, or null. The scan starts
     * over for each: starting a pull may run an allocator and deliver messages, which may change the queue.
     */
    private Op nextForIdleEndpoint() {
        for (java.util.Iterator<Op> it = heldPulls.iterator(); it.hasNext(); ) {
            Op op = it.next();
            if (op.ep != null && op.ep.pullsInFlight == 0) {
                it.remove();
                return op;
            }
        }
        return null;
    }

    private void startPull(Op op) {
        byte[] userHeader = (byte[]) op.keepAlive;
        op.keepAlive = null;
        if (op.ep != null) { // counted before the allocator runs: its endpoint is busy from now on
            op.ep.pullsInFlight++;
        }
        AmData m = take(op.ep, op.inbox, (byte) op.amId, userHeader, op.length, op);
        if (m == null) {
            if (op.ep != null) {
                endpointPullEnded(op.ep);
            }
            Ucp.amDataRelease(engine.worker, op.address);
            pullEnded(op);
            return;
        }
        op.attachment = m;
        if (op.length >= PeerStats.LARGE) {
            op.startedAt = System.nanoTime();
        }
        if (Jfr.AVAILABLE && Jfr.transfers) {
            op.jfr = Jfr.begin();
        }
        pullsInFlight++;
        bytesInFlight += op.length;
        int slot = engine.slots.alloc(op);
        // no callback: whoever drives the worker tests the request, oldest pull first, after each progress call that
        // did work and every 64th (Engine#testPolled), which saves an upcall per rendezvous message; a pull UCX ends
        // with an error (its endpoint failed) is found the same way, one stuck at worker close is finished after the
        // worker's destroy
        engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE, 0, 0, 0);
        EndpointCore from = op.ep; // read now: an op that ends at once may be reused
        long r = Ucp.amRecvDataNbx(engine.worker, op.address, m.payload.address(), op.length,
                engine.reqParam.address());
        if (engine.requests.posted(op, slot, r, op.length, 0)) {
            op.polled = true;
            engine.addRingPolled(op);
        } else if (Status.isError(r) && from != null) {
            // (no memory for UCX's request) the announcement can now be neither pulled nor released, so the sender
            // would never hear of this message: the connection fails, on both sides, as the receive did here
            engine.connections.failEndpoint(from, (int) r, "a message it sent could not be received");
        }
    }

    /**
     * Runs {@link #startPulls} after the current progress call if a held message may start now: the oldest, or
     * {@code fresh} (just announced) by its endpoint's turn.
     */
    private void schedulePulls(Op fresh) {
        Op next = heldPulls.peek();
        boolean idle = fresh.ep != null && fresh.ep.pullsInFlight == 0;
        idleEndpointMayWait |= idle;
        if (next != null && !pullsScheduled && (canPull(next) || idle)) {
            engine.deferred.add(startPulls);
            pullsScheduled = true; // after the add: a failed one leaves the next arrival to schedule
        }
    }

    /** A pull ended or stopped counting: the budget, or its endpoint's turn, may let held messages start. */
    private void schedulePulls() {
        if (!heldPulls.isEmpty() && !pullsScheduled) {
            engine.deferred.add(startPulls);
            pullsScheduled = true;
        }
    }

    /**
     * A pull of {@code op} may start: fewer than two in flight, whatever their sizes (every message is
     * double-buffered: the next pull is already requested when one ends, so the sender never waits a round trip
     * between them), or all of them within the pull budget; or its endpoint has no pull in flight (only the oldest
     * of an endpoint's held messages can be the one in {@link #startPulls}).
     */
    private boolean canPull(Op op) {
        long length = op.length;
        return pullsInFlight <= 1 || bytesInFlight + length <= pullBudget
                || op.ep != null && op.ep.pullsInFlight == 0;
    }

    /** One of {@code ep}'s pulls ended or stopped counting. */
    private void endpointPullEnded(EndpointCore ep) {
        if (--ep.pullsInFlight == 0) {
            idleEndpointMayWait = true;
        }
    }

    /**
     * An endpoint closed or failed (owner thread): its announced, unpulled messages are released, and its pulls in
     * flight stop counting against the budget. UCX 1.13 may never complete a pull whose sender died, and one such
     * pull would otherwise stall every later pull on this worker; its memory stays with the op until UCX lets go
     * (or the worker is destroyed).
     */
    private void dropPulls(EndpointCore c) {
        for (java.util.Iterator<Op> it = heldPulls.iterator(); it.hasNext(); ) {
            Op op = it.next();
            if (op.ep == c) {
                it.remove();
                Ucp.amDataRelease(engine.worker, op.address);
            }
        }
        boolean freed = false;
        for (Op op : engine.slots.table()) {
            // a raw peer's messages carry no connection: when a raw endpoint goes, no raw pull counts any more
            // (a dead one's might never end), but each is still delivered when it does
            if (op != null && op.kind == Op.AM_DATA && !op.pullUncounted && (op.ep == c || op.ep == null && c.raw)) {
                op.pullUncounted = true;
                op.pullOrphaned = op.ep == c; // freed when it ends (amDataDone)
                pullsInFlight--;
                if (op.ep != null) {
                    endpointPullEnded(op.ep);
                }
                bytesInFlight -= op.length;
                freed = true;
            }
        }
        for (Inbox in : c.inboxes) { // an unfinished pull leaves a marker in its place; all goes out, in order
            for (int i = 0, n = in.inOrder.size(); i < n; i++) {
                Object e = in.inOrder.poll();
                in.inOrder.add(e instanceof Op op && !op.done ? lostWithEndpoint(op) : e);
            }
            drainInOrder(c, in);
        }
        if (freed) {
            schedulePulls();
        }
    }

    /**
     * What a reader gets in place of a message whose payload was still on its way when its endpoint went: a receive
     * fails there, naming it, instead of the next message arriving as if none were missing.
     */
    private static UcxException lostWithEndpoint(Op pull) {
        byte[] header = pull.attachment != null ? pull.attachment.header
                : pull.keepAlive instanceof byte[] b ? b : NO_BYTES;
        return new org.ucx4j.MessageDroppedException("message of " + pull.length + " bytes lost: its connection went "
                + "away while it was being received (" + Status.name(Status.ERR_CONNECTION_RESET) + ")",
                Status.ERR_CONNECTION_RESET, pull.amId == AmWire.PLAIN ? header : NO_BYTES, null);
    }

    /**
     * A message is complete: to its endpoint's handler (after UCX's progress call returns, still on the owner
     * thread), or to its inbox.
     */
    private void deliver(EndpointCore ep, Inbox inbox, AmData m) {
        if (ep != null && m.kind == AmWire.PLAIN && ep.amHandler != null) {
            engine.deferred.add(m); // runs handle(ep, m): queued as itself, nothing allocated per message
        } else {
            inbox.deliver(m);
        }
    }

    static void handle(EndpointCore ep, AmData m) {
        try {
            ep.amHandler.accept(m);
        } catch (Throwable t) {
            LOG.error("ucx4j: active-message handler of {} failed; message dropped", ep.peer, t);
            m.freeUnlessBound(); // a checked message's arena frees it, once nothing uses its payload any more
        }
    }

    /** See {@link Engine#setAmHandler}; owner thread. */
    void setHandler(EndpointCore ep, Consumer<AmData> handler, RuntimeException waiting) {
        ep.amHandler = handler;
        Inbox in = ep.inboxes[AmWire.PLAIN];
        in.failWaiters(waiting);
        Object entry;
        while ((entry = in.poll()) != null) {
            if (entry instanceof AmData m) {
                handle(ep, m);
            } else {
                LOG.warn("ucx4j: {} lost an active message before its handler was set: {}", ep.peer, entry);
            }
        }
    }

    /** A rendezvous payload finished arriving (or failed): its slot's completion. */
    void pulled(Op op, int status) {
        AmData m = op.attachment;
        if (m == null) {
            // a pull stuck at worker close that UCX ends inside its destroy: the close took its block (freed after
            // the destroy) and finishes the op
            return;
        }
        EndpointCore ep = op.ep;
        if (op.pullOrphaned) { // its endpoint went away meanwhile (dropPulls): nobody will read it
            op.attachment = null;
            m.free();
            op.finish(0, 0, null);
            return;
        }
        if (!op.pullUncounted) {
            pullsInFlight--;
            bytesInFlight -= op.length;
            if (ep != null) {
                endpointPullEnded(ep);
            }
        }
        if (status == Status.OK) {
            if (ep != null) {
                ep.stats.received(op.length, op.startedAt);
            }
            op.finish(op.length, 0, null);
        } else {
            op.attachment = null;
            m.free();
            op.finish(0, 0, engine.requests.errorFor(op, status));
        }
        pullEnded(op);
        schedulePulls(); // after the delivery: a handler frees first
    }

    /**
     * An endpoint closed or failed: its pulls stop counting ({@link #dropPulls}), its waiting receives fail, and on
     * a local close what nobody took is freed.
     */
    void endpointGone(EndpointCore c, boolean local) {
        dropPulls(c);
        for (byte kind = 0; kind < c.inboxes.length; kind++) {
            Inbox in = c.inboxes[kind];
            in.failWaiters(c.unusable(AmWire.receiveName(kind)));
            if (local) {
                in.clear();
            }
        }
    }
}
