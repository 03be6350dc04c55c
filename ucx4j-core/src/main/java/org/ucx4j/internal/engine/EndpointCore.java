package org.ucx4j.internal.engine;

import java.util.List;
import java.util.UUID;
import java.util.function.Consumer;
import org.ucx4j.ConnectionResetException;
import org.ucx4j.EndpointClosedException;
import org.ucx4j.UcxException;
import org.ucx4j.internal.ffi.Status;

/**
 * Engine-side state of one connection. Fields without {@code volatile} belong to the worker's owner thread.
 * Tags: bit 63 set marks the endpoint-private space, bits 32..62 carry the receiving side's connection id, bits
 * 0..31 the user tag; worker-level tags have bit 63 clear.
 */
public final class EndpointCore {
    public static final long PRIVATE_BIT = 1L << 63;
    static final int CONNECTING = 0, OPEN = 1, CLOSING = 2, FAILED = 3, CLOSED = 4;

    final Engine engine;
    final UUID id = UUID.randomUUID();
    final int localConnId;
    final boolean client;
    final String peer;
    int slot = -1;
    long handle;
    int peerConnId;
    final PeerStats stats = new PeerStats();
    /** Receiver-allocated messages by kind (plain active messages, frames, objects); owner thread. */
    final Inbox[] inboxes = {new Inbox(this), new Inbox(this), new Inbox(this)};
    /** Rendezvous active messages of this endpoint being pulled now (owner thread; see AmReceiver). */
    int pullsInFlight;
    /** The application closed this endpoint: messages nobody read are freed (owner thread). */
    boolean unreadDiscarded;
    /** The peer closed gracefully (its goodbye, or a loopback twin's close), after flushing its sends (owner thread). */
    boolean peerSaidBye;
    /** Completes when the peer acknowledged this side's goodbye, or its control socket ended. */
    final java.util.concurrent.CompletableFuture<Void> byeAcknowledged = new java.util.concurrent.CompletableFuture<>();

    /** Stream bytes the peer sent before its graceful close that no receive took (owner thread; null: none). */
    HeldStream heldStream;

    /**
     * Whether what the peer sent before it closed stays receivable here (owner thread): tag messages from the
     * worker's queue, stream bytes from {@link #heldStream}; after the peer's graceful close, until the application
     * closes this endpoint. Not after a peer's death, where a message split into fragments may have arrived in part
     * only; not for a raw endpoint, whose tags are the worker's.
     */
    boolean keepsArrived() {
        return peerSaidBye && !raw && !closedLocally && !unreadDiscarded;
    }

    /** The mask that matches every private tag of this endpoint's connection id. */
    static final long CONNECTION_MASK = 0xffffffff00000000L;

    /** True when no message waits in any inbox (owner thread). */
    boolean inboxesEmpty() {
        for (Inbox in : inboxes) {
            if (!in.isEmpty()) {
                return false;
            }
        }
        return true;
    }
    /** Messages received so far (tag, stream, active message; not gets); owner thread. */
    long receivesCompleted;
    /** Close gracefully once this many receives have completed in total (-1: never); see closeAfterReceives. */
    volatile long closeAfter = -1;
    volatile Runnable closeAfterAction;
    /** Raw endpoint (worker address, no handshake): tags go on the wire as given. */
    volatile boolean raw;
    /** Owner thread: {@code ucp_ep_close_nbx} was called; the UCX endpoint may be gone before {@link #handle} is 0. */
    boolean closePosted;
    /**
     * A handshaked connection to this same worker. UCX connects an endpoint created from its own worker's address
     * to itself, so what one end streams lands on its own UCX endpoint: the other end receives streams from there.
     */
    boolean loopback;
    /**
     * The endpoint has a TCP lane (owner thread, set at creation). A socket error inside a send runs UCX's error
     * handling within that call, down to the endpoint's error callback and its pending requests' callbacks, so calls
     * that may send on it are never critical downcalls ({@link InCall#critical}).
     */
    boolean socketLane;
    /**
     * Larger sends go eagerly (owner thread, set at creation, before the endpoint opens; see {@link #tagSendAttrs}):
     * the endpoint is a ucx4j peer's, every lane a shared-memory FIFO ({@code posix}, {@code sysv}), UCX runs its
     * first protocols (before 1.16, or later with {@code UCX_PROTO_ENABLE=n}), the application allows it
     * ({@code UcxOptions.withEagerSends}) and left the rendezvous threshold to UCX. There UCX's rendezvous copies the
     * data through the same FIFO as an eager send, after a round trip to announce it and, for an active message, into
     * a block the receiver pulls into; an eager message is copied straight into the posted receive, or into the buffer
     * UCX assembles, which the receiver keeps as the payload where it keeps UCX's buffers (UCX 1.16 and later send
     * such messages eagerly by themselves). The costs: a message that arrives before its receive holds shared-memory
     * receive segments until taken, and a receiver's refusal no longer reaches the sender.
     */
    boolean eagerSends;
    /** ... and tag sends too ({@link Engine#eagerTagSendsAllowed}: not with a FIFO of more than 64 slots). */
    boolean eagerTagSends;
    /** Active messages up to this payload go eagerly where {@link #eagerSends} (UCX 1.20's own limit is ~540 KiB). */
    static final long EAGER_AM_MAX = 512 * 1024;
    /** ... and with a wire header up to this: UCX packs the header into the first fragment. */
    static final long EAGER_AM_HEADER_MAX = 1024;

    /**
     * The request attributes of a tag send larger than UCX's short protocol: {@code UCP_OP_ATTR_FLAG_FAST_CMPL} where
     * {@link #eagerTagSends} (UCX's first protocols then send eagerly below their "local" rendezvous threshold,
     * {@code RNDV_SEND_NBR_THRESH}, which ucx4j sets to 520 KiB unless the application did: the {@code tag_send_nbr}
     * row of {@code ucp_ep_print_info}), else none.
     */
    int tagSendAttrs() {
        return eagerTagSends ? org.ucx4j.internal.ffi.Structs.UCP_OP_ATTR_FLAG_FAST_CMPL : 0;
    }

    /**
     * The {@code ucp_am_send_nbx} flags of a contiguous active message: {@code UCP_AM_SEND_FLAG_EAGER} where
     * {@link #eagerSends} and the message is within {@link #EAGER_AM_MAX} and {@link #EAGER_AM_HEADER_MAX}, else 0
     * (UCX chooses).
     */
    int amSendFlags(long headerLength, long length) {
        return eagerSends && length <= EAGER_AM_MAX && headerLength <= EAGER_AM_HEADER_MAX
                ? org.ucx4j.internal.ffi.Structs.UCP_AM_SEND_FLAG_EAGER : 0;
    }

    /** The other end of a loopback connection, once both are open (owner thread). */
    EndpointCore twin;
    /** Stream receives of a loopback end that wait for the other end to open (owner thread; created on need). */
    java.util.ArrayDeque<Op> waitingForTwin;
    /** This endpoint's number among the UCX endpoints its worker created to the peer worker (owner thread). */
    long number = -1;
    /** Its handshake gave up before the endpoint was created (see {@link EndpointOrder}). */
    volatile boolean abandoned;
    /**
     * The arbiter's endpoint of a handshake lost before the peer confirmed its own: kept open, unused, until the
     * peer's filler closes it (a UCX error here) or the worker closes ({@link Connections#park}).
     */
    boolean parked; // owner thread
    /** Its handshake failed where the peer may still fill its number: kept rather than closed ({@link Connections#park}). */
    volatile boolean keepOnFailure;
    long peerPid;
    String peerHost;
    /** The handshake socket, kept open as the liveness channel (null for raw endpoints). */
    volatile java.net.Socket control;
    volatile int state = CONNECTING;
    volatile UcxException failure;
    volatile boolean closedLocally;
    /** A graceful close flushed every send: nothing is left in flight. */
    public volatile boolean flushed;
    /** Its operations UCX holds a request for (owner thread). */
    final PendingOps pending = new PendingOps();
    /** Flushes of this endpoint UCX holds a request for (owner thread); its close waits for them. */
    int flushesInUcx;
    /** The close put off until {@link #flushesInUcx} is 0 (owner thread; {@link Connections#abortOnOwner}). */
    Op closeAfterFlushes;
    final SafeFuture<Void> closed;
    /** Close callbacks not yet run; guarded by itself, with {@link #callbacksFired} and {@link #closeCause}. */
    private final List<Consumer<Throwable>> closeCallbacks = new java.util.ArrayList<>();
    private boolean callbacksFired;
    private Throwable closeCause;
    /** Takes plain active messages on the owner thread instead of the inbox, once set (owner thread writes). */
    Consumer<AmData> amHandler;
    private final java.util.concurrent.atomic.AtomicBoolean amHandlerClaimed =
            new java.util.concurrent.atomic.AtomicBoolean();

    /** True for the one caller that may set this endpoint's active-message handler. */
    public boolean claimAmHandler() {
        return amHandlerClaimed.compareAndSet(false, true);
    }

    public boolean hasAmHandler() {
        return amHandlerClaimed.get();
    }

    /** What a receive of plain active messages fails with on an endpoint that has a handler. */
    public static IllegalStateException handlerSet() {
        return new IllegalStateException("active messages of this endpoint go to its handler (onActiveMessage), "
                + "not to amRecv");
    }

    /**
     * Why a receive of {@code kind} waiting on this endpoint can never be answered (owner thread): plain active
     * messages go to the handler set meanwhile. Null otherwise.
     */
    IllegalStateException handlerTakes(byte kind) {
        return kind == AmWire.PLAIN && amHandler != null ? handlerSet() : null;
    }
    /** Set by the API layer: the public object handed to users. */
    public volatile Object facade;

    EndpointCore(Engine engine, int localConnId, boolean client, String peer) {
        this.engine = engine;
        this.localConnId = localConnId;
        this.client = client;
        this.peer = peer;
        this.closed = new EngineFuture<>(engine); // a wait on it drives the worker (caller mode's owner too)
    }

    public UUID id() {
        return id;
    }

    public String peer() {
        return peer;
    }

    public PeerStats stats() {
        return stats;
    }

    /** Arms a close after {@code n} more receives complete; {@code action} runs off the progress thread. */
    public void closeAfterReceives(long n, Runnable action) {
        closeAfterAction = action;
        engine.execute(() -> {
            closeAfter = receivesCompleted + n;
            engine.requests.checkCloseAfter(this);
        });
    }

    public boolean isRaw() {
        return raw;
    }

    public long peerPid() {
        return peerPid;
    }

    public String peerHost() {
        return peerHost;
    }

    /**
     * Tells the peer over the control socket that this side closes gracefully; true if there is a peer to answer
     * ({@link Engine#awaitByeAcknowledged}), false for a raw endpoint, which has no goodbye.
     */
    public boolean sayBye() {
        if (control == null) {
            return false;
        }
        Bootstrap.sayBye(this);
        return true;
    }

    public boolean isAlive() {
        return state == OPEN;
    }

    public boolean isClosed() {
        return state == CLOSED;
    }

    public Engine engine() {
        return engine;
    }

    /** Completes (normally) when the endpoint is fully released; after a peer failure the callbacks get the cause. */
    public SafeFuture<Void> closedFuture() {
        return closed;
    }

    public void onClose(Consumer<Throwable> callback) {
        Throwable cause;
        synchronized (closeCallbacks) {
            if (!callbacksFired) {
                closeCallbacks.add(callback);
                return;
            }
            cause = closeCause;
        }
        // already closed: run now on the caller, unless that is the progress thread or a call inside UCX's progress
        // (an active-message handler); a caller-mode owner's own code is the caller's
        Thread me = Thread.currentThread();
        if (me == engine.progressThread() || me == engine.owner && !engine.ownsOutsideProgress()) {
            Throwable c = cause;
            engine.executor.execute(() -> callback.accept(c));
        } else {
            callback.accept(cause);
        }
    }

    /** The release's side: from now on callbacks run when added; returns those registered so far, once. */
    java.util.List<Consumer<Throwable>> fireCloseCallbacks(Throwable cause) {
        synchronized (closeCallbacks) {
            callbacksFired = true;
            closeCause = cause;
            java.util.List<Consumer<Throwable>> all = java.util.List.copyOf(closeCallbacks);
            closeCallbacks.clear();
            return all;
        }
    }

    /** Wire tag for a message this side sends to the peer's endpoint. */
    public long sendTag(int userTag) {
        if (raw) {
            return userTag & 0xffffffffL;
        }
        return PRIVATE_BIT | ((long) peerConnId << 32) | (userTag & 0xffffffffL);
    }

    /** Tag that matches messages the peer sent to this endpoint with {@code userTag}. */
    public long recvTag(int userTag) {
        if (raw) {
            return userTag & 0xffffffffL;
        }
        return PRIVATE_BIT | ((long) localConnId << 32) | (userTag & 0xffffffffL);
    }

    /** The exception for an operation that finds this endpoint unusable, or null if it is open. */
    UcxException unusable(String what) {
        UcxException f = failure;
        if (f != null) {
            return new ConnectionResetException(what + " on endpoint to " + peer + ": " + f.getMessage(), f.status(), f);
        }
        if (state == OPEN) {
            return null;
        }
        if (state == CONNECTING) {
            return new EndpointClosedException(what + ": endpoint to " + peer + " is not connected yet ("
                    + Status.name(Status.ERR_NOT_CONNECTED) + ")", Status.ERR_NOT_CONNECTED);
        }
        return new EndpointClosedException(what + ": endpoint to " + peer + " is closed ("
                + Status.name(Status.ERR_NOT_CONNECTED) + ")", Status.ERR_NOT_CONNECTED);
    }

    @Override
    public String toString() {
        return "Endpoint[" + id + " peer=" + peer + " conn=" + localConnId + "/" + peerConnId + "]";
    }
}
