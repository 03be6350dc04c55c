package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.Socket;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.EndpointClosedException;
import org.ucx4j.UcxException;
import org.ucx4j.UnreachableException;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * The endpoints of one {@link Engine}: their records by connection id and by the slot UCX's error callback names,
 * the order in which they are created to each peer worker ({@link EndpointOrder}), loopback pairs, endpoints kept
 * after a lost handshake, and the way every endpoint ends (failure, abort, graceful close, release). Methods marked
 * "any thread" hand their work to the owner thread; the others run on it.
 */
final class Connections {
    private static final Logger LOG = LoggerFactory.getLogger(Connections.class);

    private final Engine engine;
    private final AtomicInteger connIds = new AtomicInteger(1);
    /** Endpoints by local connection id, from before the handshake: active messages find their endpoint here. */
    final ConcurrentHashMap<Integer, EndpointCore> byConnId = new ConcurrentHashMap<>();
    /**
     * The same endpoints at {@code id & (length - 1)}, set and cleared with the map (ids are handed out in sequence,
     * so the endpoints alive at once rarely share a slot; one that lost its slot is found in the map): every active
     * message looks its endpoint up here, without boxing its id or hashing.
     */
    private final AtomicReferenceArray<EndpointCore> byIdSlot = new AtomicReferenceArray<>(1024);
    /** Open endpoints by the slot their error callback names (owner thread). */
    EndpointCore[] eps = new EndpointCore[64];
    private final Set<ListenerCore> listeners = ConcurrentHashMap.newKeySet();
    /** Owner thread: {@code ucp_ep_create}'s parameters and the endpoint it returns. */
    private final MemorySegment epParams, created;

    Connections(Engine engine, Arena arena) {
        this.engine = engine;
        this.epParams = arena.allocate(UCP_EP_PARAMS);
        this.created = arena.allocate(JAVA_LONG);
    }

    /** UCX reported an error on the endpoint in slot {@code slot} (an upcall): handled after the progress call. */
    void endpointError(int slot, long ep, int status) {
        EndpointCore c = eps[slot];
        if (c != null && c.handle == ep) {
            engine.deferred.add(() -> {
                boolean open = c.state == EndpointCore.OPEN;
                failEndpoint(c, status, "UCX reported an endpoint error");
                if (open && !c.parked) { // the peer died (not a close already under way)
                    engine.shmCheck.suspect(c);
                }
            });
        }
    }

    /** A raw endpoint (no handshake, tags as given) to a worker address. */
    SafeFuture<EndpointCore> attachRaw(byte[] address) {
        EndpointCore c = newEndpoint(true, "worker-address:" + Integer.toHexString(Arrays.hashCode(address)));
        c.raw = true;
        return attach(c, address, NO_TICKET);
    }

    /**
     * A new endpoint record with a fresh connection id (any thread): after 2^31 connections the ids wrap, and one
     * still in use (a long-lived connection) is skipped, never taken over.
     */
    EndpointCore newEndpoint(boolean client, String peer) {
        while (true) {
            int id = connIds.getAndIncrement() & 0x7fffffff;
            if (id == 0) {
                continue;
            }
            EndpointCore c = new EndpointCore(engine, id, client, peer);
            if (byConnId.putIfAbsent(id, c) == null) {
                byIdSlot.set(id & (byIdSlot.length() - 1), c);
                return c;
            }
        }
    }

    /** The endpoint with local connection id {@code id}, or null (as {@code byConnId.get}, without its boxing). */
    EndpointCore byId(int id) {
        EndpointCore c = byIdSlot.get(id & (byIdSlot.length() - 1));
        return c != null && c.localConnId == id ? c : byConnId.get(id);
    }

    private void forget(EndpointCore c) {
        byIdSlot.compareAndSet(c.localConnId & (byIdSlot.length() - 1), c, null);
        byConnId.remove(c.localConnId, c);
    }

    /** Forgets an endpoint whose connection never opened. */
    void discard(EndpointCore c) {
        forget(c);
    }

    /** {@link #attach}: create the endpoint now (raw endpoints, loopback, and the arbiter's side of a pair). */
    static final long NO_TICKET = -1;

    /**
     * Creates the UCX endpoint to the peer's worker address (peer error handling as configured) and opens {@code c}:
     * at once with {@link #NO_TICKET} (the endpoint's number is then in {@link EndpointCore#number}), else when
     * {@code ticket} comes up in this worker's {@link EndpointOrder} with the peer.
     */
    SafeFuture<EndpointCore> attach(EndpointCore c, byte[] peerAddress, long ticket) {
        SafeFuture<EndpointCore> f = new SafeFuture<>(engine.executor);
        engine.executeFor(f, () -> {
            EndpointOrder.Ticket t = new EndpointOrder.Ticket(c, peerAddress, f);
            if (ticket == NO_TICKET) {
                if (engine.stopRequested) { // the worker is closing: no endpoint after its sweep
                    f.completeExceptionally(engine.closedError("connect"));
                    return;
                }
                creator.create(t);
            } else {
                order.arrived(ticket, MAX_ENDPOINTS_PER_PEER, t, creator);
            }
        });
        return f;
    }

    /** A handshake with the worker at {@code peerAddress} will wait for its ticket (see {@link EndpointOrder}). */
    SafeFuture<Void> expectTicket(byte[] peerAddress) {
        SafeFuture<Void> f = new SafeFuture<>(engine.executor);
        engine.executeFor(f, () -> {
            order.expect(peerAddress);
            f.complete(null);
        });
        return f;
    }

    /** A handshake announced with {@link #expectTicket} failed before its ticket arrived. */
    void ticketLost(byte[] peerAddress) {
        engine.execute(() -> order.lost(peerAddress, creator));
    }

    private final EndpointOrder order = new EndpointOrder();

    private final EndpointOrder.Creator creator = new EndpointOrder.Creator() {
        @Override
        public void create(EndpointOrder.Ticket t) {
            EndpointCore c = t.endpoint();
            // its handshake gave up waiting: the number is used all the same (an arbiter's endpoint is created
            // instead, for park to keep for the peer's filler)
            if (c.abandoned && !c.keepOnFailure) {
                fill(t.peerAddress());
                t.future().completeExceptionally(engine.closedError("connect"));
                return;
            }
            try {
                createEndpoint(c, t.peerAddress());
                if (!c.raw && Arrays.equals(t.peerAddress(), engine.workerAddress())) {
                    c.loopback = true;
                    linkLoopback(c);
                }
                t.future().complete(c);
            } catch (Throwable e) {
                t.future().completeExceptionally(e);
            }
        }

        @Override
        public void fill(byte[] peerAddress) {
            EndpointCore unused = new EndpointCore(engine, 0, true, "unused endpoint number");
            try {
                createEndpoint(unused, peerAddress);
                abortOnOwner(unused, null);
            } catch (UcxException e) {
                LOG.debug("ucx4j: could not fill an unused endpoint number: {}", e.getMessage());
            }
        }
    };

    /** UCX's per-peer endpoint numbers are 16 bits, the last one meaning "unnumbered" (refused with streams on). */
    static final long MAX_ENDPOINTS_PER_PEER = 65535;

    private static final int ADDRESS_PADDING = 256;

    /** {@code ucp_ep_create} to {@code peerAddress} for {@code c}, counted in {@link #order}; owner thread. */
    private void createEndpoint(EndpointCore c, byte[] peerAddress) {
        c.number = order.next(peerAddress); // first: UCX numbers the endpoint even if creating it fails
        // zero padding after the address: UCX's parser takes no length, so an address cut short reads zeros, not
        // past the buffer (beyond that, a peer's address is trusted as UCX's own listener trusts it)
        long addr = Ucp.malloc(peerAddress.length + ADDRESS_PADDING);
        try {
            MemorySegment padded = NativeAccess.view(addr, peerAddress.length + ADDRESS_PADDING);
            padded.fill((byte) 0);
            MemorySegment.copy(peerAddress, 0, padded, JAVA_BYTE, 0, peerAddress.length);
            int slot = allocEndpointSlot(c);
            epParams.fill((byte) 0);
            epParams.set(JAVA_LONG, EP_FIELD_MASK, UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                    | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
            epParams.set(JAVA_LONG, EP_ADDRESS, addr);
            epParams.set(JAVA_INT, EP_ERR_MODE,
                    engine.peerErrorHandling ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE);
            epParams.set(JAVA_LONG, EP_ERR_HANDLER_CB, Upcalls.EP_ERROR.address());
            epParams.set(JAVA_LONG, EP_ERR_HANDLER_ARG, Upcalls.userData(engine.id, slot));
            int st = Ucp.epCreate(engine.worker, epParams.address(), created.address());
            if (st != Status.OK) {
                eps[slot] = null;
                if (st == Status.ERR_EXCEEDS_LIMIT && c.number >= MAX_ENDPOINTS_PER_PEER) {
                    throw new UnreachableException("create endpoint to " + c.peer + ": UCX numbers the endpoints "
                            + "between two workers with 16 bits, and these two have created all "
                            + MAX_ENDPOINTS_PER_PEER + " over their lifetime; a new Ucx (a new worker) on either "
                            + "side can connect again (" + Status.name(st) + ")", st);
                }
                throw UcxException.of(st, "create endpoint to " + c.peer);
            }
            c.handle = created.get(JAVA_LONG, 0);
            String info = Ucp.capture(f -> Ucp.epPrintInfo(c.handle, f));
            List<String> lanes = TransportInfo.lanes(info);
            c.socketLane = lanes.stream().anyMatch(t -> t.startsWith("tcp/"));
            c.eagerSends = engine.eagerSendsAllowed && !c.raw && !lanes.isEmpty()
                    && lanes.stream().allMatch(TransportInfo::isFifo) && TransportInfo.firstProtocols(info);
            c.eagerTagSends = c.eagerSends && engine.eagerTagSendsAllowed;
            c.state = EndpointCore.OPEN;
        } finally {
            Ucp.free(addr);
        }
    }

    /** Pairs the two open ends of a loopback connection and starts the stream receives that waited for that. */
    private void linkLoopback(EndpointCore c) {
        EndpointCore t = byConnId.get(c.peerConnId);
        if (t == null || !t.loopback || t.state != EndpointCore.OPEN || t.peerConnId != c.localConnId) {
            return; // the other end opens later (and links then), or is already gone (and this end fails soon)
        }
        c.twin = t;
        t.twin = c;
        startWaitingForTwin(c);
        startWaitingForTwin(t);
    }

    private void startWaitingForTwin(EndpointCore c) {
        Op op;
        while (c.waitingForTwin != null && (op = c.waitingForTwin.poll()) != null) {
            engine.requests.dispatch(op);
        }
    }

    /**
     * One end of a loopback connection goes: the other end's stream receives were posted on this end's UCX
     * endpoint, which is about to close, so the other end fails now (as it would when its peer says goodbye), and
     * stream receives still waiting for this end to open fail.
     */
    private void unlinkLoopback(EndpointCore c) {
        EndpointCore t = c.twin;
        if (t != null) {
            if (t.state == EndpointCore.OPEN && c.flushed && !engine.stopRequested) {
                t.peerSaidBye = true; // c closed gracefully: what it sent is in the worker's queue, whole
                engine.requests.holdStream(t); // and its streams on c's UCX endpoint, about to close
            }
            c.twin = null;
            t.twin = null;
            if (t.state != EndpointCore.CLOSING) { // one closing itself (gracefully) goes on with its own close
                failEndpoint(t, Status.ERR_CONNECTION_RESET, c.failure == null ? "the peer closed the endpoint"
                        : "the peer endpoint failed");
            }
        }
        Op op;
        while (c.waitingForTwin != null && (op = c.waitingForTwin.poll()) != null) {
            UcxException e = c.unusable(op.what);
            engine.requests.failNow(op, e != null ? e : engine.closedError(op.what));
        }
    }

    private int allocEndpointSlot(EndpointCore c) {
        for (int i = 0; i < eps.length; i++) {
            if (eps[i] == null) {
                eps[i] = c;
                c.slot = i;
                return i;
            }
        }
        int s = eps.length;
        eps = Arrays.copyOf(eps, s * 2);
        eps[s] = c;
        c.slot = s;
        return s;
    }

    /**
     * The peer said goodbye ({@code bye}: it closes gracefully, its sends flushed) or its control socket ended
     * (it died). Messages it sent before are matched first; then what is pending fails with
     * {@link org.ucx4j.ConnectionResetException}. A goodbye is acknowledged once that is done (whatever became of
     * the endpoint): until then the peer keeps its UCX endpoint open, whose close UCX could otherwise see first
     * (over TCP, as the end of its socket) and drop the stream bytes it queued here.
     */
    void peerGone(EndpointCore c, boolean bye, String why) {
        if (engine.stopRequested) {
            if (bye) {
                Bootstrap.acknowledgeBye(c);
            }
            return;
        }
        engine.execute(() -> {
            try {
                if (c.state != EndpointCore.OPEN) {
                    return; // closing or closed locally, or already failed
                }
                for (int i = 0; i < 1000 && engine.progressNested() != 0; i++) {
                    // drain what already arrived so receives it satisfies still succeed
                }
                c.peerSaidBye = bye; // its sends were flushed: later receives still take what waits in the worker
                if (bye && !c.raw) {
                    engine.requests.holdStream(c); // UCX drops the stream bytes queued on an endpoint with it
                }
                failEndpoint(c, Status.ERR_CONNECTION_RESET, bye ? "the peer closed the endpoint"
                        : "the peer went away (control connection lost: " + why + ")");
                if (!bye) {
                    engine.shmCheck.suspect(c);
                }
            } finally {
                if (bye) {
                    engine.executor.execute(() -> Bootstrap.acknowledgeBye(c)); // a socket write: off this thread
                }
            }
        });
        if (bye && engine.stopRequested) {
            Bootstrap.acknowledgeBye(c); // the worker stopped meanwhile: the task may never run (a second is harmless)
        }
    }

    void track(ListenerCore l) {
        listeners.add(l);
    }

    void untrack(ListenerCore l) {
        listeners.remove(l);
    }

    // ---- endpoint failure / close (owner thread)

    void failEndpoint(EndpointCore c, int status, String why) {
        if (c.state == EndpointCore.CLOSED || c.state == EndpointCore.FAILED) {
            return;
        }
        UcxException cause = UcxException.of(status, "connection to " + c.peer + " lost: " + why);
        c.failure = cause;
        LOG.debug("ucx4j: endpoint {} failed: {}", c, cause.getMessage());
        abortOnOwner(c, cause);
    }

    /** Cancels what is pending on the endpoint and force-closes it (owner thread). */
    void abortOnOwner(EndpointCore c, UcxException cause) {
        if (c.state == EndpointCore.CLOSED || c.handle == 0 || c.state == EndpointCore.FAILED) {
            return;
        }
        if (cause == null) {
            c.closedLocally = true;
        }
        c.state = EndpointCore.FAILED;
        cancelPending(c);
        if (c.loopback) {
            unlinkLoopback(c);
        }
        engine.amReceiver.endpointGone(c, cause == null);
        Op close = new Op(engine);
        close.kind = Op.CLOSE;
        close.what = "close";
        close.ep = c;
        close.whenComplete((v, e) -> releaseEndpoint(c, e == null && engine.peerErrorHandling));
        if (flushesHeld(c)) {
            // a flush UCX holds may sit in its progress queue, to be resumed there (one it put off, e.g. while the
            // endpoint's lanes changed): a forced close frees the endpoint and leaves that entry, which then reads
            // through the freed endpoint (the likely cause of JVM crashes in StressTest on UCX 1.18.1). The close
            // waits for the flushes, which end once what was sent before them is out (flushEnded); past a bound,
            // for a peer that takes nothing, it goes after this worker's next progress, which has resumed any such
            // flush by then (docs/internals.md, "Two faults StressTest found"). A worker flush counts for every
            // endpoint: UCX flushes each endpoint inside it the same way
            c.closeAfterFlushes = close;
            TestHooks.closesAfterFlushes.incrementAndGet();
            later(flushWaitBoundMs, () -> {
                if (c.closeAfterFlushes == close) {
                    c.closeAfterFlushes = null;
                    postAfterProgress(c, close);
                }
            });
        } else {
            engine.requests.post(close);
        }
        if (!close.done && !engine.peerErrorHandling) {
            // a flushing close (see Requests) to a peer that is gone may never end: the endpoint is released
            // after a bound all the same, and UCX finishes (or the worker's close ends) its close request later.
            // A close still waiting for flushes goes to UCX first (its wait may be longer than this bound, or its
            // post queued behind this task): a release without it would leave the endpoint open in UCX
            later(flushingCloseBoundMs, () -> {
                if (!close.done) {
                    if (unposted(close)) {
                        if (c.closeAfterFlushes == close) {
                            c.closeAfterFlushes = null;
                        }
                        engine.requests.post(close);
                    }
                    if (!close.done) {
                        close.finish(0, 0, null);
                    }
                }
            });
        }
    }

    /** Whether a close op has yet to be handed to UCX (once handed, it holds a request or has ended). */
    private static boolean unposted(Op close) {
        return !close.done && close.request == 0;
    }

    /** Whether UCX holds a flush of {@code c}, its own or a worker flush (owner thread). */
    private boolean flushesHeld(EndpointCore c) {
        return c.flushesInUcx > 0 || workerFlushesInUcx > 0;
    }

    /**
     * Worker flushes UCX holds a request for (owner thread): UCX flushes every endpoint inside them, through the
     * same path as an endpoint's own flush, so every close waits for them too.
     */
    int workerFlushesInUcx;

    /** Runs {@code task} on the owner thread after {@code millis} (refused once the worker stops). */
    private void later(long millis, Runnable task) {
        Thread.ofVirtual().name("ucx4j-close-bound").start(() -> {
            try {
                Thread.sleep(millis);
            } catch (InterruptedException e) {
                return;
            }
            engine.execute(task);
        });
    }

    /** Posts a close after the worker's next progress call ends, unless the endpoint was released meanwhile. */
    private void postAfterProgress(EndpointCore c, Op close) {
        engine.deferred.add(() -> {
            if (c.handle != 0 && unposted(close)) { // released meanwhile: by the worker's close, or a bound
                engine.requests.post(close);
            }
        });
    }

    /** How long a close waits for the endpoint's flushes before it goes all the same (tests: {@link TestHooks}). */
    static volatile long flushWaitBoundMs = 200;

    /** How long a close without peer error handling, which cannot be forced, may flush before the release. */
    static volatile long flushingCloseBoundMs = 5000;

    private void cancelPending(EndpointCore c) {
        boolean was = engine.beginCallbacks(); // completions run inside the cancels, and their dependents
        try {
            for (Op op : c.pending.snapshot()) {
                if (op.request != 0 && !op.done) { // one an earlier cancel's completion ended is skipped
                    Ucp.requestCancel(engine.worker, op.request);
                }
            }
            // polled receives complete inside the cancel, without an event: seen now, their dependents still
            // inside the abort (a wait there is refused as in a callback); UCX cannot cancel a send, which ends
            // with the endpoint's close and is seen at the next full test (every 64 progress calls, or a nap)
            engine.testPolledNow();
        } finally {
            engine.endCallbacks(was);
        }
    }

    /**
     * Releases an endpoint whose close ended; {@code forced}: UCX's forced close of it finished, so UCX has destroyed
     * it and no transport will touch the memory of a send still pending on it.
     */
    private void releaseEndpoint(EndpointCore c, boolean forced) {
        // may run on the owner thread (complete() of the CLOSE op) — only engine code here; once the worker is gone,
        // the task is refused and shutdownOnOwner has released what was left (while it stops, a handler that waits
        // on the close future drives the worker: the release must reach it)
        if (engine.isOwnerThread()) {
            released(c, forced);
        } else {
            engine.executeWhileStopping(() -> released(c, forced));
        }
    }

    private void released(EndpointCore c, boolean forced) {
        releaseNow(c);
        if (forced && !engine.stopRequested) { // a worker that closes ends what UCX kept after its destroy
            // sends UCX aborted in the forced close but still holds: each waits for its memory handle's
            // invalidation, which a pull cut short holds up until the peer answers, if ever (UCX 1.13-1.20, all
            // sends of that buffer; docs/ucx-faults). They end here, after the current progress call
            engine.deferred.add(() -> {
                if (engine.stopRequested) {
                    return;
                }
                int n = engine.requests.endSendsUcxKept(c);
                if (n > 0) {
                    LOG.debug("ucx4j: {} send(s) UCX kept after the forced close of {} ended", n, c);
                }
            });
        }
    }

    /**
     * Endpoints a peer's close or failure ended, already released, whose messages nobody has read yet (owner
     * thread): the messages stay readable, as data a socket received before its peer hung up does, until the
     * application closes the endpoint ({@link #discardUnread}) or the worker closes ({@link #clearLostUnread}).
     */
    private final Set<EndpointCore> lostUnread = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());

    /** The application closed an endpoint: what it did not read is freed, now or when the endpoint is released. */
    void discardUnread(EndpointCore c) {
        boolean kept = c.keepsArrived();
        c.unreadDiscarded = true;
        c.heldStream = null;
        if (lostUnread.remove(c) || c.state == EndpointCore.CLOSED) {
            clearInboxes(c);
            if (kept) {
                dropArrivedTags(c);
            }
        }
    }

    /**
     * Frees the tag messages the worker still holds for a released endpoint that nobody can receive any more
     * (owner thread, after the current progress call: the release may run inside UCX's callbacks). Without it they
     * would stay in the worker's queue until the worker closes, which frees them anyway.
     */
    private void dropArrivedTags(EndpointCore c) {
        if (c.raw || c.localConnId == 0 || engine.stopRequested) {
            return; // a raw endpoint's tags are the worker's; 0: no connection of its own (EndpointOrder)
        }
        long tag = c.recvTag(0);
        engine.deferred.add(() -> {
            int n = engine.requests.dropWaiting(tag, EndpointCore.CONNECTION_MASK);
            if (n > 0) {
                LOG.debug("ucx4j: {} unread tag message(s) of {} freed", n, c);
            }
        });
    }

    /**
     * Whether a message of {@code c} (null: a raw peer's) may go back to its inbox to be read (owner thread): not
     * once the application closed the endpoint, whose unread messages are freed, nor once the endpoint was
     * released with nothing unread (its inboxes are then nobody's to clear), unless it is kept readable here.
     */
    boolean takesBack(EndpointCore c) {
        if (c == null || c.state != EndpointCore.CLOSED || lostUnread.contains(c)) {
            return true;
        }
        if (c.closedLocally || c.unreadDiscarded) {
            return false;
        }
        lostUnread.add(c); // readable until the application closes the endpoint, or the Ucx closes
        return true;
    }

    /** The worker closes: frees what endpoints ended by their peers still held unread. */
    void clearLostUnread(UcxException closed) {
        for (EndpointCore c : lostUnread) {
            for (Inbox in : c.inboxes) {
                in.failWaiters(closed);
            }
            clearInboxes(c);
        }
        lostUnread.clear();
    }

    private static void clearInboxes(EndpointCore c) {
        for (Inbox in : c.inboxes) {
            in.clear();
        }
    }

    /** Marks the endpoint closed, forgets it, closes its socket and runs its close callbacks (owner thread). */
    private void releaseNow(EndpointCore c) {
        if (c.state == EndpointCore.CLOSED) {
            return;
        }
        c.state = EndpointCore.CLOSED;
        if (c.parked) {
            TestHooks.parked.decrementAndGet();
            parked.removeIf(p -> p.endpoint() == c);
        }
        forget(c);
        if (!c.keepsArrived()) {
            dropArrivedTags(c);
        }
        if (c.closedLocally || c.unreadDiscarded) {
            clearInboxes(c);
        } else if (!c.inboxesEmpty()) {
            lostUnread.add(c); // readable until the application closes the endpoint, or the Ucx closes
        }
        if (c.slot >= 0 && eps[c.slot] == c) {
            eps[c.slot] = null;
        }
        c.handle = 0;
        Socket control = c.control;
        Throwable cause = c.closedLocally ? null : c.failure;
        if (Jfr.AVAILABLE && c.localConnId != 0 && !c.parked) { // 0: it only filled a number (EndpointOrder)
            Jfr.CloseEvent ev = new Jfr.CloseEvent();
            if (ev.shouldCommit()) {
                ev.peer = c.peer;
                ev.reason = cause == null ? "closed locally" : cause.getMessage();
                ev.bytesSent = c.stats.bytesSent;
                ev.bytesReceived = c.stats.bytesReceived;
                ev.commit();
            }
        }
        engine.executor.execute(() -> {
            Bootstrap.closeQuietly(control);
            for (Consumer<Throwable> cb : c.fireCloseCallbacks(cause)) {
                try {
                    cb.accept(cause);
                } catch (Throwable t) {
                    LOG.warn("ucx4j close callback threw", t);
                }
            }
            c.closed.complete(null);
        });
    }

    /**
     * A counted flush of {@code c} ended (owner thread, maybe inside UCX's callbacks): the close that waited for
     * the last one goes after the progress call, outside them.
     */
    void flushEnded(EndpointCore c) {
        c.flushesInUcx--;
        closeIfFlushed(c);
    }

    /** A counted worker flush ended (owner thread, maybe inside UCX's callbacks): as {@link #flushEnded}. */
    void workerFlushEnded() {
        if (--workerFlushesInUcx == 0) {
            for (EndpointCore c : eps) {
                if (c != null) {
                    closeIfFlushed(c);
                }
            }
        }
    }

    private void closeIfFlushed(EndpointCore c) {
        if (c.closeAfterFlushes != null && !flushesHeld(c)) {
            Op close = c.closeAfterFlushes;
            c.closeAfterFlushes = null;
            postAfterProgress(c, close); // not inside UCX's callbacks, where the flush ended
        }
    }

    /**
     * The worker stops (owner thread, just before its destroy, with no progress call after this): the closes that
     * still wait for their endpoints' flushes go now.
     */
    void closeWaitingNow() {
        for (EndpointCore c : eps) {
            if (c != null && c.closeAfterFlushes != null) {
                Op close = c.closeAfterFlushes;
                c.closeAfterFlushes = null;
                if (c.handle != 0 && unposted(close)) {
                    engine.requests.post(close);
                }
            }
        }
    }

    /** Graceful close: cancel receives, flush sends (bounded by the caller's wait), then force-close. */
    Op closeEndpoint(EndpointCore c) {
        Op flush = new Op(engine);
        flush.kind = Op.FLUSH;
        flush.what = "close";
        flush.ep = c;
        flush.blocking = true;
        engine.execute(() -> {
            if (c.state == EndpointCore.OPEN || c.state == EndpointCore.CONNECTING) {
                c.closedLocally = true;
                c.state = EndpointCore.CLOSING;
                cancelPending(c);
            }
        });
        engine.submit(flush);
        return flush;
    }

    /** Force-closes the endpoint (any thread); pending operations fail with {@link EndpointClosedException}. */
    void abortEndpoint(EndpointCore c) {
        engine.execute(() -> {
            c.closedLocally = c.failure == null;
            if (c.state == EndpointCore.CLOSING) {
                c.state = EndpointCore.OPEN; // let abortOnOwner run its course
            }
            abortOnOwner(c, null);
        });
    }

    /**
     * Keeps the arbiter's endpoint of a handshake lost before the peer confirmed it has its own open, unused
     * (once created: the creation may still be queued). The peer fills that number later with an endpoint of its
     * own, which UCX pairs with this one; were this one closed first, the peer's filler would be a new endpoint
     * that UCX pairs with nothing, and over TCP
     * that shifts the transport's own pairing of sockets for every later connection between the two workers
     * (docs/internals.md, UCX TCP transport crash). The filler's close fails this endpoint where the transport
     * reports it, which closes it; else the next connection the peer confirms ({@link #confirmed}; not for an
     * endpoint with a TCP lane), or the worker's close, does.
     */
    void park(EndpointCore c, byte[] peerAddress) {
        engine.execute(() -> { // after the endpoint's creation, which was queued before
            if (c.state != EndpointCore.OPEN || c.handle == 0) {
                abortOnOwner(c, null); // never created, or failed meanwhile: nothing to keep
                return;
            }
            boolean tcp = c.socketLane;
            c.parked = true;
            c.closedLocally = true;
            TestHooks.parked.incrementAndGet();
            if (!tcp && order.filled(peerAddress, c.number)) {
                abortOnOwner(c, null); // a later connection was confirmed first: the filler exists already
                return;
            }
            parked.add(new Parked(c, peerAddress, tcp));
            LOG.debug("ucx4j: endpoint {} to {} kept until the peer fills its number", c.number, c.peer);
        });
    }

    /** A parked endpoint, the worker address of its peer, and whether it has a TCP lane (owner thread). */
    private record Parked(EndpointCore endpoint, byte[] peerAddress, boolean tcp) {}

    /** Endpoints {@link #park} keeps (owner thread); few, and only after lost handshakes. */
    private final List<Parked> parked = new ArrayList<>();

    /**
     * The peer at {@code peerAddress} confirmed it created its endpoint number {@code number} (any thread). It
     * creates its endpoints to this worker in number order, so every lower number is filled by now: endpoints
     * parked for those numbers have their pair and are closed. Not those with a TCP lane: over TCP the filler's own
     * close ends them, and closing one before the filler's wireup arrived here (it travels apart from the
     * confirmation) would leave that wireup unmatched, which is what parking prevents; they stay until UCX reports
     * the filler's close or the worker closes. Without this, endpoints on transports that report no peer close
     * (shared memory among them) would stay until the worker closes too.
     */
    void confirmed(byte[] peerAddress, long number) {
        engine.execute(() -> {
            order.confirmed(peerAddress, number);
            for (Parked p : List.copyOf(parked)) {
                if (!p.tcp() && p.endpoint().number < number && Arrays.equals(p.peerAddress(), peerAddress)) {
                    abortOnOwner(p.endpoint(), null); // releases it, which takes it off the list
                }
            }
        });
    }

    /**
     * The worker stops (owner thread): connections waiting for their turn fail, listeners close, and every endpoint
     * is aborted (what is pending on it fails).
     */
    void abortAll() {
        order.failPending(t -> t.future().completeExceptionally(engine.closedError("connect")));
        for (ListenerCore l : listeners) {
            l.close();
        }
        for (EndpointCore c : eps) {
            if (c != null) {
                abortOnOwner(c, null);
            }
        }
    }

    /**
     * Just before the worker is destroyed (owner thread): releases the endpoints whose close UCX did not finish in
     * time (or whose release the stopped queue refused), drops what their dead peers sent and nobody took, and fails
     * connections queued meanwhile.
     */
    void releaseAll() {
        List<EndpointCore> open = new ArrayList<>(byConnId.values());
        for (EndpointCore c : eps) {
            if (c != null && !open.contains(c)) {
                open.add(c);
            }
        }
        for (EndpointCore c : open) {
            releaseNow(c);
            for (Inbox in : c.inboxes) {
                in.clear();
            }
        }
        order.failPending(t -> t.future().completeExceptionally(engine.closedError("connect")));
    }
}
