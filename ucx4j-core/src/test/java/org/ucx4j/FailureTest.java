package org.ucx4j;

import static org.junit.jupiter.api.Assertions.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.ucx4j.testsupport.SlowResolver;

/** Nothing hangs, nothing is silent: peer death, truncation, close/abort, bad input, unavailability. */
class FailureTest {
    static final Duration T = Duration.ofSeconds(10);

    /**
     * A peer JVM connects, then is SIGKILLed while the handler's receive is pending: the receive must fail with
     * ConnectionResetException before its 5 s timeout (a UcxTimeoutException would mean the death went
     * unnoticed), on the default transports (shared memory) and on TCP. The survivor then serves a new peer.
     */
    @ParameterizedTest
    @ValueSource(strings = {"default", "tcp", "no-peer-errors"})
    void peerKilledWhileReceivePending(String transport) throws Exception {
        // no-peer-errors: shared memory without UCX's error handling; the connection's socket reports the death
        Map<String, String> env = switch (transport) {
            case "tcp" -> Map.of("UCX_TLS", "tcp,rdmacm,sockcm");
            case "no-peer-errors" -> Map.of("UCX4J_TEST_PEER_ERRORS", "off");
            default -> Map.of();
        };
        UcxOptions opts = UcxOptions.defaults();
        if (transport.equals("tcp")) {
            opts = opts.with("TLS", "tcp,rdmacm,sockcm");
        } else if (transport.equals("no-peer-errors")) {
            opts = opts.withPeerErrorHandling(false);
        }
        try (Ucx ucx = Ucx.open(opts)) {
            CompletableFuture<Throwable> outcome = new CompletableFuture<>();
            CompletableFuture<Void> ready = new CompletableFuture<>();
            AtomicReference<String> lanes = new AtomicReference<>();
            try (Listener l = ucx.listen(0, ep -> {
                byte[] hello = new byte[1];
                ep.recv(hello, 9, T);
                lanes.set(ep.info());
                ready.complete(null);
                try {
                    ep.recv(new byte[16], 1, Duration.ofSeconds(5));
                    outcome.complete(null);
                } catch (Throwable t) {
                    outcome.complete(t);
                }
            })) {
                try (Peer p = Peer.start(env, List.of(), "connect-hold", String.valueOf(l.port()))) {
                    p.await("READY");
                    ready.get(30, TimeUnit.SECONDS);
                    if (!transport.equals("tcp") && ConfigAndInfoTest.startupEnv("UCX_TLS") == null) {
                        assertTrue(lanes.get().contains("posix") || lanes.get().contains("sysv"),
                                "shared memory must be in use with failure detection on:\n" + lanes.get());
                    } else {
                        assertFalse(lanes.get().contains("posix"), lanes.get());
                    }
                    p.kill();
                    Throwable t = outcome.get(30, TimeUnit.SECONDS);
                    assertInstanceOf(ConnectionResetException.class, t, "got " + t);
                    assertTrue(t.getMessage().contains("UCS_ERR_"), t.getMessage());
                }
                // the survivor still serves: a fresh peer connects to it and gets every size echoed, content checked
                try (Listener echo = ucx.listen(0, PeerMain::echo); Peer p2 = Peer.start(env, List.of(),
                        "connect-echo-sizes", "127.0.0.1", String.valueOf(echo.port()))) {
                    assertEquals("0 1 8 1024 65536 1048576 16777216", p2.await("ECHOED"));
                }
                try (Peer p3 = Peer.start(env, List.of(), "serve-echo");
                        Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p3.await("PORT")))) {
                    echoOnce(ep, 4096);
                }
            }
        }
    }

    static void echoOnce(Endpoint ep, long size) {
        try (Arena a = Arena.ofShared()) {
            MemorySegment header = a.allocate(8);
            header.set(java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED, 0, size);
            MemorySegment out = Data.pattern(a, size, 3);
            MemorySegment in = a.allocate(size);
            CompletableFuture<Long> r = ep.recvAsync(in, 2);
            ep.send(header, 1, T);
            ep.send(out, 2, T);
            assertEquals(size, r.orTimeout(30, TimeUnit.SECONDS).join());
            Data.verify(in, size, 3);
        }
    }

    /** Opens a connected in-process pair and hands both ends to {@code body}. */
    interface PairBody {
        void run(Ucx a, Ucx b, Endpoint client, Endpoint server) throws Exception;
    }

    static void pair(PairBody body) throws Exception {
        pair(UcxOptions.defaults(), body);
    }

    /** {@link #pair(PairBody)} with {@code options} for both sides. */
    static void pair(UcxOptions options, PairBody body) throws Exception {
        try (Ucx a = Ucx.open(options); Ucx b = Ucx.open(options)) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                body.run(a, b, client, server);
            }
        }
    }

    @Test
    void truncationIsAnErrorNotSilent() throws Exception {
        pair(Data.rendezvous(), (a, b, client, server) -> {
            for (int size : new int[] {64, 1 << 20}) { // eager and rendezvous
                try (Arena arena = Arena.ofShared()) {
                    MemorySegment small = arena.allocate(16);
                    CompletableFuture<Long> r = server.recvAsync(small, 1);
                    CompletableFuture<Long> s = client.sendAsync(Data.pattern(arena, size, 1), 1);
                    CompletionException e = assertThrows(CompletionException.class,
                            () -> r.orTimeout(10, TimeUnit.SECONDS).join());
                    assertInstanceOf(MessageTruncatedException.class, e.getCause());
                    assertTrue(e.getCause().getMessage().contains("UCS_ERR_MESSAGE_TRUNCATED"));
                    assertTrue(e.getCause().getMessage().contains("longer than the 16-byte buffer"),
                            e.getCause().getMessage());
                    s.handle((v, x) -> null).orTimeout(10, TimeUnit.SECONDS).join();
                }
            }
            // the endpoint still works afterwards
            byte[] got = new byte[3];
            CompletableFuture<Long> r = server.recvAsync(got, 2);
            client.send(new byte[] {1, 2, 3}, 2);
            assertEquals(3, r.get(10, TimeUnit.SECONDS));
            assertArrayEquals(new byte[] {1, 2, 3}, got);
        });
    }

    @Test
    void connectToClosedPortFailsClearlyWithinTimeout() throws Exception {
        int port;
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            port = s.getLocalPort();
        }
        try (Ucx ucx = Ucx.open()) {
            long start = System.nanoTime();
            UcxException e = assertThrows(UcxException.class,
                    () -> ucx.connect("127.0.0.1", port, Duration.ofSeconds(5)));
            long tookMs = (System.nanoTime() - start) / 1_000_000;
            assertTrue(tookMs < 8_000, "a 5 s connect ended after " + tookMs + " ms"); // the bound, with slack
            assertTrue(e instanceof UnreachableException || e instanceof ConnectionResetException
                    || e instanceof UcxTimeoutException, "got " + e);
            assertTrue(e.getMessage().contains("UCS_ERR_"), e.getMessage());
            assertFalse(ucx.isClosed());
        }
    }

    @Test
    void listenerCloseStopsAccepting() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open()) {
            Listener l = b.listen(0, ep -> {});
            int port = l.port();
            assertTrue(port > 0);
            l.close();
            l.close(); // idempotent
            assertTrue(l.isClosed());
            assertThrows(UcxException.class, () -> a.connect("127.0.0.1", port, Duration.ofSeconds(3)));
        }
    }

    @Test
    void aConnectionWhoseHandshakeEndsAfterTheListenerClosedReachesNoHandler() throws Exception {
        CompletableFuture<Void> reached = new CompletableFuture<>();
        java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.atomic.AtomicInteger handled = new java.util.concurrent.atomic.AtomicInteger();
        org.ucx4j.internal.engine.TestHooks.beforeHandOver(() -> {
            reached.complete(null);
            try {
                release.await(20, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open()) {
            Listener l = b.listen(0, ep -> handled.incrementAndGet());
            CompletableFuture<Endpoint> connecting = a.connectAsync("127.0.0.1", l.port());
            reached.get(20, TimeUnit.SECONDS); // handshake done, not yet handed to the handler
            l.close();
            release.countDown();
            Endpoint client = connecting.get(20, TimeUnit.SECONDS);
            UcxException e = assertThrows(UcxException.class, () -> client.recv(new byte[8], 1, T));
            assertInstanceOf(ConnectionResetException.class, e, e.toString());
            assertEquals(0, handled.get(), "a handler ran after its listener closed");
        } finally {
            org.ucx4j.internal.engine.TestHooks.beforeHandOver(null);
            release.countDown();
        }
    }

    /**
     * An asynchronous connect fails at its timeout while the host name is still being resolved (the test JVM's
     * resolver takes 3 s for {@link SlowResolver#SLOW}): it used to wait for the resolver however long it took.
     */
    @Test
    void anAsyncConnectFailsAtItsTimeoutWhileTheNameIsStillResolving() throws Exception {
        try (Ucx a = Ucx.open(UcxOptions.defaults().withConnectTimeout(Duration.ofMillis(500)))) {
            long start = System.nanoTime();
            CompletableFuture<Endpoint> connecting = a.connectAsync(SlowResolver.SLOW, 1);
            java.util.concurrent.ExecutionException e = assertThrows(java.util.concurrent.ExecutionException.class,
                    () -> connecting.get(SlowResolver.DELAY_MS - 1000, TimeUnit.MILLISECONDS));
            assertInstanceOf(UcxTimeoutException.class, e.getCause(), e.toString());
            assertTrue(System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(SlowResolver.DELAY_MS),
                    "failed only once the name was resolved");
        }
    }

    @Test
    void closeCancelsPendingReceiveAndFailsLaterCalls() throws Exception {
        pair((a, b, client, server) -> {
            CompletableFuture<Throwable> closedCb = new CompletableFuture<>();
            client.onClose(closedCb::complete);
            CompletableFuture<Long> pending = client.recvAsync(new byte[8], 1);
            client.close();
            client.close(); // idempotent
            CompletionException e = assertThrows(CompletionException.class,
                    () -> pending.orTimeout(10, TimeUnit.SECONDS).join());
            assertInstanceOf(EndpointClosedException.class, e.getCause());
            assertThrows(EndpointClosedException.class, () -> client.send(new byte[1]));
            assertFalse(client.isAlive());
            assertTrue(client.isClosed());
            assertNull(closedCb.get(10, TimeUnit.SECONDS), "local close reports no cause");
            // the peer sees the connection go away
            UcxException pe = assertThrows(UcxException.class, () -> server.recv(new byte[8], 1, T));
            assertInstanceOf(ConnectionResetException.class, pe);
        });
    }

    /**
     * Tag messages a peer sent before its graceful close are still received after the close ended the endpoint,
     * by tag, in any order and in every form; a receive that finds none fails with ConnectionResetException at
     * once, a too-small buffer with MessageTruncatedException; what is left unread leaves the worker when the
     * application closes its endpoint (before, such messages could never be received, and stayed in the worker).
     */
    @ParameterizedTest
    @ValueSource(strings = {"two-workers", "one-worker"})
    void tagMessagesSentBeforeAGracefulCloseAreStillReceived(String where) throws Exception {
        pairOn(where, (a, b, client, server) -> {
            try (Arena arena = Arena.ofConfined()) {
                long[] sizes = {100, 0, 30000, 300, 50, 20}; // tags 1..6, eager (30000: in fragments)
                for (int i = 0; i < sizes.length; i++) {
                    client.send(Data.pattern(arena, sizes[i], i), i + 1);
                }
                CompletableFuture<Throwable> cause = new CompletableFuture<>();
                client.onClose(cause::complete);
                client.close();
                assertNull(cause.get(10, TimeUnit.SECONDS), "the closer's own graceful close reports no cause");
                Data.eventually(server::isClosed);
                MemorySegment buf = arena.allocate(32768);
                assertEquals(30000, server.recv(buf, 3));
                Data.verify(buf.asSlice(0, 30000), 30000, 2);
                assertEquals(100, server.recvAsync(buf, 1).get(10, TimeUnit.SECONDS));
                Data.verify(buf.asSlice(0, 100), 100, 0);
                assertEquals(0, server.recv(buf, 2, T));
                byte[] bytes = new byte[300];
                assertEquals(300, server.recv(bytes, 4));
                Data.verify(MemorySegment.ofArray(bytes), 300, 3);
                assertThrows(MessageTruncatedException.class, () -> server.recv(new byte[10], 5));
                assertInstanceOf(ConnectionResetException.class,
                        assertThrows(UcxException.class, () -> server.recv(buf, 7, T)), "nothing sent with tag 7");
                assertInstanceOf(ConnectionResetException.class,
                        assertThrows(UcxException.class, () -> server.recv(buf, 1, T)), "tag 1's one message was taken");
                assertNotNull(server.probe(6, false), "tag 6's message waits in the worker");
                server.close();
                Data.eventually(() -> server.probe(6, false) == null); // freed, not left in the worker
                assertThrows(UcxException.class, () -> server.recv(buf, 6, T));
            }
        });
    }

    /**
     * Stream bytes a peer sent before its graceful close are still read after the close ended the endpoint (UCX
     * drops an endpoint's queued stream data with it: they are copied out first), exact-length and "some" reads
     * alike; an exact read asking for more than is left fails and leaves the bytes; then the stream's end is a
     * ConnectionResetException. Also between two endpoints of one worker, whose streams land on each other's.
     */
    @ParameterizedTest
    @ValueSource(strings = {"two-workers", "one-worker"})
    void streamBytesSentBeforeAGracefulCloseAreStillRead(String where) throws Exception {
        PairBody body = (a, b, client, server) -> {
            try (Arena arena = Arena.ofConfined()) {
                int size = 10_000;
                client.streamSend(Data.pattern(arena, size, 4));
                client.close();
                Data.eventually(server::isClosed);
                MemorySegment buf = arena.allocate(size);
                assertEquals(4000, server.streamRecv(buf.asSlice(0, 4000)));
                assertInstanceOf(ConnectionResetException.class,
                        assertThrows(UcxException.class, () -> server.streamRecv(arena.allocate(7000), T)),
                        "6000 bytes are left, not 7000");
                byte[] some = new byte[1000];
                assertEquals(1000, server.streamRecv(some));
                MemorySegment.copy(MemorySegment.ofArray(some), 0, buf, 4000, 1000);
                long got = 5000;
                while (got < size) {
                    got += server.streamRecvSome(buf.asSlice(got), T);
                }
                Data.verify(buf, size, 4);
                assertInstanceOf(ConnectionResetException.class,
                        assertThrows(UcxException.class, () -> server.streamRecvSome(buf, T)), "the stream's end");
                server.close();
                assertThrows(UcxException.class, () -> server.streamRecvSome(buf, T));
            }
        };
        pairOn(where, body);
    }

    /** {@link #pair} for "two-workers"; for "one-worker", a connection of one {@code Ucx} to itself. */
    static void pairOn(String where, PairBody body) throws Exception {
        if (where.equals("two-workers")) {
            pair(body);
            return;
        }
        try (Ucx a = Ucx.open()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = a.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                body.run(a, a, client, accepted.get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * An exact-length stream receive already waiting when the peer closed gracefully, with part of its bytes in,
     * fails (the stream ended short of it), and those bytes are still read by the next receive.
     */
    @ParameterizedTest
    @ValueSource(strings = {"async", "blocking", "blocking-array"})
    void aWaitingExactStreamReceiveCutShortByAGracefulCloseLeavesItsBytes(String form) throws Exception {
        pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment into = arena.allocate(100);
                // a blocking receive borrows the worker and is polled, an async one completes through a callback
                CompletableFuture<Long> exact = switch (form) {
                    case "async" -> server.streamRecvAsync(into);
                    case "blocking" -> CompletableFuture.supplyAsync(() -> server.streamRecv(into, T),
                            java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
                    default -> CompletableFuture.supplyAsync(() -> server.streamRecv(new byte[100], T),
                            java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
                };
                if (!form.equals("async")) {
                    Thread.sleep(200); // the receive is posted (it fails the same if it comes after the bytes)
                }
                client.streamSend(Data.pattern(arena, 50, 6));
                client.close();
                ExecutionException e = assertThrows(ExecutionException.class, () -> exact.get(10, TimeUnit.SECONDS));
                assertInstanceOf(ConnectionResetException.class, e.getCause());
                MemorySegment rest = arena.allocate(100);
                assertEquals(50, server.streamRecvSome(rest, T));
                Data.verify(rest.asSlice(0, 50), 50, 6);
                assertThrows(ConnectionResetException.class, () -> server.streamRecvSome(rest, T));
            }
        });
    }

    /**
     * Two connections between the same two workers: what one peer left unread goes with its endpoint, and only
     * its own; the other connection's messages, sent with the same tag, are all still received, content checked.
     */
    @Test
    void anEndpointsUnreadTagMessagesLeaveWithoutTouchingAnotherConnections() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Arena arena = Arena.ofShared()) {
            java.util.concurrent.LinkedBlockingQueue<Endpoint> accepted = new java.util.concurrent.LinkedBlockingQueue<>();
            try (Listener l = b.listen(0, accepted::add)) {
                Endpoint c1 = a.connect("127.0.0.1", l.port());
                Endpoint s1 = accepted.poll(10, TimeUnit.SECONDS);
                Endpoint c2 = a.connect("127.0.0.1", l.port());
                Endpoint s2 = accepted.poll(10, TimeUnit.SECONDS);
                for (int i = 0; i < 2; i++) {
                    c1.send(Data.pattern(arena, 200, 10 + i), 1);
                    c2.send(Data.pattern(arena, 200, 20 + i), 1);
                }
                c1.close();
                Data.eventually(s1::isClosed);
                MemorySegment in = arena.allocate(200);
                assertEquals(200, s1.recv(in, 1, T));
                Data.verify(in, 200, 10);
                s1.close(); // its second message leaves the worker
                Data.eventually(() -> s1.probe(1, false) == null);
                for (int i = 0; i < 2; i++) {
                    assertEquals(200, s2.recv(in, 1, T));
                    Data.verify(in, 200, 20 + i);
                }
                c2.close();
            }
        }
    }

    /**
     * A rendezvous-size message the peer closed without waiting for (UCX's flush does not wait for the receiver to
     * take it; the close then aborts the send): its announcement is still in the worker, but its bytes went with
     * the peer, so a receive of it fails at once with ConnectionResetException, and takes the announcement along.
     */
    @Test
    void aRendezvousMessageAClosingPeerLeftBehindFailsItsReceive() throws Exception {
        pair(Data.rendezvous(), (a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                CompletableFuture<Long> sent = client.sendAsync(Data.pattern(arena, 4 << 20, 7), 8);
                Data.eventually(() -> server.probe(8, false) != null);
                client.close(Duration.ofMillis(300));
                assertThrows(ExecutionException.class, () -> sent.get(10, TimeUnit.SECONDS));
                Data.eventually(server::isClosed);
                assertThrows(ConnectionResetException.class, () -> server.recv(arena.allocate(4 << 20), 8, T));
                assertNull(server.probe(8, false), "the announcement went with the failed receive");
            }
        });
    }

    /** Messages a locally closed endpoint never received leave the worker with it. */
    @Test
    void tagMessagesUnreadWhenAnEndpointClosesLeaveTheWorker() throws Exception {
        pair((a, b, client, server) -> {
            server.send(new byte[] {1, 2, 3}, 9);
            Data.eventually(() -> client.probe(9, false) != null);
            client.close();
            Data.eventually(() -> client.probe(9, false) == null);
            assertThrows(EndpointClosedException.class, () -> client.recv(new byte[3], 9, T));
        });
    }

    @Test
    void abortFailsPendingAtOnce() throws Exception {
        pair((a, b, client, server) -> {
            CompletableFuture<Long> pending = server.recvAsync(new byte[8], 1);
            server.abort();
            server.abort();
            CompletionException e = assertThrows(CompletionException.class,
                    () -> pending.orTimeout(10, TimeUnit.SECONDS).join());
            assertInstanceOf(EndpointClosedException.class, e.getCause());
            server.closeFuture().get(10, TimeUnit.SECONDS);
            assertTrue(server.isClosed());
        });
    }

    /**
     * Every pending receive fails with its endpoint, not only the first: UCX completes a canceled receive inside
     * {@code ucp_request_cancel}, which unlinks it from the endpoint's pending list while that list is walked.
     */
    @ParameterizedTest
    @ValueSource(strings = {"abort", "close", "peer-abort"})
    void everyPendingReceiveFailsWithItsEndpoint(String how) throws Exception {
        pair((a, b, client, server) -> {
            List<CompletableFuture<Long>> pending = new java.util.ArrayList<>();
            for (int i = 0; i < 5; i++) {
                pending.add(server.recvAsync(new byte[8], 10 + i));
            }
            switch (how) {
                case "abort" -> server.abort();
                case "close" -> server.close(Duration.ofSeconds(2));
                default -> client.abort();
            }
            for (CompletableFuture<Long> f : pending) {
                CompletionException e = assertThrows(CompletionException.class,
                        () -> f.orTimeout(10, TimeUnit.SECONDS).join());
                Class<? extends UcxException> expected = how.equals("peer-abort") ? ConnectionResetException.class
                        : EndpointClosedException.class;
                assertInstanceOf(expected, e.getCause(), "got " + e.getCause());
            }
        });
    }

    /**
     * With a progress thread, a handler that blocks (a receive nothing will complete, waited for by a blocking call
     * or a future's get) is ended by another thread's {@code Ucx.close()}: the wait fails, and the worker is then
     * released, within the close's bound rather than left running when the close gives up.
     */
    @ParameterizedTest
    @ValueSource(strings = {"worker-recv", "endpoint-recv", "future-get"})
    void aCloseEndsAHandlersBlockingWaitWithAProgressThread(String wait) throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                CompletableFuture<Throwable> inHandler = new CompletableFuture<>();
                java.util.concurrent.CountDownLatch waits = new java.util.concurrent.CountDownLatch(1);
                MemorySegment buf = arena.allocate(8);
                client.onActiveMessage(m -> {
                    m.close();
                    waits.countDown();
                    try {
                        switch (wait) { // nothing will come: each ends only by the close
                            case "worker-recv" -> a.recvTagged(buf, 7, -1);
                            case "endpoint-recv" -> client.recv(buf, 7);
                            default -> a.recvTaggedAsync(buf, 7, -1).get();
                        }
                        inHandler.complete(null);
                    } catch (Throwable e) {
                        inHandler.complete(e);
                    }
                });
                server.amSend(new byte[0], new byte[] {1});
                assertTrue(waits.await(10, TimeUnit.SECONDS));
                Thread.sleep(100);
                long t0 = System.nanoTime();
                a.close();
                long took = System.nanoTime() - t0;
                Throwable t = inHandler.get(10, TimeUnit.SECONDS);
                if (t instanceof java.util.concurrent.ExecutionException ee) {
                    t = ee.getCause();
                }
                assertInstanceOf(UcxException.class, t, "got " + t);
                assertTrue(took < TimeUnit.SECONDS.toNanos(9), "the close waited out its 10 s bound ("
                        + TimeUnit.NANOSECONDS.toMillis(took) + " ms): the worker was not released");
                assertTrue(a.isClosed());
            }
        }
    }

    /**
     * A graceful close from code that runs inside UCX's progress (a completion's dependent run where it completes)
     * either closes the endpoint or is refused before it changes anything, never leaving it half-closed.
     */
    @Test
    void aCloseFromInsideProgressClosesOrIsRefusedCleanly() throws Exception {
        pair((a, b, client, server) -> {
            CompletableFuture<Throwable> inside = new CompletableFuture<>();
            server.recvAsync(new byte[8], 5).whenCompleteAsync((v, e) -> {
                try {
                    server.close();
                    inside.complete(null);
                } catch (Throwable t) {
                    inside.complete(t);
                }
            }, Runnable::run);
            client.send(new byte[8], 5, T);
            Throwable t = inside.get(10, TimeUnit.SECONDS);
            if (t == null) {
                assertTrue(server.isClosed());
            } else {
                assertInstanceOf(IllegalStateException.class, t, "got " + t);
                assertTrue(server.isAlive(), "a refused close changed nothing");
                server.close();
                assertTrue(server.isClosed());
            }
            client.closeFuture().get(10, TimeUnit.SECONDS);
        });
    }

    /** A timeout too long for nanoseconds in a long (ChronoUnit.FOREVER) is a very long wait, not an exception. */
    @Test
    void aForeverTimeoutIsAcceptedEverywhere() throws Exception {
        Duration forever = java.time.temporal.ChronoUnit.FOREVER.getDuration();
        pair((a, b, client, server) -> {
            CompletableFuture<Long> r = CompletableFuture.supplyAsync(() -> server.recv(new byte[8], 4, forever));
            client.send(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, 4, forever);
            assertEquals(8, r.get(10, TimeUnit.SECONDS));
            try (Listener l = b.listen(0, ep -> {}); Endpoint second = a.connect("127.0.0.1", l.port(), forever)) {
                assertTrue(second.isAlive());
                second.close(forever);
                assertTrue(second.isClosed());
            }
        });
    }

    /**
     * A close after an abort (a try-with-resources close of an endpoint aborted inside it) says no goodbye: its peer
     * hears that it went away, not that it closed gracefully (the close's flush of the aborted endpoint counted as
     * done, and its goodbye went out).
     */
    @Test
    void aCloseAfterAnAbortSaysNoGoodbye() throws Exception {
        for (int round = 0; round < 5; round++) {
            pair((a, b, client, server) -> {
                CompletableFuture<Long> pending = server.recvAsync(new byte[8], 9);
                client.abort();
                client.close();
                ExecutionException e = assertThrows(ExecutionException.class, () -> pending.get(10, TimeUnit.SECONDS));
                assertInstanceOf(ConnectionResetException.class, e.getCause());
                // the socket's end ("went away") or, over TCP, UCX's own endpoint error may come first: either way
                // not a goodbye
                String m = e.getCause().getMessage();
                assertTrue(m.contains("went away") || m.contains("connection to") && m.contains("lost"), m);
            });
        }
    }

    /**
     * FOREVER as an instance's connect and close timeouts: it opens (the connect timeout overflowed a conversion to
     * nanoseconds), connects, and its close ends every endpoint and the progress thread (the close's bound
     * overflowed after the instance counted as closed, leaving the worker and its thread running).
     */
    @Test
    void foreverConnectAndCloseTimeoutsOpenConnectAndClose() throws Exception {
        Duration forever = java.time.temporal.ChronoUnit.FOREVER.getDuration();
        try (Ucx b = Ucx.open()) {
            Ucx a = Ucx.open(UcxOptions.defaults().withName("forever").withConnectTimeout(forever)
                    .withCloseTimeout(forever));
            try (Listener l = b.listen(0, ep -> { })) {
                Endpoint ep = a.connect("127.0.0.1", l.port());
                assertTrue(ep.isAlive());
                a.close();
                assertTrue(ep.isClosed());
            }
            Data.eventually(() -> Thread.getAllStackTraces().keySet().stream()
                    .noneMatch(t -> t.getName().startsWith("ucx4j-progress-forever")));
        }
    }

    /**
     * UCX leaves the JVM's signals alone: a process with UCX loaded still ends on SIGHUP, running its shutdown hooks
     * (libucs's default debug signal, SIGHUP, replaced the JVM's handler, so the process went on running).
     */
    @Test
    void aHangUpStillEndsTheProcessTheJvmWay() throws Exception {
        // a process started under nohup (as CI jobs may be) ignores SIGHUP, and so would the child, whose JVM then
        // handles nothing: the child starts with SIGHUP at its default (coreutils env), or the test is skipped
        boolean resettable;
        try {
            resettable = new ProcessBuilder("env", "--default-signal=HUP", "true").start().waitFor() == 0;
        } catch (java.io.IOException e) {
            resettable = false;
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(resettable, "env --default-signal is not available");
        try (Peer p = Peer.startWith(List.of("env", "--default-signal=HUP"), Map.of(), List.of(), "hangup")) {
            p.await("READY");
            Process kill = new ProcessBuilder("kill", "-HUP", String.valueOf(p.process.pid())).start();
            assertEquals(0, kill.waitFor());
            List<String> out = p.awaitExit();
            assertEquals(129, p.process.waitFor(), "128 + SIGHUP: the JVM's handler ended it");
            assertTrue(out.contains("HOOK"), "the shutdown hooks ran: " + out);
        }
    }

    /** Every worker-level receive is canceled when the worker closes, and the close does not wait for them. */
    @Test
    void closingUcxCancelsEveryWorkerLevelReceive() throws Exception {
        Ucx ucx = Ucx.open();
        MemorySegment buf = Arena.global().allocate(64);
        List<CompletableFuture<TagMessage>> rs = new java.util.ArrayList<>();
        for (int i = 0; i < 4; i++) {
            rs.add(ucx.recvTaggedAsync(buf.asSlice(i * 16, 16), 5 + i, -1));
        }
        ucx.close();
        for (CompletableFuture<TagMessage> r : rs) {
            CompletionException e = assertThrows(CompletionException.class,
                    () -> r.orTimeout(10, TimeUnit.SECONDS).join());
            assertInstanceOf(CanceledException.class, e.getCause());
        }
    }

    @Test
    void closingUcxCancelsWorkerLevelReceiveAndRejectsCalls() throws Exception {
        Ucx ucx = Ucx.open();
        MemorySegment buf = Arena.global().allocate(8);
        CompletableFuture<TagMessage> r = ucx.recvTaggedAsync(buf, 5, -1);
        ucx.close();
        ucx.close();
        CompletionException e = assertThrows(CompletionException.class, () -> r.orTimeout(10, TimeUnit.SECONDS).join());
        assertInstanceOf(CanceledException.class, e.getCause());
        assertThrows(EndpointClosedException.class, () -> ucx.listen(0, ep -> {}));
    }

    @Test
    void receiveTimeoutCancelsAndLaterMessageIsNotLost() throws Exception {
        pair((a, b, client, server) -> {
            byte[] buf = new byte[4];
            UcxTimeoutException e = assertThrows(UcxTimeoutException.class,
                    () -> server.recv(buf, 3, Duration.ofMillis(200)));
            assertTrue(e.getMessage().contains("UCS_ERR_TIMED_OUT"));
            client.send(new byte[] {9, 8, 7, 6}, 3);
            assertEquals(4, server.recv(buf, 3, T));
            assertArrayEquals(new byte[] {9, 8, 7, 6}, buf);
        });
    }

    @Test
    void badArgumentsGetClearErrors() throws Exception {
        pair((a, b, client, server) -> {
            assertThrows(NullPointerException.class, () -> client.send((byte[]) null));
            IllegalArgumentException heap = assertThrows(IllegalArgumentException.class,
                    () -> client.send(MemorySegment.ofArray(new byte[4])));
            assertTrue(heap.getMessage().contains("heap"));
            assertThrows(IllegalArgumentException.class,
                    () -> server.recv(java.nio.ByteBuffer.allocateDirect(4).asReadOnlyBuffer()));
            assertThrows(IllegalArgumentException.class,
                    () -> server.recv(Arena.global().allocate(4).asReadOnly()));
            assertThrows(IllegalArgumentException.class, () -> server.recv(new byte[4], 0, Duration.ofSeconds(-1)));
            assertThrows(IllegalArgumentException.class, () -> client.sendTagged(new byte[1], -5));
            assertThrows(IllegalArgumentException.class, () -> a.connect("127.0.0.1", 0));
            // a null or negative timeout is refused by every Duration form, never taken as "no timeout"
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment eight = arena.allocate(8);
                assertThrows(NullPointerException.class, () -> client.streamSend(eight, null));
                assertThrows(NullPointerException.class, () -> client.streamSend(new byte[1], null));
                assertThrows(IllegalArgumentException.class,
                        () -> client.streamSend(new byte[1], Duration.ofSeconds(-1)));
                assertThrows(NullPointerException.class, () -> server.streamRecv(new byte[1], null));
                assertThrows(NullPointerException.class, () -> client.sendTagged(new byte[1], 5, null));
                assertThrows(NullPointerException.class, () -> client.amSend(new byte[1], new byte[1], null));
            }
            // nothing was lost or corrupted: the pair still works
            byte[] got = new byte[2];
            CompletableFuture<Long> r = server.recvAsync(got, 0);
            client.send(new byte[] {4, 2});
            assertEquals(2, r.get(10, TimeUnit.SECONDS));
            assertArrayEquals(new byte[] {4, 2}, got);
        });
    }

    /**
     * A UCX install named by {@code ucx4j.ucx.home} is loaded whole: libucm and libuct come from it too, not from the
     * system's UCX the dynamic linker would otherwise find (a mixed install: a missing symbol aborts the process).
     */
    @Test
    void anInstallDirIsLoadedWhole(@org.junit.jupiter.api.io.TempDir java.nio.file.Path home) throws Exception {
        java.nio.file.Path sys = null;
        for (String d : List.of("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")) {
            if (java.nio.file.Files.exists(java.nio.file.Path.of(d, "libuct.so.0"))) {
                sys = java.nio.file.Path.of(d);
                break;
            }
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(sys != null, "no system UCX to copy");
        java.nio.file.Path lib = java.nio.file.Files.createDirectories(home.resolve("lib"));
        for (String name : List.of("libucm.so.0", "libucs.so.0", "libuct.so.0", "libucp.so.0")) {
            java.nio.file.Files.copy(sys.resolve(name).toRealPath(), lib.resolve(name));
        }
        try (Peer p = Peer.start(Map.of(), List.of("-Ducx4j.ucx.home=" + home), "loaded-libraries")) {
            List<String> out = p.awaitExit();
            List<String> libs = out.stream().filter(l -> l.startsWith("LIB ")).map(l -> l.substring(4)).toList();
            for (String name : List.of("libucm", "libucs", "libuct", "libucp")) {
                assertTrue(libs.stream().anyMatch(l -> l.contains(name)), name + " not mapped: " + out);
            }
            for (String l : libs) {
                assertTrue(l.startsWith(lib.toRealPath().toString()) || l.startsWith(lib.toString()),
                        "loaded from outside the install: " + l);
            }
        }
    }

    @Test
    void missingLibraryGivesRemedyNotStackTrace() throws Exception {
        try (Peer p = Peer.start(Map.of(), List.of("-Ducx4j.ucx.home=/nonexistent/ucx"), "availability")) {
            assertEquals("false", p.await("AVAILABLE"));
            String cause = p.await("CAUSE");
            assertTrue(cause.contains("/nonexistent/ucx") && cause.contains("UCX4J_UCX_HOME"), cause);
            assertEquals(0, p.process.waitFor());
        }
    }
}
