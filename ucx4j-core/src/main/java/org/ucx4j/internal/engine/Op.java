package org.ucx4j.internal.engine;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.Executor;
import java.util.concurrent.locks.LockSupport;
import org.ucx4j.UcxException;

/**
 * One operation: the command a caller hands to the worker's owner thread, the queue node that carries it, the
 * in-flight record UCX's callback finds again, and the future the async API hands back. So a message costs one
 * object. Blocking calls use the same object but wait on {@link #done} with a parked thread, never on the
 * future, so they box nothing.
 */
public final class Op extends EngineFuture<Long> {
    static final byte TAG_SEND = 1, TAG_RECV = 2, STREAM_SEND = 3, STREAM_RECV = 4, FLUSH = 5, CLOSE = 6, TASK = 7,
            AM_SEND = 8, AM_DATA = 9, PUT = 10, GET = 11, RMA_FLUSH = 12;

    private static final VarHandle QUEUED, NEXT, CANCEL, WAITER, DONE, PARKED, ASKED;

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            QUEUED = l.findVarHandle(Op.class, "queued", int.class);
            NEXT = l.findVarHandle(Op.class, "next", Op.class);
            CANCEL = l.findVarHandle(Op.class, "cancelRequested", boolean.class);
            WAITER = l.findVarHandle(Op.class, "waiter", Thread.class);
            DONE = l.findVarHandle(Op.class, "done", boolean.class);
            PARKED = l.findVarHandle(Op.class, "waiterParked", boolean.class);
            ASKED = l.findVarHandle(Op.class, "asked", Asked.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    // --- command (written by the submitting thread before offer)
    byte kind;
    boolean blocking;
    EndpointCore ep;
    long address;
    long length;
    long tag;
    long mask;
    /** Heap array the received bytes are copied back into (byte[] receives), or null. */
    byte[] copyBack;
    /** malloc'd staging buffer this op owns (byte[] and heap buffers), 0 if none. */
    long owned;
    Runnable task;
    /** Active-message send: AM id, header (address, length), datatype (contiguous or iov) and total payload bytes. */
    int amId;
    long header;
    long headerLength;
    long datatype;
    long total;
    /** A receive of a message taken by a probe: its {@code ucp_tag_message_h}. */
    long probed;
    /** Run if the op is withdrawn before UCX saw it (a probed message's receive gives its handle back). */
    Runnable onWithdrawn;

    /** See {@link #onWithdrawn}: set before the op is submitted. */
    public void onWithdrawn(Runnable action) {
        this.onWithdrawn = action;
    }
    /** RMA: the remote key handle (put/get). */
    long rkey;
    /** Active-message data transfer: the message being filled and the inbox it goes to. */
    AmData attachment;
    Inbox inbox;
    /** A pull in flight whose endpoint went away: no longer counted against the worker's pull budget. */
    boolean pullUncounted;
    /** A pull in flight whose endpoint went away: its message is freed when it ends, not delivered. */
    boolean pullOrphaned;
    /** Keeps the caller's buffer (segment, ByteBuffer) reachable while UCX uses its memory. */
    Object keepAlive;
    String what;

    // --- queue / engine state
    volatile Op next;
    @SuppressWarnings("unused") // QUEUED
    private volatile int queued;
    volatile boolean cancelRequested;
    volatile Thread waiter;
    /** The waiter of a blocking op went to park (its spin did not catch the completion). */
    volatile boolean waiterParked;
    long request;
    /** {@link #request} was released to UCX as the worker went ({@code ucp_request_free}): UCX frees it. */
    boolean requestReleased;
    /** A flush of {@link #ep} counted in its {@code flushesInUcx} while UCX holds it. */
    boolean countedFlush;
    int slot = -1;
    Op pendingPrev;
    Op pendingNext;

    // --- result (published by the release write of done)
    long resultLength;
    long senderTag;
    UcxException error;
    volatile boolean done;
    /** A blocking op recycled per thread by {@link Engine#await} once it is done and nothing refers to it. */
    boolean pooled;
    /** A receive or send posted without a callback: whoever drives the worker tests it (no upcall per message). */
    boolean polled;
    /** A polled send's, pull's or asynchronous receive's place in its {@link PolledRing} (an ever-growing index). */
    int ringIndex;
    /** System.nanoTime() when a transfer of >= 1 MB was posted (per-peer bandwidth), else 0. */
    long startedAt;
    /** The flight-recorder event of this transfer while a recording wants it, else null. */
    Jfr.TransferEvent jfr;

    Op(Executor executor) {
        super(executor);
    }

    Op(Engine engine) {
        super(engine.executor);
        this.engine = engine;
    }

    // engine (EngineFuture): the engine that runs this op (null for the queue's stub)

    /**
     * Cancels the UCX operation too. A tag receive is withdrawn, and the future canceled, only if no message has
     * matched it yet (the message then goes to the next matching receive); one that UCX already matched completes
     * with its message, and this returns false, so nothing is lost. The owner thread decides: this waits for it
     * up to {@link Engine#CANCEL_WAIT_NANOS} and returns false if it has not answered by then (the future still
     * ends canceled or with the message). A send, a stream receive, a put or a get is canceled by aborting its
     * endpoint, since UCX cannot withdraw it, and its future ends (canceled) only once UCX has let go of the buffer,
     * waited for the same way; one that completed meanwhile keeps its result (false). A flush's future is canceled
     * at once and the flush left to complete in UCX (it holds no caller memory), its endpoint alive.
     */
    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        if (engine != null && !blocking && (kind == TAG_RECV || holdsCallerMemory())) {
            // the future ends only when UCX has let go of the caller's memory: a tag receive withdrawn, anything
            // else purged by its endpoint's abort (its future done any earlier, a caller would free the buffer
            // while UCX may still read or write it)
            if (!isDone()) {
                engine.cancelAndWait(this);
            }
            return isCancelled();
        }
        boolean r = super.cancel(mayInterruptIfRunning);
        if (r && engine != null && !done) {
            engine.cancel(this);
        }
        return r;
    }

    /** An outcome asked for from outside while UCX held the caller's memory (see {@link #complete}). */
    private record Asked(Long value, Throwable error) {}

    @SuppressWarnings("unused") // ASKED
    private volatile Asked asked;

    /**
     * Completes the future from outside (a JDK timer's {@code orTimeout} or {@code completeOnTimeout}, or the
     * application): where UCX still reads or writes the caller's memory for this operation, the future cannot end
     * yet, or the caller would free memory that UCX then writes into. The operation is then canceled as by
     * {@link #cancel} (without waiting: a timer thread calls this) and this returns false; once UCX has let go, the
     * future takes the outcome asked for here, unless the operation completed first (a message that matched is
     * delivered, never lost). The first outcome asked for wins. Elsewhere, the ordinary completion.
     */
    @Override
    public boolean complete(Long value) {
        return !deferred(new Asked(value, null)) && super.complete(value);
    }

    /** As {@link #complete}, with an exception ({@code orTimeout}'s {@code TimeoutException}). */
    @Override
    public boolean completeExceptionally(Throwable ex) {
        java.util.Objects.requireNonNull(ex);
        return !deferred(new Asked(null, ex)) && super.completeExceptionally(ex);
    }

    /** As {@link #complete} while UCX holds the caller's memory; afterwards, the ordinary obtrude. */
    @Override
    public void obtrudeValue(Long value) {
        if (!deferred(new Asked(value, null))) {
            super.obtrudeValue(value);
        }
    }

    /** As {@link #completeExceptionally} while UCX holds the caller's memory; afterwards, the ordinary obtrude. */
    @Override
    public void obtrudeException(Throwable ex) {
        java.util.Objects.requireNonNull(ex);
        if (!deferred(new Asked(null, ex))) {
            super.obtrudeException(ex);
        }
    }

    /**
     * True where UCX may still use the caller's memory for this async operation: {@code outcome} is kept (the first
     * one asked for) and the operation canceled; its future ends in {@link #finish}.
     */
    private boolean deferred(Asked outcome) {
        Engine e = engine;
        if (e == null || blocking || e.isTerminated() || !(kind == TAG_RECV || holdsCallerMemory())) {
            return false;
        }
        if (done) { // UCX has let go: finish completes the future now, with the operation's own outcome, unless
            return !isDone(); // it has (then the ordinary completion, which does nothing more)
        }
        if (ASKED.compareAndSet(this, (Asked) null, outcome)) {
            e.cancel(this);
        }
        return true;
    }

    /** The bytes this op moves: {@link #length}, except for an active-message send, whose length counts iov entries. */
    long bytes() {
        return kind == AM_SEND ? total : length;
    }

    /** Operations UCX reads or writes the caller's memory for until they end. */
    private boolean holdsCallerMemory() {
        return kind == TAG_SEND || kind == STREAM_SEND || kind == STREAM_RECV || kind == AM_SEND || kind == PUT
                || kind == GET;
    }

    /** Readies a recycled blocking op for its next use (the submitting thread only, before submit). */
    void reuse(Engine e) {
        // plain writes (no fence per field): the op is confined to this thread until submit publishes it
        engine = e;
        NEXT.set(this, (Op) null);
        CANCEL.set(this, false);
        request = 0;
        requestReleased = false;
        countedFlush = false;
        slot = -1;
        pendingPrev = pendingNext = null;
        polled = false;
        startedAt = 0;
        jfr = null;
        copyBack = null;
        owned = 0;
        task = null;
        mask = 0;
        probed = 0;
        onWithdrawn = null; // a probed receive's give-back belongs to that receive alone
        error = null;
        resultLength = 0;
        senderTag = 0;
        DONE.set(this, false);
        PARKED.set(this, false);
        ASKED.set(this, (Asked) null);
    }

    /** Records the thread that waits for a blocking op (before submit publishes it, so a plain write). */
    void waitedBy(Thread t) {
        WAITER.set(this, t);
    }

    /** Drops references a parked spare op would otherwise keep alive. */
    void park() {
        engine = null;
        ep = null;
        WAITER.set(this, (Thread) null);
        keepAlive = null;
        copyBack = null;
        error = null;
        onWithdrawn = null;
    }

    static Op stub() {
        return new Op(Runnable::run);
    }

    boolean markQueued() {
        return QUEUED.compareAndSet(this, 0, 1);
    }

    /**
     * Takes a queued op out of the queue's hands: true for exactly one caller — the owner thread that polls it (and
     * then dispatches it), the waiter that withdraws it first (a timeout or an interrupt: the owner then skips it),
     * or the submitter that finds the worker gone.
     */
    boolean claimQueued() {
        return QUEUED.compareAndSet(this, 1, 0);
    }

    /** Runs on the owner thread when the operation ends, with either a length or an error. */
    void finish(long length, long tag, UcxException err) {
        if (done) {
            return;
        }
        this.resultLength = length;
        this.senderTag = tag;
        this.error = err;
        this.keepAlive = null;
        if (jfr != null) {
            Jfr.end(jfr, what, length, kind == PUT || kind == GET ? 0 : tag != 0 ? tag : this.tag, ep,
                    err == null ? "OK" : err.statusName());
            jfr = null;
        }
        // read before the op is published as done: its waiter may recycle it at once
        boolean b = blocking;
        Thread w = waiter;
        Engine e = w != null && waiterParked ? engine : null;
        // a release store publishes the result to the waiter's volatile read of done; no store-load fence is
        // needed (the waiter was recorded before the op was handed over, and unpark before park is not lost)
        DONE.setRelease(this, true);
        if (b) {
            if (w != null && w != Thread.currentThread()) {
                LockSupport.unpark(w);
                if (e != null) {
                    e.wokeParkedWaiter = true;
                }
            }
        } else {
            // a dependent may run here (a plain future built from this one, allOf say), and may call back in:
            // a caller-mode owner's engine counts it as inside a duty cycle (see Engine.stopOnCallerOwner)
            Engine en = engine;
            boolean owner = en != null && en.mode == org.ucx4j.ProgressMode.CALLER && en.isOwnerThread();
            if (owner) {
                en.driving++;
            }
            try {
                if (err == null) {
                    super.complete(length);
                } else if (cancelRequested && (err.status() == org.ucx4j.internal.ffi.Status.ERR_CANCELED
                        || err instanceof org.ucx4j.EndpointClosedException)) {
                    // withdrawn at the caller's request, or purged by the endpoint abort that the cancel made (a
                    // send, a stream receive, RMA): a canceled future, as it asked, or the outcome asked for from
                    // outside (complete, orTimeout); a dead peer's error stays
                    Asked a = asked;
                    if (a == null) {
                        super.cancel(false);
                    } else if (a.error() != null) {
                        super.completeExceptionally(a.error());
                    } else {
                        super.complete(a.value());
                    }
                } else {
                    super.completeExceptionally(err);
                }
            } finally {
                if (owner) {
                    en.driving--;
                }
            }
        }
    }

    /** Result of a completed blocking op: the length, or the error thrown. */
    long resultOrThrow() {
        if (error != null) {
            // a fresh exception per throw site keeps the caller's stack; the UCX cause stays attached
            throw error;
        }
        return resultLength;
    }

    /** Keeps {@code buffer} reachable until the op completes (UCX holds its memory meanwhile). */
    public void keepAlive(Object buffer) {
        this.keepAlive = buffer;
    }

    public long senderTag() {
        return senderTag;
    }
}
