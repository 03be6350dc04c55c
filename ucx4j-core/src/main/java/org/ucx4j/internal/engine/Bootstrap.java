package org.ucx4j.internal.engine;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.NoRouteToHostException;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.UnknownHostException;
import java.util.Arrays;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;
import jdk.net.ExtendedSocketOptions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.UcxException;
import org.ucx4j.UcxTimeoutException;
import org.ucx4j.UnreachableException;
import org.ucx4j.internal.ffi.Status;

/**
 * Connection set-up: a TCP socket carries the {@link Handshake}, then each side creates a UCX endpoint to the other's
 * worker address, and the socket stays as the liveness channel. All of it runs on virtual threads, never on the
 * worker's owner thread, which only creates the endpoint.
 */
public final class Bootstrap {
    private static final Logger LOG = LoggerFactory.getLogger(Bootstrap.class);

    private Bootstrap() {}

    /** Connects to a ucx4j listener; the future completes once both the handshake and the UCX endpoint are up. */
    public static SafeFuture<EndpointCore> connect(Engine engine, String host, int port, long timeoutNanos) {
        SafeFuture<EndpointCore> f = new SafeFuture<>(engine.executor);
        String peer = host + ":" + port;
        Thread.ofVirtual().name("ucx4j-connect-" + peer).start(() -> {
            long deadline = System.nanoTime() + timeoutNanos;
            Socket s = new Socket();
            f.whenComplete((x, e) -> {
                if (e != null) { // the caller gave up mid-way, or the timeout below: the handshake fails here and
                    closeQuietly(s); // at the peer
                }
            });
            EndpointCore c = null;
            Jfr.ConnectEvent ev = Jfr.beginConnect();
            try {
                s.setTcpNoDelay(true);
                keepAlive(s, engine.livenessSeconds);
                InetSocketAddress to = new InetSocketAddress(host, port); // name resolution counts against it too
                if (System.nanoTime() - deadline >= 0 || f.isDone()) {
                    throw new java.net.SocketTimeoutException("resolving " + host + " took the whole timeout");
                }
                s.connect(to, millis(deadline - System.nanoTime())); // what is left of the timeout
                if (f.isDone()) { // the caller gave up (canceled, or its wait timed out): no handshake for nothing
                    throw new java.util.concurrent.CancellationException("connect canceled");
                }
                c = engine.connections.newEndpoint(true, peer);
                open(engine, c, s, deadline);
                connected(ev, "connect", peer, c, null);
                if (!f.complete(c)) {
                    engine.connections.abortEndpoint(c); // the caller gave up
                }
            } catch (Throwable t) {
                connected(ev, "connect", peer, c, t);
                closeQuietly(s);
                if (c != null) {
                    engine.connections.discard(c);
                }
                f.completeExceptionally(mapConnectError(t, peer, timeoutNanos));
            }
        });
        // the thread above checks its deadline between steps, and name resolution has no bound of its own (a resolver
        // that does not answer holds it for glibc's retries, tens of seconds): the future fails at the deadline
        // whatever the thread is doing, and the thread, finding it done, gives up (a little grace lets its own
        // error win when it has one)
        if (timeoutNanos < Long.MAX_VALUE / 2) {
            java.util.concurrent.CompletableFuture.delayedExecutor(timeoutNanos + CONNECT_GRACE_NANOS,
                    TimeUnit.NANOSECONDS).execute(() -> {
                        if (!f.isDone()) {
                            f.completeExceptionally(mapConnectError(new SocketTimeoutException("deadline"), peer,
                                    timeoutNanos));
                        }
                    });
        }
        return f;
    }

    private static final long CONNECT_GRACE_NANOS = TimeUnit.MILLISECONDS.toNanos(50);

    /** How often an accept loop with every handshake slot taken looks whether its listener closed. */
    private static final long HANDSHAKE_SLOT_CHECK_MS = 100;

    /**
     * Binds a listening socket; each accepted connection is handshaken on its own virtual thread, at most
     * {@code maxHandshakes} at once.
     */
    public static ListenerCore listen(Engine engine, InetSocketAddress bind, Consumer<EndpointCore> onConnection)
            throws IOException {
        ServerSocket ss = new ServerSocket();
        try {
            ss.setReuseAddress(true);
            ss.bind(bind, 128);
        } catch (IOException e) {
            closeQuietly(ss);
            throw e;
        }
        ListenerCore l = new ListenerCore(engine, onConnection, ss);
        engine.connections.track(l);
        Thread.ofVirtual().name("ucx4j-accept-" + l.port()).start(() -> acceptLoop(engine, l));
        return l;
    }

    private static void acceptLoop(Engine engine, ListenerCore l) {
        long pauseMs = 10;
        while (!l.isClosed()) {
            try {
                // at most maxHandshakes connections between accept and the end of their handshake: past that,
                // peers wait in the kernel's accept queue (a flood that never speaks holds no more descriptors)
                if (!l.handshakes.tryAcquire(HANDSHAKE_SLOT_CHECK_MS, TimeUnit.MILLISECONDS)) {
                    continue; // looks at closed again
                }
            } catch (InterruptedException e) {
                return;
            }
            Socket s;
            try {
                s = l.socket.accept();
                pauseMs = 10;
            } catch (IOException e) {
                l.handshakes.release();
                if (l.isClosed() || l.socket.isClosed()) {
                    return;
                }
                // out of descriptors (EMFILE), say, perhaps from connections that never finish their handshake:
                // the listener waits and accepts again rather than stop for good with only a log line to say so
                LOG.warn("ucx4j: listener on port {} could not accept ({}); trying again in {} ms", l.port(),
                        e.toString(), pauseMs);
                try {
                    Thread.sleep(pauseMs);
                } catch (InterruptedException ie) {
                    return;
                }
                pauseMs = Math.min(1000, pauseMs * 2);
                continue;
            }
            try {
                Thread.ofVirtual().name("ucx4j-accepted-" + s.getRemoteSocketAddress()).start(() -> {
                    try {
                        serve(engine, l, s);
                    } finally {
                        l.handshakes.release();
                    }
                });
            } catch (Throwable t) { // no thread (out of memory): the connection is dropped, its slot freed
                l.handshakes.release();
                closeQuietly(s);
                LOG.warn("ucx4j: listener on port {} dropped a connection: {}", l.port(), t.toString());
            }
        }
    }

    private static void serve(Engine engine, ListenerCore l, Socket s) {
        InetSocketAddress remote = (InetSocketAddress) s.getRemoteSocketAddress();
        String peer = remote.getHostString() + ":" + remote.getPort();
        long timeout = engine.handshakeTimeoutNanos;
        EndpointCore c = null;
        Jfr.ConnectEvent ev = Jfr.beginConnect();
        try {
            s.setTcpNoDelay(true);
            keepAlive(s, engine.livenessSeconds);
            c = engine.connections.newEndpoint(false, peer);
            open(engine, c, s, System.nanoTime() + timeout);
            connected(ev, "accept", peer, c, null);
        } catch (Throwable t) {
            connected(ev, "accept", peer, c, t);
            closeQuietly(s);
            if (c != null) {
                engine.connections.discard(c);
            }
            LOG.warn("ucx4j: rejected incoming connection from {}: {}", peer,
                    t.getMessage() != null ? t.getMessage() : t.toString()); // an EOF has no message
            return;
        }
        Runnable hook = TestHooks.beforeHandOver;
        if (hook != null) {
            hook.run();
        }
        if (!l.handOver(c)) { // closed while this handshake ran: the peer's endpoint fails, no handler sees it
            engine.connections.abortEndpoint(c);
        }
    }

    /** Handshake, UCX endpoint creation, liveness watch. */
    private static void open(Engine engine, EndpointCore c, Socket s, long deadline) throws Exception {
        Handshake.Peer p = Handshake.run(s, deadline, c.client, c.localConnId, engine.workerAddress(), engine.secret,
                engine.shmSettings, engine.peerErrorHandling, engine.sharedMemoryFailure() != null, c.peer);
        c.peerConnId = p.connId();
        c.peerPid = p.pid();
        c.peerHost = p.host();
        c.control = s;
        try {
            attachInOrder(engine, c, p, deadline);
            p.deadline().clear();
        } catch (Throwable t) {
            c.abandoned = true;
            if (c.keepOnFailure) {
                engine.connections.park(c, p.workerAddress());
            } else {
                engine.connections.abortEndpoint(c); // created or not: never left open without its connection
            }
            throw t;
        }
        Thread.ofVirtual().name("ucx4j-watch-" + c.peer).start(() -> watch(engine, c, p.in()));
    }

    /** Creates the UCX endpoint, in the order both sides agree on ({@link EndpointOrder}). */
    private static void attachInOrder(Engine engine, EndpointCore c, Handshake.Peer p, long deadline)
            throws Exception {
        byte[] address = p.workerAddress();
        int cmp = Arrays.compareUnsigned(engine.workerAddress(), address);
        if (cmp < 0) { // the arbiter of the pair: create first, then tell the peer the endpoint's number
            if (p.in().read() != Handshake.READY) {
                throw new EOFException("handshake cut short");
            }
            Exception failed = null;
            // from here until the peer confirms its endpoint, a failure keeps this one (once created) for the
            // peer's filler to pair with; unless UCX refused to create it, which the peer is told
            c.keepOnFailure = true;
            try {
                await(engine.connections.attach(c, address, Connections.NO_TICKET), deadline);
            } catch (UcxException e) {
                c.keepOnFailure = false;
                failed = e; // the peer still learns the number UCX used, and why
            }
            if (TestHooks.dropEndpointNumber(true)) {
                throw new IOException("connection lost (test hook)");
            }
            p.out().writeLong(c.number);
            p.out().writeUTF(failed == null ? "" : String.valueOf(failed.getMessage()));
            p.out().flush();
            if (failed != null) {
                throw failed;
            }
            // the confirmation is the handshake's last byte: acknowledged as soon as it is read, not after TCP's
            // delayed-ack timer, so that the peer's socket goes idle with nothing unacknowledged (its liveness
            // probes only run then; see keepAlive)
            quickAck(c.control);
            int confirm = p.in().read();
            if (confirm == Handshake.NOT_CREATED) { // the peer used the number but UCX refused its endpoint
                c.keepOnFailure = false;
                throw refusedBy(c, p.in().readUTF());
            }
            if (confirm != Handshake.CREATED) {
                throw new EOFException("handshake cut short before the peer created its endpoint");
            }
            c.keepOnFailure = false;
            engine.connections.confirmed(address, c.number);
        } else if (cmp > 0) { // create in the order of the arbiter's numbers
            boolean arrived = false;
            try {
                await(engine.connections.expectTicket(address), deadline);
                p.out().writeByte(Handshake.READY);
                p.out().flush();
                if (TestHooks.dropEndpointNumber(false)) {
                    throw new IOException("connection lost (test hook)");
                }
                long number = p.in().readLong();
                String refused = p.in().readUTF();
                if (number < 0) { // the arbiter failed before UCX numbered anything
                    throw refusedBy(c, refused);
                }
                arrived = true;
                if (!refused.isEmpty()) {
                    c.abandoned = true; // the number is used all the same
                }
                try {
                    await(engine.connections.attach(c, address, number), deadline);
                } catch (UcxException e) {
                    if (refused.isEmpty()) { // the number is used: the arbiter closes its endpoint, keeps nothing
                        p.out().writeByte(Handshake.NOT_CREATED);
                        p.out().writeUTF(String.valueOf(e.getMessage()));
                        p.out().flush();
                        throw e;
                    }
                }
                if (!refused.isEmpty()) { // the number was filled; the arbiter's reason is the one that counts
                    throw refusedBy(c, refused);
                }
                p.out().writeByte(Handshake.CREATED);
                p.out().flush();
            } finally {
                if (!arrived) {
                    engine.connections.ticketLost(address);
                }
            }
        } else { // the same worker: UCX connects each endpoint to itself, no pairing
            await(engine.connections.attach(c, address, Connections.NO_TICKET), deadline);
        }
    }

    private static UnreachableException refusedBy(EndpointCore c, String why) {
        return new UnreachableException("connection to " + c.peer + " failed: the peer could not create its endpoint: "
                + why + " (" + Status.name(Status.ERR_UNREACHABLE) + ")", Status.ERR_UNREACHABLE);
    }

    /** Waits for the owner thread's part of connecting. */
    private static void await(SafeFuture<?> f, long deadline) throws Exception {
        try {
            f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (ExecutionException e) {
            throw e.getCause() instanceof Exception x ? x : e;
        }
    }

    /**
     * The socket's liveness probes: once idle, the kernel probes the peer and fails the socket when its host has not
     * answered for {@code seconds} in all (idle time, then up to three probes); see
     * {@link org.ucx4j.UcxOptions#withLivenessTimeout}. The kernel probes only a socket with nothing
     * unacknowledged: data that is never acknowledged is retransmitted instead, for up to ~15 minutes with Linux's
     * defaults (Java cannot set {@code TCP_USER_TIMEOUT}). The control socket carries only the handshake, whose
     * last byte is acknowledged at once ({@link #quickAck}), and the goodbye of a close.
     */
    static void keepAlive(Socket s, int seconds) throws IOException {
        s.setKeepAlive(true);
        try {
            if (!s.supportedOptions().contains(ExtendedSocketOptions.TCP_KEEPIDLE)) {
                return; // the system's keepalive timing applies
            }
            int interval = Math.max(1, seconds / 4);
            int probes = Math.min(3, seconds - 1);
            s.setOption(ExtendedSocketOptions.TCP_KEEPINTERVAL, interval);
            s.setOption(ExtendedSocketOptions.TCP_KEEPCOUNT, probes);
            s.setOption(ExtendedSocketOptions.TCP_KEEPIDLE, Math.max(1, seconds - probes * interval));
        } catch (LinkageError e) {
            // a runtime without the jdk.net module: the system's keepalive timing applies
        }
    }

    /** Acknowledge what arrives next at once (Linux; elsewhere a no-op). */
    private static void quickAck(Socket s) {
        try {
            if (s.supportedOptions().contains(ExtendedSocketOptions.TCP_QUICKACK)) {
                s.setOption(ExtendedSocketOptions.TCP_QUICKACK, true);
            }
        } catch (IOException | LinkageError e) {
            // the read that follows reports a broken socket; or a runtime without the jdk.net module
        }
    }

    /**
     * Reads the control socket until it ends: the peer's goodbye (handled at once, then the socket is read on for
     * the acknowledgement of this side's own goodbye, in a close from both sides), the acknowledgement of ours, or
     * the end of the socket, which without a goodbye means the peer went away.
     */
    private static void watch(Engine engine, EndpointCore c, InputStream in) {
        boolean bye = false;
        String why = "the peer's socket closed";
        try {
            int b;
            while ((b = in.read()) >= 0) {
                if (b == Handshake.BYE && !bye) {
                    bye = true;
                    engine.connections.peerGone(c, true, why); // acknowledges once it kept what arrived
                } else if (b == Handshake.BYE_ACK) {
                    c.byeAcknowledged.complete(null);
                    engine.wakeIfSleeping(); // a caller-mode owner waiting for it naps between progress calls
                }
            }
        } catch (IOException e) {
            // reset, closed by us, or the peer's host stopped answering the liveness probes
            why = String.valueOf(e.getMessage()).contains("timed out") ? "its host stopped answering (liveness "
                    + "probes or retransmissions timed out; liveness timeout " + engine.livenessSeconds + " s)"
                    : String.valueOf(e.getMessage());
        }
        c.byeAcknowledged.complete(null); // nobody will acknowledge now
        if (!bye) {
            engine.connections.peerGone(c, false, why);
        }
    }

    /** Tells the peer this side closes gracefully (after its sends were flushed). Never throws. */
    static void sayBye(EndpointCore c) {
        send(c, Handshake.BYE);
    }

    /** Tells the peer that its goodbye was taken in: what it sent before is kept here. Never throws. */
    static void acknowledgeBye(EndpointCore c) {
        send(c, Handshake.BYE_ACK);
    }

    private static void send(EndpointCore c, byte b) {
        Socket s = c.control;
        if (s != null && !s.isClosed()) {
            try {
                synchronized (s) { // a goodbye and an acknowledgement may be sent at once from two threads
                    s.getOutputStream().write(b);
                    s.getOutputStream().flush();
                }
            } catch (IOException e) {
                // the peer is gone already
            }
        }
    }

    private static void connected(Jfr.ConnectEvent ev, String direction, String peer, EndpointCore c,
            Throwable failure) {
        if (ev == null) {
            return;
        }
        ev.end();
        if (ev.shouldCommit()) {
            ev.direction = direction;
            ev.peer = peer;
            ev.peerPid = c == null ? 0 : c.peerPid;
            ev.outcome = failure == null ? "OK" : failure.toString();
            ev.commit();
        }
    }

    static void closeQuietly(AutoCloseable c) {
        if (c != null) {
            try {
                c.close();
            } catch (Exception e) {
                // nothing to do
            }
        }
    }

    private static int millis(long nanos) {
        return (int) Math.min(Integer.MAX_VALUE, Math.max(1, TimeUnit.NANOSECONDS.toMillis(nanos)));
    }

    private static Throwable mapConnectError(Throwable t, String peer, long timeoutNanos) {
        if (t instanceof UcxException) {
            return t;
        }
        if (t instanceof SocketTimeoutException || t instanceof TimeoutException) {
            return new UcxTimeoutException("connect to " + peer + " timed out after "
                    + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms (" + Status.name(Status.ERR_TIMED_OUT)
                    + ")", Status.ERR_TIMED_OUT);
        }
        if (t instanceof ConnectException || t instanceof NoRouteToHostException
                || t instanceof UnknownHostException) {
            return new UnreachableException("connect to " + peer + " failed: nobody accepts connections there ("
                    + t.getMessage() + ", " + Status.name(Status.ERR_UNREACHABLE) + ")", Status.ERR_UNREACHABLE, t);
        }
        return new UnreachableException("connect to " + peer + " failed: " + t + " ("
                + Status.name(Status.ERR_UNREACHABLE) + ")", Status.ERR_UNREACHABLE, t);
    }
}
