package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;
import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandles;
import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.CanceledException;
import org.ucx4j.ConfigException;
import org.ucx4j.EndpointClosedException;
import org.ucx4j.ProgressMode;
import org.ucx4j.UcxException;
import org.ucx4j.UcxTimeoutException;
import org.ucx4j.internal.ffi.NativeAccess;
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
    private static final ValueLayout.OfShort NET_SHORT = JAVA_SHORT.withOrder(ByteOrder.BIG_ENDIAN);
    private static final int HELLO_SIZE = 32;
    private static final int HELLO_MAGIC = 0x34584355; // "UCX4" little-endian
    public static final int PROTOCOL_VERSION = 1;
    private static final int SPINS = 4_000;
    private static final int YIELDS = 200;
    private static final int SLEEP_MS = 1000;

    // ---- registry: upcalls find their engine by id (written before the owner thread starts)
    private static final Engine[] REGISTRY = new Engine[1 << 16];
    private static int nextId;

    private static synchronized int register(Engine e) {
        for (int i = 0; i < REGISTRY.length; i++) {
            int id = (nextId + i) & (REGISTRY.length - 1);
            if (REGISTRY[id] == null) {
                REGISTRY[id] = e;
                nextId = id + 1;
                return id;
            }
        }
        throw new IllegalStateException("too many open UCX workers in this JVM");
    }

    private static synchronized void unregister(int id) {
        REGISTRY[id] = null;
    }

    // ---- upcall stubs, created once per JVM
    private static final class Stubs {
        static final MemorySegment SEND = stub("onSend", FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_INT, JAVA_LONG));
        static final MemorySegment TAG_RECV = stub("onTagRecv",
                FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_INT, JAVA_LONG, JAVA_LONG));
        static final MemorySegment STREAM_RECV = stub("onStreamRecv",
                FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_INT, JAVA_LONG, JAVA_LONG));
        static final MemorySegment EP_ERROR = stub("onEndpointError",
                FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG, JAVA_INT));
        static final MemorySegment CONN_REQUEST = stub("onConnRequest",
                FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG));

        private static MemorySegment stub(String method, FunctionDescriptor fd) {
            try {
                return NativeAccess.upcall(
                        MethodHandles.lookup().findStatic(Engine.class, method, fd.toMethodType()), fd);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }
    }

    /** Engine settings chosen by the API layer. */
    public record Config(String name, ProgressMode mode, Map<String, String> ucxOptions, boolean environmentWins,
            Executor executor) {}

    final int id;
    final String name;
    final ProgressMode mode;
    final Executor executor;
    private final Arena arena = Arena.ofShared();
    private final long context;
    private final long worker;
    private final OpQueue queue = new OpQueue();
    private volatile boolean sleeping;
    private volatile boolean stopRequested;
    private volatile boolean terminated;
    private final SafeFuture<Void> terminatedFuture;
    private volatile Thread owner;
    private final int efd;

    // ---- owner-thread state
    private Op[] slots = new Op[256];
    private int[] freeSlots = new int[256];
    private int freeTop;
    private EndpointCore[] eps = new EndpointCore[64];
    private ListenerCore[] listeners = new ListenerCore[8];
    private final ArrayDeque<Runnable> deferred = new ArrayDeque<>();
    private final MemorySegment reqParam, lenOut, pollfd, scratch, epParams, listenerParams;
    private int nextConnId = 1;
    private Op workerRecvHead; // worker-level receives still pending (cancelled at close)
    private int idle;

    public Engine(Config cfg) {
        Ucp.ensureLoaded();
        this.name = cfg.name();
        this.mode = cfg.mode();
        this.executor = cfg.executor();
        this.terminatedFuture = new SafeFuture<>(executor);
        this.reqParam = arena.allocate(UCP_REQUEST_PARAM);
        this.lenOut = arena.allocate(JAVA_LONG);
        this.pollfd = arena.allocate(8);
        this.scratch = arena.allocate(256, 16);
        this.epParams = arena.allocate(UCP_EP_PARAMS);
        this.listenerParams = arena.allocate(UCP_LISTENER_PARAMS);
        for (int i = 0; i < freeSlots.length; i++) {
            freeSlots[i] = freeSlots.length - 1 - i;
        }
        freeTop = freeSlots.length;
        long ctx = 0, wrk = 0;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            long config = readConfig(cfg.ucxOptions(), cfg.environmentWins());
            try {
                MemorySegment p = a.allocate(UCP_PARAMS);
                p.set(JAVA_LONG, PARAMS_FIELD_MASK, UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME);
                p.set(JAVA_LONG, PARAMS_FEATURES, UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP
                        | UCP_FEATURE_AM | UCP_FEATURE_RMA);
                MemorySegment nameSeg = arena.allocateFrom(name);
                p.set(JAVA_LONG, PARAMS_NAME, nameSeg.address());
                check(Ucp.initVersion(p.address(), config, out.address()), "ucp_init");
                ctx = out.get(JAVA_LONG, 0);
            } finally {
                Ucp.configRelease(config);
            }
            MemorySegment wp = a.allocate(UCP_WORKER_PARAMS);
            wp.set(JAVA_LONG, WP_FIELD_MASK, UCP_WORKER_PARAM_FIELD_THREAD_MODE);
            wp.set(JAVA_INT, WP_THREAD_MODE, UCS_THREAD_MODE_SINGLE);
            int st = Ucp.workerCreate(ctx, wp.address(), out.address());
            if (st != Status.OK) {
                Ucp.cleanup(ctx);
                throw UcxException.of(st, "ucp_worker_create");
            }
            wrk = out.get(JAVA_LONG, 0);
            MemorySegment fd = a.allocate(JAVA_INT);
            st = Ucp.workerGetEfd(wrk, fd.address());
            if (st != Status.OK) {
                Ucp.workerDestroy(wrk);
                Ucp.cleanup(ctx);
                throw UcxException.of(st, "ucp_worker_get_efd");
            }
            this.efd = fd.get(JAVA_INT, 0);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        this.context = ctx;
        this.worker = wrk;
        pollfd.set(JAVA_INT, 0, efd);
        pollfd.set(JAVA_SHORT, 4, (short) 1); // POLLIN
        this.id = register(this);
        if (mode == ProgressMode.CALLER) {
            owner = Thread.currentThread();
        } else {
            Thread t = Thread.ofPlatform().daemon().name("ucx4j-progress-" + name).unstarted(this::runLoop);
            owner = t;
            t.start();
        }
    }

    /**
     * {@code ucp_config_read} plus the given options (keys with or without {@code UCX_}); an option whose
     * {@code UCX_} variable is set in the environment is skipped when {@code environmentWins}. Caller releases.
     */
    static long readConfig(Map<String, String> options, boolean environmentWins) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            check(Ucp.configRead(0, 0, out.address()), "ucp_config_read");
            long config = out.get(JAVA_LONG, 0);
            for (Map.Entry<String, String> e : options.entrySet()) {
                String key = stripPrefix(e.getKey());
                if (environmentWins && System.getenv("UCX_" + key) != null) {
                    continue;
                }
                int st = Ucp.configModify(config, a.allocateFrom(key).address(), a.allocateFrom(e.getValue()).address());
                if (st != Status.OK) {
                    Ucp.configRelease(config);
                    throw new ConfigException("UCX option " + key + "=" + e.getValue() + " refused: "
                            + Status.describe(st), st);
                }
            }
            return config;
        }
    }

    /** The effective UCX configuration ({@code UCX_KEY=value} lines) for these options. */
    public static String effectiveConfig(Map<String, String> options, boolean environmentWins) {
        Ucp.ensureLoaded();
        long config = readConfig(options, environmentWins);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment title = a.allocateFrom("");
            return Ucp.capture(f -> Ucp.configPrint(config, f, title.address(), UCS_CONFIG_PRINT_CONFIG));
        } finally {
            Ucp.configRelease(config);
        }
    }

    private static String stripPrefix(String key) {
        return key.startsWith("UCX_") ? key.substring(4) : key;
    }

    private static void check(int status, String what) {
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

    public Op tagSend(EndpointCore ep, long address, long length, long tag, long owned, boolean blocking) {
        Op op = new Op(this);
        op.kind = Op.TAG_SEND;
        op.what = "send";
        op.ep = ep;
        op.address = address;
        op.length = length;
        op.tag = tag;
        op.owned = owned;
        op.blocking = blocking;
        return op;
    }

    public Op tagRecv(EndpointCore ep, long address, long length, long tag, long mask, long owned, byte[] copyBack,
            boolean blocking) {
        Op op = new Op(this);
        op.kind = Op.TAG_RECV;
        op.what = "recv";
        op.ep = ep;
        op.address = address;
        op.length = length;
        op.tag = tag;
        op.mask = mask;
        op.owned = owned;
        op.copyBack = copyBack;
        op.blocking = blocking;
        return op;
    }

    /** Hands an op to the owner thread (or runs it now when called on the owner thread). */
    public void submit(Op op) {
        if (op.blocking) {
            op.waiter = Thread.currentThread();
        }
        if (stopRequested) {
            freeOwned(op);
            op.finish(0, 0, closedError(op.what));
            return;
        }
        if (Thread.currentThread() == owner) {
            post(op);
            return;
        }
        if (op.markQueued()) {
            queue.offer(op);
        }
        if (sleeping) {
            Ucp.workerSignal(worker);
        }
    }

    /** Runs a task on the owner thread. */
    public void execute(Runnable task) {
        Op op = new Op(this);
        op.kind = Op.TASK;
        op.task = task;
        op.what = "task";
        submit(op);
    }

    /** Runs a task on the owner thread; if it throws, or the worker closes first, {@code f} fails. */
    private void executeFor(SafeFuture<?> f, Runnable task) {
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

    private UcxException closedError(String what) {
        return new EndpointClosedException(what + ": the UCX worker is closed ("
                + Status.name(Status.ERR_NOT_CONNECTED) + ")", Status.ERR_NOT_CONNECTED);
    }

    /**
     * Waits for a blocking op. On timeout the op is canceled (a send aborts its endpoint, since UCX cannot cancel
     * a send in flight) and the wait continues until UCX has let go of the buffer; a message that arrived anyway
     * is returned, not dropped.
     */
    public long await(Op op, long timeoutNanos) {
        long deadline = timeoutNanos < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutNanos;
        boolean interrupted = false;
        boolean timedOut = false;
        boolean owned = Thread.currentThread() == owner;
        while (!op.done) {
            long now = System.nanoTime();
            if (!op.cancelRequested && now - deadline >= 0 && timeoutNanos >= 0) {
                timedOut = true;
                cancel(op);
            }
            if (owned) {
                if (progressOnce() == 0) {
                    idleStep(op);
                }
                continue;
            }
            long park = op.cancelRequested ? TimeUnit.MILLISECONDS.toNanos(100) : deadline - now;
            LockSupport.parkNanos(op, Math.min(park, TimeUnit.SECONDS.toNanos(1)));
            if (Thread.interrupted()) {
                interrupted = true;
                if (!op.cancelRequested) {
                    cancel(op);
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        if (op.error != null && (timedOut || interrupted) && op.error instanceof CanceledException) {
            if (interrupted) {
                throw new CanceledException(op.what + " interrupted: " + op.error.getMessage(), op.error.status(),
                        op.error);
            }
            throw new UcxTimeoutException(op.what + " timed out after "
                    + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms (" + Status.name(Status.ERR_TIMED_OUT)
                    + "); the operation was canceled", Status.ERR_TIMED_OUT, op.error);
        }
        return op.resultOrThrow();
    }

    /** Asks the owner thread to cancel an op (any thread). */
    public void cancel(Op op) {
        op.cancelRequested = true;
        if (Thread.currentThread() == owner) {
            cancelOnOwner(op);
            return;
        }
        if (op.markQueued()) {
            queue.offer(op);
        }
        if (sleeping) {
            Ucp.workerSignal(worker);
        }
    }

    // ============================================================== owner thread

    private void runLoop() {
        try {
            while (!stopRequested) {
                if (progressOnce() == 0) {
                    idleStep(null);
                } else {
                    idle = 0;
                }
            }
        } catch (Throwable t) {
            LOG.error("ucx4j progress thread {} died", name, t);
        } finally {
            shutdownOnOwner();
        }
    }

    /** One duty cycle: drain commands, progress UCX, run deferred work. Owner thread only. */
    public int progressOnce() {
        int work = 0;
        Op op;
        while (work < 256 && (op = queue.poll()) != null) {
            op.clearQueued();
            dispatch(op);
            work++;
        }
        work += Ucp.workerProgress(worker);
        Runnable r;
        while ((r = deferred.poll()) != null) {
            r.run();
            work++;
        }
        return work;
    }

    private void idleStep(Op waitingFor) {
        switch (mode) {
            case POLLING -> Thread.onSpinWait();
            case BLOCKING -> sleep(waitingFor);
            default -> {
                int i = idle++;
                if (i < SPINS) {
                    Thread.onSpinWait();
                } else if (i < SPINS + YIELDS) {
                    Thread.yield();
                } else {
                    sleep(waitingFor);
                    idle = 0;
                }
            }
        }
    }

    private void sleep(Op waitingFor) {
        sleeping = true;
        try {
            if (!queue.isEmpty() || stopRequested || (waitingFor != null && waitingFor.done) || !deferred.isEmpty()) {
                return;
            }
            int st = Ucp.workerArm(worker);
            if (st == Status.OK) {
                // a caller-mode wait with a deadline must wake to cancel: keep the nap short there
                Ucp.poll(pollfd.address(), waitingFor != null ? 10 : SLEEP_MS);
            }
        } finally {
            sleeping = false;
        }
    }

    private void dispatch(Op op) {
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
            freeOwned(op);
            op.finish(0, 0, new CanceledException(op.what + " canceled before it started ("
                    + Status.name(Status.ERR_CANCELED) + ")", Status.ERR_CANCELED));
            return;
        }
        post(op);
    }

    private void post(Op op) {
        switch (op.kind) {
            case Op.TASK -> runTask(op);
            case Op.TAG_SEND -> {
                UcxException bad = op.ep.unusable(op.what);
                if (bad != null) {
                    failNow(op, bad);
                    return;
                }
                int slot = allocSlot(op);
                setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
                        Stubs.SEND.address(), userData(slot), 0);
                long r = Ucp.tagSendNbx(op.ep.handle, op.address, op.length, op.tag, reqParam.address());
                posted(op, slot, r, op.length, op.tag);
            }
            case Op.TAG_RECV -> {
                if (op.ep != null) {
                    UcxException bad = op.ep.unusable(op.what);
                    if (bad != null) {
                        failNow(op, bad);
                        return;
                    }
                }
                int slot = allocSlot(op);
                // UCX 1.13 reports no length/tag for an immediately completed tag receive (recv_info came in
                // 1.14), so immediate completion is refused: the callback then runs inside ucp_tag_recv_nbx.
                setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE
                        | UCP_OP_ATTR_FLAG_NO_IMM_CMPL, Stubs.TAG_RECV.address(), userData(slot), 0);
                long r = Ucp.tagRecvNbx(worker, op.address, op.length, op.tag, op.mask, reqParam.address());
                posted(op, slot, r, 0, 0);
                if (op.request != 0) {
                    linkPending(op);
                }
            }
            case Op.STREAM_SEND -> {
                int slot = allocSlot(op);
                setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA, Stubs.SEND.address(),
                        userData(slot), 0);
                long r = Ucp.streamSendNbx(op.ep.handle, op.address, op.length, reqParam.address());
                posted(op, slot, r, op.length, 0);
            }
            case Op.STREAM_RECV -> {
                int slot = allocSlot(op);
                setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
                        Stubs.STREAM_RECV.address(), userData(slot), UCP_STREAM_RECV_FLAG_WAITALL);
                long r = Ucp.streamRecvNbx(op.ep.handle, op.address, op.length, lenOut.address(),
                        reqParam.address());
                posted(op, slot, r, r == 0 ? lenOut.get(JAVA_LONG, 0) : 0, 0);
                if (op.request != 0) {
                    op.ep.addPending(op);
                }
            }
            case Op.FLUSH -> {
                if (op.ep.state != EndpointCore.CLOSING || op.ep.handle == 0) {
                    op.finish(0, 0, null);
                    return;
                }
                int slot = allocSlot(op);
                setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA, Stubs.SEND.address(),
                        userData(slot), 0);
                long r = Ucp.epFlushNbx(op.ep.handle, reqParam.address());
                posted(op, slot, r, 0, 0);
            }
            case Op.CLOSE -> {
                int slot = allocSlot(op);
                setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
                        Stubs.SEND.address(), userData(slot), UCP_EP_CLOSE_FLAG_FORCE);
                long r = Ucp.epCloseNbx(op.ep.handle, reqParam.address());
                posted(op, slot, r, 0, 0);
            }
            default -> throw new IllegalStateException("unknown op kind " + op.kind);
        }
    }

    private void runTask(Op op) {
        try {
            op.task.run();
            op.finish(0, 0, null);
        } catch (UcxException e) {
            op.finish(0, 0, e);
        } catch (Throwable t) {
            LOG.error("ucx4j task failed on {}", name, t);
            op.finish(0, 0, new UcxException("internal error: " + t, 0, t));
        }
    }

    private void failNow(Op op, UcxException e) {
        freeOwned(op);
        op.finish(0, 0, e);
    }

    private void linkPending(Op op) {
        if (op.ep != null) {
            op.ep.addPending(op);
        } else {
            op.pendingPrev = null;
            op.pendingNext = workerRecvHead;
            if (workerRecvHead != null) {
                workerRecvHead.pendingPrev = op;
            }
            workerRecvHead = op;
        }
    }

    private void unlinkPending(Op op) {
        if (op.ep != null) {
            op.ep.removePending(op);
            return;
        }
        if (op.pendingPrev == null && workerRecvHead != op) {
            return;
        }
        if (op.pendingPrev != null) {
            op.pendingPrev.pendingNext = op.pendingNext;
        } else {
            workerRecvHead = op.pendingNext;
        }
        if (op.pendingNext != null) {
            op.pendingNext.pendingPrev = op.pendingPrev;
        }
        op.pendingPrev = op.pendingNext = null;
    }

    private void setParam(int attrMask, long cb, long userData, int flags) {
        MemorySegment p = reqParam;
        p.set(JAVA_INT, RP_OP_ATTR_MASK, attrMask);
        p.set(JAVA_INT, RP_FLAGS, flags);
        p.set(JAVA_LONG, RP_CB, cb);
        p.set(JAVA_LONG, RP_USER_DATA, userData);
        p.set(JAVA_INT, RP_MEMORY_TYPE, UCS_MEMORY_TYPE_HOST);
    }

    private long userData(int slot) {
        return ((long) id << 32) | slot;
    }

    private void posted(Op op, int slot, long r, long immediateLength, long immediateTag) {
        if (r == 0) {
            releaseSlot(slot);
            complete(op, Status.OK, immediateLength, immediateTag);
        } else if (Status.isError(r)) {
            releaseSlot(slot);
            complete(op, (int) r, 0, 0);
        } else if (!op.done) {
            op.request = r;
        } // else: completed (and the request freed) by its callback inside the nbx call
    }

    private int allocSlot(Op op) {
        if (freeTop == 0) {
            int old = slots.length;
            slots = Arrays.copyOf(slots, old * 2);
            freeSlots = new int[old * 2];
            for (int i = 0; i < old; i++) {
                freeSlots[i] = old * 2 - 1 - i;
            }
            freeTop = old;
        }
        int s = freeSlots[--freeTop];
        slots[s] = op;
        op.slot = s;
        return s;
    }

    private void releaseSlot(int s) {
        Op op = slots[s];
        if (op != null) {
            op.slot = -1;
        }
        slots[s] = null;
        freeSlots[freeTop++] = s;
    }

    /** Ends an op on the owner thread: frees UCX's request and staging memory, maps the status, wakes the caller. */
    private void complete(Op op, int status, long length, long tag) {
        if (op.request != 0) {
            Ucp.requestFree(op.request);
            op.request = 0;
        }
        unlinkPending(op);
        switch (op.kind) {
            case Op.STREAM_RECV -> onHelloReceived(op, status);
            case Op.STREAM_SEND -> onHelloSent(op, status);
            case Op.FLUSH, Op.CLOSE -> op.finish(0, 0, status == Status.OK ? null : UcxException.of(status, op.what));
            default -> {
                if (status == Status.OK) {
                    if (op.copyBack != null) {
                        MemorySegment.copy(NativeAccess.view(op.owned, length), JAVA_BYTE, 0, op.copyBack, 0,
                                (int) length);
                    }
                    freeOwned(op);
                    op.finish(length, tag, null);
                } else {
                    freeOwned(op);
                    op.finish(0, 0, errorFor(op, status));
                }
            }
        }
    }

    private UcxException errorFor(Op op, int status) {
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
        if (status == Status.ERR_CANCELED && stopRequested) {
            return new CanceledException(op.what + " canceled: the UCX worker was closed ("
                    + Status.name(status) + ")", status);
        }
        return UcxException.of(status, op.what);
    }

    private static void freeOwned(Op op) {
        if (op.owned != 0) {
            Ucp.free(op.owned);
            op.owned = 0;
        }
    }

    private void cancelOnOwner(Op op) {
        if (op.done || op.request == 0) {
            if (!op.done && op.slot < 0) {
                dispatch(op); // not posted yet: dispatch sees cancelRequested
            }
            return;
        }
        if (op.kind == Op.TAG_RECV || op.kind == Op.STREAM_RECV) {
            Ucp.requestCancel(worker, op.request);
        } else if (op.ep != null) {
            // UCX cannot cancel a send in flight: abort the endpoint, which purges it
            abortOnOwner(op.ep, null);
        }
    }

    // ---- upcalls: run on the owner thread inside ucp_worker_progress; never throw

    static void onSend(long request, int status, long userData) {
        try {
            Engine e = REGISTRY[(int) (userData >>> 32)];
            e.completeSlot((int) userData, request, status, -1, 0);
        } catch (Throwable t) {
            LOG.error("ucx4j send callback failed", t);
        }
    }

    static void onTagRecv(long request, int status, long info, long userData) {
        try {
            Engine e = REGISTRY[(int) (userData >>> 32)];
            long len = 0, tag = 0;
            if (status == Status.OK && info != 0) {
                MemorySegment i = NativeAccess.view(info, UCP_TAG_RECV_INFO.byteSize());
                len = i.get(JAVA_LONG, TRI_LENGTH);
                tag = i.get(JAVA_LONG, TRI_SENDER_TAG);
            }
            e.completeSlot((int) userData, request, status, len, tag);
        } catch (Throwable t) {
            LOG.error("ucx4j recv callback failed", t);
        }
    }

    static void onStreamRecv(long request, int status, long length, long userData) {
        try {
            Engine e = REGISTRY[(int) (userData >>> 32)];
            e.completeSlot((int) userData, request, status, length, 0);
        } catch (Throwable t) {
            LOG.error("ucx4j stream callback failed", t);
        }
    }

    static void onEndpointError(long arg, long ep, int status) {
        try {
            Engine e = REGISTRY[(int) (arg >>> 32)];
            EndpointCore c = e.eps[(int) arg];
            if (c != null && c.handle == ep) {
                e.deferred.add(() -> e.failEndpoint(c, status));
            }
        } catch (Throwable t) {
            LOG.error("ucx4j endpoint error callback failed", t);
        }
    }

    static void onConnRequest(long connRequest, long arg) {
        try {
            Engine e = REGISTRY[(int) (arg >>> 32)];
            ListenerCore l = e.listeners[(int) arg];
            e.deferred.add(() -> e.accept(l, connRequest));
        } catch (Throwable t) {
            LOG.error("ucx4j connection callback failed", t);
        }
    }

    private void completeSlot(int slot, long request, int status, long length, long tag) {
        Op op = slots[slot];
        if (op == null || (op.request != request && op.request != 0)) {
            Ucp.requestFree(request);
            return;
        }
        op.request = request;
        releaseSlot(slot);
        complete(op, status, length < 0 ? op.length : length, tag);
    }

    // ============================================================== connections

    /** Starts a client connection; the future completes after the ucx4j handshake. */
    public SafeFuture<EndpointCore> connect(InetSocketAddress address) {
        String peer = address.getHostString() + ":" + address.getPort();
        SafeFuture<EndpointCore> f = new SafeFuture<>(executor);
        executeFor(f, () -> {
            EndpointCore c = new EndpointCore(this, nextConnId(), true, peer);
            c.connectFuture = f;
            try {
                long addrLen = writeSockaddr(scratch, address);
                epParams.fill((byte) 0);
                epParams.set(JAVA_LONG, EP_FIELD_MASK, UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS
                        | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
                epParams.set(JAVA_INT, EP_FLAGS, UCP_EP_PARAMS_FLAGS_CLIENT_SERVER);
                epParams.set(JAVA_LONG, EP_SOCKADDR_ADDR, scratch.address());
                epParams.set(JAVA_INT, EP_SOCKADDR_LEN, (int) addrLen);
                createEndpoint(c);
            } catch (UcxException e) {
                f.completeExceptionally(e);
            }
        });
        return f;
    }

    private int nextConnId() {
        int id = nextConnId;
        nextConnId = (nextConnId + 1) & 0x7fffffff;
        if (nextConnId == 0) {
            nextConnId = 1;
        }
        return id;
    }

    private void createEndpoint(EndpointCore c) {
        int slot = allocEndpointSlot(c);
        epParams.set(JAVA_INT, EP_ERR_MODE, UCP_ERR_HANDLING_MODE_PEER);
        epParams.set(JAVA_LONG, EP_ERR_HANDLER_CB, Stubs.EP_ERROR.address());
        epParams.set(JAVA_LONG, EP_ERR_HANDLER_ARG, ((long) id << 32) | slot);
        int st = Ucp.epCreate(worker, epParams.address(), lenOut.address());
        if (st != Status.OK) {
            eps[slot] = null;
            throw UcxException.of(st, "connect to " + c.peer);
        }
        c.handle = lenOut.get(JAVA_LONG, 0);
        c.hello = Ucp.malloc(2L * HELLO_SIZE);
        MemorySegment h = NativeAccess.view(c.hello, 2L * HELLO_SIZE);
        h.fill((byte) 0);
        h.set(JAVA_INT, 0, HELLO_MAGIC);
        h.set(JAVA_SHORT, 4, (short) PROTOCOL_VERSION);
        h.set(JAVA_INT, 8, c.localConnId);
        h.set(JAVA_LONG, 16, ProcessHandle.current().pid());
        Op send = new Op(this);
        send.kind = Op.STREAM_SEND;
        send.what = "handshake send";
        send.ep = c;
        send.address = c.hello;
        send.length = HELLO_SIZE;
        if (!c.client) {
            // UCX 1.13 aborts (wireup_ep.c assertion) if a connect fails with a send still queued on the wireup
            // endpoint, so the client sends its hello only after the server's has arrived.
            post(send);
        } else {
            c.pendingHelloSend = send;
        }
        Op recv = new Op(this);
        recv.kind = Op.STREAM_RECV;
        recv.what = "handshake recv";
        recv.ep = c;
        recv.address = c.hello + HELLO_SIZE;
        recv.length = HELLO_SIZE;
        post(recv);
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

    private void onHelloSent(Op op, int status) {
        if (status != Status.OK) {
            handshakeFailed(op.ep, UcxException.of(status, "handshake with " + op.ep.peer));
        }
    }

    private void onHelloReceived(Op op, int status) {
        EndpointCore c = op.ep;
        if (status != Status.OK) {
            handshakeFailed(c, UcxException.of(status, "handshake with " + c.peer));
            return;
        }
        if (c.state != EndpointCore.CONNECTING) {
            return;
        }
        MemorySegment h = NativeAccess.view(c.hello + HELLO_SIZE, HELLO_SIZE);
        int magic = h.get(JAVA_INT, 0);
        int version = h.get(JAVA_SHORT, 4);
        if (magic != HELLO_MAGIC || version != PROTOCOL_VERSION) {
            handshakeFailed(c, new UcxException("handshake with " + c.peer + " failed: "
                    + (magic != HELLO_MAGIC ? "the peer is not a ucx4j endpoint"
                            : "protocol version mismatch: ours " + PROTOCOL_VERSION + ", peer's " + version)
                    + " (" + Status.name(Status.ERR_UNSUPPORTED) + ")", Status.ERR_UNSUPPORTED));
            return;
        }
        c.peerConnId = h.get(JAVA_INT, 8);
        c.peerPid = h.get(JAVA_LONG, 16);
        if (c.pendingHelloSend != null) {
            Op send = c.pendingHelloSend;
            c.pendingHelloSend = null;
            post(send);
        }
        c.state = EndpointCore.OPEN;
        if (c.client) {
            c.connectFuture.complete(c);
        } else if (c.listener != null && !c.listener.closed) {
            ListenerCore l = c.listener;
            executor.execute(() -> l.onConnection.accept(c));
        } else {
            abortOnOwner(c, null);
        }
    }

    private void handshakeFailed(EndpointCore c, UcxException e) {
        if (c.state != EndpointCore.CONNECTING) {
            return;
        }
        if (c.client) {
            c.connectFuture.completeExceptionally(e.status() == Status.ERR_UNSUPPORTED ? e
                    : new org.ucx4j.UnreachableException("connect to " + c.peer + " failed, nobody accepted the "
                            + "connection: " + Status.describe(e.status()), e.status(), e));
        } else {
            LOG.warn("ucx4j: rejected incoming connection from {}: {}", c.peer, e.getMessage());
        }
        c.failure = e;
        abortOnOwner(c, e);
    }

    private void accept(ListenerCore l, long connRequest) {
        String peer = "?";
        MemorySegment attr = scratch.asSlice(0, UCP_CONN_REQUEST_ATTR.byteSize());
        attr.set(JAVA_LONG, CRA_FIELD_MASK, UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR);
        if (Ucp.connRequestQuery(connRequest, attr.address()) == Status.OK) {
            InetSocketAddress a = readSockaddr(attr.asSlice(CRA_CLIENT_ADDRESS, SOCKADDR_STORAGE_SIZE));
            if (a != null) {
                peer = a.getHostString() + ":" + a.getPort();
            }
        }
        if (l.closed) {
            Ucp.listenerReject(l.handle, connRequest);
            return;
        }
        EndpointCore c = new EndpointCore(this, nextConnId(), false, peer);
        c.listener = l;
        epParams.fill((byte) 0);
        epParams.set(JAVA_LONG, EP_FIELD_MASK, UCP_EP_PARAM_FIELD_CONN_REQUEST
                | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
        epParams.set(JAVA_LONG, EP_CONN_REQUEST, connRequest);
        try {
            createEndpoint(c);
        } catch (UcxException e) {
            LOG.warn("ucx4j: could not accept a connection from {}: {}", peer, e.getMessage());
        }
    }

    /** Starts listening; the future completes with the bound listener. */
    public SafeFuture<ListenerCore> listen(InetSocketAddress bind, Consumer<EndpointCore> onConnection) {
        SafeFuture<ListenerCore> f = new SafeFuture<>(executor);
        executeFor(f, () -> {
            ListenerCore l = new ListenerCore(this, onConnection);
            int slot = -1;
            for (int i = 0; i < listeners.length && slot < 0; i++) {
                if (listeners[i] == null) {
                    slot = i;
                }
            }
            if (slot < 0) {
                slot = listeners.length;
                listeners = Arrays.copyOf(listeners, slot * 2);
            }
            listeners[slot] = l;
            l.slot = slot;
            long len = writeSockaddr(scratch, bind);
            listenerParams.fill((byte) 0);
            listenerParams.set(JAVA_LONG, LP_FIELD_MASK,
                    UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER);
            listenerParams.set(JAVA_LONG, LP_SOCKADDR_ADDR, scratch.address());
            listenerParams.set(JAVA_INT, LP_SOCKADDR_LEN, (int) len);
            listenerParams.set(JAVA_LONG, LP_CONN_CB, Stubs.CONN_REQUEST.address());
            listenerParams.set(JAVA_LONG, LP_CONN_ARG, ((long) id << 32) | slot);
            int st = Ucp.listenerCreate(worker, listenerParams.address(), lenOut.address());
            if (st != Status.OK) {
                listeners[slot] = null;
                f.completeExceptionally(UcxException.of(st, "listen on " + bind));
                return;
            }
            l.handle = lenOut.get(JAVA_LONG, 0);
            MemorySegment attr = scratch.asSlice(0, UCP_LISTENER_ATTR.byteSize());
            attr.set(JAVA_LONG, LA_FIELD_MASK, UCP_LISTENER_ATTR_FIELD_SOCKADDR);
            st = Ucp.listenerQuery(l.handle, attr.address());
            if (st == Status.OK) {
                InetSocketAddress a = readSockaddr(attr.asSlice(LA_SOCKADDR, SOCKADDR_STORAGE_SIZE));
                l.port = a == null ? bind.getPort() : a.getPort();
                l.bindAddress = a == null ? bind.getHostString() : a.getHostString();
            } else {
                l.port = bind.getPort();
                l.bindAddress = bind.getHostString();
            }
            f.complete(l);
        });
        return f;
    }

    public void closeListener(ListenerCore l) {
        if (l.closed) {
            return;
        }
        l.closed = true;
        if (stopRequested) {
            return; // the shutdown on the owner thread destroys it
        }
        if (Thread.currentThread() == owner) {
            destroyListener(l);
        } else {
            Op op = newOp();
            op.kind = Op.TASK;
            op.task = () -> destroyListener(l);
            op.what = "close listener";
            op.blocking = true;
            submit(op);
            await(op, TimeUnit.SECONDS.toNanos(5));
        }
    }

    private void destroyListener(ListenerCore l) {
        if (l.handle != 0) {
            Ucp.listenerDestroy(l.handle);
            l.handle = 0;
            listeners[l.slot] = null;
        }
    }

    // ---- endpoint failure / close (owner thread)

    private void failEndpoint(EndpointCore c, int status) {
        if (c.state == EndpointCore.CLOSED || c.state == EndpointCore.FAILED) {
            return;
        }
        UcxException cause = UcxException.of(status, "connection to " + c.peer + " lost");
        if (c.state == EndpointCore.CONNECTING) {
            handshakeFailed(c, cause);
            return;
        }
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
        Op close = new Op(this);
        close.kind = Op.CLOSE;
        close.what = "close";
        close.ep = c;
        close.whenComplete((v, e) -> releaseEndpoint(c));
        post(close);
    }

    private void cancelPending(EndpointCore c) {
        for (Op op = c.pendingHead; op != null; op = op.pendingNext) {
            if (op.request != 0) {
                Ucp.requestCancel(worker, op.request);
            }
        }
    }

    private void releaseEndpoint(EndpointCore c) {
        // may run on the owner thread (complete() of the CLOSE op) — only engine code here
        Runnable release = () -> {
            if (c.state == EndpointCore.CLOSED) {
                return;
            }
            c.state = EndpointCore.CLOSED;
            if (c.slot >= 0 && eps[c.slot] == c) {
                eps[c.slot] = null;
            }
            c.handle = 0;
            if (c.hello != 0 && c.pendingHead == null) {
                Ucp.free(c.hello);
                c.hello = 0;
            }
            Throwable cause = c.closedLocally ? null : c.failure;
            executor.execute(() -> {
                for (Consumer<Throwable> cb : c.closeCallbacks) {
                    try {
                        cb.accept(cause);
                    } catch (Throwable t) {
                        LOG.warn("ucx4j close callback threw", t);
                    }
                }
                c.closed.complete(null);
            });
        };
        if (Thread.currentThread() == owner) {
            release.run();
        } else {
            execute(release);
        }
    }

    /** Graceful close: cancel receives, flush sends (bounded by the caller's wait), then force-close. */
    public Op closeEndpoint(EndpointCore c) {
        Op flush = new Op(this);
        flush.kind = Op.FLUSH;
        flush.what = "close";
        flush.ep = c;
        flush.blocking = true;
        execute(() -> {
            if (c.state == EndpointCore.OPEN || c.state == EndpointCore.CONNECTING) {
                c.closedLocally = true;
                c.state = EndpointCore.CLOSING;
                cancelPending(c);
            }
        });
        submit(flush);
        return flush;
    }

    /** Force-closes the endpoint (any thread); pending operations fail with {@link EndpointClosedException}. */
    public void abortEndpoint(EndpointCore c) {
        execute(() -> {
            c.closedLocally = c.failure == null;
            if (c.state == EndpointCore.CLOSING) {
                c.state = EndpointCore.OPEN; // let abortOnOwner run its course
            }
            abortOnOwner(c, null);
        });
    }

    // ============================================================== info

    public String contextInfo() {
        return onOwner(() -> Ucp.capture(f -> Ucp.contextPrintInfo(context, f)));
    }

    public String workerInfo() {
        return onOwner(() -> Ucp.capture(f -> Ucp.workerPrintInfo(worker, f)));
    }

    public String endpointInfo(EndpointCore c) {
        return onOwner(() -> c.handle == 0 ? "" : Ucp.capture(f -> Ucp.epPrintInfo(c.handle, f)));
    }

    private <T> T onOwner(java.util.function.Supplier<T> s) {
        if (Thread.currentThread() == owner) {
            return s.get();
        }
        Object[] box = new Object[1];
        Op op = newOp();
        op.kind = Op.TASK;
        op.what = "info";
        op.blocking = true;
        op.task = () -> box[0] = s.get();
        submit(op);
        await(op, TimeUnit.SECONDS.toNanos(10));
        @SuppressWarnings("unchecked")
        T t = (T) box[0];
        return t;
    }

    // ============================================================== shutdown

    /** Stops the engine: cancels everything pending, destroys the worker and the context. Idempotent. */
    public void shutdown(long timeoutNanos) {
        if (Thread.currentThread() == owner) {
            stopRequested = true;
            if (sleeping) {
                Ucp.workerSignal(worker);
            }
            if (mode == ProgressMode.CALLER) {
                shutdownOnOwner();
            }
            return;
        }
        stopRequested = true;
        Ucp.workerSignal(worker);
        try {
            terminatedFuture.get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            LOG.warn("ucx4j: worker {} did not stop within {} ms", name, TimeUnit.NANOSECONDS.toMillis(timeoutNanos));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (java.util.concurrent.ExecutionException e) {
            // cannot happen: completed normally
        }
    }

    public SafeFuture<Void> terminatedFuture() {
        return terminatedFuture;
    }

    private void shutdownOnOwner() {
        if (terminated) {
            return;
        }
        try {
            // commands still queued fail as closed
            Op op;
            while ((op = queue.poll()) != null) {
                op.clearQueued();
                if (!op.done && op.request == 0) {
                    if (op.kind == Op.TASK) {
                        runTask(op);
                    } else {
                        failNow(op, closedError(op.what));
                    }
                }
            }
            for (ListenerCore l : listeners) {
                if (l != null) {
                    l.closed = true;
                    destroyListener(l);
                }
            }
            for (EndpointCore c : eps) {
                if (c != null) {
                    abortOnOwner(c, null);
                }
            }
            for (Op r = workerRecvHead; r != null; r = r.pendingNext) {
                Ucp.requestCancel(worker, r.request);
            }
            long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500);
            while (System.nanoTime() < until && hasInFlight()) {
                progressOnce();
            }
            List<Op> stuck = new ArrayList<>();
            for (Op s : slots) {
                if (s != null) {
                    stuck.add(s);
                }
            }
            for (Op s : stuck) {
                // UCX never completed these; after worker destroy it never will
                s.finish(0, 0, new CanceledException(s.what + " canceled: the UCX worker was closed ("
                        + Status.name(Status.ERR_CANCELED) + ")", Status.ERR_CANCELED));
            }
            Ucp.workerDestroy(worker);
            Ucp.cleanup(context);
        } catch (Throwable t) {
            LOG.error("ucx4j: error while closing worker {}", name, t);
        } finally {
            terminated = true;
            unregister(id);
            arena.close();
            terminatedFuture.complete(null);
        }
    }

    private boolean hasInFlight() {
        for (Op s : slots) {
            if (s != null) {
                return true;
            }
        }
        return false;
    }

    // ============================================================== sockaddr

    static long writeSockaddr(MemorySegment seg, InetSocketAddress a) {
        seg.asSlice(0, SOCKADDR_STORAGE_SIZE).fill((byte) 0);
        InetAddress ip = a.getAddress();
        if (ip == null) {
            try {
                ip = InetAddress.getByName(a.getHostString());
            } catch (UnknownHostException e) {
                throw new org.ucx4j.UnreachableException("unknown host " + a.getHostString() + " ("
                        + Status.name(Status.ERR_INVALID_ADDR) + ")", Status.ERR_INVALID_ADDR);
            }
        }
        if (ip instanceof Inet4Address) {
            seg.set(JAVA_SHORT, 0, (short) AF_INET);
            seg.set(NET_SHORT, 2, (short) a.getPort());
            MemorySegment.copy(ip.getAddress(), 0, seg, JAVA_BYTE, 4, 4);
            return SOCKADDR_IN.byteSize();
        }
        seg.set(JAVA_SHORT, 0, (short) AF_INET6);
        seg.set(NET_SHORT, 2, (short) a.getPort());
        MemorySegment.copy(ip.getAddress(), 0, seg, JAVA_BYTE, 8, 16);
        if (ip instanceof Inet6Address v6) {
            seg.set(JAVA_INT, 24, v6.getScopeId());
        }
        return SOCKADDR_IN6.byteSize();
    }

    static InetSocketAddress readSockaddr(MemorySegment seg) {
        int family = seg.get(JAVA_SHORT, 0);
        int port = Short.toUnsignedInt(seg.get(NET_SHORT, 2));
        try {
            if (family == AF_INET) {
                byte[] b = new byte[4];
                MemorySegment.copy(seg, JAVA_BYTE, 4, b, 0, 4);
                return new InetSocketAddress(InetAddress.getByAddress(b), port);
            }
            if (family == AF_INET6) {
                byte[] b = new byte[16];
                MemorySegment.copy(seg, JAVA_BYTE, 8, b, 0, 16);
                return new InetSocketAddress(InetAddress.getByAddress(b), port);
            }
        } catch (UnknownHostException e) {
            return null;
        }
        return null;
    }
}
