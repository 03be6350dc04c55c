package org.ucx4j.internal.engine;

/** Switches for tests that must reach paths the installed UCX never takes; not for applications. */
public final class TestHooks {
    private TestHooks() {}

    /** {@return the handshake protocol version this build speaks} (tests that write a hello by hand) */
    public static int handshakeVersion() {
        return Handshake.VERSION;
    }

    /**
     * With {@code false}, sends made inside the call (owner thread) no longer ask UCX to complete there, so UCX
     * hands back a request for whatever it cannot finish at once: the path UCX 1.20 stream sends take anyway.
     * Set it before the worker's owner thread sends; restore it after.
     */
    public static void forceImmediateSends(boolean force) {
        InCall.sendNowFlag = force ? org.ucx4j.internal.ffi.Structs.UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL : 0;
    }

    /** A send made inside a call was kept off a critical downcall by its endpoint's TCP lane (any engine). */
    static boolean socketKeptSendRegular; // plain, as lastBorrower

    /** Whether a send was kept off a critical downcall by a TCP lane since the last call; clears the flag. */
    public static boolean takeSocketKeptSendRegular() {
        boolean b = socketKeptSendRegular;
        socketKeptSendRegular = false;
        return b;
    }

    /** Payloads kept in UCX's buffers that were still open when the last worker with such payloads closed. */
    static volatile int heldOpenAtClose;

    public static int heldOpenAtClose() {
        return heldOpenAtClose;
    }

    /** The thread that last asked to borrow a worker from its progress thread (any engine). */
    static Thread lastBorrower; // plain: written on every borrow, read by tests on the thread that borrowed

    public static Thread lastBorrower() {
        return lastBorrower;
    }

    public static void clearLastBorrower() {
        lastBorrower = null;
    }

    /** The thread other than a progress thread that last posted an operation to UCX (any engine); written on change. */
    static Thread lastPoster; // plain, as lastBorrower

    public static Thread lastPoster() {
        return lastPoster;
    }

    public static void clearLastPoster() {
        lastPoster = null;
    }

    /**
     * Runs on the thread that closes a worker it does not own, after it has asked the worker's thread to stop and
     * before it wakes that thread; it is given the future of the worker's destruction (a test waits for it there).
     */
    static volatile java.util.function.Consumer<java.util.concurrent.Future<Void>> beforeShutdownWake;

    public static void beforeShutdownWake(java.util.function.Consumer<java.util.concurrent.Future<Void>> hook) {
        beforeShutdownWake = hook;
    }

    /**
     * The next {@code n} handshakes lose their connection before the endpoint's number reaches the other side: on
     * the arbiter's side right before it sends the number ({@code arbiter}), else on the other side right after it
     * said it is ready for it.
     */
    private static final java.util.concurrent.atomic.AtomicInteger dropNumbers =
            new java.util.concurrent.atomic.AtomicInteger();
    private static volatile boolean dropAtArbiter;

    public static void dropEndpointNumbers(int n, boolean arbiter) {
        dropAtArbiter = arbiter;
        dropNumbers.set(n);
    }

    /** Runs on an accepted connection's thread after its handshake, right before it goes to the listener's handler. */
    static volatile Runnable beforeHandOver;

    public static void beforeHandOver(Runnable hook) {
        beforeHandOver = hook;
    }

    /** Runs on a progress thread at each of its idle turns (to make it fail as an unexpected error would). */
    static volatile Runnable onIdleTurn;

    public static void onIdleTurn(Runnable hook) {
        onIdleTurn = hook;
    }

    /** Endpoints kept open after their handshake was lost ({@link Connections#park}), all engines. */
    static final java.util.concurrent.atomic.AtomicInteger parked = new java.util.concurrent.atomic.AtomicInteger();

    public static int parkedEndpoints() {
        return parked.get();
    }

    static boolean dropEndpointNumber(boolean arbiter) {
        return dropNumbers.get() > 0 && dropAtArbiter == arbiter && dropNumbers.getAndDecrement() > 0;
    }

    /** Active-message receives waiting in {@code ep}'s inbox (read off the owner thread: for a settled state). */
    public static int amReceivesWaiting(EndpointCore ep) {
        return ep.inboxes[AmWire.PLAIN].waiting();
    }

    /** Entries waiting in {@code ep}'s active-message inbox to be received (as {@link #amReceivesWaiting}). */
    public static int amEntriesReady(EndpointCore ep) {
        return ep.inboxes[AmWire.PLAIN].ready();
    }

    /** Ops ended as never started while UCX held their request (a broken invariant; any engine). */
    static final java.util.concurrent.atomic.AtomicInteger endedWhileUcxHeld =
            new java.util.concurrent.atomic.AtomicInteger();

    public static int endedWhileUcxHeld() {
        return endedWhileUcxHeld.get();
    }

    /** {@return {@code ep}'s local connection id, as its peer's messages name it} */
    public static int connectionId(EndpointCore ep) {
        return ep.localConnId;
    }

    /**
     * Makes {@code ep}'s later messages name connection {@code peerConnId} on the peer (a peer that forges another
     * connection's id); returns the id it named before. Call it while nothing is being sent on {@code ep}.
     */
    public static int retarget(EndpointCore ep, int peerConnId) {
        int was = ep.peerConnId;
        ep.peerConnId = peerConnId;
        return was;
    }

    /** Closes that waited for a flush UCX held on their endpoint or worker (any engine). */
    static final java.util.concurrent.atomic.AtomicInteger closesAfterFlushes =
            new java.util.concurrent.atomic.AtomicInteger();

    public static int closesAfterFlushes() {
        return closesAfterFlushes.get();
    }

    /**
     * How long an endpoint's close waits for the flushes UCX holds on it before it goes all the same (default
     * 200 ms); returns the previous bound, to restore.
     */
    public static long flushWaitBound(long millis) {
        long was = Connections.flushWaitBoundMs;
        Connections.flushWaitBoundMs = millis;
        return was;
    }

    /**
     * How long a close without peer error handling may flush before the endpoint is released all the same (default
     * 5 s); returns the previous bound, to restore.
     */
    public static long flushingCloseBound(long millis) {
        long was = Connections.flushingCloseBoundMs;
        Connections.flushingCloseBoundMs = millis;
        return was;
    }

    /** Endpoint closes handed to UCX ({@code ucp_ep_close_nbx}, any engine). */
    static final java.util.concurrent.atomic.AtomicInteger endpointClosesPosted =
            new java.util.concurrent.atomic.AtomicInteger();

    public static int endpointClosesPosted() {
        return endpointClosesPosted.get();
    }
}
