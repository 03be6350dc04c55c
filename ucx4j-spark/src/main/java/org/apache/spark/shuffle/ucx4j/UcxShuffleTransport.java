package org.apache.spark.shuffle.ucx4j;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.SparkEnv;
import org.apache.spark.network.netty.SparkTransportConf;
import org.apache.spark.network.util.TransportConf;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.storage.BlockId;
import org.apache.spark.util.RpcUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

import scala.Option;
import scala.reflect.ClassTag$;

/**
 * One executor's side of the ucx4j shuffle: a {@link Ucx} instance, the {@link BlockServer} listening for
 * reducers (its address registered with the driver), and the reducer-side connections to other executors, one per
 * peer, made on first use and dropped when they fail.
 *
 * <p>When ucx4j finds this worker's shared-memory FIFO wedged ({@link Ucx#onSharedMemoryFailure}: a same-host peer
 * killed while writing into it; UCX cannot recover), the transport replaces its {@code Ucx}: a new instance with a
 * new block server, registered with the driver, takes every new connection; the old one stops listening, tells its
 * remaining reducers to go elsewhere ({@link Wire#GOAWAY}), lets requests in flight finish, and closes once its
 * connections are gone (at the latest after {@code spark.shuffle.io.connectionTimeout}). Reducers that find a peer's cached
 * address dead ask the driver again, so they follow a peer that did the same.
 */
final class UcxShuffleTransport implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(UcxShuffleTransport.class);

    private final UcxShuffleConf conf;
    private final String executorId;
    private final String host;
    private final ShuffleBlockResolver resolver;
    private final UcxOptions options;
    private final RpcEndpointRef driver;
    private final Map<String, UcxDriverEndpoint.Address> addresses = new ConcurrentHashMap<>();
    private final Map<String, CompletableFuture<PeerConnection>> peers = new ConcurrentHashMap<>();
    private final AtomicLong requestIds = new AtomicLong();
    /** Traffic of connections that have closed, newest last, at most {@link #MAX_RETIRED}. */
    private final java.util.concurrent.ConcurrentLinkedDeque<PeerTraffic> retired =
            new java.util.concurrent.ConcurrentLinkedDeque<>();
    static final int MAX_RETIRED = 256;
    private final UcxBlockClient client;
    private final TransportConf transportConf;
    /** Where fetched blocks land, shared by replaced and current instances; emptied at close. */
    private final org.ucx4j.PooledAllocator receivePool;
    /** The instance new connections use. */
    private volatile Generation current;
    /** Every instance not closed yet: the current one, and replaced ones whose connections are draining. */
    private final Set<Generation> live = ConcurrentHashMap.newKeySet();
    private volatile boolean closed; // written under this

    /**
     * One {@link Ucx} instance with its block server and the connections made from it (identity equality: it sits
     * in sets while its connections change).
     */
    private static final class Generation {
        final int number;
        final Ucx ucx;
        final BlockServer server;
        final Listener listener;
        final UcxDriverEndpoint.Address address;
        final Set<PeerConnection> connections = ConcurrentHashMap.newKeySet();
        /** Why it must be replaced, where it failed before it became current (under the transport). */
        String failedEarly;

        Generation(int number, Ucx ucx, BlockServer server, Listener listener, UcxDriverEndpoint.Address address) {
            this.number = number;
            this.ucx = ucx;
            this.server = server;
            this.listener = listener;
            this.address = address;
        }
    }

    UcxShuffleTransport(UcxShuffleConf conf, SparkEnv env, ShuffleBlockResolver resolver) {
        this.conf = conf;
        this.executorId = env.executorId();
        this.host = env.blockManager().blockManagerId().host();
        this.resolver = resolver;
        this.transportConf = SparkTransportConf.fromSparkConf(env.conf(), "shuffle", 0, Option.empty(),
                Option.empty()); // retries, download files
        // fetched blocks wait in Spark's queue for their task and may outlive a replaced instance (see retire):
        // they live in ucx4j's pool, never in UCX's own buffers, which go with the instance
        this.receivePool = new org.ucx4j.PooledAllocator(conf.receiveCache());
        // blocks go as active messages: no RMA, so UCX's software put/get handlers, which take any address a
        // request names, are not there for whoever reaches UCX's ports (withRma)
        UcxOptions o = conf.ucxOptions().withUcxBuffers(false).withAllocator(org.ucx4j.MemoryType.HOST, receivePool)
                .withRma(false);
        if (env.securityManager().isAuthenticationEnabled()) {
            o = o.withSecret(env.securityManager().getSecretKey().getBytes(StandardCharsets.UTF_8));
        }
        this.options = o;
        this.driver = RpcUtils.makeDriverRef(UcxDriverEndpoint.NAME, env.conf(), env.rpcEnv());
        this.client = new UcxBlockClient(this);
        Generation g = open(0);
        synchronized (this) {
            live.add(g);
            current = g;
        }
        // (on its own thread: a replacement registers with the driver, and the caller holds the manager's start lock)
        Thread.ofVirtual().name("ucx4j-shuffle-reopen-check").start(() -> replaceIfFailedEarly(g));
    }

    /** {@code g} just became current: if its shared memory failed before that, it is replaced now. */
    private void replaceIfFailedEarly(Generation g) {
        String why;
        synchronized (this) {
            why = g.failedEarly;
        }
        if (why != null) {
            reopen(g, why);
        }
    }

    /** A new instance: its block server listens and is registered with the driver. */
    private Generation open(int number) {
        Ucx ucx = Ucx.open(options.withName("spark-executor-" + executorId + (number == 0 ? "" : "-" + number)));
        try {
            BlockServer server = new BlockServer(id -> resolver.getBlockData(BlockId.apply(id), Option.empty()),
                    conf.partSize(), conf.partsInFlight(), conf.serverBytesInFlight(), receivePool);
            server.onClientClosed(ep -> retire(new PeerTraffic(executorId, ep.stats().peer(), false, ep.stats())));
            Listener listener = listen(ucx, server);
            UcxDriverEndpoint.Address me = new UcxDriverEndpoint.Address(executorId, host, listener.port());
            Generation g = new Generation(number, ucx, server, listener, me);
            awaitRegistrationGate(g);
            register(me);
            addresses.put(executorId, me);
            ucx.onSharedMemoryFailure(e -> reopen(g, e.getMessage()));
            LOG.info("ucx4j shuffle: executor {} serves blocks at {}:{} (UCX {}{})", executorId, host,
                    listener.port(), Ucx.version(), number == 0 ? "" : ", instance " + number);
            return g;
        } catch (Throwable e) { // also Spark's RPC failures: checked exceptions Scala throws undeclared
            ucx.close();
            throw e;
        }
    }

    /**
     * Registers an instance with the driver. What Spark's RPC throws (its checked exceptions undeclared, an
     * {@link InterruptedException} when the task is killed) comes out as a {@link RegistrationException}: a
     * failure of the driver or of the task, never of UCX, so never a reason for the fallback.
     */
    private void register(UcxDriverEndpoint.Address me) {
        try {
            if (openFaults.getAndUpdate(n -> Math.max(0, n - 1)) > 0) { // what askSync throws when the driver fails
                throw UcxShuffleTransport.<RuntimeException>undeclared(
                        new org.apache.spark.SparkException("test: the driver did not take the registration"));
            }
            if (interruptNextRegistration) { // tests: a task killed while it waits for the driver
                interruptNextRegistration = false;
                throw UcxShuffleTransport.<RuntimeException>undeclared(new InterruptedException("test: task killed"));
            }
            driver.askSync(new UcxDriverEndpoint.Register(me), ClassTag$.MODULE$.apply(Boolean.class));
        } catch (Exception e) {
            if (e instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
            throw new RegistrationException(e);
        }
    }

    /** The driver did not take an instance's registration (see {@link #register}). */
    static final class RegistrationException extends RuntimeException {
        RegistrationException(Exception cause) {
            super("ucx4j shuffle: the driver did not take this executor's registration: " + cause, cause);
        }
    }

    /** Tests: the next registration of any transport in this JVM fails as a killed task's would. */
    static volatile boolean interruptNextRegistration;

    /** Throws {@code t} as Scala code does, checked or not, without declaring it (tests' faults). */
    @SuppressWarnings("unchecked")
    private static <T extends Throwable> T undeclared(Throwable t) throws T {
        throw (T) t;
    }

    /**
     * Listens on the configured port, or, as Spark's own services do, on the next ones up to
     * {@code spark.port.maxRetries} further where it is taken (two executors on one host with one fixed port).
     */
    private Listener listen(Ucx ucx, BlockServer server) {
        int base = conf.port();
        for (int i = 0; ; i++) {
            int port = base == 0 ? 0 : (base - 1024 + i) % (65536 - 1024) + 1024;
            try {
                return conf.bindAddress() == null ? ucx.listen(port, server)
                        : ucx.listen(conf.bindAddress(), port, server);
            } catch (org.ucx4j.EndpointClosedException e) {
                throw e;
            } catch (org.ucx4j.UcxException e) {
                if (base == 0 || i >= conf.portRetries()) {
                    throw e;
                }
                LOG.info("ucx4j shuffle: port {} is taken ({}); trying {}", port, e.getMessage(),
                        (port - 1024 + 1) % (65536 - 1024) + 1024);
            }
        }
    }

    /** Replaces instance number {@code generation} if it is still the current one: see the class comment. */
    void reopen(int generation, String why) {
        Generation g = current;
        if (g.number == generation) {
            reopen(g, why);
        }
    }

    private void reopen(Generation old, String why) {
        reopen(old, why, 0);
    }

    /**
     * One try at replacing {@code old}; where the new instance cannot open (UCX refuses, the port range is taken, the
     * driver does not take its registration), the next try follows {@link #reopenDelayMillis} later, for as long as
     * {@code old} is current and the transport open, so an executor is never left without a block server for good.
     * The new instance opens and registers with the driver outside this transport's lock, so {@link #close} (the
     * executor stopping) never waits for the driver's answer; an instance that opened after the close is closed here.
     */
    private void reopen(Generation old, String why, int failedTries) {
        synchronized (this) {
            if (!closed && (current == null || old.number > current.number)) {
                old.failedEarly = why; // still registering: replaced once it is current
                return;
            }
            if (closed || current != old || (failedTries == 0 && replacing == old)) {
                return; // stopping, replaced already, or a try is running or scheduled
            }
            replacing = old;
            if (failedTries == 0) {
                LOG.warn("ucx4j shuffle: executor {} replaces its UCX instance: {}", executorId, why);
            }
            if (conf.port() != 0) {
                old.listener.close(); // the configured port is the new server's
            }
        }
        Generation next;
        try {
            next = open(old.number + 1);
        } catch (Throwable e) { // also the driver's RPC failures (checked, undeclared), and malloc's OutOfMemoryError
            if (closed) { // the executor is stopping (which may be why the driver did not answer): nothing to replace
                LOG.debug("ucx4j shuffle: executor {} stopped while replacing its UCX instance: {}", executorId,
                        e.toString());
                return;
            }
            long delay = reopenDelayMillis(failedTries);
            LOG.error("ucx4j shuffle: executor {} could not replace its UCX instance (try {}): {}; trying again "
                    + "in {} ms", executorId, failedTries + 1, e.toString(), delay);
            failedReopens.incrementAndGet();
            Thread.ofVirtual().name("ucx4j-shuffle-reopen-" + old.number).start(() -> {
                try {
                    Thread.sleep(delay);
                } catch (InterruptedException ie) {
                    // nothing interrupts it; try now rather than leave the chain (and `replacing`) hanging
                }
                reopen(old, why, failedTries + 1);
            });
            return;
        }
        boolean stopped;
        synchronized (this) {
            stopped = closed;
            if (!stopped) {
                live.add(next);
                current = next;
                replacing = null; // (the replaced instance is not kept reachable from here)
            }
        }
        if (stopped) { // the executor stopped while the new instance registered: close() did not see it
            next.listener.close();
            next.ucx.close();
            lateInstancesClosed.incrementAndGet();
            return;
        }
        old.listener.close();
        try {
            old.server.goAway();
            for (PeerConnection c : old.connections) {
                c.retire();
            }
        } catch (RuntimeException e) { // the executor stopped meanwhile: close() closed the old instance
            if (!closed) {
                throw e;
            }
            return;
        }
        Thread.ofVirtual().name("ucx4j-shuffle-drain-" + old.number).start(() -> drainAndClose(old));
        replaceIfFailedEarly(next);
    }

    /**
     * Closes a replaced instance once its connections are gone, or once nothing has moved on them for
     * {@code spark.shuffle.io.connectionTimeout} (120 s where that is under a second; measured from the last byte, not from the replacement, so a long transfer still
     * running there, a multi-GB block streamed to disk, say, is not cut off while it makes progress).
     */
    private static final java.time.Duration DRAIN_GRACE = java.time.Duration.ofSeconds(1);

    private void drainAndClose(Generation old) {
        java.time.Duration timeout = conf.networkTimeout();
        long quiet = (timeout.isZero() ? java.time.Duration.ofSeconds(120) : timeout).toNanos(); // zero: none set
        long deadline = System.nanoTime() + quiet;
        // a reducer whose handshake ended as the listener closed reaches the server's clients only once its
        // handler thread runs: idle or not, the instance lives this long, for such a reducer to be told GOAWAY
        long settled = System.nanoTime() + DRAIN_GRACE.toNanos();
        long moved = bytesMoved(old);
        try {
            while ((!old.server.clients().isEmpty() || !old.connections.isEmpty()
                    || System.nanoTime() - settled < 0) && System.nanoTime() - deadline < 0) {
                Thread.sleep(100);
                long now = bytesMoved(old);
                if (now != moved) {
                    moved = now;
                    deadline = System.nanoTime() + quiet;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        synchronized (this) {
            if (!live.remove(old)) {
                return; // the transport closed it
            }
        }
        LOG.info("ucx4j shuffle: executor {} closes its replaced UCX instance {}", executorId, old.number);
        old.ucx.close();
    }

    /** Bytes served and fetched so far on an instance's open connections (what says it is still in use). */
    private static long bytesMoved(Generation g) {
        long n = 0;
        for (Endpoint ep : g.server.clients()) {
            n += ep.stats().bytesSent();
        }
        for (PeerConnection c : g.connections) {
            n += c.endpoint().stats().bytesReceived();
        }
        return n;
    }

    /** 1 s, doubling up to 30 s: the wait before the next try at replacing an instance after a failed one. */
    static long reopenDelayMillis(int failedTries) {
        return Math.min(30_000L, 1000L << Math.min(failedTries, 5));
    }

    /**
     * The instance being replaced: a try is running, or one failed and the next is scheduled (under this; only
     * the first request to replace an instance starts tries, later ones return at once).
     */
    private Generation replacing;

    /** Tests: how many of the next instances fail to open (their registration with the driver fails). */
    private final java.util.concurrent.atomic.AtomicInteger openFaults = new java.util.concurrent.atomic.AtomicInteger();
    private final java.util.concurrent.atomic.AtomicInteger failedReopens = new java.util.concurrent.atomic.AtomicInteger();

    private volatile java.util.concurrent.CountDownLatch registrationGate;
    private final java.util.concurrent.atomic.AtomicInteger registrationsHeld =
            new java.util.concurrent.atomic.AtomicInteger();

    private void awaitRegistrationGate(Generation g) {
        java.util.concurrent.CountDownLatch gate = registrationGate;
        if (gate != null) { // tests: a driver slow to answer
            registering = g;
            pass(gate, registrationsHeld, "registering");
        }
    }

    /** Tests: counts this thread as held at {@code gate}, then waits for it to open. */
    private static void pass(java.util.concurrent.CountDownLatch gate,
            java.util.concurrent.atomic.AtomicInteger held, String what) {
        held.incrementAndGet();
        try {
            gate.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while " + what, e);
        }
    }

    private volatile Generation registering;
    private final java.util.concurrent.atomic.AtomicInteger lateInstancesClosed =
            new java.util.concurrent.atomic.AtomicInteger();

    /** Tests: the instance last held at {@link #holdRegistrations}'s gate fails, as if its shared memory had. */
    void failRegistering(String why) {
        Generation g = registering;
        if (g != null) {
            reopen(g, why);
        }
    }

    /** Tests: instances that finished registering after the transport closed, and were closed then. */
    int lateInstancesClosed() {
        return lateInstancesClosed.get();
    }

    /** Tests: instances opened from now on wait for {@code gate} before registering, as with a slow driver. */
    void holdRegistrations(java.util.concurrent.CountDownLatch gate) {
        registrationGate = gate;
    }

    private volatile java.util.concurrent.CountDownLatch connectGate;
    private final java.util.concurrent.atomic.AtomicInteger connectsHeld = new java.util.concurrent.atomic.AtomicInteger();

    /** Tests: connections to peers started from now on wait for {@code gate} once they chose their instance. */
    void holdConnects(java.util.concurrent.CountDownLatch gate) {
        connectGate = gate;
    }

    /** Tests: how many connections reached {@link #holdConnects}'s gate. */
    int connectsHeld() {
        return connectsHeld.get();
    }

    private void awaitConnectGate() {
        java.util.concurrent.CountDownLatch gate = connectGate;
        if (gate != null) {
            pass(gate, connectsHeld, "connecting");
        }
    }

    /** Tests: how many instances reached {@link #holdRegistrations}'s gate. */
    int registrationsHeld() {
        return registrationsHeld.get();
    }

    /** Tests: the next {@code n} tries at opening an instance fail, as if the driver did not answer. */
    void failNextReopens(int n) {
        openFaults.set(n);
    }

    /** Tries at replacing an instance that failed so far. */
    int failedReopens() {
        return failedReopens.get();
    }

    /** How many times this executor's instance was replaced. */
    int generation() {
        return current.number;
    }

    /** Instances not closed yet (1, or more while replaced ones drain). */
    int liveInstances() {
        return live.size();
    }

    UcxDriverEndpoint.Address address() {
        return current.address;
    }

    UcxBlockClient client() {
        return client;
    }

    /**
     * Whether the executor serves its blocks through Spark's own transfer service (it fell back alone: no UCX
     * there). Asks the driver on first use; {@code lookUp} false answers from what is known here, without blocking.
     */
    boolean servedByNetty(String peerExecutorId, boolean lookUp) {
        if (!lookUp) {
            UcxDriverEndpoint.Address a = addresses.get(peerExecutorId);
            return a != null && a.isServedByNetty();
        }
        UcxDriverEndpoint.Address a = lookUp(peerExecutorId);
        // none known: an executor that never ran a shuffle task holds blocks migrated to it (decommissioning), or
        // the executor is gone: Spark's own transfer service serves the former and fails the latter
        return a == null || a.isServedByNetty();
    }

    /** The current block server: for tests. */
    BlockServer server() {
        return current.server;
    }

    /** Spark's settings of its shuffle transfer service: retries, download files. */
    TransportConf transportConf() {
        return transportConf;
    }

    /** True once the transport closed (the executor stops): nothing is retried then. */
    boolean isStopped() { // no lock: called on ucx4j's progress thread
        return closed;
    }

    long nextRequestId() {
        return requestIds.incrementAndGet();
    }

    /** An open connection to the executor, if there is one already (the fetch fast path). */
    PeerConnection cachedPeer(String peerExecutorId) {
        CompletableFuture<PeerConnection> f = peers.get(peerExecutorId);
        if (f != null && f.isDone() && !f.isCompletedExceptionally()) {
            PeerConnection c = f.join();
            if (c.isUsable()) {
                return c;
            }
        }
        return null;
    }

    /** A connection to the executor's block server: looked up at the driver and connected on first use. Blocks. */
    PeerConnection peer(String peerExecutorId) {
        while (true) {
            CompletableFuture<PeerConnection> mine = new CompletableFuture<>();
            CompletableFuture<PeerConnection> f = peers.putIfAbsent(peerExecutorId, mine);
            if (f == null) {
                try {
                    mine.complete(connect(peerExecutorId));
                } catch (Throwable t) {
                    peers.remove(peerExecutorId, mine);
                    mine.completeExceptionally(t);
                    throw t;
                }
                f = mine;
            }
            PeerConnection c = f.join();
            if (c.isUsable()) {
                return c;
            }
            peers.remove(peerExecutorId, f);
        }
    }

    private PeerConnection connect(String peerExecutorId) {
        while (true) {
            Generation g = current;
            awaitConnectGate();
            try {
                return connect(g, peerExecutorId);
            } catch (RuntimeException e) {
                if (current == g || closed) {
                    throw e;
                }
                // this executor replaced its own instance meanwhile, and the old one closed under the connect: the
                // peer is not to blame, the new instance connects
                LOG.debug("ucx4j shuffle: connecting to executor {} again through the new instance: {}",
                        peerExecutorId, e.toString());
            }
        }
    }

    private PeerConnection connect(Generation g, String peerExecutorId) {
        UcxDriverEndpoint.Address a = address(peerExecutorId);
        Endpoint ep;
        try {
            ep = g.ucx.connect(a.host(), a.port(), conf.connectTimeout());
        } catch (RuntimeException e) {
            if (current != g) {
                throw e; // (see above)
            }
            // the peer may have replaced its UCX instance (a new port) since we looked it up: ask the driver again
            addresses.remove(peerExecutorId, a);
            UcxDriverEndpoint.Address fresh;
            try {
                fresh = address(peerExecutorId);
            } catch (Exception lookup) { // also the driver's RPC failures (checked, undeclared)
                e.addSuppressed(lookup);
                throw e;
            }
            if (fresh.equals(a)) {
                throw e;
            }
            a = fresh;
            ep = g.ucx.connect(a.host(), a.port(), conf.connectTimeout());
        }
        PeerConnection c = new PeerConnection(a, ep, conf.networkTimeout(), transportConf, this::forget);
        g.connections.add(c);
        c.endpoint().onClose(cause -> {
            g.connections.remove(c);
            retire(new PeerTraffic(executorId, peerExecutorId, true, c.endpoint().stats()));
        });
        if (current != g) {
            c.retire(); // replaced meanwhile: the caller connects again, through the new instance
        }
        return c;
    }

    /** The connection must take no new requests: drop it and the peer's address (it may have moved). */
    private void forget(PeerConnection c) {
        String id = c.peer().executorId();
        peers.computeIfPresent(id, (k, f) -> f.isDone() && !f.isCompletedExceptionally() && f.join() == c ? null : f);
        addresses.remove(id, c.peer());
    }

    private void retire(PeerTraffic t) {
        retired.addLast(t);
        while (retired.size() > MAX_RETIRED) {
            retired.pollFirst();
        }
    }

    private UcxDriverEndpoint.Address address(String peerExecutorId) {
        UcxDriverEndpoint.Address a = lookUp(peerExecutorId);
        if (a == null) {
            throw new IllegalStateException("ucx4j shuffle: the driver knows no block server for executor "
                    + peerExecutorId);
        }
        return a;
    }

    /** Where the executor serves blocks, asking the driver unless known here; null when the driver knows none. */
    private UcxDriverEndpoint.Address lookUp(String peerExecutorId) {
        UcxDriverEndpoint.Address a = addresses.get(peerExecutorId);
        if (a != null) {
            return a;
        }
        Object reply = driver.askSync(new UcxDriverEndpoint.Lookup(peerExecutorId),
                ClassTag$.MODULE$.apply(Object.class));
        if (!(reply instanceof UcxDriverEndpoint.Address found)) {
            return null; // not remembered: the executor may start its block server later
        }
        addresses.put(peerExecutorId, found);
        if (!found.isServedByNetty()) {
            servedOverUcx.add(peerExecutorId);
        }
        return found;
    }

    /**
     * Executors the driver named a ucx4j block server of (kept after the driver drops them): one of them that the
     * driver no longer knows is gone, whichever fetch asks first (see {@link #servedOverUcxBefore}).
     */
    private final java.util.Set<String> servedOverUcx = ConcurrentHashMap.newKeySet();

    /**
     * Whether the driver ever named a ucx4j block server of {@code peerExecutorId} to this executor: if it no
     * longer knows one, the executor is gone, and its blocks fail at once instead of going to Spark's own client
     * (which would retry a dead address for {@code spark.shuffle.io.maxRetries} x {@code retryWait} first).
     */
    boolean servedOverUcxBefore(String peerExecutorId) {
        return servedOverUcx.contains(peerExecutorId);
    }

    /**
     * Traffic per connection to a peer executor, as seen from this one: fetches it made (reducer side) and blocks
     * it served; closed connections first (the last {@value #MAX_RETIRED}), then open ones.
     */
    List<PeerTraffic> traffic() {
        List<PeerTraffic> out = new ArrayList<>(retired);
        for (Generation g : live) {
            for (PeerConnection c : g.connections) {
                out.add(new PeerTraffic(executorId, c.peer().executorId(), true, c.endpoint().stats()));
            }
            for (Endpoint ep : g.server.clients()) {
                out.add(new PeerTraffic(executorId, ep.stats().peer(), false, ep.stats()));
            }
        }
        return out;
    }

    @Override
    public void close() {
        List<Generation> all;
        synchronized (this) {
            closed = true;
            all = new ArrayList<>(live);
            live.clear();
        }
        for (CompletableFuture<PeerConnection> f : peers.values()) {
            f.thenAccept(PeerConnection::close);
        }
        peers.clear();
        for (Generation g : all) {
            g.connections.forEach(PeerConnection::close);
            g.listener.close();
            g.ucx.close();
        }
        receivePool.close(); // blocks still held by tasks are freed as they come back
    }
}
