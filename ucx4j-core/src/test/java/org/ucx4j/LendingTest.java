package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.ucx4j.internal.engine.TestHooks;

/**
 * A thread that blocks on a worker whose progress thread it is not borrows the worker and drives it itself for the
 * length of its wait, then gives it back; the progress thread carries on with everything else.
 */
class LendingTest {
    static final Duration T = Duration.ofSeconds(10);

    interface Body {
        void run(Ucx a, Endpoint client, Endpoint server, Arena arena) throws Exception;
    }

    static void pair(Body body) throws Exception {
        try (Arena arena = Arena.ofShared()) {
            FailureTest.pair((a, b, client, server) -> body.run(a, client, server, arena));
        }
    }

    @Test
    void blockingCallsDriveTheWorkerAndTheProgressThreadTakesItBack() throws Exception {
        pair((a, client, server, arena) -> {
            Thread echo = Thread.ofPlatform().start(() -> { // blocking calls on both sides
                MemorySegment buf = arena.allocate(8);
                for (int i = 0; i < 2000; i++) {
                    server.recv(buf, 1, T);
                    server.send(buf, 2, T);
                }
            });
            MemorySegment out = arena.allocate(8), in = arena.allocate(8);
            for (int i = 0; i < 2000; i++) {
                out.set(ValueLayout.JAVA_LONG, 0, i);
                client.send(out, 1, T);
                assertEquals(8, client.recv(in, 2, T));
                assertEquals(i, in.get(ValueLayout.JAVA_LONG, 0), "pong " + i);
            }
            echo.join(10_000);
            // a receive that must wait borrows the worker (this thread drives it), then gives it back at its timeout
            TestHooks.clearLastBorrower();
            assertThrows(UcxTimeoutException.class, () -> client.recv(in, 9, Duration.ofMillis(50)));
            assertSame(Thread.currentThread(), TestHooks.lastBorrower(), "the waiting thread borrowed the worker");
            // nobody blocks now: what another thread posts is completed by the progress thread
            MemorySegment late = arena.allocate(8);
            CompletableFuture<Long> r = CompletableFuture.supplyAsync(() -> client.recvAsync(late, 3)).get(10,
                    TimeUnit.SECONDS);
            server.sendAsync(out, 3).get(10, TimeUnit.SECONDS);
            assertEquals(8, r.get(10, TimeUnit.SECONDS));
            assertEquals(1999, late.get(ValueLayout.JAVA_LONG, 0));
        });
    }

    @Test
    void manyThreadsBlockOnOneWorkerAndEveryMessageArrives() throws Exception {
        pair((a, client, server, arena) -> {
            int threads = 16, each = 200;
            CompletableFuture<?>[] done = new CompletableFuture<?>[threads];
            for (int t = 0; t < threads; t++) {
                int tag = 100 + t;
                done[t] = CompletableFuture.runAsync(() -> { // virtual threads: one borrows, the others park
                    MemorySegment b = arena.allocate(8);
                    for (int i = 0; i < each; i++) {
                        assertEquals(8, server.recv(b, tag, T));
                        assertEquals((long) tag << 32 | i, b.get(ValueLayout.JAVA_LONG, 0));
                    }
                }, r -> Thread.ofVirtual().start(r));
            }
            CompletableFuture<?>[] sent = new CompletableFuture<?>[threads];
            for (int t = 0; t < threads; t++) {
                int tag = 100 + t;
                sent[t] = CompletableFuture.runAsync(() -> {
                    MemorySegment b = arena.allocate(8);
                    for (int i = 0; i < each; i++) {
                        b.set(ValueLayout.JAVA_LONG, 0, (long) tag << 32 | i);
                        client.send(b, tag, T);
                    }
                }, r -> Thread.ofVirtual().start(r));
            }
            CompletableFuture.allOf(sent).get(30, TimeUnit.SECONDS);
            CompletableFuture.allOf(done).get(30, TimeUnit.SECONDS);
        });
    }

    @Test
    void closingTheWorkerWhileAThreadDrivesItFailsTheWaitAndReturns() throws Exception {
        Ucx a = Ucx.open();
        try (Ucx b = Ucx.open(); Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                accepted.get(10, TimeUnit.SECONDS);
                MemorySegment in = arena.allocate(8);
                CompletableFuture<Long> waiting = CompletableFuture.supplyAsync(() -> client.recv(in, 5),
                        r -> Thread.ofPlatform().start(r)); // no timeout: only the close ends it
                Thread.sleep(200);
                long t0 = System.nanoTime();
                a.close();
                ExecutionException e = assertThrows(ExecutionException.class, () -> waiting.get(5, TimeUnit.SECONDS));
                assertInstanceOf(UcxException.class, e.getCause());
                assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 5000);
            }
        } finally {
            a.close();
        }
    }

    /**
     * A blocking call that borrows the worker acts inside the call, but after everything the same thread queued
     * before it: sends on one tag arrive in the order they were made, and receives on one tag take messages in the
     * order they were posted, mixing asynchronous and blocking calls.
     */
    @Test
    void aBorrowingCallKeepsTheOrderOfTheThreadsEarlierCalls() throws Exception {
        pair((a, client, server, arena) -> {
            int rounds = 400, burst = 8;
            int total = rounds * (burst + 1);
            MemorySegment[] outs = new MemorySegment[total];
            CompletableFuture<?> sender = CompletableFuture.runAsync(() -> {
                java.util.List<CompletableFuture<Long>> pending = new java.util.ArrayList<>();
                for (int i = 0, n = 0; i < rounds; i++) {
                    for (int j = 0; j < burst; j++, n++) {
                        outs[n] = arena.allocateFrom(ValueLayout.JAVA_LONG, n);
                        pending.add(client.sendAsync(outs[n], 4));
                    }
                    outs[n] = arena.allocateFrom(ValueLayout.JAVA_LONG, n);
                    client.send(outs[n], 4, T); // may borrow the worker: must not overtake the burst before it
                    n++;
                }
                pending.forEach(CompletableFuture::join);
            }, r -> Thread.ofPlatform().start(r));
            long expect = 0;
            for (int i = 0; i < rounds; i++) {
                MemorySegment[] ins = new MemorySegment[burst];
                java.util.List<CompletableFuture<Long>> rs = new java.util.ArrayList<>();
                for (int j = 0; j < burst; j++) {
                    ins[j] = arena.allocate(8);
                    rs.add(server.recvAsync(ins[j], 4));
                }
                MemorySegment last = arena.allocate(8);
                assertEquals(8, server.recv(last, 4, T)); // posted after the burst's receives: takes the last
                for (int j = 0; j < burst; j++) {
                    assertEquals(8, rs.get(j).get(10, TimeUnit.SECONDS));
                    assertEquals(expect++, ins[j].get(ValueLayout.JAVA_LONG, 0), "message order, round " + i);
                }
                assertEquals(expect++, last.get(ValueLayout.JAVA_LONG, 0), "message order, round " + i);
            }
            sender.get(30, TimeUnit.SECONDS);
        });
    }

    /**
     * Waiting on an async operation's future ({@code get}, {@code join}) drives the worker the same way: the waiting
     * thread borrows it, and a timed {@code get} still ends on time.
     */
    @Test
    void waitingOnAFutureBorrowsTheWorker() throws Exception {
        pair((a, client, server, arena) -> {
            MemorySegment in = arena.allocate(8);
            CompletableFuture<Long> r = client.recvAsync(in, 5);
            TestHooks.clearLastBorrower();
            long t0 = System.nanoTime();
            assertThrows(java.util.concurrent.TimeoutException.class, () -> r.get(50, TimeUnit.MILLISECONDS));
            long waited = System.nanoTime() - t0;
            assertTrue(waited < TimeUnit.SECONDS.toNanos(5), "the timed get ended: " + waited + " ns");
            assertSame(Thread.currentThread(), TestHooks.lastBorrower(), "the waiting thread borrowed the worker");
            server.send(arena.allocateFrom(ValueLayout.JAVA_LONG, 42L), 5, T);
            assertEquals(8, r.join());
            assertEquals(42L, in.get(ValueLayout.JAVA_LONG, 0));
            // async sends made while nobody drives the worker go out inside the call; their futures are complete
            CompletableFuture<Long> s = client.sendAsync(arena.allocateFrom(ValueLayout.JAVA_LONG, 43L), 6);
            assertEquals(8, server.recv(in, 6, T));
            assertEquals(43L, in.get(ValueLayout.JAVA_LONG, 0));
            assertEquals(8, s.get(10, TimeUnit.SECONDS));
        });
    }

    /**
     * A send too large for UCX's short protocol, made by a thread that borrows the worker for the call, is posted by
     * that thread, not handed to the progress thread through the queue: for each API, most such async sends made
     * right after a blocking call (which leaves the worker given back) are posted by the calling thread (or, where
     * UCX completes them inside the call after all, come back done).
     */
    @Test
    void aSendTooLargeForTheShortProtocolIsPostedByTheBorrowingCaller() throws Exception {
        pair((a, client, server, arena) -> {
            int size = 4096, rounds = 100;
            MemorySegment out = arena.allocate(size), in = arena.allocate(size), tiny = arena.allocate(8);
            MemorySegment none = MemorySegment.ofArray(new byte[0]);
            for (String api : new String[] {"tag", "stream", "am"}) {
                int postedHere = 0;
                for (int i = 0; i < rounds; i++) {
                    client.send(tiny, 6, T); // borrows the client's worker and gives it back, nothing in flight
                    out.fill((byte) i);
                    out.set(ValueLayout.JAVA_INT, 0, i);
                    TestHooks.clearLastPoster();
                    CompletableFuture<Long> f = switch (api) {
                        case "tag" -> client.sendAsync(out, 5);
                        case "stream" -> client.streamSendAsync(out);
                        default -> client.amSendAsync(none, out);
                    };
                    if (f.isDone() || TestHooks.lastPoster() == Thread.currentThread()) {
                        postedHere++;
                    }
                    assertEquals(8, server.recv(tiny, 6, T));
                    switch (api) {
                        case "tag" -> assertEquals(size, server.recv(in, 5, T));
                        case "stream" -> assertEquals(size, server.streamRecv(in, T));
                        default -> {
                            try (AmMessage m = server.amRecv(T)) {
                                assertEquals(size, m.payload().byteSize());
                                MemorySegment.copy(m.payload(), 0, in, 0, size);
                            }
                        }
                    }
                    assertEquals(i, in.get(ValueLayout.JAVA_INT, 0), api + " message " + i);
                    assertEquals((byte) i, in.get(ValueLayout.JAVA_BYTE, size - 1), api + " message " + i);
                    assertEquals(size, f.get(10, TimeUnit.SECONDS));
                }
                assertTrue(postedHere >= rounds / 2, api + ": " + postedHere + " of " + rounds
                        + " async sends were posted by their caller");
            }
        });
    }

    /**
     * A thread that borrows the worker for blocking calls reuses its one spare operation, as the caller-mode owner
     * does: a loop of blocking 4 KiB sends (an operation each, posted inside the call) and receives allocates next
     * to nothing per message once compiled (a new operation per message would be ~200 bytes).
     */
    @Test
    void borrowedBlockingCallsReuseTheThreadsSpareOperation() throws Exception {
        pair((a, client, server, arena) -> {
            MemorySegment out = arena.allocate(4096), in = arena.allocate(4096);
            var threads = (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
            long perMessage = Long.MAX_VALUE;
            for (int pass = 0; pass < 10 && perMessage > 32; pass++) { // the first passes run before the JIT is done
                long before = threads.getCurrentThreadAllocatedBytes();
                for (int i = 0; i < 5000; i++) {
                    out.set(ValueLayout.JAVA_INT, 0, i);
                    client.send(out, 4, T);
                    assertEquals(4096, server.recv(in, 4, T));
                    assertEquals(i, in.get(ValueLayout.JAVA_INT, 0));
                }
                perMessage = (threads.getCurrentThreadAllocatedBytes() - before) / 5000;
            }
            assertTrue(perMessage <= 32, perMessage + " bytes allocated per blocking send + receive");
        });
    }

    /**
     * An asynchronous call made while nobody drives the worker is made by its caller, who then goes back to its own
     * work: what it left in flight still completes when it never comes back (the progress thread takes the worker
     * back), and while it keeps calling, another thread's operation in flight completes too, with every byte right.
     */
    @Test
    void asynchronousCallersLeaveNothingStranded() throws Exception {
        pair((a, client, server, arena) -> {
            MemorySegment in = arena.allocate(8);
            long big = 16L << 20; // more than the peer's shared-memory FIFO holds: in flight until it is received
            MemorySegment payload = Data.pattern(arena, big, 7);
            MemorySegment got = arena.allocate(big);
            CompletableFuture<Long> s = null;
            for (int attempt = 0; s == null; attempt++) {
                // a blocking call that ends with nothing in flight leaves the worker given back, the progress
                // thread napping (it takes it back at its next look, so an attempt may find it taken)
                server.send(in, 9, T);
                assertEquals(8, client.recv(in, 9, T));
                TestHooks.clearLastBorrower();
                CompletableFuture<Long> f = client.sendAsync(payload, 11);
                if (TestHooks.lastBorrower() == Thread.currentThread() || attempt == 20) {
                    s = f; // this thread posted the send itself, and now goes about other business
                } else {
                    assertEquals(big, server.recv(got, 11, T));
                    f.get(10, TimeUnit.SECONDS);
                }
            }
            assertSame(Thread.currentThread(), TestHooks.lastBorrower(), "the caller posted the send itself");
            // nobody waits on it through ucx4j (a get would drive the worker): a callback sees it complete
            java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
            s.whenComplete((v, x) -> done.countDown());
            Thread.sleep(100);
            assertEquals(big, server.recv(got, 11, T));
            assertTrue(done.await(10, TimeUnit.SECONDS), "the send completed after its caller left");
            assertEquals(big, s.join());
            Data.verify(got, big, 7);

            // a thread sending in a loop, and an operation of another thread in flight meanwhile
            int n = 200;
            long size = 256 * 1024;
            MemorySegment other = arena.allocate(8);
            CompletableFuture<Long> otherRecv = client.recvAsync(other, 12);
            java.util.concurrent.CountDownLatch otherDone = new java.util.concurrent.CountDownLatch(1);
            otherRecv.whenComplete((v, x) -> otherDone.countDown());
            CompletableFuture<?> receiver = CompletableFuture.runAsync(() -> {
                MemorySegment b = arena.allocate(size);
                for (int i = 0; i < n; i++) {
                    assertEquals(size, server.recv(b, 13, T));
                    Data.verify(b, size, i);
                    if (i == n / 2) {
                        server.send(arena.allocateFrom(ValueLayout.JAVA_LONG, 77L), 12, T);
                    }
                }
            }, r -> Thread.ofPlatform().start(r));
            MemorySegment[] bufs = new MemorySegment[n];
            java.util.List<CompletableFuture<Long>> pending = new java.util.ArrayList<>();
            for (int i = 0; i < n; i++) {
                bufs[i] = Data.pattern(arena, size, i);
                pending.add(client.sendAsync(bufs[i], 13));
            }
            assertTrue(otherDone.await(30, TimeUnit.SECONDS), "another thread's receive completed");
            assertEquals(77L, other.get(ValueLayout.JAVA_LONG, 0));
            receiver.get(30, TimeUnit.SECONDS);
            for (CompletableFuture<Long> f : pending) {
                assertEquals(size, f.get(10, TimeUnit.SECONDS));
            }
        });
    }

    /** The same for active messages: async and blocking sends and receives of one thread keep their order. */
    @Test
    void borrowingActiveMessageCallsKeepTheOrderOfTheThreadsEarlierCalls() throws Exception {
        pair((a, client, server, arena) -> {
            int rounds = 300, burst = 6;
            MemorySegment none = MemorySegment.ofArray(new byte[0]);
            CompletableFuture<?> sender = CompletableFuture.runAsync(() -> {
                java.util.List<CompletableFuture<Long>> pending = new java.util.ArrayList<>();
                for (long n = 0; n < (long) rounds * (burst + 1); n++) {
                    MemorySegment p = arena.allocateFrom(ValueLayout.JAVA_LONG, n);
                    if (n % (burst + 1) == burst) {
                        client.amSend(none, p, T);
                    } else {
                        pending.add(client.amSendAsync(none, p));
                    }
                }
                pending.forEach(CompletableFuture::join);
            }, r -> Thread.ofPlatform().start(r));
            long expect = 0;
            for (int i = 0; i < rounds; i++) {
                java.util.List<CompletableFuture<AmMessage>> rs = new java.util.ArrayList<>();
                for (int j = 0; j < burst; j++) {
                    rs.add(server.amRecvAsync());
                }
                try (AmMessage last = server.amRecv(T)) { // asked for after the burst: gets the message after it
                    for (CompletableFuture<AmMessage> f : rs) {
                        try (AmMessage m = f.get(10, TimeUnit.SECONDS)) {
                            assertEquals(expect++, m.payload().get(ValueLayout.JAVA_LONG, 0), "order, round " + i);
                        }
                    }
                    assertEquals(expect++, last.payload().get(ValueLayout.JAVA_LONG, 0), "order, round " + i);
                }
            }
            sender.get(30, TimeUnit.SECONDS);
        });
    }

    /**
     * In BLOCKING mode, a receive that borrowed the worker, posted its request and gave the worker back still ends
     * at its timeout: the cancel completes the request without an event, and the progress thread must see that
     * before it sleeps on the event fd (it used to sleep through it: 1-2 s for a 50 ms timeout).
     */
    @Test
    void aTimedReceiveEndsOnTimeInBlockingMode() throws Exception {
        try (Ucx a = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.BLOCKING));
                Ucx b = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.BLOCKING));
                Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                MemorySegment in = arena.allocate(8);
                long best = Long.MAX_VALUE;
                for (int i = 0; i < 3; i++) { // the best of three, so one slow spell of the machine does not count
                    long t0 = System.nanoTime();
                    assertThrows(UcxTimeoutException.class, () -> client.recv(in, 7, Duration.ofMillis(50)));
                    best = Math.min(best, System.nanoTime() - t0);
                }
                assertTrue(best < TimeUnit.MILLISECONDS.toNanos(900), "a 50 ms receive took " + best / 1_000_000
                        + " ms");
                // the endpoint still works, and the timed-out receives took nothing
                server.send(arena.allocateFrom(ValueLayout.JAVA_LONG, 5L), 7, T);
                assertEquals(8, client.recv(in, 7, T));
                assertEquals(5L, in.get(ValueLayout.JAVA_LONG, 0));
            }
        }
    }

    /**
     * A timed send that would borrow the worker while the progress thread cannot hand it over (busy in a duty
     * cycle: here an active-message handler that sleeps) keeps its own deadline: the wait for the hand-over ends by
     * it, not by the hand-over's own 20 ms bound and then the whole timeout again.
     */
    @Test
    void aTimedSendKeepsItsDeadlineWhileTheWorkerIsNotHandedOver() throws Exception {
        pair((a, client, server, arena) -> {
            java.util.concurrent.Semaphore inHandler = new java.util.concurrent.Semaphore(0);
            java.util.concurrent.Semaphore release = new java.util.concurrent.Semaphore(0);
            client.onActiveMessage(m -> { // on a's progress thread: it keeps the worker until released
                m.close();
                inHandler.release();
                release.acquireUninterruptibly();
            });
            MemorySegment out = arena.allocateFrom(ValueLayout.JAVA_LONG, 42L);
            long best = Long.MAX_VALUE;
            for (int i = 0; i < 3; i++) { // the best of three, so one slow spell of the machine does not count
                server.amSend(new byte[0], new byte[1]);
                assertTrue(inHandler.tryAcquire(10, TimeUnit.SECONDS));
                long t0 = System.nanoTime();
                try {
                    UcxTimeoutException e = assertThrows(UcxTimeoutException.class,
                            () -> client.send(out, 4, Duration.ofMillis(1)));
                    assertTrue(e.getMessage().contains("UCS_ERR_TIMED_OUT"), e.getMessage());
                    assertTrue(e.getMessage().contains("UCX was given nothing"), e.getMessage());
                    best = Math.min(best, System.nanoTime() - t0);
                } finally {
                    release.release();
                }
            }
            assertTrue(best < TimeUnit.MILLISECONDS.toNanos(15), "a 1 ms send took " + best / 1_000 + " us");
            // the timed-out sends were withdrawn before UCX took them: the endpoint works, and they never arrive
            assertTrue(client.isAlive());
            client.send(out, 5, T);
            MemorySegment in = arena.allocate(8);
            assertEquals(8, server.recv(in, 5, T));
            assertEquals(42L, in.get(ValueLayout.JAVA_LONG, 0));
            assertThrows(UcxTimeoutException.class, () -> server.recv(in, 4, Duration.ofMillis(100)));
        });
    }
}
