package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.ucx4j.internal.engine.TestHooks;

/**
 * {@link ProgressMode#CALLER}: the test thread owns the worker and runs every operation itself. A receive takes a
 * message that is already waiting by its probe handle, and one posted before its message is polled; both must
 * deliver the right bytes and report truncation.
 */
@org.junit.jupiter.api.Timeout(120)
class CallerModeTest {
    static final Duration T = Duration.ofSeconds(10);
    static final long[] SIZES = {0, 8, 4096, 64 * 1024, 1 << 20}; // eager and, with Data.rendezvous(), rendezvous
    static final int WARM_UP = 77;

    interface Body {
        void run(Ucx caller, Endpoint client, Endpoint server) throws Exception;
    }

    static void withCallerClient(Body body) throws Exception {
        withCallerClient(UcxOptions.defaults(), body);
    }

    /** {@link #withCallerClient(Body)} with {@code options} for both sides. */
    static void withCallerClient(UcxOptions options, Body body) throws Exception {
        withCallerClient(options, (a, b, client, server) -> body.run(a, client, server));
    }

    interface BodyWithServerUcx {
        void run(Ucx caller, Ucx serverUcx, Endpoint client, Endpoint server) throws Exception;
    }

    /** {@link #withCallerClient(UcxOptions, Body)} that also hands the body the server's {@code Ucx}. */
    static void withCallerClient(UcxOptions options, BodyWithServerUcx body) throws Exception {
        try (Ucx b = Ucx.open(options); Ucx a = Ucx.open(options.withProgressMode(ProgressMode.CALLER))) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port(), T);
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                // one message each way first: over TCP, UCX completes a connection only while both sides
                // progress, and the caller-mode side progresses only inside its own calls
                byte[] hello = new byte[1];
                CompletableFuture<Long> toClient = server.sendAsync(hello, WARM_UP);
                assertEquals(1, client.recv(hello, WARM_UP, T));
                assertEquals(1, toClient.get(10, TimeUnit.SECONDS));
                CompletableFuture<Long> fromClient = server.recvAsync(hello, WARM_UP);
                client.send(hello, WARM_UP, T);
                assertEquals(1, drive(a, fromClient));
                body.run(a, b, client, server);
            }
        }
    }

    /**
     * A handler set from another thread while the owner waits in {@code amRecv} fails that receive, as it fails
     * receives waiting on futures, instead of leaving it to wait for messages that now go to the handler.
     */
    @Test
    void aHandlerSetWhileTheOwnerWaitsInAmRecvFailsThatReceive() throws Exception {
        withCallerClient((a, client, server) -> {
            java.util.concurrent.LinkedBlockingQueue<byte[]> handled = new java.util.concurrent.LinkedBlockingQueue<>();
            Thread setter = Thread.ofVirtual().start(() -> {
                try {
                    Thread.sleep(200);
                } catch (InterruptedException e) {
                    return;
                }
                client.onActiveMessage(m -> {
                    handled.add(m.payloadBytes());
                    m.close();
                });
            });
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> client.amRecv(Duration.ofSeconds(5)));
            assertTrue(e.getMessage().contains("onActiveMessage"), e.getMessage());
            setter.join();
            // asynchronous, with this thread driving the receiver meanwhile: a send may need its peer to progress
            // (UCX 1.20 built with CUDA on an H100 host: a blocking send here waited for ever), and the receiver's
            // owner is this thread
            CompletableFuture<Long> sent = server.amSendAsync(MemorySegment.ofArray(new byte[0]),
                    MemorySegment.ofArray(new byte[] {7}));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while ((handled.isEmpty() || !sent.isDone()) && System.nanoTime() < deadline) {
                a.progress();
            }
            assertArrayEquals(new byte[] {7}, handled.poll());
            assertEquals(1, sent.get(1, TimeUnit.SECONDS));
        });
    }

    /** Drives the caller-mode worker until {@code f} completes. */
    static <T> T drive(Ucx caller, CompletableFuture<T> f) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!f.isDone()) {
            caller.progress();
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not completed within 10 s");
            }
        }
        return f.get();
    }

    @Test
    void aRawConnectFutureDrivesTheWorkerWhenItsOwnerWaits() throws Exception {
        try (Ucx b = Ucx.open(); Ucx a = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER))) {
            // only this thread progresses a: the endpoint is made (and its lanes read) while it waits on the future
            Endpoint ep = a.connectAsync(b.workerAddress()).get(10, TimeUnit.SECONDS);
            assertTrue(ep.isAlive());
            try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofShared()) {
                java.lang.foreign.MemorySegment in = arena.allocate(3);
                CompletableFuture<TagMessage> r = b.recvTaggedAsync(in, 5, -1L);
                ep.send(new byte[] {1, 2, 3}, 5, T);
                assertEquals(3, r.get(10, TimeUnit.SECONDS).length());
                assertEquals(3, in.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 2));
            }
            ep.close();
        }
    }

    @Test
    void futuresOfConnectAndCloseDriveTheWorkerWhenItsOwnerWaits() throws Exception {
        withCallerClient((a, client, server) -> {
            try (Ucx other = Ucx.open(); Listener l = other.listen(0, ep -> {})) {
                // the handshake needs this worker to create its endpoint: only the waiting owner can progress it
                Endpoint second = a.connectAsync("127.0.0.1", l.port()).get(10, TimeUnit.SECONDS);
                assertTrue(second.isAlive());
                second.closeAsync().get(10, TimeUnit.SECONDS);
                assertTrue(second.isClosed());
            }
            client.closeAsync().get(10, TimeUnit.SECONDS);
            assertTrue(client.isClosed());
            UcxException e = assertThrows(UcxException.class, () -> server.recv(new byte[1], 5, T));
            assertInstanceOf(ConnectionResetException.class, e, e.toString());
        });
    }

    @Test
    void receiveOfAMessageAlreadyWaitingTakesItByHandle() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                EndpointStats before = client.stats();
                for (long size : SIZES) {
                    CompletableFuture<Long> sent = server.sendAsync(Data.pattern(arena, size, 3), 5);
                    // let it arrive (and, for rendezvous, announce itself) before any receive is posted
                    Data.eventually(() -> {
                        a.progress();
                        return client.probe(5, false) != null;
                    });
                    MemorySegment buf = arena.allocate(Math.max(1, size)).asSlice(0, size);
                    assertEquals(size, client.recv(buf, 5, T));
                    Data.verify(buf, size, 3);
                    assertEquals(size, sent.get(10, TimeUnit.SECONDS));
                }
                // receives taken inside the call are counted like any other
                EndpointStats after = client.stats();
                assertEquals(SIZES.length, after.messagesReceived() - before.messagesReceived());
                assertEquals(java.util.Arrays.stream(SIZES).sum(), after.bytesReceived() - before.bytesReceived());
                // larger than the buffer: truncation, then the endpoint still works
                server.send(Data.pattern(arena, 64, 4), 6);
                Data.eventually(() -> {
                    a.progress();
                    return client.probe(6, false) != null;
                });
                MessageTruncatedException e = assertThrows(MessageTruncatedException.class,
                        () -> client.recv(arena.allocate(16), 6, T));
                assertTrue(e.getMessage().contains("UCS_ERR_MESSAGE_TRUNCATED"), e.getMessage());
                server.send(Data.pattern(arena, 8, 5), 6);
                MemorySegment last = arena.allocate(8);
                assertEquals(8, client.recv(last, 6, T));
                Data.verify(last, 8, 5);
            }
        });
    }

    @Test
    void receivePostedBeforeItsMessageIsPolled() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : SIZES) {
                    MemorySegment buf = arena.allocate(Math.max(1, size)).asSlice(0, size);
                    // the server answers only after a pause, so the caller's receive is posted first
                    CompletableFuture<Void> later = CompletableFuture.runAsync(() -> {
                        sleep(50);
                        server.send(Data.pattern(arena, size, 7), 8, T);
                    });
                    assertEquals(size, client.recv(buf, 8, T));
                    Data.verify(buf, size, 7);
                    later.get(10, TimeUnit.SECONDS);
                }
                CompletableFuture.runAsync(() -> {
                    sleep(50);
                    server.send(new byte[64], 9);
                });
                assertThrows(MessageTruncatedException.class, () -> client.recv(arena.allocate(16), 9, T));
                // a timed-out caller-mode receive is withdrawn and leaves the next message alone
                assertThrows(UcxTimeoutException.class, () -> client.recv(arena.allocate(8), 10,
                        Duration.ofMillis(100)));
                server.send(Data.pattern(arena, 8, 1), 10);
                MemorySegment next = arena.allocate(8);
                assertEquals(8, client.recv(next, 10, T));
                Data.verify(next, 8, 1);
            }
        });
    }


    /**
     * Ping-pong against a peer that answers at once: the caller's receive is posted and its reply mostly arrives
     * while the owner thread still polls it right after posting (no op); content, lengths, truncation and the
     * endpoint's counters must be right whichever way each reply is caught.
     */
    @Test
    void pingPongRepliesArriveWhileTheReceiveIsPolled() throws Exception {
        withCallerClient((a, client, server) -> {
            int rounds = 500;
            try (Arena arena = Arena.ofShared()) {
                Thread echo = Thread.ofVirtual().start(() -> {
                    MemorySegment in = arena.allocate(8);
                    for (int i = 0; i <= rounds; i++) {
                        server.recv(in, 20, T);
                        int n = in.get(java.lang.foreign.ValueLayout.JAVA_INT, 0);
                        // round 250 answers with more than the caller's buffer holds
                        server.send(Data.pattern(arena, i == rounds / 2 ? 64 : 8, n), 21, T);
                    }
                });
                EndpointStats before = client.stats();
                MemorySegment ask = arena.allocate(8);
                MemorySegment reply = arena.allocate(8);
                for (int i = 0; i < rounds; i++) {
                    ask.set(java.lang.foreign.ValueLayout.JAVA_INT, 0, i);
                    client.send(ask, 20, T);
                    if (i == rounds / 2) {
                        MessageTruncatedException e = assertThrows(MessageTruncatedException.class,
                                () -> client.recv(reply, 21, T));
                        assertTrue(e.getMessage().contains("UCS_ERR_MESSAGE_TRUNCATED"), e.getMessage());
                        continue;
                    }
                    assertEquals(8, client.recv(reply, 21, T));
                    Data.verify(reply, 8, i);
                }
                EndpointStats after = client.stats();
                assertEquals(rounds - 1, after.messagesReceived() - before.messagesReceived());
                assertEquals(8L * (rounds - 1), after.bytesReceived() - before.bytesReceived());
                // the endpoint still works after the truncation
                ask.set(java.lang.foreign.ValueLayout.JAVA_INT, 0, 77);
                client.send(ask, 20, T);
                assertEquals(8, client.recv(reply, 21, T));
                Data.verify(reply, 8, 77);
                echo.join(10_000);
                assertFalse(echo.isAlive());
            }
        });
    }
    @Test
    void asyncSendsAndReceivesFromTheOwnerThreadAllComplete() throws Exception {
        withCallerClient((a, client, server) -> {
            int n = 2000;
            try (Arena arena = Arena.ofShared()) {
                MemorySegment in = arena.allocate(8L * n);
                CompletableFuture<Void> served = CompletableFuture.runAsync(() -> {
                    for (int i = 0; i < n; i++) {
                        server.recv(in.asSlice(8L * i, 8), 11, T);
                    }
                    server.send(new byte[] {1}, 12);
                });
                EndpointStats before = client.stats();
                List<CompletableFuture<Long>> sends = new ArrayList<>();
                MemorySegment out = arena.allocate(8L * n);
                for (int i = 0; i < n; i++) {
                    out.setAtIndex(java.lang.foreign.ValueLayout.JAVA_LONG, i, 1000L + i);
                    sends.add(client.sendAsync(out.asSlice(8L * i, 8), 11));
                }
                byte[] done = new byte[1];
                assertEquals(1, drive(a, client.recvAsync(done, 12)));
                served.get(10, TimeUnit.SECONDS);
                for (CompletableFuture<Long> s : sends) {
                    assertEquals(8, drive(a, s));
                }
                for (int i = 0; i < n; i++) {
                    assertEquals(1000L + i, in.getAtIndex(java.lang.foreign.ValueLayout.JAVA_LONG, i), "message " + i);
                }
                assertEquals(n, client.stats().messagesSent() - before.messagesSent(),
                        "sends completed inside the call are counted too");
                assertEquals(8L * n, client.stats().bytesSent() - before.bytesSent());
                // a send that completed inside the call may share its future: it cannot be rewritten
                CompletableFuture<Long> f = sends.get(0);
                assertTrue(f.isDone());
                assertEquals(false, f.complete(99L));
                assertEquals(false, f.cancel(true));
                assertEquals(8, f.join());
            }
        });
    }

    /**
     * Rendezvous sends made inside the owner's call come back from UCX as requests posted without a callback: the
     * owner tests them, oldest first, as it progresses. A window of them, received out of posting order by tag,
     * must all complete with the right bytes.
     */
    @Test
    void rendezvousSendsOfTheOwnerCompleteByPollingEvenOutOfOrder() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            int n = 80; // more than the engine's first 64 ring slots: the ring grows with all of them in flight
            long size = 1 << 20; // rendezvous (Data.rendezvous())
            try (Arena arena = Arena.ofShared()) {
                MemorySegment out = arena.allocate(size * n);
                MemorySegment in = arena.allocate(size * n);
                for (int i = 0; i < n; i++) {
                    out.asSlice(size * i, size).fill((byte) (i + 1));
                }
                EndpointStats before = client.stats();
                List<CompletableFuture<Long>> sends = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    sends.add(client.sendAsync(out.asSlice(size * i, size), 100 + i));
                }
                // the server takes them newest first: each send waits for its receive
                CompletableFuture<Void> served = CompletableFuture.runAsync(() -> {
                    for (int i = n - 1; i >= 0; i--) {
                        server.recv(in.asSlice(size * i, size), 100 + i, T);
                    }
                });
                for (int i = n - 1; i >= 0; i--) {
                    assertEquals(size, drive(a, sends.get(i)), "send " + i);
                }
                served.get(10, TimeUnit.SECONDS);
                for (int i = 0; i < n; i++) {
                    MemorySegment got = in.asSlice(size * i, size);
                    assertEquals(-1, got.mismatch(out.asSlice(size * i, size)), "message " + i);
                }
                assertEquals(n, client.stats().messagesSent() - before.messagesSent());
            }
        });
    }

    /**
     * A polled send that finishes while an older one is still in flight completes too: the oldest-first test stops
     * at the older one, and the periodic test of all of them, busy or not, finds the younger.
     */
    @Test
    void aPolledSendCompletesWhileAnOlderOneWaitsForItsReceive() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                long size = 1 << 20;
                MemorySegment older = arena.allocate(size).fill((byte) 1);
                MemorySegment younger = arena.allocate(size).fill((byte) 2);
                CompletableFuture<Long> first = client.sendAsync(older, 31);
                CompletableFuture<Long> second = client.sendAsync(younger, 32);
                MemorySegment in = arena.allocate(size);
                CompletableFuture<Long> got = server.recvAsync(in, 32);
                // meanwhile a stream of small messages keeps the owner's progress calls busy
                CompletableFuture<Void> chatter = CompletableFuture.runAsync(() -> {
                    for (int i = 0; i < 20_000 && !got.isDone(); i++) {
                        server.send(new byte[8], 33);
                    }
                });
                byte[] small = new byte[8];
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (!second.isDone() && System.nanoTime() < deadline) {
                    CompletableFuture<Long> r = client.recvAsync(small, 33);
                    while (!r.isDone() && !second.isDone() && System.nanoTime() < deadline) {
                        a.progress();
                    }
                }
                assertEquals(size, second.getNow(-1L), "the younger send completed");
                assertTrue(!first.isDone(), "the older one is still waiting for its receive");
                // the client keeps progressing: a chatter send may wait for room in its FIFO (UCX 1.20 can finish
                // the sender's side of a rendezvous before the receiver has it, so got may still be running)
                drive(a, chatter);
                assertEquals(size, got.get(10, TimeUnit.SECONDS));
                assertEquals(-1, in.mismatch(younger));
                CompletableFuture<Long> gotOlder = server.recvAsync(in, 31);
                assertEquals(size, drive(a, first));
                assertEquals(size, gotOlder.get(10, TimeUnit.SECONDS));
                assertEquals(-1, in.mismatch(older));
            }
        });
    }

    /**
     * A rendezvous send of the owner still in flight when the peer aborts fails with a typed error, never hangs.
     * One rendezvous goes through first: UCX learns the peer's endpoint id on the first one (a wireup request and
     * reply), and a request reaching the aborted endpoint would make UCX answer it from a new internal endpoint whose
     * socket to this worker connects only while this caller-mode worker progresses; UCX 1.13 built with assertions
     * (Debian's) aborts the process when that reply is still queued as this worker goes away (openucx 9ccaf31bb6,
     * fixed in 1.14).
     */
    @Test
    void aPolledSendInFlightFailsTypedWhenThePeerAborts() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment big = arena.allocate(4 << 20);
                CompletableFuture<Long> first = server.recvAsync(big, 76);
                assertEquals(4 << 20, drive(a, client.sendAsync(big, 76)));
                assertEquals(4 << 20, first.get(10, TimeUnit.SECONDS));
                CompletableFuture<Long> f = client.sendAsync(big, 77); // nobody receives it
                assertTrue(!f.isDone(), "a 4 MiB send waits for its receive");
                server.abort();
                ExecutionException e = assertThrows(ExecutionException.class, () -> drive(a, f));
                assertInstanceOf(UcxException.class, e.getCause(), String.valueOf(e.getCause()));
                assertTrue(e.getCause().getMessage().contains("UCS_ERR_"), e.getCause().getMessage());
            }
        });
    }

    /**
     * Asynchronous receives of one endpoint, tag and mask wait in UCX without a callback, on a ring that whoever
     * drives the worker tests: a window of them, eager and rendezvous mixed, completes with every message's bytes
     * in matching order, and a dependent of one runs after UCX's progress call, where a blocking call is allowed
     * (a receive completed by its callback runs it inside the call, where one is refused:
     * {@code LifecycleGuardsTest.blockingInsideUcxProgressIsRefusedNotReentered}).
     */
    @Test
    void asyncReceivesOfOneTagAreTestedOnTheOwnerAndTheirDependentsMayBlock() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            int n = 100; // more than the ring's first 64 slots
            try (Arena arena = Arena.ofShared()) {
                long[] sizes = new long[n];
                long total = 0;
                for (int i = 0; i < n; i++) {
                    sizes[i] = SIZES[i % SIZES.length];
                    total += sizes[i];
                }
                MemorySegment in = arena.allocate(total);
                List<CompletableFuture<Long>> recvs = new ArrayList<>();
                long at = 0;
                for (int i = 0; i < n; i++) {
                    recvs.add(client.recvAsync(in.asSlice(at, sizes[i]), 43));
                    at += sizes[i];
                }
                MemorySegment other = arena.allocate(8);
                // a plain future's dependent runs where the receive completes (a ucx4j future's own run on its
                // executor): on the owner's thread, outside UCX, so it may block, driving the worker nested in
                // the test of the ring (the rest of the messages complete there) until the last message comes
                CompletableFuture<Long> blockedInside = blockingReceiveAfter(recvs.get(3), client, other, 44);
                CompletableFuture<Void> sent = CompletableFuture.runAsync(() -> {
                    for (int i = 0; i < n; i++) {
                        server.send(Data.pattern(arena, sizes[i], i), 43, T);
                    }
                    server.send(Data.pattern(arena, 8, 99), 44, T);
                });
                for (int i = 0; i < n; i++) {
                    assertEquals(sizes[i], drive(a, recvs.get(i)), "receive " + i);
                }
                assertEquals(8, drive(a, blockedInside));
                Data.verify(other, 8, 99);
                sent.get(10, TimeUnit.SECONDS);
                at = 0;
                for (int i = 0; i < n; i++) {
                    Data.verify(in.asSlice(at, sizes[i]), sizes[i], i);
                    at += sizes[i];
                }
            }
        });
    }

    /**
     * A blocking receive of {@code tag} into {@code into}, run as a plain future's dependent of {@code first}: where
     * {@code first} completes (a ucx4j future's own dependents run on its executor instead).
     */
    private static CompletableFuture<Long> blockingReceiveAfter(CompletableFuture<Long> first, Endpoint ep,
            MemorySegment into, int tag) {
        return CompletableFuture.allOf(first).thenApply(v -> {
            try {
                return ep.recv(into, tag, T);
            } catch (Exception e) {
                throw new java.util.concurrent.CompletionException(e);
            }
        });
    }

    /**
     * Asynchronous stream receives of one endpoint go the same way (UCX completes them in posting order): a window of
     * exact receives of mixed sizes gets the stream's bytes in order, and a plain future's dependent of one may block.
     */
    @Test
    void asyncStreamReceivesAreTestedOnTheOwnerAndTheirDependentsMayBlock() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            int n = 90;
            try (Arena arena = Arena.ofShared()) {
                long[] sizes = new long[n];
                long total = 0;
                for (int i = 0; i < n; i++) {
                    sizes[i] = 1 + SIZES[i % SIZES.length]; // exact receives of 1 B up to 1 MiB + 1
                    total += sizes[i];
                }
                MemorySegment in = arena.allocate(total);
                List<CompletableFuture<Long>> recvs = new ArrayList<>();
                long at = 0;
                for (int i = 0; i < n; i++) {
                    recvs.add(client.streamRecvAsync(in.asSlice(at, sizes[i])));
                    at += sizes[i];
                }
                MemorySegment other = arena.allocate(8);
                CompletableFuture<Long> blockedInside = blockingReceiveAfter(recvs.get(5), client, other, 47);
                MemorySegment out = Data.pattern(arena, total, 12);
                CompletableFuture<Void> sent = CompletableFuture.runAsync(() -> {
                    server.streamSend(out);
                    server.send(Data.pattern(arena, 8, 13), 47, T);
                });
                for (int i = 0; i < n; i++) {
                    assertEquals(sizes[i], drive(a, recvs.get(i)), "receive " + i);
                }
                assertEquals(8, drive(a, blockedInside));
                Data.verify(other, 8, 13);
                sent.get(10, TimeUnit.SECONDS);
                assertEquals(-1, in.mismatch(out), "the stream's bytes, in order");
            }
        });
    }

    /**
     * An asynchronous exact stream receive on the ring of polled receives that its peer's goodbye cuts short gives
     * its bytes back: a receive made as soon as the endpoint's close ended it reads them. (Since a review the
     * close also tests the ring inside its own call, so it never counts on a later test.)
     */
    @Test
    void aPolledStreamReceiveCutShortByAGoodbyeGivesItsBytesBack() throws Exception {
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment into = arena.allocate(100);
                CompletableFuture<Long> exact = client.streamRecvAsync(into);
                // the sender may need this caller-mode side to progress (a connection still being wired up)
                drive(a, server.streamSendAsync(Data.pattern(arena, 50, 14)));
                // the peer's close waits for this caller-mode side's answer to its goodbye: driven here
                CompletableFuture<Void> closed = CompletableFuture.runAsync(server::close);
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (!exact.isDone() && !client.isClosed()) {
                    a.progress();
                    assertTrue(System.nanoTime() < deadline, "the goodbye ended the endpoint");
                }
                MemorySegment rest = arena.allocate(100);
                assertEquals(50, client.streamRecvSome(rest, T));
                Data.verify(rest.asSlice(0, 50), 50, 14);
                ExecutionException e = assertThrows(ExecutionException.class, () -> drive(a, exact));
                assertInstanceOf(ConnectionResetException.class, e.getCause());
                drive(a, closed);
            }
        });
    }

    /**
     * A send larger than UCX's short protocol that UCX sends eagerly (4 KiB: a copy into the peer's shared-memory
     * FIFO, or a socket write) is made inside the call and finished there: its future is already done, and it costs
     * no operation object, so a loop of them allocates next to nothing (an operation per send would be ~200 bytes).
     */
    @Test
    void eagerSendsAboveTheShortProtocolFinishInsideTheCall() throws Exception {
        withCallerClient((a, client, server) -> {
            int n = 5000;
            CompletableFuture<Long> served = CompletableFuture.supplyAsync(() -> {
                try (Arena arena = Arena.ofConfined()) {
                    MemorySegment in = arena.allocate(4096);
                    for (int i = 0; i < n; i++) {
                        assertEquals(4096, server.recv(in, 21, T));
                        assertEquals(i, in.get(java.lang.foreign.ValueLayout.JAVA_INT, 0), "message " + i);
                        assertEquals((byte) 0x5a, in.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 4095));
                        server.send(in.asSlice(0, 4), 22, T);
                    }
                    return (long) n;
                }
            }, java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
            var threads = (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
            try (Arena arena = Arena.ofShared()) {
                MemorySegment out = arena.allocate(4096).fill((byte) 0x5a), ack = arena.allocate(4);
                long perMessage = Long.MAX_VALUE;
                int sent = 0;
                for (int pass = 0; pass < 10 && sent < n; pass++) { // the first passes run before the JIT is done
                    long before = threads.getCurrentThreadAllocatedBytes();
                    int k = 0;
                    for (; k < 500 && sent < n; k++, sent++) {
                        out.set(java.lang.foreign.ValueLayout.JAVA_INT, 0, sent);
                        CompletableFuture<Long> f = client.sendAsync(out, 21);
                        assertTrue(f.isDone(), "an eager send is finished inside the call");
                        assertEquals(4, client.recv(ack, 22, T)); // the peer has it: the FIFO never fills up
                    }
                    perMessage = (threads.getCurrentThreadAllocatedBytes() - before) / k;
                }
                assertEquals(n, served.get(10, TimeUnit.SECONDS));
                assertTrue(perMessage <= 32, perMessage + " bytes allocated per eager async send + blocking receive");
            }
        });
    }

    /** One message's step: the {@code i}th send or receive. */
    interface Step {
        void run(int i) throws Exception;
    }

    /**
     * Bytes the calling thread (the worker's owner) allocates per message while {@code receive} takes {@code n}
     * messages that {@code send} sends from a virtual thread: in the last of up to 10 passes of 300 (the first run
     * before the JIT is done). Every 16 messages the receiver acknowledges, so its pace sets the sender's.
     */
    static long allocatedPerMessage(Endpoint client, Endpoint server, int n, Step send, Step receive)
            throws Exception {
        CompletableFuture<Long> sent = CompletableFuture.supplyAsync(() -> {
            byte[] ack = new byte[1];
            try {
                for (int i = 0; i < n; i++) {
                    send.run(i);
                    if (i % 16 == 15) {
                        server.recv(ack, 23, T);
                    }
                }
            } catch (Exception e) {
                throw new java.util.concurrent.CompletionException(e);
            }
            return (long) n;
        }, java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
        var threads = (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
        try (Arena arena = Arena.ofShared()) {
            MemorySegment ack = arena.allocate(1);
            long perMessage = Long.MAX_VALUE;
            int got = 0;
            for (int pass = 0; pass < 10 && got < n; pass++) {
                long before = threads.getCurrentThreadAllocatedBytes();
                int k = 0;
                for (; k < 300 && got < n; k++, got++) {
                    receive.run(got);
                    if (got % 16 == 15) {
                        client.send(ack, 23, T);
                    }
                }
                perMessage = (threads.getCurrentThreadAllocatedBytes() - before) / k;
            }
            assertEquals(n, sent.get(10, TimeUnit.SECONDS));
            return perMessage;
        }
    }

    /**
     * A rendezvous active message costs its receiving worker's thread only the message the API hands back (the
     * message, its payload's segment and the {@link AmMessage}): the pull that fetches its payload reuses an
     * operation object (one per pull would be ~200 bytes more), and the payload lands intact.
     */
    @Test
    void rendezvousActiveMessagesAllocateOnlyTheMessage() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            int size = 128 * 1024;
            try (Arena arena = Arena.ofShared()) {
                MemorySegment out = arena.allocate(size).fill((byte) 0x3c), empty = arena.allocate(0);
                long perMessage = allocatedPerMessage(client, server, 3000, i -> {
                    out.set(java.lang.foreign.ValueLayout.JAVA_INT, 0, i);
                    server.amSend(empty, out);
                }, got -> {
                    try (AmMessage m = client.amRecv(T)) {
                        MemorySegment p = m.payload();
                        assertEquals(size, p.byteSize());
                        assertEquals(got, p.get(java.lang.foreign.ValueLayout.JAVA_INT, 0), () -> "message " + got);
                        assertEquals((byte) 0x3c, p.get(java.lang.foreign.ValueLayout.JAVA_BYTE, size - 1));
                    }
                });
                assertTrue(perMessage <= 200, perMessage + " bytes allocated per rendezvous active message received");
            }
        });
    }

    /**
     * An object that arrives whole is copied from UCX's buffer straight into the array {@code recvObject} hands
     * back, and the inbox keeps that array itself: no receive block, no second copy, no entry, nothing allocated
     * beyond the array (an object of 64 B cost 424 bytes until the twenty-ninth session, 120 until the thirtieth),
     * with every byte intact.
     */
    @Test
    void eagerObjectsAllocateOnlyTheArray() throws Exception {
        withCallerClient((a, client, server) -> {
            int size = 64;
            byte[] out = new byte[size];
            java.util.Arrays.fill(out, (byte) 0x3c);
            long perMessage = allocatedPerMessage(client, server, 3000, i -> {
                out[0] = (byte) i;
                out[size - 1] = (byte) (i >> 8);
                server.sendObject(out);
            }, got -> {
                byte[] o = client.recvObject(T);
                assertEquals(size, o.length);
                if (o[0] != (byte) got || o[size - 1] != (byte) (got >> 8) || o[size / 2] != 0x3c) {
                    fail("object " + got + " arrived as " + java.util.Arrays.toString(o));
                }
            });
            // the array itself (16 B of header and 64 B): no inbox entry, no receive block, no copy
            assertTrue(perMessage <= 16 + size + 8, perMessage + " bytes allocated per 64 B object received");
        });
    }

    /**
     * A send made inside the call is a critical downcall (no thread-state transition) only where UCX cannot call
     * back into Java during it: on shared memory, up to 64 KiB; never on an endpoint with a TCP lane, where a socket
     * error inside the send runs UCX's error handling in that call, the endpoint's error callback and its pending
     * requests' callbacks included, and an upcall inside a critical call aborts the JVM. Either way the messages
     * arrive intact.
     */
    @ParameterizedTest
    @ValueSource(strings = {"default", "tcp"})
    void sendsOnEndpointsWithASocketLaneAreNeverCriticalDowncalls(String transport) throws Exception {
        UcxOptions options = transport.equals("tcp") ? UcxOptions.defaults().with("TLS", "tcp")
                : UcxOptions.defaults();
        withCallerClient(options, (a, client, server) -> {
            boolean socket = client.transports().stream().anyMatch(t -> t.startsWith("tcp/"));
            if (transport.equals("tcp")) {
                assertTrue(socket, client.transports().toString());
            }
            try (Arena arena = Arena.ofShared()) {
                for (int size : new int[] {8, 4096, 32768}) {
                    MemorySegment in = arena.allocate(size);
                    CompletableFuture<Long> received = server.recvAsync(in, 23);
                    TestHooks.takeSocketKeptSendRegular();
                    client.send(Data.pattern(arena, size, 23), 23, T); // the owner thread: made inside the call
                    assertEquals(socket, TestHooks.takeSocketKeptSendRegular(),
                            size + " B send on " + client.transports() + " kept off a critical downcall");
                    assertEquals(size, received.get(10, TimeUnit.SECONDS));
                    Data.verify(in, size, 23);
                }
            }
        });
    }

    @Test
    void activeMessagesBothWaysOnTheOwnerThread() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                byte[] header = {1, 2, 3};
                long receivedBefore = server.stats().messagesReceived();
                for (long size : SIZES) {
                    // caller -> server: short ones leave inside the call (heap payloads staged), long ones are ops
                    MemorySegment heap = MemorySegment.ofArray(new byte[(int) size]);
                    MemorySegment.copy(Data.pattern(arena, size, 11), 0, heap, 0, size);
                    client.amSend(MemorySegment.ofArray(header), heap);
                    client.amSend(MemorySegment.ofArray(header), Data.pattern(arena, size, 12));
                    for (int seed : new int[] {11, 12}) {
                        try (AmMessage m = server.amRecv(T)) {
                            assertEquals(3, m.headerBytes().length);
                            assertEquals(3, m.headerBytes()[2]);
                            Data.verify(m.payload(), size, seed);
                        }
                    }
                    // server -> caller: taken straight from the inbox while the caller progresses
                    // (async: a rendezvous send completes only once the caller, progressing in amRecv, pulls it)
                    CompletableFuture<Long> sent = server.amSendAsync(MemorySegment.ofArray(new byte[] {9}),
                            Data.pattern(arena, size, 13));
                    try (AmMessage m = client.amRecv(T)) {
                        assertEquals(9, m.headerBytes()[0]);
                        Data.verify(m.payload(), size, 13);
                    }
                    drive(a, sent);
                }
                assertEquals(2L * SIZES.length, server.stats().messagesReceived() - receivedBefore);
                assertThrows(UcxTimeoutException.class, () -> client.amRecv(Duration.ofMillis(100)));
                // a message that arrives after a timed-out receive is still delivered to the next one
                server.amSend(MemorySegment.ofArray(new byte[0]), Data.pattern(arena, 8, 14));
                try (AmMessage m = client.amRecv(T)) {
                    Data.verify(m.payload(), 8, 14);
                }
            }
        });
    }

    @Test
    void streamsBothWaysOnTheOwnerThread() throws Exception {
        withCallerClient(Data.rendezvous(), (a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : SIZES) {
                    if (size == 0) {
                        continue;
                    }
                    client.streamSend(Data.pattern(arena, size, 21));
                    MemorySegment in = arena.allocate(size);
                    assertEquals(size, server.streamRecv(in, T));
                    Data.verify(in, size, 21);
                    // the caller's receive is posted before the bytes come, then polled
                    CompletableFuture<Void> later = CompletableFuture.runAsync(() -> {
                        sleep(20);
                        server.streamSend(Data.pattern(arena, size, 22));
                    });
                    MemorySegment back = arena.allocate(size);
                    assertEquals(size, client.streamRecv(back, T));
                    Data.verify(back, size, 22);
                    later.get(10, TimeUnit.SECONDS);
                }
            }
        });
    }

    /**
     * Receive blocks of messages closed on the worker's own thread stay with the worker, and the next messages land
     * in them (their bytes intact); a message closed on another thread gives its block to the pool; closing the
     * {@code Ucx} gives back the blocks the worker kept.
     */
    @Test
    void blocksOfMessagesClosedOnTheOwnerThreadAreReusedAndGivenBackAtClose() throws Exception {
        try (PooledAllocator pool = new PooledAllocator(64L << 20); Arena arena = Arena.ofShared()) {
            Ucx a = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER)
                    .withAllocator(MemoryType.HOST, pool));
            try (a) {
                CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                try (Listener l = a.listen("127.0.0.1", 0, accepted::complete);
                        Endpoint client = a.connect("127.0.0.1", l.port(), T)) {
                    drive(a, accepted);
                    Endpoint server = accepted.get();
                    long size = 100; // 128-byte blocks
                    long before = pool.cachedBytes();
                    List<AmMessage> first = receive(client, server, arena, size, 0, 3);
                    java.util.Set<Long> blocks = new java.util.HashSet<>();
                    first.forEach(m -> blocks.add(m.payload().address()));
                    first.forEach(AmMessage::close); // on the owner thread
                    assertEquals(before, pool.cachedBytes(), "the worker kept the blocks, not the pool");
                    List<AmMessage> second = receive(client, server, arena, size, 3, 3);
                    java.util.Set<Long> again = new java.util.HashSet<>();
                    second.forEach(m -> again.add(m.payload().address()));
                    assertEquals(blocks, again, "the next messages landed in the kept blocks");
                    Thread.ofVirtual().start(() -> second.forEach(AmMessage::close)).join();
                    assertEquals(before + 3 * 128, pool.cachedBytes(), "closed elsewhere: back to the pool");
                    receive(client, server, arena, size, 6, 2).forEach(AmMessage::close);
                    assertEquals(before + 128, pool.cachedBytes(), "two taken from the pool, kept by the worker");
                }
            }
            assertEquals(3 * 128, pool.cachedBytes(), "the worker's blocks went back at close");
        }
    }

    /** Sends {@code n} messages, receives them (bytes checked) and returns them open. */
    private static List<AmMessage> receive(Endpoint client, Endpoint server, Arena arena, long size, int seed,
            int n) {
        List<AmMessage> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            client.amSend(MemorySegment.ofArray(new byte[] {(byte) (seed + i)}), Data.pattern(arena, size, seed + i));
        }
        for (int i = 0; i < n; i++) {
            AmMessage m = server.amRecv(T);
            assertArrayEquals(new byte[] {(byte) (seed + i)}, m.headerBytes());
            Data.verify(m.payload(), size, seed + i);
            out.add(m);
        }
        return out;
    }

    /** Both ends on the caller's own worker (UCX's loopback): every API, eager and rendezvous, with timeouts. */
    @Test
    void loopbackPairOnTheCallersOwnWorker() throws Exception {
        try (Ucx a = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER))) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = a.listen("127.0.0.1", 0, accepted::complete);
                    Endpoint client = a.connect("127.0.0.1", l.port(), T);
                    Arena arena = Arena.ofShared()) {
                drive(a, accepted);
                Endpoint server = accepted.get();
                for (long size : SIZES) {
                    MemorySegment in = arena.allocate(Math.max(1, size)).asSlice(0, size);
                    // one thread is both ends: a rendezvous send completes only once its receive is posted
                    CompletableFuture<Long> sent = client.sendAsync(Data.pattern(arena, size, 31), 7);
                    assertEquals(size, server.recv(in, 7, T));
                    Data.verify(in, size, 31);
                    drive(a, sent);
                    sent = client.amSendAsync(MemorySegment.ofArray(new byte[] {1}), Data.pattern(arena, size, 32));
                    try (AmMessage m = server.amRecv(T)) {
                        assertEquals(size, m.payload().byteSize());
                        Data.verify(m.payload(), size, 32);
                    }
                    drive(a, sent);
                    if (size > 0) {
                        sent = server.streamSendAsync(Data.pattern(arena, size, 33));
                        assertEquals(size, client.streamRecv(in, T));
                        Data.verify(in, size, 33);
                        drive(a, sent);
                    }
                }
                // a stream receive waiting on one end fails, typed, when the other end closes
                CompletableFuture<Long> pending = server.streamRecvAsync(arena.allocate(8));
                client.close();
                ExecutionException e = assertThrows(ExecutionException.class, () -> drive(a, pending));
                assertInstanceOf(ConnectionResetException.class, e.getCause());
                assertFalse(server.isAlive());
            }
        }
    }

    /** The owner thread blocked in a receive (tag and active message) answers an interrupt, and keeps its flag. */
    @Test
    void blockedOwnerAnswersInterrupts() throws Exception {
        withCallerClient((a, client, server) -> {
            Thread owner = Thread.currentThread();
            for (int round = 0; round < 2; round++) {
                CompletableFuture<Void> interrupter = CompletableFuture.runAsync(() -> {
                    sleep(100);
                    owner.interrupt();
                });
                // a long timeout, not none: without the interrupt the receive fails by timing out instead
                Duration wait = Duration.ofSeconds(20);
                CanceledException e = round == 0
                        ? assertThrows(CanceledException.class, () -> client.recv(new byte[8], 9, wait))
                        : assertThrows(CanceledException.class, () -> client.amRecv(wait));
                assertTrue(e.getMessage().contains("UCS_ERR_CANCELED"), e.getMessage());
                assertTrue(Thread.interrupted(), "the interrupt flag stays set");
                interrupter.get(10, TimeUnit.SECONDS);
            }
            // the tag receive was withdrawn: the next message with that tag goes to the next receive
            server.send(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, 9);
            byte[] got = new byte[8];
            assertEquals(8, client.recv(got, 9, T));
            assertEquals(8, got[7]);
        });
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** A blocking call made on a virtual thread of its own: the thread, and how the call ended (null: normally). */
    record Call(Thread thread, CompletableFuture<Throwable> outcome) {}

    static Call onAnotherThread(Runnable blockingCall) {
        CompletableFuture<Throwable> outcome = new CompletableFuture<>();
        Thread t = Thread.ofVirtual().start(() -> {
            try {
                blockingCall.run();
                outcome.complete(null);
            } catch (Throwable e) {
                outcome.complete(e);
            }
        });
        return new Call(t, outcome);
    }

    /**
     * Another thread's timed call on a caller-mode worker whose owner is not progressing: the operation never
     * reaches UCX, and the wait still ends at its deadline (not when the owner next turns the crank); the worker
     * then goes on working for its owner.
     */
    @Test
    void timedWaitOfAnotherThreadEndsWhileTheOwnerIsIdle() throws Exception {
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment buf = arena.allocate(8);
                Call call = onAnotherThread(() -> client.recv(buf, 5, Duration.ofMillis(300)));
                CompletableFuture<Throwable> outcome = call.outcome();
                Thread t = call.thread();
                // the owner (this thread) does not progress meanwhile
                Throwable e = outcome.get(5, TimeUnit.SECONDS);
                assertInstanceOf(UcxTimeoutException.class, e, String.valueOf(e));
                assertTrue(e.getMessage().contains("UCS_ERR_TIMED_OUT"), e.getMessage());
                t.join();
                // the withdrawn receive left nothing behind: the owner's next receive gets the next message (sent
                // async: over TCP the send may need the caller-mode side to progress, which its receive does)
                CompletableFuture<Long> sent = server.sendAsync(new byte[] {42, 0, 0, 0, 0, 0, 0, 0}, 5);
                assertEquals(8, client.recv(buf, 5, T));
                assertEquals(42, buf.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0));
                assertEquals(8, sent.get(10, TimeUnit.SECONDS));
            }
        });
    }

    /**
     * Another thread's close ends an untimed blocking call of a third thread whose operation the idle owner never
     * took (it waits in the worker's queue): UCX never saw it, so it fails at once as closed, instead of waiting for
     * an owner that may never call again.
     */
    @Test
    void anotherThreadsCloseEndsAnUntimedCallWaitingInTheQueueOfAnIdleOwner() throws Exception {
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment buf = arena.allocate(8);
                // no timeout; the owner (this thread) does not progress
                Call call = onAnotherThread(() -> client.recv(buf, 6));
                CompletableFuture<Throwable> outcome = call.outcome();
                Thread t = call.thread();
                // the receive waits in the queue (the thread parks) before the close: else it would be refused
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (t.getState() != Thread.State.WAITING && t.getState() != Thread.State.TIMED_WAITING) {
                    assertTrue(System.nanoTime() < deadline && !outcome.isDone(), "the receive never waited");
                    Thread.sleep(1);
                }
                Thread.ofVirtual().start(a::close); // another thread's close: only the owner could release
                Throwable e = outcome.get(20, TimeUnit.SECONDS);
                assertInstanceOf(UcxException.class, e, String.valueOf(e));
                assertTrue(e.getMessage().contains("closed"), e.getMessage());
                t.join();
            }
        });
    }

    @Test
    void anOwnerWaitingLongSpinsOnceThenNapsUntilItsMessageComes() throws Exception {
        // the backoff spins (~1 ms of progress calls) only after work; an owner that restarted the spin after
        // every 10 ms nap kept a few % of a core busy while it waited, and slowed whatever else ran on the machine
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment buf = arena.allocate(8);
                client.recv(buf, 6, Duration.ofMillis(20)); // nothing comes; warms the wait path up
            } catch (UcxTimeoutException expected) {
                // as planned
            }
            try (Arena arena = Arena.ofShared()) {
                MemorySegment buf = arena.allocate(8);
                // the owner's CPU from 0.5 s to 2.5 s into a 3 s wait, read by another thread: past the first spin
                java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
                long owner = Thread.currentThread().threadId();
                CompletableFuture<Long> cpuNanos = CompletableFuture.supplyAsync(() -> {
                    try {
                        Thread.sleep(500);
                        long cpu0 = mx.getThreadCpuTime(owner);
                        Thread.sleep(2000);
                        return mx.getThreadCpuTime(owner) - cpu0;
                    } catch (InterruptedException ie) {
                        throw new IllegalStateException(ie);
                    }
                });
                long t0 = System.nanoTime();
                UcxTimeoutException e = assertThrows(UcxTimeoutException.class,
                        () -> client.recv(buf, 6, Duration.ofSeconds(3)));
                long waitedMs = (System.nanoTime() - t0) / 1_000_000;
                assertTrue(e.getMessage().contains("UCS_ERR_TIMED_OUT"), e.getMessage());
                long cpuMs = cpuNanos.get(10, TimeUnit.SECONDS) / 1_000_000;
                // ~25-30 ms here (200 naps' wake-ups, interpreted), ~60 ms when every nap restarted the spin
                assertTrue(cpuMs < 45, "the idle owner used " + cpuMs + " ms of CPU in 2 s");
                // naps are short, and the deadline is checked after each: the wait ends on time
                assertTrue(waitedMs < 3_500, "a 3 s receive timed out after " + waitedMs + " ms");
                // a message that comes while the owner naps is received
                CompletableFuture<Long> sent = CompletableFuture.supplyAsync(() -> 0,
                        CompletableFuture.delayedExecutor(300, TimeUnit.MILLISECONDS))
                        .thenCompose(x -> server.sendAsync(new byte[] {7, 0, 0, 0, 0, 0, 0, 1}, 6));
                assertEquals(8, client.recv(buf, 6, T));
                assertEquals(7, buf.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0));
                assertEquals(1, buf.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 7));
                assertEquals(8, sent.get(10, TimeUnit.SECONDS));
            }
        });
    }

    /** Closes {@code ucx} on another thread 200 ms after {@code after} opens; completes with how long close took. */
    private static CompletableFuture<Long> closeLater(Ucx ucx, java.util.concurrent.CountDownLatch after) {
        CompletableFuture<Long> closed = new CompletableFuture<>();
        Thread.ofVirtual().start(() -> {
            try {
                assertTrue(after.await(10, TimeUnit.SECONDS));
                Thread.sleep(200);
                long t0 = System.nanoTime();
                ucx.close();
                closed.complete(System.nanoTime() - t0);
            } catch (Throwable e) {
                closed.completeExceptionally(e);
            }
        });
        return closed;
    }

    @Test
    void anotherThreadsCloseIsFinishedByTheOwnerWaitingOnAFuture() throws Exception {
        // only the owner may touch a caller-mode worker, so a close from another thread cannot release it; the
        // owner, waiting on a future nobody else could complete, releases it and fails the future
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                CompletableFuture<Long> pending = client.recvAsync(arena.allocate(8), 5);
                CompletableFuture<Long> closed = closeLater(a, new java.util.concurrent.CountDownLatch(0));
                ExecutionException e = assertThrows(ExecutionException.class, pending::get); // no timeout: must end
                assertInstanceOf(UcxException.class, e.getCause(), String.valueOf(e.getCause()));
                long tookNanos = closed.get(30, TimeUnit.SECONDS);
                assertTrue(tookNanos < TimeUnit.SECONDS.toNanos(9), "the close waited out its 10 s bound ("
                        + TimeUnit.NANOSECONDS.toMillis(tookNanos) + " ms) instead of being finished by the owner");
                assertTrue(a.isClosed());
                assertThrows(EndpointClosedException.class, () -> a.progress());
                a.close(); // idempotent
            }
        });
    }

    /**
     * Canceling a stream receive from another thread ends its future only once UCX has let go of the buffer (its
     * endpoint aborted on the owner thread), never before: a caller that frees the buffer when the future is done
     * must not race UCX writing into it.
     */
    @Test
    void aCanceledStreamReceiveEndsOnlyOnceUcxLetGoOfTheBuffer() throws Exception {
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                CompletableFuture<Long> f = client.streamRecvAsync(arena.allocate(8));
                CompletableFuture<Boolean> canceled = CompletableFuture.supplyAsync(() -> f.cancel(true));
                canceled.get(10, TimeUnit.SECONDS); // the owner (this thread) did not progress meanwhile
                assertFalse(f.isDone(), "done before the owner made UCX let go of the buffer");
                for (int i = 0; i < 1000 && !f.isDone(); i++) {
                    a.progress();
                    Thread.sleep(1);
                }
                assertTrue(f.isDone());
                assertTrue(f.isCancelled() || f.isCompletedExceptionally());
            }
        });
    }

    /** A worker-level receive's future, waited for on the owner thread, drives the worker until its message came. */
    @Test
    void aWorkerLevelReceiveFutureWaitedForOnTheOwnerDrivesTheWorker() throws Exception {
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment in = arena.allocate(64);
                CompletableFuture<TagMessage> r = a.recvTaggedAsync(in, 0x70, -1);
                CompletableFuture<Long> sent = server.sendTaggedAsync(Data.pattern(arena, 64, 7), 0x70);
                TagMessage m = r.get(10, TimeUnit.SECONDS); // nobody but this thread progresses the worker
                assertEquals(64, m.length());
                Data.verify(in, 64, 7);
                assertEquals(64L, sent.get(10, TimeUnit.SECONDS));
            }
        });
    }

    @Test
    void anotherThreadsCloseEndsABlockingCallInsideAHandlerAndTheWorkerGoesAfterIt() throws Exception {
        // a handler runs inside the owner's progress; a blocking call it makes when another thread closes the worker
        // fails, and the worker is released only once the owner's call that ran the handler returns (released
        // under it, the progress call the handler returns into would use a destroyed worker)
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                CompletableFuture<Throwable> inHandler = new CompletableFuture<>();
                java.util.concurrent.CountDownLatch handlerWaits = new java.util.concurrent.CountDownLatch(1);
                client.onActiveMessage(m -> {
                    m.close();
                    handlerWaits.countDown();
                    try {
                        client.recv(arena.allocate(8), 9); // nothing will come: ends only by the close
                        inHandler.complete(null);
                    } catch (Throwable e) {
                        inHandler.complete(e);
                    }
                });
                CompletableFuture<Long> pending = client.recvAsync(arena.allocate(8), 5);
                // not a blocking send: over TCP, UCX 1.20 may finish it only once the caller-mode side progresses
                CompletableFuture<Long> sent = server.amSendAsync(MemorySegment.ofArray(new byte[0]),
                        MemorySegment.ofArray(new byte[] {1}));
                CompletableFuture<Long> closed = closeLater(a, handlerWaits);
                assertThrows(ExecutionException.class, pending::get); // drives; runs the handler; ends by the close
                assertInstanceOf(UcxException.class, inHandler.get(10, TimeUnit.SECONDS));
                assertEquals(1L, sent.get(10, TimeUnit.SECONDS)); // it arrived: the handler ran
                assertTrue(closed.get(30, TimeUnit.SECONDS) < TimeUnit.SECONDS.toNanos(9), "the close waited out "
                        + "its bound instead of being finished by the owner");
                assertTrue(a.isClosed());
                assertThrows(EndpointClosedException.class, () -> a.progress());
            }
        });
    }

    /**
     * A send made inside the call that UCX takes but does not finish there (UCX 1.20's stream sends with protocol
     * v2 ignore FORCE_IMM_CMPL; here every API is made to by clearing the flag) is in flight exactly once: tag,
     * stream and active messages, eager and rendezvous, async and blocking, each arrives once, intact, in order.
     * (Before, such a send was taken for "not sent" and sent again: the stream then carried its bytes twice.)
     */
    @Test
    void aSendUcxTakesButDoesNotFinishInsideTheCallGoesOutOnce() throws Exception {
        TestHooks.forceImmediateSends(false);
        try {
            withCallerClient((a, client, server) -> {
                try (Arena arena = Arena.ofShared()) {
                    MemorySegment none = MemorySegment.ofArray(new byte[0]);
                    for (long size : new long[] {8, 4096, 64 * 1024, 1 << 20}) {
                        for (boolean async : new boolean[] {true, false}) {
                            int seed = (int) size + (async ? 1 : 2);
                            MemorySegment in = arena.allocate(size);
                            CompletableFuture<Long> r = server.recvAsync(in, 5);
                            MemorySegment out = Data.pattern(arena, size, seed);
                            if (async) {
                                assertEquals(size, drive(a, client.sendAsync(out, 5)));
                            } else {
                                client.send(out, 5);
                            }
                            assertEquals(size, drive(a, r));
                            Data.verify(in, size, seed);

                            MemorySegment streamIn = arena.allocate(size);
                            CompletableFuture<Long> sr = server.streamRecvAsync(streamIn);
                            if (async) {
                                assertEquals(size, drive(a, client.streamSendAsync(out)));
                            } else {
                                client.streamSend(out);
                            }
                            assertEquals(size, drive(a, sr));
                            Data.verify(streamIn, size, seed);

                            CompletableFuture<AmMessage> ar = server.amRecvAsync();
                            if (async) {
                                assertEquals(size, drive(a, client.amSendAsync(none, out)));
                            } else {
                                client.amSend(none, out);
                            }
                            try (AmMessage m = drive(a, ar)) {
                                Data.verify(m.payload(), size, seed);
                            }
                        }
                    }
                    // nothing went twice: what comes next on each API is the end marker
                    MemorySegment marker = arena.allocate(1).fill((byte) 0x7f);
                    MemorySegment room = arena.allocate(1 << 20);
                    CompletableFuture<Long> r = server.recvAsync(room, 5);
                    client.send(marker, 5);
                    assertEquals(1, drive(a, r), "a tagged message was sent twice");
                    assertEquals(0x7f, room.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0));
                    MemorySegment one = arena.allocate(1);
                    CompletableFuture<Long> sr = server.streamRecvAsync(one);
                    client.streamSend(marker);
                    assertEquals(1, drive(a, sr));
                    assertEquals(0x7f, one.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0), "stream bytes went twice");
                    CompletableFuture<AmMessage> ar = server.amRecvAsync();
                    client.amSend(none, marker);
                    try (AmMessage m = drive(a, ar)) {
                        assertEquals(1, m.payloadLength(), "an active message was sent twice");
                    }
                }
            });
        } finally {
            TestHooks.forceImmediateSends(true);
        }
    }

    /**
     * Puts and gets on the owner thread, made inside the call: into UCX-allocated (shared-memory) regions UCX copies
     * at once; into registered Java memory, which a peer with error handling reaches through active messages, UCX
     * hands back a request that completes later. Both blocking and async, every byte checked, both counted.
     */
    @Test
    void putsAndGetsOnTheOwnerThread() throws Exception {
        try (Ucx b = Ucx.open(); Ucx a = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER));
                Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port(), T);
                accepted.get(10, TimeUnit.SECONDS);
                long regionSize = 4 << 20;
                for (boolean ucxAllocated : new boolean[] {true, false}) {
                    try (MemoryRegion region = ucxAllocated ? b.allocateMemory(regionSize)
                            : b.registerMemory(arena.allocate(regionSize))) {
                        RemoteKey key = client.unpackRemoteKey(region.packRemoteKey());
                        MemorySegment target = region.segment();
                        long offset = 4096 + 3;
                        for (long size : new long[] {0, 8, 4096, 64 * 1024, 1 << 20}) {
                            for (boolean async : new boolean[] {true, false}) {
                                int seed = (int) size + (async ? 5 : 6);
                                long before = client.stats().bytesReceived();
                                RmaTest.fill(target, offset, size, seed);
                                MemorySegment dst = arena.allocate(Math.max(1, size)).asSlice(0, size);
                                long got = async ? drive(a, client.getAsync(dst, key, offset))
                                        : client.get(dst, key, offset, T);
                                assertEquals(size, got);
                                Data.verify(dst, size, seed);
                                assertEquals(before + size, client.stats().bytesReceived(), "a get is counted");
                                MemorySegment src = Data.pattern(arena, size, seed + 100);
                                if (async) {
                                    assertEquals(size, drive(a, client.putAsync(src, key, offset)));
                                } else {
                                    client.put(src, key, offset, T);
                                }
                                client.flush(T);
                                Data.verify(target.asSlice(offset, size), size, seed + 100);
                            }
                        }
                        key.close();
                    }
                }
            }
        }
    }

    /** In caller mode, waiting on a future on the owner thread drives the worker (nobody else would). */
    @Test
    void aFutureWaitedForOnTheOwnerThreadCompletes() throws Exception {
        withCallerClient((a, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment in = arena.allocate(64);
                CompletableFuture<Long> r = client.recvAsync(in, 30);
                CompletableFuture.runAsync(() -> {
                    sleep(20);
                    server.send(Data.pattern(arena, 64, 9), 30, T);
                });
                assertEquals(64, r.get(10, TimeUnit.SECONDS)); // before: nothing progressed, a TimeoutException
                Data.verify(in, 64, 9);
                CompletableFuture<Long> r2 = client.recvAsync(in, 31);
                server.sendAsync(Data.pattern(arena, 64, 10), 31);
                assertEquals(64, r2.join());
                Data.verify(in, 64, 10);
                // join() does not answer interrupts: with the flag set it still drives the worker to completion
                CompletableFuture<Long> r3 = client.recvAsync(in, 33);
                CompletableFuture.runAsync(() -> {
                    sleep(20);
                    server.send(Data.pattern(arena, 64, 11), 33, T);
                });
                // a watchdog fails the future instead of letting a join that does not drive hang the suite
                CompletableFuture.runAsync(() -> r3.completeExceptionally(new AssertionError("join did not drive "
                        + "the worker")), CompletableFuture.delayedExecutor(10, TimeUnit.SECONDS));
                Thread.currentThread().interrupt();
                try {
                    assertEquals(64, r3.join());
                    assertTrue(Thread.currentThread().isInterrupted(), "the interrupt is kept");
                } finally {
                    Thread.interrupted();
                }
                Data.verify(in, 64, 11);
                // the same for a receiver-allocated active message, frames and an object
                CompletableFuture<AmMessage> am = client.amRecvAsync();
                CompletableFuture<Frames> frames = client.recvFramesAsync();
                CompletableFuture<byte[]> object = client.recvObjectAsync();
                // (sent asynchronously: this thread alone drives the receiving worker, so it must not block on a
                // send whose protocol needs the receiver)
                server.amSendAsync(MemorySegment.ofArray(new byte[] {4}), Data.pattern(arena, 64, 12));
                server.sendFramesAsync(java.util.List.of(Data.pattern(arena, 16, 13)));
                server.sendObjectAsync(new byte[] {1, 2, 3});
                try (AmMessage m = am.get(10, TimeUnit.SECONDS)) {
                    Data.verify(m.payload(), 64, 12);
                }
                try (Frames f = frames.join()) {
                    Data.verify(f.get(0), 16, 13);
                }
                org.junit.jupiter.api.Assertions.assertArrayEquals(new byte[] {1, 2, 3}, object.get());
                // a timed get with nothing coming still ends on time
                assertThrows(java.util.concurrent.TimeoutException.class,
                        () -> client.recvAsync(arena.allocate(8), 32).get(30, TimeUnit.MILLISECONDS));
            }
        });
    }
}
