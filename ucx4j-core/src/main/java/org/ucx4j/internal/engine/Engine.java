package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;
import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.CanceledException;
import org.ucx4j.ConfigException;
import org.ucx4j.EndpointClosedException;
import org.ucx4j.ProgressMode;
import org.ucx4j.UcxException;
import org.ucx4j.UcxTimeoutException;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * One UCX context + worker and the thread that owns it. Every UCX call on the worker happens on the owner
 * thread (a progress thread, or the caller in {@link ProgressMode#CALLER}); other threads hand it {@link Op}s
 * through an intrusive MPSC queue and wake it with {@code ucp_worker_signal}. Completions come back through
 * upcall stubs created once per JVM; the hot path allocates nothing and takes no lock.
 */
public final class Engine {
    private static final Logger LOG = LoggerFactory.getLogger(Engine.class);
    /** Idle turns that poll again at once, then with a spin-wait hint, then yield, then sleep on the event fd. */
    private static final int HOT_SPINS = 1_000;
    private static final int SPINS = 4_000;
    /** Bounds of {@link #awaitSpins}: ~1.3 us and ~160 us of {@code Thread.onSpinWait} here. */
    private static final int MIN_AWAIT_SPINS = 32, MAX_AWAIT_SPINS = 4_000;
    private static final int YIELDS = 200;
    private static final int SLEEP_MS = 1000;

    /** Engine settings chosen by the API layer. */
    public record Config(String name, ProgressMode mode, Map<String, String> ucxOptions, boolean environmentWins,
            Executor executor, byte[] secret, long handshakeTimeoutNanos, org.ucx4j.MemoryAllocator allocator,
            int maxFrames, long maxMessageBytes, long pullBudget, boolean peerErrorHandling,
            int livenessSeconds, boolean ucxBuffers, boolean rma, int maxHandshakes, boolean hostMemoryOnly,
            boolean eagerSends) {}

    final int id;
    final String name;
    final ProgressMode mode;
    final Executor executor;
    private final Arena arena = Arena.ofShared();
    private final long context;
    /**
     * The memory types UCX can move here (a bit per {@code ucs_memory_type_t}), and whether every buffer is host
     * memory: UCX moves nothing else, or the application promised it ({@code UcxOptions.withHostMemoryOnly}). Only
     * then does every operation name its buffer host memory, which spares UCX a memory-type lookup per call; where
     * UCX also handles GPU memory (built with CUDA or ROCm, and a device present) UCX finds out for each buffer
     * itself, so a device pointer is never copied as if it were host memory.
     */
    public final long memoryTypes;
    final boolean hostOnly;
    /**
     * The application allows eager sends and left the rendezvous threshold to UCX: endpoints may send eagerly
     * ({@link EndpointCore#eagerSends}).
     */
    final boolean eagerSendsAllowed;
    /**
     * ... and so may tag sends: only with receive FIFOs of at most {@link #EAGER_TAG_FIFO_MAX} slots. On UCX 1.13
     * with 256 slots (UCX 1.16's default, which an application may set) a receiver whose eager tag messages of
     * several segments arrive before its receives fell behind and never caught up: UCX kept every segment of the
     * messages waiting, and the receiver's shared memory grew without bound (23 GB in 600 000 messages of 64 KiB),
     * where 64 slots held it at ~30 MB. Active messages, single-segment and rendezvous tag messages do not do that.
     */
    final boolean eagerTagSendsAllowed;
    /** UCX's own FIFO size before 1.16: the largest with which ucx4j asks for eager tag sends. */
    static final long EAGER_TAG_FIFO_MAX = 64;
    final long worker;
    /**
     * The largest active-message header UCX takes on this worker (its smallest transport's limit: a few KiB with
     * InfiniBand's UD, tens of KiB over shared memory and TCP). UCX up to 1.15, and later builds without parameter
     * checks, do not check it: a longer header aborts the process ("RTS is too big") or overruns a buffer.
     */
    public final long maxAmHeader;
    private final OpQueue queue = new OpQueue();
    private volatile boolean sleeping;
    /** Threads inside {@link #wake}; the worker is destroyed only once none is and no new one can signal it. */
    private final AtomicInteger waking = new AtomicInteger();
    private volatile boolean wakesClosed;
    volatile boolean stopRequested;
    private volatile boolean terminated;
    private final SafeFuture<Void> terminatedFuture;
    volatile Thread owner;
    /** {@link #owner} written with release semantics by borrowers (no fence on their hot path). */
    private static final VarHandle OWNER;

    static {
        try {
            OWNER = MethodHandles.lookup().findVarHandle(Engine.class, "owner", Thread.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }
    private final int efd;

    // ---- owner-thread state
    /** Operations UCX holds a request for, by the slot their callback names. */
    final OpSlots slots = new OpSlots();
    /** The endpoints: creation order, failure, close and release. */
    final Connections connections;
    /** Work for after the current progress call (owner thread): upcalls must not call back into UCX. */
    final ArrayDeque<Runnable> deferred = new ArrayDeque<>();
    /** Active messages in: inboxes, rendezvous pulls, handlers (owner thread). */
    final AmReceiver amReceiver;
    final MemorySegment reqParam;
    private final MemorySegment lenOut, pollfd, scratch;
    /** How ops become UCX requests and how they end (owner thread). */
    final Requests requests;
    /** Sends, puts and gets made inside the caller's call. */
    public final InCall inCall;
    private final byte[] workerAddress;
    final SharedMemoryCheck shmCheck;
    /** The shared-memory settings UCX needs equal on both sides of a same-host connection (see Handshake). */
    final String shmSettings;
    final byte[] secret;
    final long handshakeTimeoutNanos;
    /** Most handshakes one listener runs at once ({@code UcxOptions.withMaxHandshakes}). */
    final int maxHandshakes;
    /** A connection whose peer host stops answering its socket's keepalive probes fails after this long. */
    final int livenessSeconds;
    /** UCP_ERR_HANDLING_MODE_PEER on every endpoint (both ends of a connection must agree; see Handshake). */
    final boolean peerErrorHandling;
    /** Whether the context has UCX's RMA feature ({@code UcxOptions.withRma}). */
    final boolean rma;
    /** Live remote keys and memory registrations (owner thread), released before the worker and context go. */
    private final Registrations registrations;
    private int idle;
    /** Owner thread: inside ucp_worker_progress (upcalls, and whatever completing a future runs there). */
    private boolean inProgress;

    public Engine(Config cfg) {
        Ucp.ensureLoaded();
        this.name = cfg.name();
        this.mode = cfg.mode();
        this.executor = cfg.executor();
        this.secret = cfg.secret();
        this.handshakeTimeoutNanos = cfg.handshakeTimeoutNanos();
        this.maxHandshakes = cfg.maxHandshakes();
        this.livenessSeconds = cfg.livenessSeconds();
        this.peerErrorHandling = cfg.peerErrorHandling();
        this.rma = cfg.rma();
        this.terminatedFuture = new SafeFuture<>(executor);
        this.reqParam = arena.allocate(UCP_REQUEST_PARAM);
        this.lenOut = arena.allocate(JAVA_LONG);
        this.pollfd = arena.allocate(8);
        this.scratch = arena.allocate(256, 16);
        this.connections = new Connections(this, arena);
        int[] version = Ucp.version();
        this.recvInfoAtOnce = version[0] > 1 || version[1] >= 16;
        long ctx = 0, wrk = 0, types;
        boolean eager, eagerTags;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            long config = UcxConfig.read(cfg.ucxOptions(), cfg.environmentWins());
            try {
                MemorySegment p = a.allocate(UCP_PARAMS);
                p.set(JAVA_LONG, PARAMS_FIELD_MASK, UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME);
                p.set(JAVA_LONG, PARAMS_FEATURES, UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP
                        | UCP_FEATURE_AM | (cfg.rma() ? UCP_FEATURE_RMA : 0));
                MemorySegment nameSeg = arena.allocateFrom(name);
                p.set(JAVA_LONG, PARAMS_NAME, nameSeg.address());
                int st = Ucp.initVersion(p.address(), config, out.address());
                if (st != Status.OK) { // UCX logged why (a transport list that leaves nothing, a bad value...)
                    throw new ConfigException("ucp_init: " + Status.describe(st) + ": UCX could not start with this "
                            + "configuration; its own error line names the setting (UCX_* environment variables "
                            + "and UcxOptions.with)", st);
                }
                ctx = out.get(JAVA_LONG, 0);
                types = Ucp.contextMemoryTypes(ctx);
                eager = cfg.eagerSends() && UcxConfig.rendezvousLeftToUcx(config);
                eagerTags = eager && UcxConfig.largestFifo() <= EAGER_TAG_FIFO_MAX;
                Ucp.createMemtypeCache(); // stream sends' short protocol (see there)
            } finally {
                Ucp.configRelease(config);
            }
            wrk = createWorker(ctx, "ucp_worker_create");
            MemorySegment fd = a.allocate(JAVA_INT);
            int st = Ucp.workerGetEfd(wrk, fd.address());
            if (st != Status.OK) {
                throw UcxException.of(st, "ucp_worker_get_efd");
            }
            this.efd = fd.get(JAVA_INT, 0);
            this.workerAddress = Ucp.workerAddress(wrk);
            this.maxAmHeader = Ucp.workerMaxAmHeader(wrk);
            // the same-host check compares these only when both sides opened a shared-memory transport
            long opened = ctx;
            this.shmSettings = TransportInfo.resources(Ucp.capture(f -> Ucp.contextPrintInfo(opened, f))).stream()
                    .anyMatch(TransportInfo::isSharedMemory) ? UcxConfig.sharedMemorySettings() : "";
        } catch (RuntimeException | Error e) {
            released(wrk, ctx, -1);
            throw e;
        }
        this.context = ctx;
        this.memoryTypes = types;
        this.eagerSendsAllowed = eager;
        this.eagerTagSendsAllowed = eagerTags;
        this.hostOnly = cfg.hostMemoryOnly() || (memoryTypes & ~(1L << UCS_MEMORY_TYPE_HOST)) == 0;
        this.worker = wrk;
        int registered = -1;
        try {
            this.shmCheck = new SharedMemoryCheck(this, ctx, arena);
            this.amReceiver = new AmReceiver(this, cfg);
            this.registrations = new Registrations(ctx, hostOnly);
            this.requests = new Requests(this, scratch, lenOut);
            this.inCall = new InCall(this, arena);
            pollfd.set(JAVA_INT, 0, efd);
            pollfd.set(JAVA_SHORT, 4, (short) 1); // POLLIN
            this.id = registered = Upcalls.register(this);
            setAmHandler(AmWire.ID_UCX4J);
            setAmHandler(AmWire.ID_RAW);
        } catch (RuntimeException | Error e) { // (too many workers open, say): nothing stays behind
            released(wrk, ctx, registered);
            throw e;
        }
        if (mode == ProgressMode.CALLER) {
            owner = Thread.currentThread();
        } else {
            Thread t = Thread.ofPlatform().daemon().name("ucx4j-progress-" + name).unstarted(this::runLoop);
            owner = t;
            progressThread = t;
            t.start();
        }
    }

    /**
     * A worker of {@code ctx} that one thread at a time drives ({@code UCS_THREAD_MODE_SERIALIZED}: the progress
     * thread, or a thread it lends the worker to, or the caller-mode owner; never two at once).
     */
    static long createWorker(long ctx, String what) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            MemorySegment wp = a.allocate(UCP_WORKER_PARAMS);
            wp.set(JAVA_LONG, WP_FIELD_MASK, UCP_WORKER_PARAM_FIELD_THREAD_MODE);
            wp.set(JAVA_INT, WP_THREAD_MODE, UCS_THREAD_MODE_SERIALIZED);
            check(Ucp.workerCreate(ctx, wp.address(), out.address()), what);
            return out.get(JAVA_LONG, 0);
        }
    }

    private void setAmHandler(int amId) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p = a.allocate(UCP_AM_HANDLER_PARAM);
            p.set(JAVA_LONG, AHP_FIELD_MASK, UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS
                    | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG);
            p.set(JAVA_INT, AHP_ID, amId);
            p.set(JAVA_INT, AHP_FLAGS, UCP_AM_FLAG_WHOLE_MSG);
            p.set(JAVA_LONG, AHP_CB, Upcalls.AM_RECV.address());
            p.set(JAVA_LONG, AHP_ARG, ((long) amId << 32) | id);
            check(Ucp.setAmRecvHandler(worker, p.address()), "ucp_worker_set_am_recv_handler");
        }
    }

    static void check(int status, String what) {
        if (status != Status.OK) {
            throw UcxException.of(status, what);
        }
    }

    public long contextHandle() {
        return context;
    }

    public long workerHandle() {
        return worker;
    }

    public boolean isOwnerThread() {
        return Thread.currentThread() == owner;
    }

    /**
     * Whether the calling thread may keep receive blocks for the worker ({@link OwnerBlocks}): it drives the worker,
     * and no close has been asked for (a caller-mode owner that never comes back after another thread's close would
     * otherwise keep them past the pool's own close).
     */
    boolean keepsBlocks() {
        return Thread.currentThread() == owner && !stopRequested;
    }

    /**
     * One {@code ucp_worker_progress} outside the duty cycle (owner thread), marked as a progress call like the duty
     * cycle's: callbacks inside it see {@link #ownsOutsideProgress} false.
     */
    int progressNested() {
        boolean was = inProgress;
        inProgress = true;
        try {
            return Ucp.workerProgress(worker);
        } finally {
            inProgress = was;
        }
    }

    /** Whether this thread drives the worker now and is outside UCX's progress call (a UCX call may be made). */
    boolean ownsOutsideProgress() {
        return Thread.currentThread() == owner && !inProgress;
    }

    /**
     * Marks the start of a UCX call other than progress that may run completion callbacks ({@code
     * ucp_request_cancel}, a forced {@code ucp_ep_close_nbx}, the worker's destroy) and of the completions ucx4j
     * delivers right after it (owner thread): code a completion runs there (a dependent of {@code allOf}, say) is
     * refused a blocking call on this worker as inside progress ({@link #checkNotInProgress}), since the wait would
     * drive the worker nested in that call (a re-entered UCX, or a destroyed worker) or wait for what only the loop
     * around it would end. Returns the mark to restore ({@link #endCallbacks}).
     */
    boolean beginCallbacks() {
        boolean was = inProgress;
        inProgress = true;
        return was;
    }

    /** Ends {@link #beginCallbacks}, restoring the mark it returned. */
    void endCallbacks(boolean was) {
        inProgress = was;
    }

    public boolean isTerminated() {
        return terminated;
    }

    public Executor executor() {
        return executor;
    }

    // ============================================================== submission (any thread)

    /** A fresh op for the API layer. */
    public Op newOp() {
        return new Op(this);
    }

    /** One spare blocking op per thread: blocking calls then allocate nothing per message. */
    private static final ThreadLocal<Op[]> SPARE = ThreadLocal.withInitial(() -> new Op[1]);
    private static final Executor DIRECT = Runnable::run;

    /**
     * The caller-mode owner thread's spare blocking op (no thread-local lookup on its path). Not a borrower's: it
     * takes an op while it owns the worker and recycles it once it has given the worker back.
     */
    private Op ownerSpare;

    /** The caller-mode owner thread (not a thread that borrowed the worker from the progress thread). */
    private boolean onCallerOwner() {
        return progressThread == null && Thread.currentThread() == owner;
    }

    private Op op(boolean blocking) {
        if (!blocking) {
            return new Op(this);
        }
        Op op;
        if (onCallerOwner()) {
            op = ownerSpare;
            ownerSpare = null;
        } else {
            Op[] spare = SPARE.get();
            op = spare[0];
            spare[0] = null;
        }
        if (op == null) {
            op = new Op(DIRECT);
            op.pooled = true;
        }
        op.reuse(this);
        return op;
    }

    /** {@link #op(boolean)} for an operation of {@code kind} on {@code ep} (null: the worker). */
    private Op op(byte kind, String what, EndpointCore ep, boolean blocking) {
        Op op = op(blocking);
        op.kind = kind;
        op.what = what;
        op.ep = ep;
        op.blocking = blocking;
        return op;
    }

    private void recycle(Op op) {
        if (op.pooled && !op.cancelRequested && op.slot < 0 && op.request == 0) {
            op.park();
            if (onCallerOwner()) {
                ownerSpare = op;
            } else {
                SPARE.get()[0] = op;
            }
        }
    }

    public Op tagSend(EndpointCore ep, long address, long length, long tag, long owned, boolean blocking) {
        Op op = op(Op.TAG_SEND, "send", ep, blocking);
        op.address = address;
        op.length = length;
        op.tag = tag;
        op.owned = owned;
        return op;
    }

    /**
     * Opens a call that may act inside it ({@link InCall#tagSend} and the like, and, where those cannot, posting the
     * ordinary operation): a thread that does not own the worker borrows it for the call — a blocking call waits
     * for the progress thread to hand it over ({@link #borrowFor}); an asynchronous one takes it only if nobody
     * drives it now ({@link #borrowIdleFor}) — so that what it starts is posted by this thread, not handed to the
     * progress thread through the queue (a send too large for UCX's short protocol, say). True when it borrowed:
     * {@link #leaveCall} then gives the worker back. {@code deadline}: when a blocking call's wait ends
     * ({@link #deadline}); the wait for the hand-over ends by it too, and a call whose deadline passed before it
     * could borrow the worker ends as a timeout ({@code what} names it) without reaching UCX, its endpoint intact.
     */
    public boolean enterCall(EndpointCore ep, boolean blocking, long deadline, String what) {
        if (Thread.currentThread() == owner) {
            return false;
        }
        if (!blocking) {
            return borrowIdleFor(ep);
        }
        if (borrowFor(ep, deadline)) {
            return true;
        }
        if (deadline != Long.MAX_VALUE && System.nanoTime() - deadline >= 0 && ep.state == EndpointCore.OPEN
                && ep.failure == null) { // (an endpoint that cannot take it says why on the ordinary way)
            throw new UcxTimeoutException(what + " timed out before it reached UCX: the worker's thread did not hand "
                    + "it over in time, and UCX was given nothing (" + Status.name(Status.ERR_TIMED_OUT) + ")",
                    Status.ERR_TIMED_OUT);
        }
        return false;
    }

    /**
     * Closes a call {@link #enterCall} opened; {@code next}: the operation a blocking call waits for next (it then
     * borrows the worker again at once, see {@link #giveBack(Op)}), else null.
     */
    public void leaveCall(boolean borrowed, Op next) {
        if (borrowed) {
            giveBack(next);
        }
    }

    /** {@code Ucx.progress()}: refused from code a completion runs inside UCX's own call (see checkNotInProgress). */
    public void checkProgressAllowed() {
        checkNotInProgress("progress()");
    }

    /**
     * A blocking wait on the owner thread must progress the worker, which UCX forbids inside its own callbacks: code
     * that a completion runs there (a dependent of {@code CompletableFuture.allOf} on a ucx4j future, say) gets a
     * clear error instead.
     */
    private void checkNotInProgress(String what) {
        if (inProgress && !terminated) { // the worker's destroy leaves the mark (see shutdownOnOwner): gone then
            throw new IllegalStateException(what + ": a blocking call from code running inside UCX progress (a "
                    + "completion on the worker's own thread); use the async form, or continue on another thread "
                    + "(thenApplyAsync)");
        }
    }

    /**
     * Refuses a blocking call made from code that runs inside UCX's progress on the owner thread (a completion's
     * dependent run there), before the call changes anything; nothing elsewhere.
     */
    public void checkMayBlock(String what) {
        if (Thread.currentThread() == owner) {
            checkNotInProgress(what);
        }
    }

    /** The owner thread may send or receive inside the call: endpoint open, worker running, no transfer recording. */
    boolean ownerMayActNow(EndpointCore ep) {
        return Thread.currentThread() == owner && !inProgress && !stopRequested && ep.state == EndpointCore.OPEN
                && ep.failure == null && !(Jfr.AVAILABLE && Jfr.transfers);
    }

    private DoneFuture lastDone;
    /** {@link #lastDone} of a thread that sent with a borrowed worker, given back by now. */
    private static final ThreadLocal<DoneFuture[]> LAST_DONE = ThreadLocal.withInitial(() -> new DoneFuture[1]);

    /**
     * A completed future of {@code length}: on the owner thread shared by consecutive sends of one size; a new one
     * on a thread that made its send with a borrowed worker it has given back.
     */
    public SafeFuture<Long> completed(long length) {
        if (Thread.currentThread() != owner) {
            DoneFuture[] mine = LAST_DONE.get();
            DoneFuture d = mine[0];
            if (d == null || d.value != length || d.defaultExecutor() != executor) {
                mine[0] = d = new DoneFuture(executor, length);
            }
            return d;
        }
        DoneFuture d = lastDone;
        if (d == null || d.value != length) {
            lastDone = d = new DoneFuture(executor, length);
        }
        return d;
    }

    public Op tagRecv(EndpointCore ep, long address, long length, long tag, long mask, long owned, byte[] copyBack,
            boolean blocking) {
        Op op = op(Op.TAG_RECV, "recv", ep, blocking);
        op.address = address;
        op.length = length;
        op.tag = tag;
        op.mask = mask;
        op.owned = owned;
        op.copyBack = copyBack;
        return op;
    }

    /**
     * Probes the worker for an unexpected tag message ({@code ucp_tag_probe_nb}); {@code {handle, senderTag,
     * length}}, or null if none matches. With {@code remove} the message is taken out of UCX's queue and must be
     * received with {@link #probedRecv}; without, the handle is 0 and the message stays for any receive.
     */
    public long[] tagProbe(long tag, long mask, boolean remove) {
        return onOwner("probe", () -> {
            long msg = Ucp.tagProbeNb(worker, tag, mask, remove, scratch.address());
            if (msg == 0) {
                return null;
            }
            return new long[] {remove ? msg : 0, scratch.get(JAVA_LONG, TRI_SENDER_TAG),
                    scratch.get(JAVA_LONG, TRI_LENGTH)};
        });
    }

    /** {@link #tagRecvNow}: the call could not receive; take the ordinary path. */
    public static final long NOT_NOW = -1;

    /**
     * Owner thread, blocking tag receive: takes a message that already waits by its probe handle inside the call
     * (the receiver's side of {@link InCall#tagSend}): an eager message that fits completes at once, with no op, no
     * request and no upcall; a rendezvous one is waited for here (polled); one too long for the buffer goes the
     * probed-receive way, which reports the truncation. A message not there yet is received by a posted request
     * this thread polls ({@link #spinPolled}), and if it takes longer, tested by whoever drives the worker. Another
     * thread borrows the worker for the call ({@link #borrowFor}) and gives it back before it waits longer. Returns
     * the length, or {@link #NOT_NOW} (a thread that cannot borrow the worker, endpoint not open, a flight
     * recording wants transfers). {@code deadline}: when a wait of {@code timeoutNanos} (negative: none) by a thread
     * other than the owner ends ({@link #deadline}).
     */
    public long tagRecvNow(EndpointCore ep, long address, long length, long tag, long timeoutNanos,
            long deadline) {
        boolean borrowed = false;
        if (Thread.currentThread() != owner) {
            if (!borrowFor(ep, deadline)) {
                return NOT_NOW;
            }
            borrowed = true;
        }
        Op waiting;
        try {
            if (!ownerMayActNow(ep)) {
                return NOT_NOW;
            }
            long n = recvInfoAtOnce ? tagRecvWithInfo(ep, address, length, tag) : tagRecvProbed(ep, address, length,
                    tag);
            if (n != PENDING) {
                return n;
            }
            waiting = pendingNow;
            pendingNow = null;
        } finally {
            if (borrowed) {
                giveBack(); // the receive still pending completes by whoever drives the worker next (polled)
            }
        }
        // a borrower's wait to borrow and its polling came out of the bound (the owner's polling is microseconds)
        return await(waiting, borrowed ? timeLeft(timeoutNanos, deadline) : timeoutNanos);
    }

    /**
     * When a blocking call of {@code timeoutNanos} (negative: no bound) made now must end, for a thread that may
     * have to borrow the worker first; {@link Long#MAX_VALUE} (no clock read) where it need not know.
     */
    public long deadline(long timeoutNanos) {
        return timeoutNanos < 0 || Thread.currentThread() == owner ? Long.MAX_VALUE : System.nanoTime() + timeoutNanos;
    }

    /** What is left of a wait of {@code timeoutNanos} (negative: no bound) that ends at {@code deadline}. */
    public static long timeLeft(long timeoutNanos, long deadline) {
        return timeoutNanos < 0 || deadline == Long.MAX_VALUE ? timeoutNanos
                : Math.max(0, deadline - System.nanoTime());
    }

    /** Releases what a constructor that failed had made: the upcall registration, the worker, the context. */
    private void released(long wrk, long ctx, int registered) {
        if (registered >= 0) {
            Upcalls.unregister(registered);
        }
        if (wrk != 0) {
            Ucp.workerDestroy(wrk);
        }
        if (ctx != 0) {
            Ucp.cleanup(ctx);
        }
        arena.close();
    }

    /** {@link #tagRecvProbed}/{@link #tagRecvWithInfo}: the receive is pending as {@link #pendingNow}. */
    private static final long PENDING = -2;
    /** The op a {@link #PENDING} receive left for its caller to wait for (owner thread, read at once). */
    private Op pendingNow;

    /**
     * A thread that does not own the worker borrows it for one blocking call ({@link #borrow}) when that call could
     * act on the endpoint now; false when it cannot (no progress thread, lending off, another borrower, closing).
     * The call then costs no hand-off to the progress thread and back: no queue, no op, no upcall. The wait for the
     * hand-over ends by {@code deadline} ({@code Long.MAX_VALUE}: none), the call's own.
     */
    private boolean borrowFor(EndpointCore ep, long deadline) {
        return ep.state == EndpointCore.OPEN && ep.failure == null && !(Jfr.AVAILABLE && Jfr.transfers)
                && borrowBy(deadline) && drainedOrGiveBack();
    }

    /**
     * {@link #borrowFor} for an asynchronous call, which must not wait: only a worker nobody drives now (given back
     * by a borrower, not yet taken back by the progress thread) is taken.
     */
    private boolean borrowIdleFor(EndpointCore ep) {
        return ep.state == EndpointCore.OPEN && ep.failure == null && !(Jfr.AVAILABLE && Jfr.transfers)
                && borrow(false) && drainedOrGiveBack();
    }

    /** How many queued ops a borrowing call posts before it gives up acting inside the call. */
    private static final int DRAIN_MAX = 4096;

    /**
     * Owner thread: posts what other threads (and this one, before it borrowed) queued, so that a call made inside
     * the call comes after this thread's earlier ones: sends on an endpoint go out, and receives match, in the
     * order they were made. False when the queue did not empty within {@link #DRAIN_MAX} ops.
     */
    private boolean drainQueue() {
        Op op;
        for (int i = 0; i < DRAIN_MAX; i++) {
            if ((op = queue.poll()) == null) {
                if (queue.isEmpty()) {
                    return true;
                }
                Thread.onSpinWait(); // another thread is half-way through an offer: its op (or one before) is next
                continue;
            }
            if (op.claimQueued()) { // else its waiter took it back (withdraw) and finishes it itself
                requests.dispatch(op);
            }
        }
        return queue.isEmpty();
    }

    /** {@link #drainQueue} right after a borrow: gives the worker back if it fails, or throws. */
    private boolean drainedOrGiveBack() {
        boolean drained = false;
        try {
            drained = drainQueue();
        } finally {
            if (!drained) {
                giveBack();
            }
        }
        return drained;
    }

    /** {@link #tagRecvNow} on UCX < 1.16, which reports no length for a receive completed inside the call. */
    private long tagRecvProbed(EndpointCore ep, long address, long length, long tag) {
        long msg = Ucp.tagProbeNb(worker, tag, -1L, true, scratch.address());
        if (msg == 0) {
            // nothing waits: post the receive (nothing progressed since the probe, so UCX can only queue it) and
            // poll it from here, without an op, a slot or an upcall
            setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL, 0, 0, 0);
            long r = Ucp.tagRecvQueued(worker, address, length, tag, -1L, reqParam.address());
            long startedAt = length >= PeerStats.LARGE ? System.nanoTime() : 0;
            long n = Status.isError(r) ? -1 : spinPolled(ep, r, startedAt);
            return n >= 0 ? n : polledOp(ep, address, length, tag, r, startedAt);
        }
        long len = scratch.get(JAVA_LONG, TRI_LENGTH);
        long senderTag = scratch.get(JAVA_LONG, TRI_SENDER_TAG);
        if (len > length) {
            Op op = probedRecv(ep, msg, senderTag, len, address, length, 0, null, true);
            submit(op); // this thread owns the worker: posted at once, reports the truncation
            pendingNow = op;
            return PENDING;
        }
        setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE, 0, 0, 0); // no callback: done at once, or a request to poll
        long r = Ucp.tagMsgRecvNbx(worker, address, length, msg, reqParam.address());
        if (r == 0) {
            ep.stats.received(len, 0);
            requests.receiveCompleted(ep);
            return len;
        }
        // rendezvous: the payload is still on its way (the start time feeds the per-peer bandwidth figures)
        return polledOp(ep, address, length, tag, r, len >= PeerStats.LARGE ? System.nanoTime() : 0);
    }

    /**
     * A tag receive UCX did not finish inside the call: {@code r} is its request (posted without a callback, and
     * tested by whoever drives the worker: {@link #testPolled}) or the error UCX gave at once. Leaves the op in
     * {@link #pendingNow}.
     */
    private long polledOp(EndpointCore ep, long address, long length, long tag, long r, long startedAt) {
        Op op = tagRecv(ep, address, length, tag, -1L, 0, null, true);
        op.waitedBy(Thread.currentThread());
        if (Status.isError(r)) {
            op.finish(0, 0, requests.errorFor(op, (int) r));
        } else {
            op.startedAt = startedAt;
            slots.alloc(op);
            op.request = r;
            op.polled = true;
            requests.linkPending(op);
        }
        pendingNow = op;
        return PENDING;
    }

    /** UCX 1.16 and later report length and tag of a tag receive that completes inside the call (recv_info). */
    final boolean recvInfoAtOnce;

    /**
     * {@link #tagRecvNow} on UCX >= 1.16: one {@code ucp_tag_recv_nbx} that reports length and tag when it completes
     * at once ({@code recv_info}) takes a message that already waits without a probe, and queues the receive for
     * one still to come (then polled by this thread, no upcall).
     */
    private long tagRecvWithInfo(EndpointCore ep, long address, long length, long tag) {
        setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_RECV_INFO, 0, 0, 0);
        reqParam.set(JAVA_LONG, RP_RECV_INFO, scratch.address());
        long startedAt = length >= PeerStats.LARGE ? System.nanoTime() : 0;
        long r = Ucp.tagRecvNbx(worker, address, length, tag, -1L, reqParam.address(),
                Requests.mayTakeFromSocket(ep));
        if (r == 0) {
            long len = scratch.get(JAVA_LONG, TRI_LENGTH);
            ep.stats.received(len, startedAt);
            requests.receiveCompleted(ep);
            return len;
        }
        long n = Status.isError(r) ? -1 : spinPolled(ep, r, startedAt);
        return n >= 0 ? n : polledOp(ep, address, length, tag, r, startedAt);
    }

    /**
     * Owner thread: drives the worker for a tag receive it has just posted without a callback (request {@code r})
     * for as long as a reply would take in a ping-pong ({@link #HOT_SPINS} turns), with no op, no slot and no
     * pending-list entry; the request is tested after each progress call that did work. Returns the length when
     * it completed, or -1 to go on the ordinary way ({@link #polledOp}, with the same request): not done yet, an
     * error (that way maps it), or the endpoint is no longer open (the request is then canceled first, since the
     * endpoint's failure could not cancel a request it did not know).
     */
    private long spinPolled(EndpointCore ep, long r, long startedAt) {
        for (int turn = 1; turn <= HOT_SPINS; turn++) {
            if (progressOnce() == 0 && (turn & 63) != 0) {
                continue;
            }
            if (terminated) {
                // closed from code this progress call ran (a handler, caller mode): the request went with the
                // worker, and is not touched again
                throw closedError("recv");
            }
            int st = Ucp.tagRecvRequestTest(r, scratch.address());
            if (st == Status.OK) {
                long len = scratch.get(JAVA_LONG, TRI_LENGTH);
                Ucp.requestFree(r);
                ep.stats.received(len, startedAt);
                requests.receiveCompleted(ep);
                return len;
            }
            if (st != Status.INPROGRESS) {
                return -1;
            }
            if (ep.state != EndpointCore.OPEN || ep.failure != null || stopRequested) {
                boolean was = beginCallbacks();
                try {
                    Ucp.requestCancel(worker, r);
                } finally {
                    endCallbacks(was);
                }
                return -1;
            }
        }
        return -1;
    }

    /** Receives a message a removing probe took; {@code senderTag}/{@code messageLength} come from the probe. */
    public Op probedRecv(EndpointCore ep, long message, long senderTag, long messageLength, long address,
            long length, long owned, byte[] copyBack, boolean blocking) {
        Op op = tagRecv(ep, address, length, 0, 0, owned, copyBack, blocking);
        op.probed = message;
        op.tag = Math.min(messageLength, length); // reported length on immediate completion
        op.mask = senderTag;
        return op;
    }

    /** A stream send: bytes in order on the endpoint, no message boundaries. */
    public Op streamSend(EndpointCore ep, long address, long length, long owned, boolean blocking) {
        Op op = op(Op.STREAM_SEND, "stream send", ep, blocking);
        op.address = address;
        op.length = length;
        op.owned = owned;
        return op;
    }

    /** A stream receive of exactly {@code length} bytes ({@code waitAll}) or of whatever is available (>= 1). */
    public Op streamRecv(EndpointCore ep, long address, long length, boolean waitAll, long owned, byte[] copyBack,
            boolean blocking) {
        Op op = op(Op.STREAM_RECV, "stream recv", ep, blocking);
        op.address = address;
        op.length = length;
        op.mask = waitAll ? UCP_STREAM_RECV_FLAG_WAITALL : 0;
        op.owned = owned;
        op.copyBack = copyBack;
        return op;
    }

    /**
     * An active-message send: {@code header} (address, length) and the payload ({@code buffer}, {@code count} bytes
     * when contiguous, or {@code count} {@code ucp_dt_iov_t} entries) of {@code total} bytes.
     */
    public Op amSend(EndpointCore ep, int amId, long header, long headerLength, long buffer, long count,
            boolean iov, long total, long owned, boolean blocking) {
        Op op = op(Op.AM_SEND, "active message send", ep, blocking);
        op.amId = amId;
        op.header = header;
        op.headerLength = headerLength;
        op.address = buffer;
        op.length = count;
        op.datatype = iov ? UCP_DATATYPE_IOV : 0;
        op.total = total;
        op.owned = owned;
        return op;
    }

    /** An RMA put ({@code get == false}) or get of {@code length} bytes at {@code remoteAddress}. */
    public Op rma(EndpointCore ep, boolean get, long local, long length, long remoteAddress, long rkey,
            boolean blocking) {
        Op op = op(get ? Op.GET : Op.PUT, get ? "get" : "put", ep, blocking);
        op.address = local;
        op.length = length;
        op.tag = remoteAddress;
        op.rkey = rkey;
        return op;
    }

    /** Completes once every RMA and send issued before on {@code ep} (or on the whole worker if null) completed. */
    public Op rmaFlush(EndpointCore ep, boolean blocking) {
        Op op = op(Op.RMA_FLUSH, "flush", ep, blocking);
        return op;
    }

    /**
     * The next receiver-allocated message of {@code kind} on {@code ep} (null: from raw peers, worker-level).
     * Completes with the message, or fails when the endpoint is gone and nothing is left to read.
     */
    public EngineFuture<AmData> amTake(EndpointCore ep, byte kind) {
        checkNotRaw(ep);
        EngineFuture<AmData> f = new EngineFuture<>(this);
        if (Thread.currentThread() == owner) {
            takeNow(f, ep, kind);
            return f;
        }
        Op op = new Op(this);
        op.kind = Op.TASK;
        op.what = AmWire.receiveName(kind);
        op.task = () -> takeNow(f, ep, kind);
        op.keepAlive = f; // failed with the op if the worker closes before the task runs (Requests.failNow)
        submit(op);
        if (op.done && op.error != null) { // the worker is closed
            f.completeExceptionally(op.error);
        }
        return f;
    }

    /** Raw peers' messages carry no connection id: they are received worker-wide, never by an endpoint. */
    private static void checkNotRaw(EndpointCore ep) {
        if (ep != null && ep.raw) {
            throw new IllegalStateException("a raw endpoint's peer sends plain UCX active messages, which carry no "
                    + "ucx4j connection to tell its endpoint by: receive them with Ucx.amRecv()");
        }
    }

    /**
     * A blocking receive of the next message of {@code kind}. The owner thread (caller mode) takes it straight
     * from the inbox while it progresses the worker, with no future; any other thread waits on one.
     *
     * @return the message: an {@link AmData}, or, for an object that arrived whole, the {@code byte[]} it was
     *     received into
     */
    public Object amTakeBlocking(EndpointCore ep, byte kind, long timeoutNanos, String what) {
        checkNotRaw(ep);
        long deadline = timeoutNanos < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutNanos;
        if (Thread.currentThread() != owner) {
            // another thread borrows the worker and takes the message the same way while it arrives soon; after
            // that (or if it cannot borrow) it waits on a future the owner completes
            if (ep == null ? borrowBy(deadline) && drainedOrGiveBack() : borrowFor(ep, deadline)) {
                try {
                    Object m = takeDriving(ep, kind, timeoutNanos, deadline, what, true);
                    if (m != null) {
                        return m;
                    }
                } finally {
                    giveBack();
                }
            }
            long left = timeoutNanos < 0 ? -1 : Math.max(0, deadline - System.nanoTime());
            return awaitFuture(amTake(ep, kind), left, what);
        }
        checkNotInProgress(what);
        return takeDriving(ep, kind, timeoutNanos, deadline, what, false);
    }

    /**
     * The owner thread takes the next message of {@code kind} from the inbox while it progresses the worker, with
     * no future. A borrower ({@code borrowed}) gives up after {@link #borrowerIdleLimit} idle duty cycles (null), as
     * {@link #driveUntil} does.
     */
    private Object takeDriving(EndpointCore ep, byte kind, long timeoutNanos, long deadline, String what,
            boolean borrowed) {
        Inbox in = amReceiver.inbox(ep, kind);
        idle = 0;
        int idleTurns = 0;
        for (int turns = 1; ; turns++) {
            Object entry = in.poll();
            if (entry instanceof UcxException e) {
                throw e;
            }
            if (entry != null) {
                return entry;
            }
            IllegalStateException handled = ep == null ? null : ep.handlerTakes(kind); // set while this waited
            if (handled != null) {
                throw handled;
            }
            UcxException bad = stopRequested ? closedError(what) : ep == null ? null : ep.unusable(what);
            if (bad != null) {
                if (stopRequested) {
                    stopOnCallerOwner(); // caller mode, closed by another thread: released on the way out
                }
                throw bad;
            }
            boolean due = (turns & 63) == 0 || napping();
            if (due && Thread.currentThread().isInterrupted()) {
                throw new CanceledException(what + " interrupted (" + Status.name(Status.ERR_CANCELED) + ")",
                        Status.ERR_CANCELED);
            }
            if (timeoutNanos >= 0 && due && System.nanoTime() - deadline >= 0) {
                throw new UcxTimeoutException(what + " timed out after "
                        + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms (" + Status.name(Status.ERR_TIMED_OUT)
                        + ")", Status.ERR_TIMED_OUT);
            }
            if (progressOnce() != 0) {
                idle = 0;
                idleTurns = 0;
            } else if (!borrowed) {
                idleStep(WAITING);
            } else if (++idleTurns >= borrowerIdleLimit() || stopRequested) {
                return null;
            } else {
                borrowerPause(idleTurns);
            }
        }
    }

    private void takeNow(SafeFuture<AmData> f, EndpointCore ep, byte kind) {
        if (stopRequested) {
            f.completeExceptionally(closedError("receive"));
            return;
        }
        IllegalStateException handled = ep == null ? null : ep.handlerTakes(kind); // set after the caller checked
        if (handled != null) {
            f.completeExceptionally(handled);
            return;
        }
        Inbox in = amReceiver.inbox(ep, kind);
        in.take(f, ep == null ? null : ep.unusable(AmWire.receiveName(kind)));
    }

    /**
     * A thread about to wait for {@code f} (its {@code get}/{@code join}) drives the worker meanwhile where it can,
     * and returns when {@code f} is done, the time is up, the thread was interrupted, or it cannot (or may no
     * longer) drive: in caller mode the owner thread progresses until then (a {@code get()} there would otherwise
     * wait for nobody); another thread borrows the worker from the progress thread, as a blocking call does. The
     * caller then waits the ordinary way.
     */
    void help(SafeFuture<?> f, long timeoutNanos, boolean interruptible) {
        long deadline = timeoutNanos < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutNanos;
        int flags = (timeoutNanos < 0 ? 0 : TIMED) | (interruptible ? INTERRUPTIBLE : 0) | STOPS;
        if (Thread.currentThread() == owner) {
            // inside UCX's progress (a completion's dependent) nothing could complete f: refused, as a blocking
            // call there is; an AM handler runs after the progress call and drives the worker as a blocking call does
            checkNotInProgress(f instanceof Op op ? op.what + " (waiting on its future)" : "waiting on a future");
            // join() does not answer interrupts, and nobody else would complete f: it drives on regardless
            if (driveUntil(null, f, deadline, flags) == STOPPED) {
                // another thread closed the worker: released here (caller mode), or (inside a handler) what is
                // pending fails and this thread drives on until f has its outcome; nobody else could complete f now
                stopWhileWaiting();
                if (!terminated) {
                    driveUntil(null, f, deadline, flags & ~STOPS);
                } else if (!f.isDone()) {
                    f.completeExceptionally(closedError("wait"));
                }
            }
            if (stopRequested) {
                stopOnCallerOwner(); // f ended by the close itself (a handler's call failed it): released now
            }
        } else if (borrowBy(deadline)) {
            try {
                driveUntil(null, f, deadline, flags | INTERRUPTIBLE | BORROWED);
            } finally {
                giveBack();
            }
        }
    }

    /**
     * Waits for a future the owner thread completes: progresses the worker itself when called on the owner thread
     * (caller mode). On timeout the future is canceled; a value that won the race is returned, not lost.
     */
    public <T> T awaitFuture(SafeFuture<T> f, long timeoutNanos, String what) {
        long deadline = timeoutNanos < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutNanos;
        int flags = (timeoutNanos < 0 ? 0 : TIMED) | INTERRUPTIBLE; // an interrupt: f.get() below answers it
        if (Thread.currentThread() == owner) {
            checkNotInProgress(what);
            if (driveUntil(null, f, deadline, flags | STOPS) == STOPPED) { // as in help
                stopWhileWaiting();
                if (!terminated) {
                    driveUntil(null, f, deadline, flags);
                } else if (!f.isDone()) {
                    f.completeExceptionally(closedError(what));
                }
            }
        } else if (!f.isDone() && borrowBy(deadline)) { // as for an op (awaitDone)
            try {
                driveUntil(null, f, deadline, flags | STOPS | BORROWED);
            } finally {
                giveBack();
            }
        }
        try {
            return timeoutNanos < 0 ? f.get() : f.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            if (f.cancel(false)) {
                throw new UcxTimeoutException(what + " timed out after " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos)
                        + " ms (" + Status.name(Status.ERR_TIMED_OUT) + ")", Status.ERR_TIMED_OUT);
            }
            return f.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            if (!f.cancel(false) && !f.isCompletedExceptionally()) {
                return f.join(); // it arrived meanwhile: delivered, not dropped (the interrupt stays set)
            }
            throw new CanceledException(what + " interrupted (" + Status.name(Status.ERR_CANCELED) + ")",
                    Status.ERR_CANCELED, e);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof RuntimeException u) {
                throw u;
            }
            throw new UcxException(what + " failed: " + e.getCause(), 0, e.getCause());
        }
    }

    /** Hands an op to the owner thread (or runs it now when called on the owner thread). */
    public void submit(Op op) {
        if (op.blocking) {
            op.waitedBy(Thread.currentThread());
        }
        if (stopRequested) {
            Requests.freeOwned(op);
            op.finish(0, 0, closedError(op.what));
            return;
        }
        if (Thread.currentThread() == owner) {
            if (op.blocking && inProgress) { // refused before UCX sees it: nothing is left posted
                Requests.freeOwned(op);
                checkNotInProgress(op.what);
            }
            requests.post(op);
            return;
        }
        enqueue(op);
    }

    /** Queues an op for the owner thread (not the owner) and wakes whatever drives the worker. */
    private void enqueue(Op op) {
        if (op.markQueued()) {
            queue.offer(op);
            // a full fence between our offer and our read of terminated, as the owner has between its write of
            // terminated and its last drain: one of the two sees the other (a store-load pair, else both miss)
            java.lang.invoke.VarHandle.fullFence();
            if (terminated && op.claimQueued()) { // the worker stopped after our check: nobody will dispatch it
                requests.failNow(op, closedError(op.what));
                return;
            }
        }
        if (sleeping) {
            wake();
        } else if (!op.blocking && lending.returned()) {
            // parked after a loan: nobody drives the worker now. Not for a blocking op: its thread borrows the
            // worker next and posts it itself (or another borrower, which hands back to the progress thread when
            // anything is queued), and a progress thread woken now would only take the worker back from under it.
            LockSupport.unpark(progressThread);
        }
    }

    /**
     * The application closed or aborted {@code ep} (perhaps after its peer had already ended it): the messages it
     * did not read are freed on the owner thread. Nothing once the worker is gone (its close freed them).
     */
    public void discardUnread(EndpointCore ep) {
        if (!terminated && !stopRequested) {
            execute(() -> connections.discardUnread(ep));
        }
    }

    /**
     * A received message whose receive's future the application completed just as the message was handed to it
     * (a timeout of its own, such as {@code orTimeout}): back to its inbox, ahead of what came after it, for the
     * next receive, instead of lost. On the owner thread, within the hand-over, nothing else was delivered
     * meanwhile, so the order stands; from another thread (a conversion off the owner thread that lost the race)
     * it goes back when the owner runs the task. Freed where nobody can read it any more (closed endpoint or
     * worker).
     */
    public void unread(AmData d) {
        if (Thread.currentThread() != owner) {
            Op op = new Op(this);
            op.kind = Op.TASK;
            op.what = "task";
            op.task = () -> unread(d);
            op.whenComplete((v, e) -> {
                if (e != null) { // the worker closed first
                    d.free();
                }
            });
            submit(op);
            return;
        }
        if (stopRequested || terminated || !connections.takesBack(d.ep)) {
            d.free();
            return;
        }
        amReceiver.inbox(d.ep, d.kind).deliverFirst(d);
    }

    /** Runs a task on the owner thread. */
    public void execute(Runnable task) {
        Op op = new Op(this);
        op.kind = Op.TASK;
        op.task = task;
        op.what = "task";
        submit(op);
    }

    /**
     * {@link #execute} from another thread, also while the worker stops but is not gone yet: for the release of an
     * endpoint, which completes its close future. The owner may be inside a handler that waits on that future
     * (driving the worker until it completes, after the stop failed what was pending); a task refused meanwhile
     * would leave that wait hanging until the handler returned, which it never would. Once the worker is gone the
     * task fails unrun, as {@link #execute}'s does: the worker's shutdown released every endpoint.
     */
    void executeWhileStopping(Runnable task) {
        Op op = new Op(this);
        op.kind = Op.TASK;
        op.task = task;
        op.what = "task";
        if (!stopRequested || terminated || Thread.currentThread() == owner) {
            submit(op);
        } else {
            enqueue(op);
        }
    }

    /** Runs a task on the owner thread; if it throws, or the worker closes first, {@code f} fails. */
    void executeFor(SafeFuture<?> f, Runnable task) {
        Op op = new Op(this);
        op.kind = Op.TASK;
        op.what = "task";
        op.task = () -> {
            try {
                task.run();
            } catch (Throwable t) {
                f.completeExceptionally(t);
            }
        };
        op.whenComplete((v, e) -> {
            if (e != null) {
                f.completeExceptionally(e);
            }
        });
        submit(op);
    }

    UcxException closedError(String what) {
        return new EndpointClosedException(what + ": the UCX worker is closed ("
                + Status.name(Status.ERR_NOT_CONNECTED) + ")", Status.ERR_NOT_CONNECTED);
    }

    /**
     * Waits for a blocking op. On timeout the op is canceled (a send aborts its endpoint, since UCX cannot cancel
     * a send in flight) and the wait continues until UCX has let go of the buffer; a message that arrived anyway
     * is returned, not dropped.
     */
    public long await(Op op, long timeoutNanos) {
        return await(op, timeoutNanos, Long.MAX_VALUE);
    }

    /**
     * {@link #await(Op, long)} for a call whose wait of {@code timeoutNanos} began earlier and ends at
     * {@code deadline} ({@link #deadline}; {@code Long.MAX_VALUE}: from now).
     */
    public long await(Op op, long timeoutNanos, long deadline) {
        long r = awaitDone(op, timeoutNanos, deadline);
        recycle(op);
        return r;
    }

    private long awaitDone(Op op, long timeoutNanos) {
        return awaitDone(op, timeoutNanos, Long.MAX_VALUE);
    }

    private long awaitDone(Op op, long timeoutNanos, long from) {
        long deadline = timeoutNanos < 0 ? Long.MAX_VALUE : from != Long.MAX_VALUE ? from
                : System.nanoTime() + timeoutNanos;
        boolean interrupted = false;
        boolean timedOut = false;
        int flags = (timeoutNanos < 0 ? 0 : TIMED) | INTERRUPTIBLE;
        if (Thread.currentThread() == owner) {
            checkNotInProgress(op.what);
            // caller-driven: progress ourselves (a polled receive is tested inside progressOnce); a timeout or an
            // interrupt cancels the op, and the wait goes on, deaf to both, until UCX has let go of it
            // (or until another thread closes the worker: see stopWhileWaiting)
            int stops = STOPS;
            for (int why; (why = driveUntil(op, null, deadline, (op.cancelRequested ? 0 : flags) | stops))
                    != FINISHED; ) {
                if (why == STOPPED) {
                    stopWhileWaiting(); // fails what is pending, this op included (and destroys the worker)
                    if (terminated) {
                        if (!op.done) {
                            op.finish(0, 0, closedError(op.what));
                        }
                        break;
                    }
                    stops = 0; // inside a handler: what is pending failed, the worker goes when that call returns
                    continue;
                }
                if (op.cancelRequested) {
                    continue; // canceled meanwhile by another thread: its outcome is on the way
                }
                if (why == DEADLINE) {
                    timedOut = true;
                } else { // INTERRUPTED: cleared here, set again below
                    Thread.interrupted();
                    interrupted = true;
                }
                cancel(op);
                if (leftToUcx(op)) {
                    break;
                }
            }
            if (stopRequested) {
                stopOnCallerOwner(); // the op ended by the close itself: released on the way out
            }
        } else {
            if (!op.done && borrowBy(deadline)) {
                try {
                    driveUntil(op, null, deadline, flags | STOPS | BORROWED);
                } finally {
                    giveBack();
                }
            }
            // a short spin catches fast completions without a park/unpark round trip; how long adapts to whether
            // it does (see awaitSpins)
            int spins = awaitSpins;
            for (int i = 0; i < spins && !op.done; i++) {
                Thread.onSpinWait();
            }
            awaitSpins = op.done ? Math.min(MAX_AWAIT_SPINS, spins << 1) : Math.max(MIN_AWAIT_SPINS, spins >> 1);
            while (!op.done) {
                long now = System.nanoTime();
                if (!op.cancelRequested && now - deadline >= 0 && timeoutNanos >= 0) {
                    timedOut = true;
                    withdraw(op);
                    if (op.done) {
                        break; // taken back from the queue: ended here (before, the wait napped 100 ms first)
                    }
                }
                if ((timedOut || interrupted) && leftToUcx(op)) {
                    break;
                }
                long park = op.cancelRequested ? TimeUnit.MILLISECONDS.toNanos(100) : deadline - now;
                op.waiterParked = true;
                LockSupport.parkNanos(op, Math.min(park, TimeUnit.SECONDS.toNanos(1)));
                if (Thread.interrupted()) {
                    interrupted = true;
                    if (!op.cancelRequested) {
                        withdraw(op);
                    }
                }
                if (stopRequested && !op.done && !op.cancelRequested && op.claimQueued()) {
                    // the worker closes, and its owner may never take the op (caller mode: an owner busy elsewhere
                    // releases the worker only at its next call): UCX never saw it, so it ends here. Not an op this
                    // wait canceled: withdraw ended it if it was still queued, so a queued one is the cancel itself
                    // on its way to an owner that has posted the op, and UCX holds it until the close ends it
                    Requests.endedBeforeStart(op, closedError(op.what));
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        if (!op.done) { // left to UCX (leftToUcx): it completes in the background, touching none of the caller's memory
            String why = " (UCX cannot withdraw a flush: it completes in the background)";
            if (interrupted) {
                throw new CanceledException(op.what + " interrupted" + why + " (" + Status.name(Status.ERR_CANCELED)
                        + ")", Status.ERR_CANCELED);
            }
            throw new UcxTimeoutException(op.what + " timed out after " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos)
                    + " ms" + why + " (" + Status.name(Status.ERR_TIMED_OUT) + ")", Status.ERR_TIMED_OUT);
        }
        // the cancel we asked for fails the op as canceled, or, for what UCX cannot cancel (sends, stream
        // receives, RMA), as the aborted endpoint's error: either way the caller asked for a timeout or an interrupt
        if (op.error != null && (timedOut || interrupted)) {
            if (interrupted) {
                throw new CanceledException(op.what + " interrupted: " + op.error.getMessage(), op.error.status(),
                        op.error);
            }
            throw new UcxTimeoutException(op.what + " timed out after "
                    + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms (" + Status.name(Status.ERR_TIMED_OUT)
                    + (op.error instanceof CanceledException ? "); the operation was canceled"
                            : "); UCX cannot withdraw it, so its endpoint was aborted"), Status.ERR_TIMED_OUT, op.error);
        }
        return op.resultOrThrow();
    }

    // ---- polled receives: posted without a callback (no upcall); whoever drives the worker tests them
    private Op[] polledOps = new Op[4];
    private int polledCount;
    private int pollTurns;

    void addPolled(Op op) {
        if (inRecvRing(op)) {
            if (recvRing.isEmpty()) {
                recvRingEp = op.ep;
                recvRingKind = op.kind;
                recvRingTag = op.tag;
                recvRingMask = op.mask;
            }
            recvRing.add(op);
            return;
        }
        if (polledCount == polledOps.length) {
            polledOps = Arrays.copyOf(polledOps, polledCount * 2);
        }
        polledOps[polledCount++] = op;
    }

    void removePolled(Op op) {
        if (inRing(op)) {
            sendRing.remove(op);
            return;
        }
        if (inRecvRing(op)) {
            recvRing.remove(op);
            if (recvRing.isEmpty()) {
                recvRingEp = null; // the next receive sets the key again; a closed endpoint is not kept reachable
            }
            return;
        }
        for (int i = 0; i < polledCount; i++) {
            if (polledOps[i] == op) {
                polledOps[i] = polledOps[--polledCount];
                polledOps[polledCount] = null;
                return;
            }
        }
    }

    // ---- polled sends (made inside a call, no callback) and active-message pulls: tested oldest first, in posting
    // order (both mostly complete in that order)
    private final PolledRing sendRing = new PolledRing();
    private final java.util.function.Predicate<Op> pollSend = this::pollSend;

    /** Polled ops kept in the ring: sends, and rendezvous active messages' pulls ({@code AmReceiver#startPull}). */
    private static boolean inRing(Op op) {
        return op.kind == Op.TAG_SEND || op.kind == Op.STREAM_SEND || op.kind == Op.AM_SEND || op.kind == Op.AM_DATA;
    }

    void addRingPolled(Op op) {
        sendRing.add(op);
    }

    // ---- asynchronous receives posted without a callback, tested oldest first like the sends: only receives of
    // one key at a time, which complete in posting order (mostly, for tags), so a receive that waits long for another
    // tag never holds up the tests of a busy one; a receive for another key while some are in flight keeps its
    // callback (Requests#post)
    private final PolledRing recvRing = new PolledRing();
    private final java.util.function.Predicate<Op> pollRecv = this::pollRecv;
    /** The ring's key while it holds receives: their kind and endpoint, and for tag receives tag and mask. */
    private EndpointCore recvRingEp;
    private int recvRingKind;
    private long recvRingTag, recvRingMask;

    private static boolean inRecvRing(Op op) {
        return (op.kind == Op.TAG_RECV || op.kind == Op.STREAM_RECV) && !op.blocking;
    }

    /**
     * Whether an asynchronous receive about to be posted may go without a callback, on the receive ring: the ring
     * is empty, or it holds receives of the same key: tag receives of the same endpoint, tag and mask (UCX matches
     * those in posting order, and they mostly complete in it), or stream receives of the same endpoint (UCX
     * completes those in posting order). A worker-level tag receive keeps its callback: messages from different
     * peers complete in any order.
     */
    boolean mayPollReceive(Op op) {
        return op.ep != null && (recvRing.isEmpty() || op.ep == recvRingEp && op.kind == recvRingKind
                && (op.kind == Op.STREAM_RECV || op.tag == recvRingTag && op.mask == recvRingMask));
    }

    /** Completes a polled send if UCX is done with it (owner thread); true when it completed. */
    private boolean pollSend(Op op) {
        int st = Ucp.requestCheckStatus(op.request);
        if (st == Status.INPROGRESS) {
            return false;
        }
        requests.completeSlot(op.slot, op.request, st, -1, 0);
        return true;
    }

    /** Adds the polled sends of {@code ep} still in flight to {@code into} (owner thread). */
    void polledSends(EndpointCore ep, List<Op> into) {
        sendRing.collect(ep, into);
    }

    /** Whether anything polled is in flight: receives or sends. */
    private boolean anyPolled() {
        return polledCount != 0 || !sendRing.isEmpty() || !recvRing.isEmpty();
    }

    /** {@link #testPolled} if there are any (owner thread): after a cancel UCX may have completed some silently. */
    void testPolledNow() {
        if (anyPolled()) {
            testPolled(true);
        }
    }

    /**
     * Completes the polled receives and sends UCX is done with (owner thread); how many. The rings (sends and
     * pulls, asynchronous receives) oldest first up to the first still in flight, every entry with {@code all}; the
     * few blocking receives always all.
     */
    private int testPolled(boolean all) {
        int done = sendRing.isEmpty() ? 0 : sendRing.test(all, pollSend);
        if (!recvRing.isEmpty()) {
            done += recvRing.test(all, pollRecv);
        }
        // backwards: a completed one is replaced by the last, already tested
        for (int i = polledCount - 1; i >= 0; i--) {
            if (i < polledCount && pollRecv(polledOps[i])) {
                done++;
            }
        }
        return done;
    }

    /** Completes a polled receive if UCX is done with it (owner thread); true when it completed. */
    boolean pollRecv(Op op) {
        boolean stream = op.kind == Op.STREAM_RECV;
        int st = stream ? Ucp.streamRecvRequestTest(op.request, lenOut.address())
                : Ucp.tagRecvRequestTest(op.request, scratch.address());
        if (st == Status.INPROGRESS) {
            return false;
        }
        // a stream receive's length also on an error: what a goodbye cut short had in (Requests.complete keeps it)
        long len = stream ? lenOut.get(JAVA_LONG, 0) : st != Status.OK ? 0 : scratch.get(JAVA_LONG, TRI_LENGTH);
        long tag = st == Status.OK && !stream ? scratch.get(JAVA_LONG, TRI_SENDER_TAG) : 0;
        requests.completeSlot(op.slot, op.request, st, len, tag);
        return true;
    }

    /**
     * A flush (worker or endpoint) that a timeout or an interrupt canceled: UCX cannot withdraw it, and it holds
     * none of the caller's memory, so its waiter stops waiting and the endpoint lives on (aborting it would end an
     * endpoint flush, but cost the connection for a peer that is only slow; no abort ends a worker flush, which
     * waits for every peer). It is never recycled (cancelRequested): its completion finds it as it was. Each such
     * flush keeps its op, slot and UCX request until UCX ends it (at the latest when the endpoint or worker goes),
     * so a caller that retries timed-out flushes against a peer that never progresses holds one per try.
     */
    private static boolean leftToUcx(Op op) {
        // flushes (an endpoint's, a close's) hold no caller memory; without peer error handling UCX cannot purge a
        // close's flush toward a peer that stopped, and the close's bound must hold
        return op.cancelRequested && (op.kind == Op.RMA_FLUSH || op.kind == Op.FLUSH);
    }

    /**
     * A waiter's cancel (timeout, interrupt; not the owner thread): an op still waiting in the queue is taken back
     * and failed here, since an owner that is not progressing (caller mode, busy elsewhere) would otherwise leave
     * the waiter parked past its deadline; one the owner already has is canceled by it. The op is then never
     * recycled (cancelRequested), as the queue may still hold it until the owner skips it.
     */
    private void withdraw(Op op) {
        if (op.claimQueued()) {
            op.cancelRequested = true;
            Requests.canceledBeforeStart(op);
        } else {
            cancel(op);
        }
    }

    /** Asks the owner thread to cancel an op (any thread). */
    public void cancel(Op op) {
        op.cancelRequested = true;
        if (Thread.currentThread() == owner) {
            requests.cancelOnOwner(op);
            return;
        }
        if (op.markQueued()) {
            queue.offer(op);
        }
        if (sleeping) {
            wake();
        }
    }

    /** How long {@link Op#cancel} waits for the owner thread to withdraw a receive. */
    static final long CANCEL_WAIT_NANOS = TimeUnit.MILLISECONDS.toNanos(200);

    /** Cancels an async {@code op} and waits (bounded) until the owner thread has withdrawn or completed it. */
    void cancelAndWait(Op op) {
        cancel(op);
        if (Thread.currentThread() == owner) {
            return; // decided inside: UCX withdrew it, or it is matched and completes as this thread progresses
        }
        long deadline = System.nanoTime() + CANCEL_WAIT_NANOS;
        // the future's state, not op.done: that is set just before the future completes
        for (int i = 0; !op.isDone() && System.nanoTime() - deadline < 0; i++) {
            if (i < 100) {
                Thread.onSpinWait();
            } else {
                LockSupport.parkNanos(op, 20_000);
            }
        }
    }

    // ============================================================== owner thread

    /**
     * How long a thread that waits for this worker's progress thread spins before it parks: doubled each time the
     * spin caught the completion, halved each time it did not. Where cores are free the progress thread finishes a
     * short operation within the spin and the waiter never parks; where they are not (two vCPUs shared by two
     * processes' progress and application threads), the spinning waiter only keeps a progress thread off the CPU,
     * and the budget falls to its floor: 8 B ping-pong one-way p50 there 19-22 us with a fixed 500 spins, 8.5-9.5
     * us at 16-32. A plain field: racing waiters may lose an update, which only blurs the average.
     */
    private int awaitSpins = 500;

    /** The dedicated progress thread; null in caller mode. */
    Thread progressThread;

    // ---- lending the worker to a thread that waits (progress-thread modes)

    /** Hands the worker to a thread about to wait, and takes it back. */
    private final Lending lending = new Lending(this);
    /** Idle duty cycles after which a borrower stops driving and waits the ordinary way (BLOCKING: HOT_SPINS). */
    private static final int DRIVE_IDLE_TURNS = HOT_SPINS + SPINS;

    /**
     * A thread about to wait for {@code op} takes the worker from the progress thread and drives it itself, as in
     * caller mode, instead of waiting to be woken: a completion then costs no hand-off between threads. True when it
     * owns the worker now ({@link #giveBack} when done).
     */
    private boolean borrow() {
        return borrow(true);
    }

    /**
     * {@link #borrow()}; without {@code wait}, only a worker nobody drives now (given back, not yet taken back by
     * the progress thread) is taken, with no hand-over to wait for.
     */
    private boolean borrow(boolean wait) {
        return lending.borrow(wait);
    }

    /** {@link #borrow()} by a call that must end by {@code deadline} ({@code Long.MAX_VALUE}: none). */
    private boolean borrowBy(long deadline) {
        return lending.borrow(true, deadline);
    }

    Thread progressThread() {
        return progressThread;
    }

    /** The worker's driver changes hands (a loan starts or ends): a release store, read by the thread it names. */
    void ownerRelease(Thread t) {
        OWNER.setRelease(this, t);
    }

    /** The progress thread lends the worker: everything it did so far is visible to the borrower. */
    void setOwner(Thread t) {
        owner = t;
    }

    /** Takes the worker's thread out of its event-fd nap, if it is in one. */
    void wakeIfSleeping() {
        if (sleeping) {
            wake();
        }
    }

    /** Operations handed over and not yet taken by the worker's thread. */
    boolean anyQueued() {
        return !queue.isEmpty();
    }

    /** Idle duty cycles after which a borrower stops driving (BLOCKING chose not to spin: the hot phase only). */
    private int borrowerIdleLimit() {
        return mode == ProgressMode.BLOCKING ? HOT_SPINS : DRIVE_IDLE_TURNS;
    }

    /** A borrower's idle duty cycle: none in the hot phase, then a spin hint, and every 256th a yield. */
    private static void borrowerPause(int idleTurns) {
        if (idleTurns < HOT_SPINS) {
            return;
        }
        if ((idleTurns & 255) == 0) {
            Thread.yield(); // other threads (the peer's, on a small machine) may need this CPU
        } else {
            Thread.onSpinWait();
        }
    }

    /** Why {@link #driveUntil} returned. */
    private static final int FINISHED = 0, DEADLINE = 1, INTERRUPTED = 2, STOPPED = 3, IDLED = 4;
    /** {@link #driveUntil}'s flags. */
    private static final int TIMED = 1, INTERRUPTIBLE = 2, STOPS = 4, BORROWED = 8;

    /**
     * The one loop of a thread that drives the worker while it waits (the caller-mode owner, or a borrower): until
     * {@code op} is done (or, when it is null, {@code f}), checking every 64 turns (every turn in BLOCKING mode) the
     * deadline ({@code TIMED}) and the interrupt flag ({@code INTERRUPTIBLE}, left set); {@code STOPS}: until the
     * worker is closing; a {@code BORROWED} worker is left after {@link #borrowerIdleLimit} idle turns
     * ({@link #IDLED}), where the owner idles the mode's way instead ({@link #idleStep}). Returns why it stopped.
     */
    private int driveUntil(Op op, SafeFuture<?> f, long deadline, int flags) {
        boolean borrowed = (flags & BORROWED) != 0;
        int idleLimit = borrowed ? borrowerIdleLimit() : 0;
        int idleTurns = 0;
        if (!borrowed) {
            idle = 0; // the owner's idle phase (a borrower leaves the progress thread's alone)
        }
        for (int turns = 1; !(op != null ? op.done : f.isDone()); turns++) {
            if ((flags & STOPS) != 0 && stopRequested) {
                return STOPPED;
            }
            // every 64 turns; every turn while idle turns are naps of up to 10 ms. The deadline first: a wait that
            // timed out and was interrupted at once reports the timeout
            if ((turns & 63) == 0 || napping()) {
                if ((flags & TIMED) != 0 && System.nanoTime() - deadline >= 0) {
                    return DEADLINE;
                }
                if ((flags & INTERRUPTIBLE) != 0 && Thread.currentThread().isInterrupted()) {
                    return INTERRUPTED;
                }
            }
            if (progressOnce() == 0) {
                if (!borrowed) {
                    idleStep(op != null ? op : WAITING);
                } else if (++idleTurns >= idleLimit) {
                    return IDLED;
                } else {
                    borrowerPause(idleTurns);
                }
            } else if (!borrowed) {
                idle = 0;
            } else {
                idleTurns = 0;
            }
        }
        return FINISHED;
    }

    /** The borrower hands the worker back; the progress thread resumes if anything may need it. */
    private void giveBack() {
        giveBack(null);
    }

    /**
     * {@link #giveBack()} by a thread that goes on to wait for {@code next} (a blocking call whose operation it
     * posted): while that is in flight, the thread borrows the worker again at once and progresses whatever else is
     * in flight too, so operations in flight alone do not wake the progress thread.
     */
    private void giveBack(Op next) {
        // decided while this thread still owns the worker's state: operations in flight (another thread's, or UCX's
        // own) complete only while someone progresses
        lending.giveBack(!deferred.isEmpty() || slots.anyTaken() && (next == null || next.done));
    }

    /** Progress thread: an op it finished had a waiter that had gone to park (see {@link #runLoop}). */
    boolean wokeParkedWaiter;

    private void runLoop() {
        try {
            while (!stopRequested) {
                if (lending.requested()) {
                    if (lending.lend()) {
                        idle = 0;
                    }
                    continue;
                }
                if (progressOnce() == 0) {
                    Thread.interrupted(); // its own flag: one a handler left set would turn every nap into a spin
                    Runnable hook = TestHooks.onIdleTurn;
                    if (hook != null) {
                        hook.run();
                    }
                    idleStep(null);
                } else {
                    idle = 0;
                }
                if (wokeParkedWaiter) {
                    // the woken thread needs a CPU, and this one would spin on it: with the cores busy (a progress
                    // thread per process, tasks), stepping aside once halved the mean 8 B ping-pong of two
                    // processes on two vCPUs (44 -> 21 us; p99 166 -> 42-52 us)
                    wokeParkedWaiter = false;
                    Thread.yield();
                }
            }
        } catch (Throwable t) {
            // (out of memory, say) the worker goes as if closed: whatever checks for a stop sees one, and every
            // wait and pending operation ends as closed
            stopRequested = true;
            LOG.error("ucx4j progress thread {} died", name, t);
        } finally {
            shutdownOnOwner();
        }
    }

    /**
     * How deep the owner thread is in {@link #progressOnce} (owner thread): user code runs inside it (handlers,
     * completions' dependents) and may call in again, so the worker is released only at depth 0.
     */
    int driving; // also counted by Op.finish around the completions it delivers on a caller-mode owner

    /** One duty cycle: drain commands, progress UCX, run deferred work. Owner thread only. */
    public int progressOnce() {
        if (terminated) {
            return 0; // released by a call made inside this thread's earlier progress (caller mode)
        }
        driving++;
        try {
            return duty();
        } finally {
            driving--;
        }
    }

    private int duty() {
        int work = 0;
        Op op;
        while (work < 256 && (op = queue.poll()) != null) {
            if (op.claimQueued()) { // else its waiter took it back (withdraw) and finishes it itself
                requests.dispatch(op);
            }
            work++;
        }
        int events;
        boolean was = inProgress; // false, but for a progress call made from a completion (refused, see callers)
        inProgress = true;
        try {
            events = Ucp.workerProgress(worker);
        } finally {
            inProgress = was;
        }
        work += events;
        // polled receives and sends complete inside a progress call that did some work: tested after those (sends up
        // to the first still in flight), and every 64 calls, busy or not, all of them: a send that finished before
        // an older one, or one UCX completed without an event
        if (anyPolled()) {
            boolean all = (++pollTurns & 63) == 0;
            if (events != 0 || all) {
                work += testPolled(all);
            }
        }
        if (shmCheck.inFlight()) {
            shmCheck.poll();
        }
        Runnable r;
        while ((r = deferred.poll()) != null) {
            r.run();
            work++;
        }
        HeldData held = amReceiver.held;
        if (held != null && held.pending()) {
            work += held.drain(worker); // UCX's buffers of messages closed since
        }
        return work;
    }

    /**
     * What an idle turn does. Polling and the first {@link #HOT_SPINS} idle turns poll again at once, as UCX's own
     * loops do: a progress call is itself a pause, and a spin-wait hint (tens of ns on x86) only delays noticing
     * the next message (8 B ping-pong measured ~7 % faster without it).
     */
    private void idleStep(Op waitingFor) {
        switch (mode) {
            case POLLING -> { }
            case BLOCKING -> sleep(waitingFor);
            default -> {
                int i = idle;
                if (i < SPINS + YIELDS) {
                    idle = i + 1; // stops counting in the nap phase
                }
                if (i < HOT_SPINS) {
                    return;
                } else if (i < SPINS) {
                    Thread.onSpinWait();
                } else if (i < SPINS + YIELDS) {
                    Thread.yield();
                } else {
                    sleep(waitingFor); // and nap again next idle turn: only work found restarts the spin
                }
            }
        }
    }

    /** Whether an idle turn of the worker's driver is a nap now (up to 10 ms while a caller waits). */
    private boolean napping() {
        return mode == ProgressMode.BLOCKING || idle >= SPINS + YIELDS;
    }

    /** A virtual-thread owner's nap (a caller-mode {@code Ucx} driven from a virtual thread). */
    private static final long VIRTUAL_NAP_NANOS = TimeUnit.MILLISECONDS.toNanos(1);

    /** Stands for "a caller waits here" in {@link #idleStep}: naps stay short, so deadlines and interrupts count. */
    private static final Op WAITING = new Op((Executor) null);

    /**
     * Wakes the worker's thread out of its event-fd nap ({@code ucp_worker_signal}), from any thread; never once the
     * worker is being destroyed (the signal would read freed memory and write to a closed, maybe reused, descriptor).
     */
    private void wake() {
        Thread o = owner;
        if (o != null && o.isVirtual()) {
            LockSupport.unpark(o); // napping in sleep(): parked, not in poll
        }
        waking.getAndIncrement(); // a full fence: either closeWakes sees this thread, or this thread sees the flag
        try {
            if (!wakesClosed) {
                Ucp.workerSignal(worker);
            }
        } finally {
            waking.getAndDecrement();
        }
    }

    /** Before the worker is destroyed: later {@link #wake}s do nothing, and the ones under way finish first. */
    private void closeWakes() {
        wakesClosed = true;
        while (waking.get() != 0) {
            Thread.onSpinWait();
        }
    }

    private void sleep(Op waitingFor) {
        sleeping = true;
        try {
            // a polled receive UCX completed without an event (a cancel: timeout, interrupt, failed endpoint) is
            // seen before the nap, not after it
            if (!queue.isEmpty() || stopRequested || (waitingFor != null && waitingFor.done) || !deferred.isEmpty()
                    || lending.requested() || (anyPolled() && testPolled(true) != 0)) {
                return;
            }
            if (Thread.currentThread().isVirtual()) {
                // a virtual thread never blocks in native code (it would pin its carrier): a short park instead,
                // ended early by wake()
                LockSupport.parkNanos(this, VIRTUAL_NAP_NANOS);
                return;
            }
            int st = Ucp.workerArm(worker);
            if (st == Status.OK) {
                // a caller-mode wait with a deadline must wake to cancel: keep the nap short there
                Ucp.poll(pollfd.address(), waitingFor != null || shmCheck.inFlight() ? 10 : SLEEP_MS);
            }
        } finally {
            sleeping = false;
        }
    }

    /**
     * Owner thread: fills the shared request parameters for the next nbx call; their buffer is named host memory
     * where every buffer is ({@link #hostOnly}), and left to UCX's lookup elsewhere.
     */
    void setParam(int attrMask, long cb, long userData, int flags) {
        MemorySegment p = reqParam;
        p.set(JAVA_INT, RP_OP_ATTR_MASK, hostOnly ? attrMask : attrMask & ~UCP_OP_ATTR_FIELD_MEMORY_TYPE);
        p.set(JAVA_INT, RP_FLAGS, flags);
        p.set(JAVA_LONG, RP_CB, cb);
        p.set(JAVA_LONG, RP_USER_DATA, userData);
        p.set(JAVA_INT, RP_MEMORY_TYPE, UCS_MEMORY_TYPE_HOST);
    }

    /** The user data a callback of this engine's op in {@code slot} carries. */
    long userData(int slot) {
        return Upcalls.userData(id, slot);
    }

    // ============================================================== active messages

    /**
     * Routes the endpoint's plain active messages to {@code handler} on the owner thread from now on; those that
     * already arrived go first, in order, and receives still waiting fail with {@code waiting}.
     */
    public void setAmHandler(EndpointCore ep, Consumer<AmData> handler, RuntimeException waiting) {
        execute(() -> amReceiver.setHandler(ep, handler, waiting));
    }

    // ============================================================== connections

    /** This worker's UCX address, as sent in the handshake. */
    byte[] workerAddress() {
        return workerAddress;
    }

    /** A copy of this worker's UCX address. */
    public byte[] workerAddressBytes() {
        return workerAddress.clone();
    }

    /** A raw endpoint (no handshake, tags as given) to a worker address. */
    public SafeFuture<EndpointCore> attachRaw(byte[] address) {
        return connections.attachRaw(address);
    }

    /** Graceful close: cancel receives, flush sends (bounded by the caller's wait), then force-close. */
    public Op closeEndpoint(EndpointCore c) {
        return connections.closeEndpoint(c);
    }

    /** Force-closes the endpoint (any thread); pending operations fail with {@link EndpointClosedException}. */
    public void abortEndpoint(EndpointCore c) {
        connections.abortEndpoint(c);
    }

    /** The longest a graceful close waits for the peer to acknowledge its goodbye. */
    public static final long BYE_WAIT_NANOS = 250_000_000L;

    /**
     * Waits up to {@code timeoutNanos} (not past {@link #BYE_WAIT_NANOS}) for the peer to acknowledge this side's
     * goodbye: it has then taken in what this side sent, and this side's UCX endpoint may go. The owner thread
     * progresses the worker meanwhile (the other end of a connection to this same worker answers there). A peer
     * whose worker nobody drives (caller mode) answers late, and the close goes on without the answer.
     */
    public void awaitByeAcknowledged(EndpointCore c, long timeoutNanos) {
        long deadline = System.nanoTime() + Math.min(Math.max(0, timeoutNanos), BYE_WAIT_NANOS);
        // past it, or once the worker is closing (which releases the endpoint), the close goes on
        awaitDriving(() -> c.byeAcknowledged.isDone() || stopRequested, c.byeAcknowledged, deadline);
    }

    /**
     * Waits up to {@code timeoutNanos} until the endpoint is released. The owner thread progresses the worker while
     * it waits (the release runs there); other threads wait on the endpoint's closed future.
     */
    public void awaitClosed(EndpointCore c, long timeoutNanos) {
        long deadline = System.nanoTime() + timeoutNanos;
        if (Thread.currentThread() == owner) {
            checkNotInProgress("close");
        }
        awaitDriving(() -> c.state == EndpointCore.CLOSED, c.closedFuture(), deadline); // else at the worker's close
    }

    /**
     * Waits until {@code done} holds or {@code deadline} passes, without failing: the owner thread progresses the
     * worker meanwhile (what it waits for happens there), other threads wait on {@code f}, which completes with it.
     */
    private void awaitDriving(java.util.function.BooleanSupplier done, java.util.concurrent.Future<?> f,
            long deadline) {
        if (Thread.currentThread() == owner) {
            idle = 0;
            while (!done.getAsBoolean() && !terminated && System.nanoTime() - deadline < 0) {
                if (progressOnce() == 0) {
                    idleStep(WAITING);
                } else {
                    idle = 0;
                }
            }
            return;
        }
        try {
            f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (TimeoutException | ExecutionException e) {
            // the caller goes on
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ============================================================== info

    public String contextInfo() {
        return onOwner(() -> Ucp.capture(f -> Ucp.contextPrintInfo(context, f)));
    }

    public String workerInfo() {
        return onOwner(() -> Ucp.capture(f -> Ucp.workerPrintInfo(worker, f)));
    }

    public String endpointInfo(EndpointCore c) {
        // once its close is posted, UCX may have freed the endpoint already (a forced close ends inside the call),
        // while the release that zeroes the handle is still on its way
        return onOwner(() -> c.handle == 0 || c.closePosted ? "" : Ucp.capture(f -> Ucp.epPrintInfo(c.handle, f))
                + (c.eagerTagSends ? EAGER_SENDS_INFO : c.eagerSends ? EAGER_AM_SENDS_INFO : ""));
    }

    /** The line {@link #endpointInfo} adds for an endpoint that sends eagerly ({@link EndpointCore#eagerSends}). */
    static final String EAGER_SENDS_INFO = "# ucx4j eager sends: tag_send takes the tag_send_nbr thresholds "
            + "(UCP_OP_ATTR_FLAG_FAST_CMPL); am_send is eager up to " + EndpointCore.EAGER_AM_MAX + " B\n";
    /** ... for one that sends only active messages eagerly ({@link #eagerTagSendsAllowed}). */
    static final String EAGER_AM_SENDS_INFO = "# ucx4j eager sends: am_send is eager up to " + EndpointCore.EAGER_AM_MAX
            + " B; tag_send keeps UCX's thresholds (shared-memory FIFO of more than " + EAGER_TAG_FIFO_MAX
            + " slots)\n";

    private <T> T onOwner(Supplier<T> s) {
        return onOwner("info", s);
    }

    private <T> T onOwner(String what, Supplier<T> s) {
        if (Thread.currentThread() == owner) {
            if (terminated) { // caller mode, after the close: the worker and context are gone
                throw closedError(what);
            }
            return s.get();
        }
        Object[] box = new Object[1];
        Op op = newOp();
        op.kind = Op.TASK;
        op.what = what;
        op.blocking = true;
        op.task = () -> box[0] = s.get();
        submit(op);
        await(op, TimeUnit.SECONDS.toNanos(10));
        @SuppressWarnings("unchecked")
        T t = (T) box[0];
        return t;
    }

    // ============================================================== shared-memory self-check

    /** Why same-host peers cannot reach this worker any more (its shared-memory FIFO is wedged), or null. */
    public UcxException sharedMemoryFailure() {
        return shmCheck.failure();
    }

    /** Runs {@code action} once, on the callback executor, when (or if already) the FIFO is found wedged. */
    public void onSharedMemoryFailure(Consumer<? super UcxException> action) {
        shmCheck.onFailure(action);
    }

    /** See {@link SharedMemoryCheck#check}. */
    public SafeFuture<Boolean> checkSharedMemory() {
        SafeFuture<Boolean> f = new SafeFuture<>(executor);
        executeFor(f, () -> shmCheck.check(f));
        return f;
    }

    // ============================================================== memory registration and remote keys

    /** Registers {@code length} bytes at {@code address} for RMA (local and remote read/write); returns the memh. */
    public long memMap(long address, long length) {
        return onOwner("register memory", () -> registrations.map(address, length));
    }

    /** See {@link Registrations#allocate}. */
    public Allocation memAllocate(long length, Arena arena) {
        return onOwner("allocate memory", () -> registrations.allocate(length, arena));
    }

    /** A registration of memory UCX allocated, and the segment over it. */
    public record Allocation(long memh, MemorySegment segment) {}

    /** Unregisters memory (freeing it if UCX allocated it); a no-op once the worker is closed (done then). */
    public void memUnmap(long memh) {
        if (terminated) {
            return;
        }
        onOwner("unregister memory", () -> {
            registrations.unmap(memh);
            return null;
        });
    }

    /** The packed remote key of a registration ({@code ucp_rkey_pack}). */
    public byte[] rkeyPack(long memh) {
        return onOwner("pack remote key", () -> registrations.pack(memh));
    }

    /** Unpacks remote-key bytes (already validated) on an endpoint; returns the rkey handle. */
    public long rkeyUnpack(EndpointCore ep, byte[] packed) {
        return onOwner("unpack remote key", () -> {
            UcxException bad = ep.unusable("unpack remote key");
            if (bad != null) {
                throw bad;
            }
            return registrations.unpack(ep, packed);
        });
    }

    /** Destroys a remote key; a no-op once the worker is closed. */
    public void rkeyDestroy(long rkey) {
        if (terminated) {
            return;
        }
        onOwner("destroy remote key", () -> {
            registrations.destroyRkey(rkey);
            return null;
        });
    }

    /** Refuses remote keys on an instance opened without RMA ({@code UcxOptions.withRma(false)}). */
    public void checkRma(String what) {
        if (!rma) {
            throw new IllegalStateException(what + ": remote memory access is off for this Ucx "
                    + "(UcxOptions.withRma(false))");
        }
    }

    /** Orders RMA: operations issued after the fence start after those before it completed remotely. */
    public void fence() {
        onOwner("fence", () -> {
            check(Ucp.workerFence(worker), "ucp_worker_fence");
            return null;
        });
    }

    // ============================================================== shutdown

    /** Stops the engine: cancels everything pending, destroys the worker and the context. Idempotent. */
    public void shutdown(long timeoutNanos) {
        if (Thread.currentThread() == owner) {
            stopRequested = true;
            if (sleeping) {
                wake();
            }
            if (mode == ProgressMode.CALLER) {
                stopOnCallerOwner(); // now, unless a handler closed it: then when the call it runs in returns
            }
            return;
        }
        stopRequested = true;
        var hook = TestHooks.beforeShutdownWake;
        if (hook != null) {
            hook.accept(terminatedFuture);
        }
        wake();
        LockSupport.unpark(progressThread); // it may be napping after a loan
        try {
            terminatedFuture.get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            LOG.warn("ucx4j: worker {} did not stop within {} ms", name, TimeUnit.NANOSECONDS.toMillis(timeoutNanos));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException e) {
            // cannot happen: completed normally
        }
    }

    /**
     * Caller mode, on the owner thread, after another thread closed the worker: that thread could not release it
     * (only the owner may touch the worker, and it may have been inside a progress call), so the owner does it at
     * its next call. No-op elsewhere.
     */
    public void stopOnCallerOwner() {
        if (mode == ProgressMode.CALLER && stopRequested && !terminated && Thread.currentThread() == owner
                && !inProgress) { // inside a UCX callback: nothing now, the wait or call around it does it
            if (driving == 0) {
                shutdownOnOwner();
            } else {
                failEverything(); // inside a handler: pending operations end now, the worker when the call returns
            }
        }
    }

    /**
     * Owner thread, a wait that another thread's close interrupted: in caller mode the worker is released now
     * ({@link #stopOnCallerOwner}); in any mode a wait nested in a handler (inside this thread's progress) fails
     * what is pending now, its own operation included, and the worker goes once the call that ran the handler
     * returns (with a progress thread, its loop then sees the stop). Without this a handler blocked on something
     * the close would never reach (a worker-level receive) kept the progress thread, and so the worker, forever.
     */
    private void stopWhileWaiting() {
        if (mode == ProgressMode.CALLER) {
            stopOnCallerOwner();
        } else if (stopRequested && !terminated && driving > 0 && !inProgress) {
            failEverything();
        }
    }

    public SafeFuture<Void> terminatedFuture() {
        return terminatedFuture;
    }

    /**
     * The worker stops (owner thread; again is harmless): queued commands and connections waiting for their turn
     * fail, listeners close, every endpoint is aborted (what is pending on it fails), worker-level receives are
     * canceled.
     */
    private void failEverything() {
        Op op;
        while ((op = queue.poll()) != null) { // commands still queued fail as closed
            if (op.claimQueued() && !op.done && op.request == 0) {
                if (op.kind == Op.TASK) {
                    requests.runTask(op);
                } else {
                    requests.failNow(op, new CanceledException(op.what + " canceled: the UCX worker was closed ("
                            + Status.name(Status.ERR_CANCELED) + ")", Status.ERR_CANCELED));
                }
            }
        }
        // announced messages never pulled are released while their endpoints still exist: UCX acknowledges each
        // to its sender through the endpoint it came on (raw peers' are not dropped with their endpoint)
        amReceiver.releaseHeld();
        connections.abortAll();
        boolean was = beginCallbacks();
        try {
            for (Op r : requests.workerRecvs.snapshot()) {
                if (r.request != 0 && !r.done) {
                    Ucp.requestCancel(worker, r.request);
                }
            }
        } finally {
            endCallbacks(was);
        }
        if (!terminated && driving > 0) { // raw peers' messages: their waiters, as the release would
            amReceiver.rawInbox.failWaiters(closedError("receive"));
        }
    }

    /** Operations UCX never completed, ended as the worker goes (after its destroy: see shutdownOnOwner). */
    private static void finishStuck(List<Op> stuck) {
        for (Op s : stuck) {
            if (!s.done) {
                s.finish(0, 0, new CanceledException(s.what + " canceled: the UCX worker was closed ("
                        + Status.name(Status.ERR_CANCELED) + ")", Status.ERR_CANCELED));
            }
        }
    }

    /** Set on the way into {@link #shutdownOnOwner} (owner thread): code it runs may call back in. */
    private boolean stopping;

    private void shutdownOnOwner() {
        if (terminated || stopping) {
            return;
        }
        stopping = true;
        List<Op> stuck = new ArrayList<>();
        try {
            failEverything();
            long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500);
            // deferred work too: messages failEverything handed to endpoints' handlers (queued behind a pull it
            // dropped) reach them while the worker and the memory they came in still exist
            while (System.nanoTime() < until && (slots.anyOp() || !deferred.isEmpty())) {
                progressOnce();
            }
            Runnable task;
            while ((task = deferred.poll()) != null) { // queued by the last turn, or left by one cut short
                task.run();
            }
            // closes still waiting for their endpoints' flushes go now, with no progress call after them: UCX purges
            // what those endpoints hold (1.13 with assertions aborts the process when the destroy finds a send still
            // there), and no put-off flush runs again
            connections.closeWaitingNow();
            while ((task = deferred.poll()) != null) {
                task.run();
            }
            for (Op s : slots.table()) {
                if (s != null) {
                    stuck.add(s);
                }
            }
            List<Long> stagings = new ArrayList<>();
            List<AmData> messages = new ArrayList<>();
            for (Op s : stuck) {
                // UCX never completed these; after worker destroy it never will. Their memory goes after it, taken
                // from the op now (a woken waiter may reuse its op)
                if (s.owned != 0) {
                    stagings.add(s.owned);
                    s.owned = 0;
                }
                if (s.attachment != null) {
                    messages.add(s.attachment);
                    s.attachment = null;
                }
            }
            sendRing.clear(); // the stuck polled sends and receives among them are finished after the destroy
            recvRing.clear();
            connections.releaseAll();
            amReceiver.releaseHeld(); // announced by raw peers, never pulled
            registrations.destroyRkeys();
            shmCheck.destroy();
            // raw peers' messages nobody took (endpoints' went with releaseAll): UCX's buffers go back while it can
            amReceiver.rawInbox.clear();
            if (amReceiver.held != null) {
                int open = amReceiver.held.close(worker); // payloads the application kept open go back too
                TestHooks.heldOpenAtClose = open;
                if (open > 0) {
                    LOG.debug("ucx4j: worker {}: {} active-message payloads were still open at close", name, open);
                }
            }
            for (Op s : stuck) {
                if (s.request != 0 && (s.kind == Op.CLOSE || s.kind == Op.FLUSH || s.kind == Op.RMA_FLUSH)) {
                    // an endpoint's close or flush UCX never ended (without peer error handling, toward a peer that
                    // stopped): UCX (1.13 with assertions on) aborts the process if the application has not
                    // released it before the destroy ends it; its callback, if the destroy runs it, frees nothing
                    s.requestReleased = true;
                    Ucp.requestFree(s.request);
                }
            }
            closeWakes();
            // from here nothing may drive the worker, not even a completion's dependent that waits on a future
            // (its wait would progress a destroyed worker): such waits are refused as inside progress; the mark
            // stays, the worker being gone for good
            beginCallbacks();
            Ucp.workerDestroy(worker);
            // UCX can no longer touch the stuck ops' memory: now their callers hear of it (and may free their
            // buffers), and their staging memory goes
            finishStuck(stuck);
            for (long p : stagings) {
                Ucp.free(p);
            }
            for (AmData m : messages) {
                m.free();
            }
            registrations.unmapAll();
            Ucp.cleanup(context);
            UcxException closed = new CanceledException("receive canceled: the UCX worker was closed ("
                    + Status.name(Status.ERR_CANCELED) + ")", Status.ERR_CANCELED);
            amReceiver.rawInbox.failWaiters(closed);
            amReceiver.rawInbox.clear();
            for (EndpointCore c : connections.byConnId.values()) {
                for (Inbox in : c.inboxes) {
                    in.failWaiters(closed);
                    in.clear();
                }
            }
            connections.clearLostUnread(closed);
        } catch (Throwable t) {
            LOG.error("ucx4j: error while closing worker {}", name, t);
            beginCallbacks(); // as above: the worker may be gone
            finishStuck(stuck); // nobody may wait forever, whatever failed above
        } finally {
            terminated = true;
            java.lang.invoke.VarHandle.fullFence(); // the other half of submit()'s store-load pair
            // what was handed over while the worker stopped (a submitter that sees terminated fails its own)
            Op late;
            while ((late = queue.poll()) != null) {
                if (late.claimQueued() && !late.done) {
                    requests.failNow(late, closedError(late.what));
                }
            }
            if (amReceiver.blocks != null) { // the blocks kept for the worker's thread go back to the pool
                amReceiver.blocks.close();
            }
            Upcalls.unregister(id);
            try {
                arena.close();
            } catch (IllegalStateException e) { // a segment of it in use by a native call (a payload being written)
                LOG.warn("ucx4j: worker {}: its arena stays open: {}", name, e.toString());
            }
            terminatedFuture.complete(null);
        }
    }
}
