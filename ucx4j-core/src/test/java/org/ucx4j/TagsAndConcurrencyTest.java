package org.ucx4j;

import static org.junit.jupiter.api.Assertions.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class TagsAndConcurrencyTest {
    static final Duration T = Duration.ofSeconds(20);

    @Test
    @org.junit.jupiter.api.Timeout(120)
    void connectionsSetUpAtOnceInBothDirectionsKeepTheirStreamsAndFailuresApart() throws Exception {
        // UCX pairs the endpoints two workers create to each other's address by the order they create them: with
        // connections set up at once (in both directions) each must still get its own pair, or one connection's
        // stream bytes arrive on another and closing one fails another
        int connections = 20;
        for (int round = 0; round < 3; round++) {
            java.util.Map<Integer, Integer> streamIdByTagId = new java.util.concurrent.ConcurrentHashMap<>();
            java.util.concurrent.CountDownLatch all = new java.util.concurrent.CountDownLatch(connections);
            ConnectionHandler serve = ep -> {
                byte[] byTag = new byte[1], byStream = new byte[1];
                ep.recv(byTag, 1, T);
                ep.streamRecv(byStream);
                streamIdByTagId.put((int) byTag[0], (int) byStream[0]);
                all.countDown();
                byte[] ping = new byte[1];
                while (true) { // echo pings over the stream until the connection ends
                    ep.streamRecv(ping);
                    ep.streamSend(ping);
                }
            };
            try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Listener la = a.listen(0, serve);
                    Listener lb = b.listen(0, serve); Arena arena = Arena.ofShared()) {
                List<Endpoint> clients = java.util.Collections.synchronizedList(new ArrayList<>());
                List<Thread> connecting = new ArrayList<>();
                for (int i = 0; i < connections; i++) {
                    byte id = (byte) (i + 1);
                    Ucx from = i % 2 == 0 ? a : b;
                    int port = i % 2 == 0 ? lb.port() : la.port();
                    connecting.add(Thread.ofVirtual().start(() -> {
                        Endpoint ep = from.connect("127.0.0.1", port);
                        clients.add(ep);
                        ep.send(new byte[] {id}, 1);
                        ep.streamSend(new byte[] {id});
                    }));
                }
                for (Thread t : connecting) {
                    t.join();
                }
                all.await(20, TimeUnit.SECONDS);
                for (var e : streamIdByTagId.entrySet()) {
                    assertEquals(e.getKey(), e.getValue(), "connection " + e.getKey() + "'s stream bytes arrived on "
                            + "connection " + e.getValue());
                }
                assertEquals(connections, streamIdByTagId.size(), "every connection identified itself");
                // closing half the connections leaves the others alive, their streams still their own
                List<Endpoint> kept = new ArrayList<>();
                for (int i = 0; i < clients.size(); i++) {
                    if (i % 2 == 0) {
                        clients.get(i).close();
                    } else {
                        kept.add(clients.get(i));
                    }
                }
                Thread.sleep(200); // a crossed pair's failure would reach the other connection meanwhile
                MemorySegment pong = arena.allocate(1);
                for (Endpoint ep : kept) {
                    assertTrue(ep.isAlive(), ep + " is alive after other connections closed");
                    pong.set(ValueLayout.JAVA_BYTE, 0, (byte) 0);
                    ep.streamSend(new byte[] {42});
                    assertEquals(1, ep.streamRecv(pong, T));
                    assertEquals(42, pong.get(ValueLayout.JAVA_BYTE, 0));
                }
            }
        }
    }

    @org.junit.jupiter.params.ParameterizedTest(name = "lost on the arbiter''s side: {0}")
    @org.junit.jupiter.params.provider.ValueSource(booleans = {true, false})
    @org.junit.jupiter.api.Timeout(120)
    void connectionsLostBeforeTheirEndpointNumberArrivedLeaveLaterOnesPaired(boolean atArbiter) throws Exception {
        // two connections are lost after the side that creates its UCX endpoint first (the pair's arbiter) did so,
        // before the other side learnt the endpoint's number (the arbiter's side drops the connection before it
        // sends the number, or the other side drops it once it said it is ready for it): the other side must fill
        // those numbers, or it pairs later connections with the dead endpoints (their streams never arrive) or
        // waits for the numbers forever
        ConnectionHandler echo = ep -> {
            byte[] b = new byte[1];
            while (true) {
                ep.streamRecv(b);
                ep.streamSend(b);
            }
        };
        int parkedBefore = org.ucx4j.internal.engine.TestHooks.parkedEndpoints();
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Listener la = a.listen(0, echo); Listener lb = b.listen(0, echo);
                Arena arena = Arena.ofShared()) {
            org.ucx4j.internal.engine.TestHooks.dropEndpointNumbers(2, atArbiter);
            try {
                assertThrows(UcxException.class, () -> a.connect("127.0.0.1", lb.port(), Duration.ofSeconds(5)));
                assertThrows(UcxException.class, () -> b.connect("127.0.0.1", la.port(), Duration.ofSeconds(5)));
            } finally {
                org.ucx4j.internal.engine.TestHooks.dropEndpointNumbers(0, atArbiter);
            }
            // the arbiter keeps both lost endpoints open for the other side's fillers to pair with (the side that
            // did not connect learns of the loss a moment later)
            Data.eventually(() -> org.ucx4j.internal.engine.TestHooks.parkedEndpoints() >= parkedBefore + 2);
            MemorySegment pong = arena.allocate(1);
            for (int i = 0; i < 4; i++) {
                Endpoint ep = i % 2 == 0 ? a.connect("127.0.0.1", lb.port()) : b.connect("127.0.0.1", la.port());
                ep.streamSend(new byte[] {(byte) i});
                assertEquals(1, ep.streamRecv(pong, T), "connection " + i + " answered on its own stream");
                assertEquals(i, pong.get(ValueLayout.JAVA_BYTE, 0));
                assertTrue(ep.isAlive());
            }
            // the later connections confirmed that the other side filled the lost numbers: the kept endpoints
            // are closed then, not left until the worker closes (shared memory reports no peer close); those with
            // a TCP lane stay (see Connections.confirmed)
            if (!"tcp".equals(ConfigAndInfoTest.startupEnv("UCX_TLS"))) {
                Data.eventually(() -> org.ucx4j.internal.engine.TestHooks.parkedEndpoints() == parkedBefore);
            }
        }
        assertEquals(parkedBefore, org.ucx4j.internal.engine.TestHooks.parkedEndpoints());
    }

    @Test
    void tagsSelectMessagesAndTwoEndpointsNeverStealEachOthers() throws Exception {
        try (Ucx server = Ucx.open(); Ucx client = Ucx.open()) {
            List<Endpoint> accepted = java.util.Collections.synchronizedList(new ArrayList<>());
            CompletableFuture<Void> two = new CompletableFuture<>();
            try (Listener l = server.listen(0, ep -> {
                accepted.add(ep);
                if (accepted.size() == 2) {
                    two.complete(null);
                }
            })) {
                Endpoint c1 = client.connect("127.0.0.1", l.port());
                Endpoint c2 = client.connect("127.0.0.1", l.port());
                two.get(10, TimeUnit.SECONDS);
                // both client endpoints post receives with the same user tag on the same worker
                byte[] b1 = new byte[1], b2 = new byte[1];
                CompletableFuture<Long> r1 = c1.recvAsync(b1, 7);
                CompletableFuture<Long> r2 = c2.recvAsync(b2, 7);
                // a canceled receive gives its message up to the next receive
                CompletableFuture<Long> dropped = accepted.get(0).recvAsync(new byte[1], 1);
                assertTrue(dropped.cancel(false));
                c1.send(new byte[] {1}, 1);
                c2.send(new byte[] {2}, 1);
                for (Endpoint s : accepted) {
                    byte[] who = new byte[1];
                    s.recv(who, 1, T);
                    s.send(new byte[] {(byte) (who[0] * 10)}, 7);
                }
                assertEquals(1, r1.get(10, TimeUnit.SECONDS));
                assertEquals(1, r2.get(10, TimeUnit.SECONDS));
                assertEquals(10, b1[0], "c1 got c1's reply");
                assertEquals(20, b2[0], "c2 got c2's reply");
                // different user tags on one endpoint: receive out of send order by tag
                c1.send(new byte[] {5}, 100);
                c1.send(new byte[] {6}, 200);
                byte[] x = new byte[1];
                Endpoint target = null;
                for (Endpoint s : accepted) {
                    try {
                        s.recv(x, 200, Duration.ofMillis(500));
                        target = s;
                        break;
                    } catch (UcxTimeoutException e) {
                        // not this one
                    }
                }
                assertNotNull(target, "tag 200 received on one server endpoint");
                assertEquals(6, x[0]);
                assertEquals(1, target.recv(x, 100, T));
                assertEquals(5, x[0]);
            }
        }
    }

    @Test
    void workerLevelReceiveWithMask() throws Exception {
        try (Ucx server = Ucx.open(); Ucx client = Ucx.open()) {
            try (Listener l = server.listen(0, ep -> {})) {
                Endpoint ep = client.connect("127.0.0.1", l.port());
                MemorySegment buf = Arena.global().allocate(8);
                CompletableFuture<TagMessage> any = server.recvTaggedAsync(buf, 0xAB00L, 0xFF00L);
                ep.sendTagged(new byte[] {1, 2, 3}, 0x1234L); // does not match the mask
                ep.sendTagged(new byte[] {4, 5}, 0xAB42L, Duration.ofSeconds(10));
                TagMessage m = any.get(10, TimeUnit.SECONDS);
                assertEquals(0xAB42L, m.tag());
                assertEquals(2, m.length());
                assertEquals(4, buf.get(ValueLayout.JAVA_BYTE, 0));
                TagMessage exact = server.recvTagged(buf, 0x1234L, -1L, T);
                assertEquals(3, exact.length());
                assertEquals(1, buf.get(ValueLayout.JAVA_BYTE, 0));
                // endpoint-private messages never match a worker-level receive
                ep.send(new byte[] {9}, 0);
                assertThrows(UcxTimeoutException.class, () -> server.recvTagged(buf, 0, 0, Duration.ofMillis(300)));
            }
        }
    }

    @Test
    void sixtyFourVirtualThreadsSendConcurrentlyAndEveryMessageArrives() throws Exception {
        int threads = 64, perThread = 50;
        try (Ucx server = Ucx.open(); Ucx client = Ucx.open()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = server.listen(0, accepted::complete)) {
                Endpoint ep = client.connect("127.0.0.1", l.port());
                Endpoint s = accepted.get(10, TimeUnit.SECONDS);
                List<CompletableFuture<Void>> senders = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    int id = t;
                    CompletableFuture<Void> done = new CompletableFuture<>();
                    senders.add(done);
                    Thread.ofVirtual().start(() -> {
                        try {
                            byte[] msg = new byte[8];
                            for (int i = 0; i < perThread; i++) {
                                // every byte a function of (sender, index): a torn or mixed message shows
                                java.nio.ByteBuffer.wrap(msg).putInt(id).putInt(i ^ (id * 0x9E3779B1));
                                ep.send(msg, 3, T);
                            }
                            done.complete(null);
                        } catch (Throwable e) {
                            done.completeExceptionally(e); // a sender's failure is reported as itself
                        }
                    });
                }
                BitSet seen = new BitSet();
                int[] next = new int[threads]; // one sender's messages arrive in the order it sent them
                byte[] in = new byte[8];
                for (int i = 0; i < threads * perThread; i++) {
                    try {
                        assertEquals(8, s.recv(in, 3, T));
                    } catch (UcxTimeoutException missing) { // a sender that failed says why, not the wait for it
                        for (CompletableFuture<Void> done : senders) {
                            if (done.isCompletedExceptionally()) {
                                done.get();
                            }
                        }
                        throw missing;
                    }
                    java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(in);
                    int id = b.getInt();
                    assertTrue(id >= 0 && id < threads, "sender " + id);
                    int index = b.getInt() ^ (id * 0x9E3779B1);
                    assertEquals(next[id]++, index, "sender " + id + "'s messages in order");
                    int v = id * perThread + index;
                    assertFalse(seen.get(v), "duplicate " + v);
                    seen.set(v);
                }
                for (CompletableFuture<Void> done : senders) {
                    done.get(20, TimeUnit.SECONDS);
                }
                assertEquals(threads * perThread, seen.cardinality());
            }
        }
    }

    /**
     * UCX cannot withdraw a send in flight, so canceling one aborts its endpoint; the future then ends canceled, as
     * asked (not with the aborted endpoint's error), once UCX has let go of the buffer.
     */
    @Test
    void aCanceledSendEndsCanceledAndTakesItsEndpointDown() throws Exception {
        FailureTest.pair(Data.rendezvous(), (a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                CompletableFuture<Long> s = client.sendAsync(Data.pattern(arena, 1 << 20, 1), 77); // nobody receives
                // a send made after it has completed: the worker's owner took both in order, so UCX has the big one
                // (a send canceled while still queued is simply withdrawn, its endpoint untouched)
                client.send(new byte[1], 78, T);
                assertTrue(s.cancel(true), "the cancel took effect");
                assertTrue(s.isCancelled());
                assertThrows(java.util.concurrent.CancellationException.class, s::join);
                Data.eventually(() -> !client.isAlive()); // the endpoint was aborted to withdraw the send
            }
        });
    }

    /**
     * A receive's future completed from outside ({@code orTimeout}, {@code completeOnTimeout}, {@code complete})
     * ends only once UCX has withdrawn the receive: the buffer is the caller's again (nothing writes into it
     * afterwards) and the next message goes to the next receive, not into the abandoned one.
     */
    @Test
    void aReceiveEndedFromOutsideIsWithdrawnBeforeItsFutureEnds() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment abandoned = arena.allocate(64);
                MemorySegment next = arena.allocate(64);
                // the JDK's timer completes it: TimeoutException, as asked, once the receive is withdrawn
                CompletableFuture<Long> timed = server.recvAsync(abandoned, 5).orTimeout(20, TimeUnit.MILLISECONDS);
                java.util.concurrent.ExecutionException e = assertThrows(
                        java.util.concurrent.ExecutionException.class, () -> timed.get(10, TimeUnit.SECONDS));
                assertInstanceOf(java.util.concurrent.TimeoutException.class, e.getCause());
                CompletableFuture<Long> defaulted = server.recvAsync(abandoned, 5)
                        .completeOnTimeout(-1L, 20, TimeUnit.MILLISECONDS);
                assertEquals(-1L, defaulted.get(10, TimeUnit.SECONDS));
                CompletableFuture<Long> completed = server.recvAsync(abandoned, 5);
                assertFalse(completed.complete(-2L), "ends once UCX has withdrawn the receive");
                assertEquals(-2L, completed.get(10, TimeUnit.SECONDS));
                CompletableFuture<TagMessage> worker = b.recvTaggedAsync(abandoned, 6, -1);
                worker.completeExceptionally(new IllegalStateException("given up"));
                assertInstanceOf(IllegalStateException.class, assertThrows(
                        java.util.concurrent.ExecutionException.class, () -> worker.get(10, TimeUnit.SECONDS))
                        .getCause());
                abandoned.fill((byte) 0);
                client.send(new byte[] {1, 2, 3}, 5, T);
                client.sendTagged(new byte[] {4, 5}, 6, T);
                assertEquals(3, server.recv(next, 5, T), "the message went to the next receive");
                assertEquals(1, next.get(ValueLayout.JAVA_BYTE, 0));
                assertEquals(2, b.recvTagged(next, 6, -1, T).length());
                assertEquals(4, next.get(ValueLayout.JAVA_BYTE, 0));
                for (long i = 0; i < 64; i++) {
                    assertEquals(0, abandoned.get(ValueLayout.JAVA_BYTE, i), "nothing landed in the abandoned buffer");
                }
                assertTrue(client.isAlive() && server.isAlive());
            }
        });
    }

    /**
     * A send whose future is timed out from outside ends as a cancel does: UCX cannot withdraw it, so its endpoint
     * is aborted, and the future ends with the {@code TimeoutException} only once UCX has let go of the buffer.
     */
    @Test
    void aSendTimedOutFromOutsideEndsOnlyWhenUcxHasLetGo() throws Exception {
        FailureTest.pair(Data.rendezvous(), (a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                CompletableFuture<Long> s = client.sendAsync(Data.pattern(arena, 1 << 20, 1), 77) // nobody receives
                        .orTimeout(50, TimeUnit.MILLISECONDS);
                java.util.concurrent.ExecutionException e = assertThrows(
                        java.util.concurrent.ExecutionException.class, () -> s.get(10, TimeUnit.SECONDS));
                assertInstanceOf(java.util.concurrent.TimeoutException.class, e.getCause());
                assertFalse(client.isAlive(), "the endpoint was aborted to withdraw the send before the future ended");
            }
        });
    }

    /**
     * Canceling an async receive races with messages matching it: either the cancel wins (the future is canceled
     * and the message goes to the next receive) or the message does (cancel returns false and the future has it).
     * Every message is accounted for, with its bytes, whichever wins.
     */
    @Test
    void cancelingAReceiveNeverLosesAMessage() throws Exception {
        FailureTest.pair(Data.rendezvous(), (a, b, client, server) -> {
            int rounds = 40;
            long size = 1 << 20; // rendezvous: matched well before its data has landed
            int canceled = 0, delivered = 0;
            try (Arena arena = Arena.ofShared()) {
                MemorySegment buf = arena.allocate(size);
                for (int i = 0; i < rounds; i++) {
                    CompletableFuture<Long> r = server.recvAsync(buf, 3);
                    CompletableFuture<Long> s = client.sendAsync(Data.pattern(arena, size, i), 3);
                    // sweep the cancel across the message's life: before it arrives, while it lands, after
                    long spin = (i % 10) * 50_000L;
                    for (long t0 = System.nanoTime(); System.nanoTime() - t0 < spin; ) {
                        Thread.onSpinWait();
                    }
                    boolean wasCanceled = r.cancel(false);
                    assertEquals(wasCanceled, r.isCancelled(), "cancel's answer matches the future's state");
                    if (wasCanceled) {
                        canceled++;
                        assertThrows(java.util.concurrent.CancellationException.class, r::join);
                        buf.fill((byte) 0);
                        assertEquals(size, server.recv(buf, 3, T), "the next receive gets the message");
                    } else {
                        delivered++;
                        assertEquals(size, r.get(10, TimeUnit.SECONDS));
                    }
                    Data.verify(buf, size, i);
                    s.get(10, TimeUnit.SECONDS);
                }
            }
            assertEquals(rounds, canceled + delivered);
            // nothing is left over: no stray message waits for a receive
            try (Arena arena = Arena.ofConfined()) {
                assertThrows(UcxTimeoutException.class, () -> server.recv(arena.allocate(size), 3,
                        Duration.ofMillis(200)));
            }
        });
    }
}
