package org.ucx4j;

import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.internal.engine.Engine;
import org.ucx4j.internal.engine.Bootstrap;
import org.ucx4j.internal.engine.EndpointCore;
import org.ucx4j.internal.engine.ListenerCore;
import org.ucx4j.internal.engine.Op;
import org.ucx4j.internal.engine.SafeFuture;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * Entry point: a UCX context, one worker and the thread that owns it (UCX-Py's {@code ucp} module in one object).
 *
 * <pre>{@code
 * try (Ucx ucx = Ucx.open();
 *      Listener l = ucx.listen(0, ep -> { byte[] b = new byte[5]; ep.recv(b); ep.send(b); });
 *      Endpoint ep = ucx.connect("127.0.0.1", l.port())) {
 *     ep.send("hello".getBytes());
 * }
 * }</pre>
 */
public final class Ucx implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(Ucx.class);
    private static final AtomicInteger COUNTER = new AtomicInteger();
    /** Oldest libucp ucx4j accepts: major, minor ({@link #MINIMUM_UCX_VERSION}). */
    private static final int[] MIN_VERSION = {1, 13};
    /** The oldest UCX release ucx4j works with ({@link #isAvailable()} is false with an older one). */
    public static final String MINIMUM_UCX_VERSION = "1.13";

    private final UcxOptions options;
    private final Engine engine;
    private final Set<Endpoint> endpoints = ConcurrentHashMap.newKeySet();
    private final Set<Listener> listeners = ConcurrentHashMap.newKeySet();
    private final AtomicBoolean closed = new AtomicBoolean();
    /** The default pooled host allocator when the options name none; emptied at close. */
    private PooledAllocator ownPool;

    private Ucx(UcxOptions options) {
        this.options = options;
        String name = options.name() + "-" + COUNTER.incrementAndGet();
        Executor executor = r -> Thread.ofVirtual().name("ucx4j-" + name + "-cb").start(r);
        this.engine = new Engine(new Engine.Config(name, options.progressMode(), options.givenToUcx(),
                options.environmentWins(), executor, options.secret(), Buffers.nanos(options.connectTimeout()),
                hostAllocator(options), options.maxFrames(), options.maxMessageBytes(), options.pullBudget(),
                options.peerErrorHandling(), (int) options.livenessTimeout().toSeconds(),
                // checked messages rebind payloads to arenas of their own, which UCX's buffers must not outlive
                options.ucxBuffers() && !options.checkedMessages(), options.rma(), options.maxHandshakes(),
                options.hostMemoryOnly(), options.eagerSends()));
    }

    /**
     * Opens UCX with ucx4j's defaults.
     *
     * @return a new open instance; close it to release the worker and context
     * @throws UcxUnavailableException if UCX cannot be used here ({@link #unavailabilityCause()} says why)
     */
    public static Ucx open() {
        return open(UcxOptions.defaults());
    }

    /**
     * Opens UCX: reads the configuration, creates the context and a worker, starts the progress thread (none in
     * {@link ProgressMode#CALLER}).
     *
     * @param options the options, not null
     * @return a new open instance; close it to release the worker and context
     * @throws UcxUnavailableException if UCX cannot be used here ({@link #unavailabilityCause()} says why)
     * @throws ConfigException if the configuration enables UCX's experimental protocols ({@code UCX_PROTO_ENABLE=y}
     *     before UCX 1.16)
     */
    public static Ucx open(UcxOptions options) {
        Objects.requireNonNull(options, "options");
        String cause = unavailabilityCause();
        if (cause != null) {
            throw new UcxUnavailableException(cause, Status.ERR_NO_DEVICE);
        }
        refuseExperimentalProtocols(options);
        return new Ucx(options);
    }

    /**
     * UCX before 1.16 labels its new protocols ({@code UCX_PROTO_ENABLE=y}) experimental, and with them UCX 1.13
     * aborts the whole process when a peer fails (an assertion in {@code ucp_ep_reqs_purge}): refused with the
     * reason rather than a JVM killed later. From 1.16 they are UCX's default and are fine.
     */
    private static void refuseExperimentalProtocols(UcxOptions options) {
        int[] v = Ucp.version();
        if (v[0] == 1 && v[1] < 16 && "y".equalsIgnoreCase(config(options).get("PROTO_ENABLE"))) {
            throw new ConfigException("UCX_PROTO_ENABLE=y: UCX " + version() + "'s protocols v2 are experimental "
                    + "(UCX's default only from 1.16) and abort the process when a peer fails; unset it, or use "
                    + "UCX >= 1.16 (" + Status.name(Status.ERR_UNSUPPORTED) + ")", Status.ERR_UNSUPPORTED);
        }
    }

    // ---------------------------------------------------------------- availability

    /** {@return true when libucp (>= 1.13) loads and native access is allowed} */
    public static boolean isAvailable() {
        return unavailabilityCause() == null;
    }

    /** {@return null when UCX is usable; otherwise one line saying what is wrong and how to fix it} */
    public static String unavailabilityCause() {
        if (!NativeAccess.nativeAccessEnabled()) {
            // Java 25 only warns by default; deny mode would throw on the first restricted call
            String mode = System.getProperty("jdk.module.illegal.native.access", "");
            if ("deny".equals(mode)) {
                return "native access is disabled for ucx4j: " + NativeAccess.nativeAccessRemedy();
            }
        }
        Throwable t;
        try {
            t = Ucp.loadFailure();
        } catch (IllegalCallerException e) {
            return "native access is disabled for ucx4j: " + NativeAccess.nativeAccessRemedy();
        }
        if (t != null) {
            if (t instanceof IllegalCallerException) {
                return "native access is disabled for ucx4j: " + NativeAccess.nativeAccessRemedy();
            }
            return "UCX (libucp) could not be loaded: " + t.getMessage() + ". Install UCX >= " + MINIMUM_UCX_VERSION
                    + " (Debian/Ubuntu: "
                    + "apt-get install libucx0; RHEL: dnf install ucx) or set UCX4J_UCX_HOME (or -Ducx4j.ucx.home) "
                    + "to a UCX install prefix";
        }
        int[] v = Ucp.version();
        if (v[0] < MIN_VERSION[0] || (v[0] == MIN_VERSION[0] && v[1] < MIN_VERSION[1])) {
            return "UCX " + v[0] + "." + v[1] + "." + v[2] + " found at " + Ucp.location() + " is too old: ucx4j "
                    + "needs UCX >= " + MINIMUM_UCX_VERSION + "; install a newer UCX or point UCX4J_UCX_HOME at one";
        }
        return null;
    }

    /**
     * {@return the libucp version, like {@code 1.13.1}}
     *
     * @throws UcxUnavailableException if UCX cannot be used here
     */
    public static String version() {
        requireAvailable();
        int[] v = Ucp.version();
        return v[0] + "." + v[1] + "." + v[2];
    }

    /**
     * {@return where libucp was loaded from}
     *
     * @throws UcxUnavailableException if UCX cannot be used here
     */
    public static String libraryLocation() {
        requireAvailable();
        return Ucp.location();
    }

    /**
     * {@return the {@code UCX_*} variables ucx4j puts in its process environment unless they were set (shared memory
     * with peer-failure detection, keepalive, allocation order, shared-memory segment size, address format), with the
     * values in effect here} Give them to a plain UCX program on the same host that talks to this one through
     * {@link #connect(WorkerAddress)}, or to a child process that must match it. The map is unmodifiable, sorted by
     * name, and its keys keep the {@code UCX_} prefix.
     *
     * @throws UcxUnavailableException if UCX cannot be used here
     */
    public static Map<String, String> environmentDefaults() {
        requireAvailable();
        return java.util.Collections.unmodifiableMap(Ucp.environmentDefaults());
    }

    /**
     * {@return the effective UCX configuration for {@code options} as {@code KEY -> value} (keys without
     * {@code UCX_})}
     *
     * @param options the options whose UCX settings are applied over UCX's configuration, not null
     * @throws UcxUnavailableException if UCX cannot be used here
     */
    public static Map<String, String> config(UcxOptions options) {
        requireAvailable();
        String text = org.ucx4j.internal.engine.UcxConfig.effective(options.givenToUcx(), options.environmentWins());
        Map<String, String> m = new LinkedHashMap<>();
        for (String line : text.split("\n")) {
            int eq = line.indexOf('=');
            if (line.startsWith("UCX_") && eq > 0) {
                m.put(line.substring(4, eq), line.substring(eq + 1));
            }
        }
        return m;
    }

    private static void requireAvailable() {
        String cause = unavailabilityCause();
        if (cause != null) {
            throw new UcxUnavailableException(cause, Status.ERR_NO_DEVICE);
        }
    }

    // ---------------------------------------------------------------- instance

    /** {@return the options this instance was opened with} */
    public UcxOptions options() {
        return options;
    }

    /**
     * {@return the effective configuration of this instance, as {@link #config(UcxOptions)} gives it for its
     * options}
     */
    public Map<String, String> config() {
        return config(options);
    }

    /** {@return UCX's context and worker description (memory domains, transports, devices)} */
    public String info() {
        checkOpen();
        return engine.contextInfo() + engine.workerInfo();
    }

    /**
     * {@return the transports this instance opened, as {@code transport/device} (e.g. {@code posix/memory},
     * {@code tcp/eth0}, {@code rc_mlx5/mlx5_0:1}, {@code cuda_ipc/cuda})} Which of them an endpoint uses:
     * {@link Endpoint#transports()}.
     */
    public List<String> transports() {
        checkOpen();
        return org.ucx4j.internal.engine.TransportInfo.resources(engine.contextInfo());
    }

    /**
     * Listens on all interfaces; port 0 picks an ephemeral port. See {@link #listen(String, int, ConnectionHandler)}.
     *
     * @param port the TCP port, 0 .. 65535 (0: ephemeral, then read it from {@link Listener#port()})
     * @param handler serves each accepted connection, on a virtual thread of its own; not null
     * @return the listener, bound and accepting; closing it keeps the endpoints it accepted
     */
    public Listener listen(int port, ConnectionHandler handler) {
        return listen(null, port, handler);
    }

    /**
     * Listens on {@code bindAddress} (null = all interfaces). Each connection's handler runs on a virtual thread.
     *
     * @param bindAddress the host name or IP address to bind, or null for all interfaces
     * @param port the TCP port, 0 .. 65535 (0: ephemeral, then read it from {@link Listener#port()})
     * @param handler serves each accepted connection, on a virtual thread of its own; not null
     * @return the listener, bound and accepting; closing it keeps the endpoints it accepted
     * @throws IllegalArgumentException if {@code port} is out of range
     * @throws UcxException ({@code UCS_ERR_IO_ERROR}) if the socket cannot be bound
     */
    public Listener listen(String bindAddress, int port, ConnectionHandler handler) {
        checkOpen();
        Objects.requireNonNull(handler, "handler");
        if (port < 0 || port > 65535) {
            throw new IllegalArgumentException("port out of range: " + port);
        }
        InetSocketAddress bind = bindAddress == null ? new InetSocketAddress(port)
                : new InetSocketAddress(bindAddress, port);
        ListenerCore core;
        try {
            core = Bootstrap.listen(engine, bind, c -> serve(c, handler));
        } catch (java.io.IOException e) {
            throw new UcxException("listen on " + bind + " failed: " + e.getMessage() + " ("
                    + Status.name(Status.ERR_IO_ERROR) + ")", Status.ERR_IO_ERROR, e);
        }
        Listener l = new Listener(core, listeners::remove);
        listeners.add(l);
        if (closed.get()) { // closed meanwhile, after its copy of the listeners: this one must not stay bound
            l.close();
            throw new EndpointClosedException("listen: this Ucx instance was closed meanwhile ("
                    + Status.name(Status.ERR_NOT_CONNECTED) + ")", Status.ERR_NOT_CONNECTED);
        }
        return l;
    }

    /** Listeners this instance still tracks (tests: closed ones are forgotten). */
    int trackedListeners() {
        return listeners.size();
    }

    private void serve(EndpointCore c, ConnectionHandler handler) {
        Endpoint ep = track(c);
        Thread.ofVirtual().name("ucx4j-handler-" + c.peer()).start(() -> {
            try {
                handler.onConnection(ep);
            } catch (Throwable t) {
                if (ep.isAlive()) {
                    LOG.warn("ucx4j: connection handler for {} threw; aborting the endpoint", c.peer(), t);
                    ep.abort();
                } else {
                    LOG.debug("ucx4j: connection handler for {} ended with {}", c.peer(), t.toString());
                }
            }
        });
    }

    /**
     * Connects with the default timeout (5 s unless set in the options): {@link #connect(String, int, Duration)}.
     *
     * @param host the listener's host name or IP address, not null
     * @param port the listener's port, 1 .. 65535
     * @return the connected endpoint, handshake done
     */
    public Endpoint connect(String host, int port) {
        return connect(host, port, options.connectTimeout());
    }

    /**
     * Connects and completes the ucx4j handshake. Fails with {@link UnreachableException} or
     * {@link ConnectionResetException} when nobody listens, {@link UcxTimeoutException} after {@code timeout}.
     *
     * @param host the listener's host name or IP address, not null
     * @param port the listener's port, 1 .. 65535
     * @param timeout the bound for name resolution, TCP connect, handshake and UCX endpoint together; not negative
     * @return the connected endpoint, handshake done
     * @throws IllegalArgumentException if {@code port} is out of range or {@code timeout} negative
     * @throws CanceledException if the calling thread is interrupted (the attempt is abandoned)
     */
    public Endpoint connect(String host, int port, Duration timeout) {
        long t = Buffers.nanos(timeout);
        engine.checkMayBlock("connect"); // refused inside UCX's progress (connectAsync works there)
        CompletableFuture<Endpoint> f = connectAsync(host, port, t);
        try {
            return awaitFuture(f, t);
        } catch (TimeoutException e) {
            if (!f.cancel(false)) {
                return outcome(f); // connected (or failed) just as the wait ended: the endpoint is the caller's
            }
            throw new UcxTimeoutException("connect to " + host + ":" + port + " timed out after "
                    + timeout.toMillis() + " ms (" + Status.name(Status.ERR_TIMED_OUT) + ")", Status.ERR_TIMED_OUT);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            if (!f.cancel(false)) {
                return outcome(f); // (the interrupt stays set)
            }
            throw new CanceledException("connect to " + host + ":" + port + " interrupted ("
                    + Status.name(Status.ERR_CANCELED) + ")", Status.ERR_CANCELED);
        } catch (ExecutionException e) {
            throw rethrow(e.getCause());
        }
    }

    /** The result of a completed future, or its failure thrown as {@link #rethrow} does. */
    private static <T> T outcome(CompletableFuture<T> f) {
        try {
            return f.join();
        } catch (java.util.concurrent.CompletionException e) {
            throw rethrow(e.getCause());
        }
    }

    /**
     * Connects asynchronously; cancelling the future before it completes aborts the attempt.
     *
     * @param host the listener's host name or IP address, not null
     * @param port the listener's port, 1 .. 65535
     * @return a future of the connected endpoint, failing as {@link #connect(String, int, Duration)} does, with the
     *     options' connect timeout
     */
    public CompletableFuture<Endpoint> connectAsync(String host, int port) {
        return connectAsync(host, port, Buffers.nanos(options.connectTimeout()));
    }

    private CompletableFuture<Endpoint> connectAsync(String host, int port, long timeoutNanos) {
        checkOpen();
        Objects.requireNonNull(host, "host");
        if (port <= 0 || port > 65535) {
            throw new IllegalArgumentException("port out of range: " + port);
        }
        SafeFuture<EndpointCore> f = Bootstrap.connect(engine, host, port, timeoutNanos);
        // a wait on it drives the worker (caller mode's owner thread too); cancelling it abandons the handshake
        SafeFuture<Endpoint> result = new org.ucx4j.internal.engine.EngineFuture<>(engine);
        result.whenComplete((ep, e) -> {
            if (result.isCancelled()) {
                f.cancel(false);
            }
        });
        f.whenComplete((c, e) -> {
            if (e != null) {
                result.completeExceptionally(e);
                return;
            }
            Endpoint ep = track(c);
            if (!result.complete(ep)) {
                ep.abort(); // the caller gave up (timeout/cancel)
            }
        });
        return result;
    }

    /**
     * {@return the longest header, in bytes, an active message from this instance can carry to a ucx4j peer (a raw
     * endpoint's: 8 bytes more)} It is what UCX takes on this worker ({@code max_am_header}, set by its most limited
     * transport: a few KiB with InfiniBand's UD, far more over shared memory and TCP), less ucx4j's own 8 bytes.
     * Longer headers, and frame lists whose header (4 bytes + 9 a frame) is longer, are refused with
     * {@link IllegalArgumentException}.
     */
    public long maxActiveMessageHeader() {
        return engine.maxAmHeader - org.ucx4j.internal.engine.AmWire.PREFIX;
    }

    /**
     * {@return the memory types this instance's UCX can send from and receive into, as far as {@link MemoryType}
     * names them} Host memory always; GPU memory ({@link MemoryType#CUDA}, {@link MemoryType#ROCM}) where UCX was
     * built with that support and found a device (UCX 1.20's Level Zero types are not listed, but count the same
     * way). A native segment over such memory ({@code cudaMalloc}'s pointer, say, through
     * {@link MemorySegment#reinterpret(long)}) may then be sent and received with tags and streams and sent as an
     * active message's payload; UCX moves it with the device's transports. Host memory only, here as everywhere:
     * frames (UCX gathers them with a host copy), active-message headers, receive buffers of stream bytes a peer
     * sent before its graceful close (ucx4j copies those itself), and put/get on UCX before 1.16 (UCX names their
     * buffers host memory itself); the memory ucx4j allocates for received active messages, frames and objects is
     * host memory. Where UCX moves host memory alone, every call tells UCX so and saves it a lookup; so does
     * {@link UcxOptions#withHostMemoryOnly}.
     */
    public java.util.Set<MemoryType> memoryTypes() {
        java.util.EnumSet<MemoryType> types = java.util.EnumSet.noneOf(MemoryType.class);
        for (MemoryType t : MemoryType.values()) {
            if ((engine.memoryTypes & (1L << t.ucsValue())) != 0) {
                types.add(t);
            }
        }
        types.add(MemoryType.HOST);
        return java.util.Collections.unmodifiableSet(types);
    }

    // ---------------------------------------------------------------- worker addresses (raw endpoints)

    /** {@return this worker's UCX address, for peers that connect with {@link #connect(WorkerAddress)}} */
    public WorkerAddress workerAddress() {
        checkOpen();
        return WorkerAddress.of(engine.workerAddressBytes());
    }

    /**
     * A raw endpoint to a worker address: no listener, no ucx4j handshake, no private tag space. Tags go on the
     * wire exactly as given ({@code send(buf, tag)} sends the 32-bit tag zero-extended, {@code recv(buf, tag)} is
     * a worker-level receive of exactly that tag, from any peer), so any UCX program can be the peer (UCX-Py's
     * {@code create_endpoint_from_worker_address}, JUCX, plain C). A dead peer is noticed by UCX itself (keepalive,
     * transport errors), not by a control socket.
     *
     * @param address the peer worker's address, not null
     * @return the raw endpoint, created within the options' connect timeout
     * @throws UcxException ({@code UCS_ERR_UNSUPPORTED}) if the peer is on this host and its address (UCX format v1)
     *     does not say its shared-memory segment size, so fragments of ucx4j's default size could overrun its
     *     buffers: start the peer with {@code UCX_ADDRESS_VERSION=v2} or with {@link #environmentDefaults()}
     */
    public Endpoint connect(WorkerAddress address) {
        return connect(address, options.connectTimeout());
    }

    /**
     * {@link #connect(WorkerAddress)} within {@code timeout} instead of the options' connect timeout.
     *
     * @param address the peer worker's address, not null
     * @param timeout how long to wait for the endpoint, not negative; one that comes later is aborted
     * @return the raw endpoint
     * @throws UcxTimeoutException past {@code timeout}
     */
    public Endpoint connect(WorkerAddress address, Duration timeout) {
        long t = Buffers.nanos(timeout);
        checkOpen();
        Objects.requireNonNull(address, "address");
        engine.checkMayBlock("connect");
        SafeFuture<EndpointCore> f = engine.attachRaw(address.raw());
        EndpointCore c;
        try {
            c = join(f, "connect to " + address, t);
        } catch (UcxTimeoutException | CanceledException e) { // the endpoint may still come: never left open
            f.whenComplete((late, x) -> {
                if (late != null) {
                    engine.abortEndpoint(late);
                }
            });
            throw e;
        }
        return adoptRaw(c, address);
    }

    /**
     * Tracks a raw endpoint UCX made, or aborts it and throws where it must not be used
     * ({@link #segmentSizeHazard}).
     */
    private Endpoint adoptRaw(EndpointCore c, WorkerAddress address) {
        Endpoint ep = track(c);
        String hazard = segmentSizeHazard(address.raw(), ep.info());
        if (hazard != null) {
            ep.abort(); // nothing was sent on it
            throw UcxException.of(Status.ERR_UNSUPPORTED, "connect to " + address + ": " + hazard);
        }
        return ep;
    }

    /**
     * {@link #connect(WorkerAddress)} without blocking the caller. A wait on the future drives the worker (caller
     * mode's owner thread too); cancelling it abandons the endpoint (aborted if it comes later).
     *
     * @param address the peer worker's address, not null
     * @return a future of the raw endpoint, failing as {@link #connect(WorkerAddress)} does; it has no timeout of
     *     its own
     */
    public CompletableFuture<Endpoint> connectAsync(WorkerAddress address) {
        checkOpen();
        Objects.requireNonNull(address, "address");
        SafeFuture<EndpointCore> f = engine.attachRaw(address.raw());
        SafeFuture<Endpoint> result = new org.ucx4j.internal.engine.EngineFuture<>(engine);
        // the segment check asks the worker's thread for the endpoint's lanes: not from that thread's own callback
        f.whenCompleteAsync((c, e) -> {
            if (e != null) {
                result.completeExceptionally(e);
                return;
            }
            if (result.isDone()) { // canceled meanwhile
                engine.abortEndpoint(c);
                return;
            }
            try {
                Endpoint ep = adoptRaw(c, address);
                if (!result.complete(ep)) {
                    ep.abort(); // the caller gave up
                }
            } catch (RuntimeException x) {
                result.completeExceptionally(x);
            }
        }, task -> Thread.ofVirtual().name("ucx4j-connect-raw").start(task));
        return result;
    }

    /**
     * Why a raw endpoint must not be used, or null. A UCX shared-memory sender writes fragments of its own segment
     * size into the receiver's buffers; a v1 worker address (UCX's default format) does not say how large the
     * peer's are, so with ucx4j's 32 KiB segments a same-host plain UCX program with UCX's 8 KiB ones would be
     * overrun. Only ucx4j's own default is checked: a segment size set in the environment is the user's choice.
     */
    static String segmentSizeHazard(byte[] peerAddress, String endpointInfo) {
        boolean v1 = peerAddress.length > 0 && (peerAddress[0] & 0xF) == 0;
        if (!v1) {
            return null;
        }
        for (String tl : new String[] {"posix", "sysv"}) {
            String key = tl.toUpperCase(java.util.Locale.ROOT) + "_SEG_SIZE";
            if (Ucp.defaultApplied(key) && endpointInfo.contains(":" + tl + "/")) {
                return "the peer is on this host (shared-memory lane " + tl + ") and its worker address (UCX format "
                        + "v1) does not carry its shared-memory segment size; ucx4j sends UCX_" + key + "="
                        + Ucp.getenv("UCX_" + key) + " fragments, larger than UCX's default 8256, which would overrun "
                        + "its receive buffers. Start the peer with UCX_ADDRESS_VERSION=v2 (UCX then sizes fragments "
                        + "for it) or with Ucx.environmentDefaults(), or set UCX_" + key + " here to the peer's value";
            }
        }
        return null;
    }

    // ---------------------------------------------------------------- worker-level tags

    /**
     * Receives a message sent with {@link Endpoint#sendTagged} from any endpoint whose tag matches: bits set in
     * {@code mask} must equal those of {@code tag} (mask -1 = exact tag, 0 = any worker-level tag).
     *
     * @param buf native, writable memory to receive into; its arena must stay open until the future completes
     * @param tag the worker-level tag to match, 0 .. 2^63-1
     * @param mask which bits of {@code tag} must match
     * @return a future of the sender's tag and the number of bytes received; it fails with
     *     {@link MessageTruncatedException} if the message is longer than {@code buf}; cancelling it withdraws the
     *     receive
     * @throws IllegalArgumentException if {@code tag} is negative or {@code buf} is heap or read-only memory
     */
    public CompletableFuture<TagMessage> recvTaggedAsync(MemorySegment buf, long tag, long mask) {
        Op op = workerRecv(Buffers.segment(buf, true), tag, mask, false);
        engine.submit(op);
        // waiting on it drives the worker, as waiting on the op would (a get() on the owner thread, in caller mode or
        // in a handler, would otherwise wait for a worker nobody progresses); it ends only as the receive does
        CompletableFuture<TagMessage> out = new org.ucx4j.internal.engine.OpView<>(engine, op,
                len -> new TagMessage(op.senderTag(), len));
        return out;
    }

    /**
     * {@link #recvTaggedAsync(MemorySegment, long, long)}, waiting for the message without a time limit.
     *
     * @param buf native, writable memory to receive into
     * @param tag the worker-level tag to match, 0 .. 2^63-1
     * @param mask which bits of {@code tag} must match (-1 = exact tag, 0 = any worker-level tag)
     * @return the sender's tag and the number of bytes received
     * @throws MessageTruncatedException if the message is longer than {@code buf}
     */
    public TagMessage recvTagged(MemorySegment buf, long tag, long mask) {
        Op op = workerRecv(Buffers.segment(buf, true), tag, mask, true);
        engine.submit(op);
        long len = engine.await(op, -1);
        return new TagMessage(op.senderTag(), len);
    }

    /**
     * {@link #recvTagged(MemorySegment, long, long)} within {@code timeout}: past it the receive is withdrawn and a
     * {@link UcxTimeoutException} thrown (a message that arrived meanwhile is returned, not dropped).
     *
     * @param buf native, writable memory to receive into
     * @param tag the worker-level tag to match, 0 .. 2^63-1
     * @param mask which bits of {@code tag} must match (-1 = exact tag, 0 = any worker-level tag)
     * @param timeout how long to wait, not negative
     * @return the sender's tag and the number of bytes received
     */
    public TagMessage recvTagged(MemorySegment buf, long tag, long mask, Duration timeout) {
        long t = Buffers.nanos(timeout);
        Op op = workerRecv(Buffers.segment(buf, true), tag, mask, true);
        engine.submit(op);
        long len = engine.await(op, t);
        return new TagMessage(op.senderTag(), len);
    }

    /**
     * Looks for a worker-level tag message (tag/mask as in {@link #recvTagged}) without receiving it; null if none
     * has arrived. With {@code remove}, the message leaves UCX's queue and must be received with
     * {@link #recv(ProbedMessage, MemorySegment)}; otherwise it stays for any receive.
     *
     * @param tag the worker-level tag to match, 0 .. 2^63-1
     * @param mask which bits of {@code tag} must match (-1 = exact tag, 0 = any worker-level tag)
     * @param remove whether to take the message out of UCX's queue for this prober
     * @return the message's sender tag and length, or null if none matches
     */
    public ProbedMessage probe(long tag, long mask, boolean remove) {
        checkOpen();
        Endpoint.workerTag(tag);
        long[] r = engine.tagProbe(tag, mask | EndpointCore.PRIVATE_BIT, remove);
        return r == null ? null : new ProbedMessage(r[0], r[1], r[2], this, null);
    }

    /**
     * Receives a message a removing {@link #probe} took.
     *
     * @param message the message, removed by this instance's {@link #probe} and not received yet
     * @param buf native, writable memory to receive into, {@link ProbedMessage#length()} bytes or more
     * @return its length in bytes
     * @throws IllegalStateException if the message was only peeked at, or already received
     * @throws IllegalArgumentException if the message was probed on an endpoint
     * @throws MessageTruncatedException if {@code buf} is smaller than the message, which then stays to be received
     *     into a larger one
     */
    public long recv(ProbedMessage message, MemorySegment buf) {
        return recvProbed(message, buf, -1);
    }

    /**
     * {@link #recv(ProbedMessage, MemorySegment)} within {@code timeout}.
     *
     * @param message the message, removed by this instance's {@link #probe} and not received yet
     * @param buf native, writable memory to receive into, {@link ProbedMessage#length()} bytes or more
     * @param timeout how long to wait, not negative; past it a {@link UcxTimeoutException}
     * @return its length in bytes
     */
    public long recv(ProbedMessage message, MemorySegment buf, Duration timeout) {
        return recvProbed(message, buf, Buffers.nanos(timeout));
    }

    private long recvProbed(ProbedMessage message, MemorySegment buf, long timeoutNanos) {
        MemorySegment seg = Buffers.segment(buf, true);
        checkOpen();
        engine.checkMayBlock("recv"); // refused before the message is claimed: it stays for a try from elsewhere
        Op op = engine.probedRecv(null, message.take(this, null, seg.byteSize()), message.tag(), message.length(),
                seg.address(), seg.byteSize(), 0, null, true);
        op.onWithdrawn(message::giveBack); // withdrawn before UCX saw it: the message waits for the next try
        keepAlive(op, seg);
        engine.submit(op);
        return engine.await(op, timeoutNanos);
    }

    /**
     * {@link #recv(ProbedMessage, MemorySegment)} without blocking the caller.
     *
     * @param message the message, removed by this instance's {@link #probe} and not received yet
     * @param buf native, writable memory to receive into, {@link ProbedMessage#length()} bytes or more; its arena
     *     must stay open until the future completes
     * @return a future of its length in bytes
     */
    public CompletableFuture<Long> recvAsync(ProbedMessage message, MemorySegment buf) {
        MemorySegment seg = Buffers.segment(buf, true);
        checkOpen();
        Op op = engine.probedRecv(null, message.take(this, null, seg.byteSize()), message.tag(), message.length(),
                seg.address(), seg.byteSize(), 0, null, false);
        op.onWithdrawn(message::giveBack); // withdrawn before UCX saw it: the message waits for the next try
        keepAlive(op, seg);
        engine.submit(op);
        return op;
    }

    private Op workerRecv(MemorySegment seg, long tag, long mask, boolean blocking) {
        checkOpen();
        Endpoint.workerTag(tag);
        // bit 63 always in the mask: worker-level receives never match endpoint-private messages
        Op op = engine.tagRecv(null, seg.address(), seg.byteSize(), tag, mask | EndpointCore.PRIVATE_BIT, 0, null,
                blocking);
        keepAlive(op, seg);
        return op;
    }

    // ---------------------------------------------------------------- RMA

    /**
     * Registers a native segment for RMA; it must stay valid until the region is closed.
     *
     * @param segment native, writable, non-empty memory
     * @return the region; closing it unregisters the memory, which stays the caller's (this instance's close
     *     unregisters what is left)
     */
    public MemoryRegion registerMemory(MemorySegment segment) {
        checkOpen();
        MemorySegment seg = Buffers.segment(segment, true);
        if (seg.byteSize() == 0) {
            throw new IllegalArgumentException("cannot register an empty segment");
        }
        return new MemoryRegion(engine, seg);
    }

    /**
     * Has UCX allocate {@code size} bytes (zeroed) and register them, as ucx_perftest does: UCX takes shared memory
     * first ({@code UCX_ALLOC_PRIO}, sysv and posix by default), so peers on this host read and write it with plain
     * copies rather than through the kernel. The region's segment is valid until the region or this instance closes;
     * closing the region frees the memory.
     *
     * @param size how many bytes, positive
     * @return the region, which owns the memory
     */
    public MemoryRegion allocateMemory(long size) {
        checkOpen();
        if (size <= 0) {
            throw new IllegalArgumentException("size must be positive, got " + size);
        }
        return new MemoryRegion(engine, size);
    }

    /**
     * {@return a future that completes (with 0) when every operation issued on this worker before it has completed
     * remotely}
     */
    public CompletableFuture<Long> flushAsync() {
        checkOpen();
        org.ucx4j.internal.engine.Op op = engine.rmaFlush(null, false);
        engine.submit(op);
        return op;
    }

    /** Waits until every operation issued on this worker before it has completed remotely. */
    public void flush() {
        checkOpen();
        org.ucx4j.internal.engine.Op op = engine.rmaFlush(null, true);
        engine.submit(op);
        engine.await(op, -1);
    }

    /**
     * {@link #flush()} for at most {@code timeout}: past it a {@link UcxTimeoutException}, and the flush completes in
     * the background.
     *
     * @param timeout how long to wait, not negative
     */
    public void flush(Duration timeout) {
        long t = Buffers.nanos(timeout);
        checkOpen();
        org.ucx4j.internal.engine.Op op = engine.rmaFlush(null, true);
        engine.submit(op);
        engine.await(op, t);
    }

    /** Operations issued after the fence start only after those issued before it completed remotely. */
    public void fence() {
        checkOpen();
        engine.fence();
    }

    // ---------------------------------------------------------------- shared-memory health

    /**
     * Checks that this worker still receives over shared memory. UCX's shared-memory transports give each worker one
     * receive FIFO that all same-host peers write into; a peer killed in the middle of writing a message leaves a
     * slot that is never filled, and since UCX reads the FIFO in order, no shared-memory message from any peer is
     * received after it (UCX has no recovery). ucx4j runs this check by itself whenever a same-host or raw peer dies;
     * when it fails, every endpoint with a shared-memory lane fails with a {@link ConnectionResetException}
     * ({@code UCS_ERR_IO_ERROR}) instead of waiting forever, same-host connections are refused from then on, and
     * {@link #sharedMemoryFailure()} says so: reopen the {@code Ucx} (a new worker has a new FIFO).
     *
     * @return a future of true if a message sent through this worker's own FIFO arrived, false if it did not within
     *     about 2 s of progress (the FIFO is wedged)
     */
    public CompletableFuture<Boolean> checkSharedMemoryAsync() {
        checkOpen();
        return engine.checkSharedMemory();
    }

    /**
     * {@link #checkSharedMemoryAsync()}, waiting at most {@code timeout}.
     *
     * @param timeout how long to wait, not negative; past it a {@link UcxTimeoutException} (the check takes about
     *     2 s when the FIFO is wedged)
     * @return true if this worker still receives over shared memory, false if its FIFO is wedged
     */
    public boolean checkSharedMemory(Duration timeout) {
        long t = Buffers.nanos(timeout);
        checkOpen();
        return engine.awaitFuture(engine.checkSharedMemory(), t, "shared-memory check");
    }

    /**
     * {@return why same-host peers can no longer reach this worker, once a
     * {@linkplain #checkSharedMemory shared-memory check} found its FIFO wedged; empty while it is healthy}
     */
    public java.util.Optional<UcxException> sharedMemoryFailure() {
        return java.util.Optional.ofNullable(engine.sharedMemoryFailure());
    }

    /**
     * Runs {@code action} once with the {@link #sharedMemoryFailure()} when a shared-memory check (run by ucx4j
     * itself after a same-host peer died, or asked for) finds this worker's FIFO wedged; at once if it already was.
     * It runs on the callback executor, never on the progress thread, so it may block, e.g. to open a replacement
     * {@code Ucx} and tell peers its new address. Never runs if the FIFO stays healthy or this {@code Ucx} closes
     * first.
     *
     * @param action takes the failure; not null
     */
    public void onSharedMemoryFailure(java.util.function.Consumer<? super UcxException> action) {
        java.util.Objects.requireNonNull(action, "action");
        checkOpen();
        engine.onSharedMemoryFailure(action);
    }

    // ---------------------------------------------------------------- active messages from raw peers

    /**
     * {@return a future of the next active message that a raw peer (a plain UCX program, or
     * {@link #connect(WorkerAddress)} on the other side) sent with UCX AM id 0, in receiver-allocated memory} Messages
     * between ucx4j endpoints are received with {@link Endpoint#amRecv()}. Close the message to give its memory back;
     * cancelling the future withdraws the receive.
     */
    public CompletableFuture<AmMessage> amRecvAsync() {
        checkOpen();
        boolean checked = options.checkedMessages();
        return adapt(engine.amTake(null, org.ucx4j.internal.engine.AmWire.PLAIN), d -> new AmMessage(d, null, checked),
                true, false);
    }

    /**
     * {@link #amRecvAsync()}, waiting for the message without a time limit.
     *
     * @return the message, with no endpoint; close it to give its memory back
     */
    public AmMessage amRecv() {
        checkOpen();
        Object m = engine.amTakeBlocking(null, org.ucx4j.internal.engine.AmWire.PLAIN, -1, "active message receive");
        return new AmMessage((org.ucx4j.internal.engine.AmData) m, null, options.checkedMessages());
    }

    /**
     * {@link #amRecv()} within {@code timeout}.
     *
     * @param timeout how long to wait, not negative; past it a {@link UcxTimeoutException}
     * @return the message, with no endpoint; close it to give its memory back
     */
    public AmMessage amRecv(Duration timeout) {
        long t = Buffers.nanos(timeout);
        checkOpen();
        Object m = engine.amTakeBlocking(null, org.ucx4j.internal.engine.AmWire.PLAIN, t, "active message receive");
        return new AmMessage((org.ucx4j.internal.engine.AmData) m, null, options.checkedMessages());
    }

    /**
     * The future of a receiver-allocated message, converted where it arrives ({@code here}: ucx4j's own code, no
     * copy) or off the worker's thread (a copy, after which {@code copied} says the message is freed). Canceling the
     * result withdraws the receive (a message then goes to the next receive); it fails once a message was handed
     * over. So does completing it any other way ({@code orTimeout}, {@code completeOnTimeout}, {@code complete}): a
     * message handed over just then goes back to be received again, not lost, ahead of later messages; once a
     * message is on its way to a copying receive (here false) such completions are refused, the message arrives.
     */
    static <T> CompletableFuture<T> adapt(
            org.ucx4j.internal.engine.EngineFuture<org.ucx4j.internal.engine.AmData> src,
            java.util.function.Function<org.ucx4j.internal.engine.AmData, T> convert, boolean here, boolean copied) {
        Received<T> out = new Received<>(src);
        org.ucx4j.internal.engine.Engine engine = org.ucx4j.internal.engine.EngineFuture.engineOf(src);
        // the conversion is ucx4j's own code: where src completes (no hop to the executor before the waiter, or the
        // user's dependents, see the message) unless it copies (here false), which stays off the worker's thread
        java.util.function.BiConsumer<org.ucx4j.internal.engine.AmData, Throwable> deliver = (d, e) -> {
            if (e != null) {
                boolean wrapped = e instanceof java.util.concurrent.CompletionException && e.getCause() != null;
                out.settleExceptionally(wrapped ? e.getCause() : e);
                return;
            }
            if (out.isDone()) { // given up as it came: for the next receive
                engine.unread(d);
                return;
            }
            T value;
            try {
                value = convert.apply(d);
            } catch (Throwable t) {
                d.free();
                out.settleExceptionally(t);
                return;
            }
            if (!out.settle(value)) {
                engine.unread(d); // (a message's holder is dropped unread; a copy was taken, d still holds it)
            } else if (copied) {
                d.free();
            }
        };
        if (here) {
            src.whenDoneHere(deliver);
        } else {
            src.whenDoneHere((d, e) -> { // the check on the worker's thread, the copy off it
                if (e == null && !out.claim()) { // completed from outside first: back in front, on this thread,
                    engine.unread(d); // before any later receive can take the next message
                } else {
                    src.defaultExecutor().execute(() -> deliver.accept(d, e));
                }
            });
        }
        return out;
    }

    /** {@link #adapt}'s future: whoever completes it but the receive withdraws the receive. */
    private static final class Received<T> extends org.ucx4j.internal.engine.EngineFuture<T> {
        private final CompletableFuture<org.ucx4j.internal.engine.AmData> src;

        Received(org.ucx4j.internal.engine.EngineFuture<org.ucx4j.internal.engine.AmData> src) {
            // waiting on it drives the worker, as on src (EngineFuture)
            super(org.ucx4j.internal.engine.EngineFuture.engineOf(src));
            this.src = src;
        }

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            // withdraw the receive first; once a message was handed over, it is delivered, not dropped
            return src.cancel(mayInterruptIfRunning) && super.cancel(mayInterruptIfRunning);
        }

        /** OPEN, then CLAIMED (a message is on its way to it) or OUTSIDE (completed by someone else first). */
        private final java.util.concurrent.atomic.AtomicInteger gate = new java.util.concurrent.atomic.AtomicInteger();
        private static final int OPEN = 0, CLAIMED = 1, OUTSIDE = 2;

        /**
         * Reserves this future for the message just received (worker's thread): false if it was completed from
         * outside first; once it returns true, outside completions ({@code orTimeout}...) are refused, so the
         * message is not handed back behind a later receive's.
         */
        boolean claim() {
            return gate.compareAndSet(OPEN, CLAIMED) && !isDone();
        }

        private boolean outside() {
            return gate.compareAndSet(OPEN, OUTSIDE) || gate.get() == OUTSIDE;
        }

        @Override
        public boolean complete(T value) {
            return outside() && withdrawIf(super.complete(value));
        }

        @Override
        public boolean completeExceptionally(Throwable ex) {
            return outside() && withdrawIf(super.completeExceptionally(ex));
        }

        private boolean withdrawIf(boolean completed) {
            if (completed) {
                src.cancel(false); // nobody takes the next message here any more
            }
            return completed;
        }

        boolean settle(T value) {
            return super.complete(value);
        }

        boolean settleExceptionally(Throwable ex) {
            return super.completeExceptionally(ex);
        }
    }

    // ---------------------------------------------------------------- progress & close

    /**
     * Progresses the worker once; for {@link ProgressMode#CALLER}, from the thread that opened this instance.
     *
     * @return how much work was done (0 = idle)
     * @throws IllegalStateException if the calling thread does not own the worker (in the other modes, only the
     *     progress thread does)
     */
    public int progress() {
        checkOpen();
        if (!engine.isOwnerThread()) {
            throw new IllegalStateException("progress() must be called by the thread that owns the worker ("
                    + (options.progressMode() == ProgressMode.CALLER ? "the one that opened it" : "its progress thread")
                    + ")");
        }
        engine.checkProgressAllowed(); // not from a completion inside UCX's own call
        int n = engine.progressOnce();
        engine.stopOnCallerOwner(); // closed by another thread or by a handler meanwhile: released on the way out
        return n;
    }

    /**
     * {@return true once {@link #close()} was called, or once the worker stopped on its own (its progress thread
     * died of an unexpected error, which is logged: what was pending then failed as closed; {@link #close()} still
     * releases the rest, its receive pool among it)}
     */
    public boolean isClosed() {
        return closed.get() || engine.isTerminated();
    }

    /**
     * Closes listeners, closes endpoints gracefully (in parallel, all of them within the close timeout and 2 s more),
     * cancels what is left, and releases the worker and context. Idempotent. Where no graceful close can progress
     * (in {@link ProgressMode#CALLER}, or when called on the thread that owns the worker, from a handler say), the
     * endpoints are aborted instead.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            engine.stopOnCallerOwner(); // caller mode: another thread closed it, its owner releases it
            return;
        }
        for (Listener l : List.copyOf(listeners)) {
            l.close();
        }
        // in caller mode only the owner can progress a graceful close: another thread's close aborts, and the
        // owner releases the worker at its next call (or inside the one it is in)
        if (!engine.isOwnerThread() && options.progressMode() != ProgressMode.CALLER) {
            List<Endpoint> eps = List.copyOf(endpoints);
            List<Thread> closers = eps.stream()
                    .map(ep -> Thread.ofVirtual().start(() -> ep.close()))
                    .toList();
            // in parallel: one bound for all of them, not one each
            // (saturated: a FOREVER close timeout must not overflow here and leave the worker running)
            long deadline = System.nanoTime() + Buffers.nanos(options.closeTimeout()) + TimeUnit.SECONDS.toNanos(2);
            for (Thread t : closers) {
                try {
                    long left = deadline - System.nanoTime();
                    if (left <= 0 || !t.join(Duration.ofNanos(left))) {
                        break; // the worker's shutdown below aborts what is still closing
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        engine.shutdown(TimeUnit.SECONDS.toNanos(10));
        if (ownPool != null) {
            ownPool.close();
        }
    }

    private MemoryAllocator hostAllocator(UcxOptions o) {
        MemoryAllocator a = o.allocator(MemoryType.HOST);
        if (a != null) {
            return a;
        }
        ownPool = new PooledAllocator(256L << 20);
        return ownPool;
    }

    void checkOpen() {
        if (closed.get() || engine.isTerminated()) {
            engine.stopOnCallerOwner(); // closed by another thread in caller mode: the owner's next call releases it
            throw new EndpointClosedException("this Ucx instance is closed (" + Status.name(Status.ERR_NOT_CONNECTED)
                    + ")", Status.ERR_NOT_CONNECTED);
        }
    }

    /** A new endpoint, closed with this instance; forgotten when released, however it ends. */
    private Endpoint track(EndpointCore c) {
        Endpoint ep = new Endpoint(this, c);
        endpoints.add(ep);
        c.closedFuture().whenComplete((v, e) -> endpoints.remove(ep));
        return ep;
    }

    void forget(Endpoint ep) {
        endpoints.remove(ep);
    }

    static void keepAlive(Op op, Object buffer) {
        op.keepAlive(buffer);
    }

    /** Waits for a future; the worker's owner thread (caller-driven mode) progresses the worker meanwhile. */
    private <T> T awaitFuture(CompletableFuture<T> f, long timeoutNanos)
            throws InterruptedException, ExecutionException, TimeoutException {
        if (!engine.isOwnerThread()) {
            return f.get(timeoutNanos, TimeUnit.NANOSECONDS);
        }
        long deadline = System.nanoTime() + timeoutNanos;
        while (!f.isDone()) {
            if (System.nanoTime() - deadline > 0) {
                throw new TimeoutException();
            }
            if (closed.get()) {
                checkOpen(); // closed by another thread: released here (caller mode), and this wait ends
            }
            if (Thread.interrupted()) {
                throw new InterruptedException(); // join() sets the flag again and reports the interrupt
            }
            if (engine.progressOnce() == 0) {
                Thread.onSpinWait();
            }
        }
        return f.get();
    }

    private <T> T join(CompletableFuture<T> f, String what, long timeoutNanos) {
        try {
            return awaitFuture(f, timeoutNanos);
        } catch (TimeoutException e) {
            throw new UcxTimeoutException(what + " timed out (" + Status.name(Status.ERR_TIMED_OUT) + ")",
                    Status.ERR_TIMED_OUT);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CanceledException(what + " interrupted (" + Status.name(Status.ERR_CANCELED) + ")",
                    Status.ERR_CANCELED);
        } catch (ExecutionException e) {
            throw rethrow(e.getCause());
        }
    }

    private static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new UcxException(String.valueOf(t), 0, t);
    }

    @Override
    public String toString() {
        return "Ucx[" + options.name() + ", " + options.progressMode() + (isClosed() ? ", closed" : "") + "]";
    }
}
