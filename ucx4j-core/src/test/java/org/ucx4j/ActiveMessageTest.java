package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.ucx4j.internal.engine.AmWire;
import org.ucx4j.internal.engine.TestHooks;

/** Receiver-allocated messaging: active messages, multi-frame messages and objects, in-process and cross-process. */
class ActiveMessageTest {
    static final Duration T = Duration.ofSeconds(20);
    static final long[] SIZES = {0, 1, 8, 1024, 64 * 1024, 1 << 20, 16 << 20};

    /** malloc, counting what it hands out, so a test can show that a refused message allocated nothing. */
    static class CountingAllocator implements MemoryAllocator {
        final AtomicLong allocations = new AtomicLong();
        final AtomicLong outstanding = new AtomicLong();
        /** Allocations of exactly this many bytes fail (-1: none). */
        volatile long failSize = -1;

        /**
         * "heap", "read-only" or "closed" (a segment of an arena already closed): what a broken allocator hands out
         * instead of writable native memory.
         */
        volatile String broken;

        @Override
        public MemorySegment allocate(long bytes) {
            if (bytes == failSize) {
                throw new OutOfMemoryError("test: no memory for " + bytes + " bytes");
            }
            allocations.incrementAndGet();
            outstanding.incrementAndGet();
            if ("heap".equals(broken)) {
                return MemorySegment.ofArray(new byte[(int) bytes]);
            }
            if ("closed".equals(broken)) {
                try (Arena gone = Arena.ofShared()) {
                    return gone.allocate(bytes);
                }
            }
            MemorySegment s = MemoryAllocator.malloc().allocate(bytes);
            return "read-only".equals(broken) ? s.asReadOnly() : s;
        }

        @Override
        public void free(MemorySegment segment) {
            outstanding.decrementAndGet();
            if (segment.isNative() && segment.scope().isAlive()) {
                MemoryAllocator.malloc().free(segment);
            }
        }
    }

    interface PairBody {
        void run(Endpoint client, Endpoint server, CountingAllocator serverAlloc) throws Exception;
    }

    static void pair(UcxOptions serverOptions, PairBody body) throws Exception {
        CountingAllocator alloc = new CountingAllocator();
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(serverOptions.withAllocator(MemoryType.HOST, alloc))) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                body.run(client, server, alloc);
            }
        }
    }

    static byte[] header(long size) {
        return ("hdr-" + size).getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }

    @Test
    void anAllocatorThatRoundsUpGetsBackTheBlockItGave() throws Exception {
        List<MemorySegment> given = java.util.Collections.synchronizedList(new ArrayList<>());
        List<MemorySegment> freed = java.util.Collections.synchronizedList(new ArrayList<>());
        MemoryAllocator pages = new MemoryAllocator() {
            @Override
            public MemorySegment allocate(long bytes) {
                MemorySegment s = MemoryAllocator.malloc().allocate((bytes + 4095) & ~4095L);
                given.add(s);
                return s;
            }

            @Override
            public void free(MemorySegment segment) {
                freed.add(segment);
                MemoryAllocator.malloc().free(segment);
            }
        };
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(UcxOptions.defaults().withAllocator(MemoryType.HOST, pages));
                Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                for (long size : new long[] {100, 1 << 20}) { // eager and rendezvous
                    client.amSend(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 6), T);
                    try (AmMessage m = server.amRecv(T)) {
                        assertEquals(size, m.payloadLength());
                        assertEquals(size, m.payload().byteSize(), "the payload is the message, not the block");
                        Data.verify(m.payload(), size, 6);
                    }
                }
            }
        }
        assertEquals(2, given.size());
        for (int i = 0; i < 2; i++) {
            assertEquals(given.get(i).address(), freed.get(i).address());
            assertEquals(given.get(i).byteSize(), freed.get(i).byteSize(), "free gets the whole block back");
        }
    }

    @Test
    void activeMessagesBeforeAndAfterTheReceiveIsPosted() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : SIZES) { // eager through rendezvous (16 MiB)
                    // receive posted first
                    CompletableFuture<AmMessage> r = server.amRecvAsync();
                    client.amSend(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 3), T);
                    try (AmMessage m = r.get(30, TimeUnit.SECONDS)) {
                        assertArrayEquals(header(size), m.headerBytes());
                        Data.verify(m.payload(), size, 3);
                        assertSame(server, m.endpoint());
                    }
                    // message first, receive later: it waits in receiver-allocated memory
                    client.amSendAsync(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 4))
                            .get(30, TimeUnit.SECONDS);
                    try (AmMessage m = server.amRecv(T)) {
                        assertArrayEquals(header(size), m.headerBytes());
                        Data.verify(m.payload(), size, 4);
                    }
                }
            }
            // order is kept, a heap payload is copied, and close gives the memory back
            for (int i = 0; i < 10; i++) {
                client.amSend(new byte[] {(byte) i}, new byte[] {(byte) (100 + i), 7});
            }
            for (int i = 0; i < 10; i++) {
                AmMessage m = server.amRecv(T);
                assertArrayEquals(new byte[] {(byte) i}, m.headerBytes());
                assertArrayEquals(new byte[] {(byte) (100 + i), 7}, m.payloadBytes());
                m.close();
                m.close(); // idempotent
                assertThrows(IllegalStateException.class, () -> m.payload().get(ValueLayout.JAVA_BYTE, 0));
            }
            assertEquals(0, alloc.outstanding.get(), "every payload was freed");
            // a message for the client's side, on the same endpoint pair
            server.amSend(new byte[0], new byte[] {9});
            try (AmMessage m = client.amRecv(T)) {
                assertEquals(0, m.header().byteSize());
                assertArrayEquals(new byte[] {9}, m.payloadBytes());
            }
            assertEquals(2 * SIZES.length + 10, server.stats().messagesReceived());
        });
    }

    @Test
    void aBlockingCallKeepsItsTimeoutWhileAHandlerHoldsTheProgressThread() throws Exception {
        // a handler must not block, but one that does must not make other threads' timeouts meaningless: a
        // blocking call asks the progress thread to hand it the worker, which a thread stuck in a handler never does
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            java.util.concurrent.CountDownLatch inHandler = new java.util.concurrent.CountDownLatch(1);
            java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
            holdOnActiveMessage(server, inHandler, release);
            try {
                client.amSend(new byte[0], new byte[] {1});
                assertTrue(inHandler.await(10, TimeUnit.SECONDS));
                // a receive and a send, each queued for the stuck thread, time out and are taken back from the queue
                assertInstanceOf(UcxTimeoutException.class,
                        outcome(() -> server.recv(new byte[1], 5, Duration.ofMillis(300))));
                assertInstanceOf(UcxTimeoutException.class,
                        outcome(() -> server.send(new byte[] {66}, 6, Duration.ofMillis(300))));
                assertEquals(1, release.getCount(), "the handler still holds the progress thread");
            } finally {
                release.countDown();
            }
            // the worker goes on afterwards, and the progress thread, meeting both taken-back operations in its
            // queue, skips them: the receive takes nothing, the send (its staging copy freed) never goes out
            byte[] b = new byte[1];
            client.send(new byte[] {7}, 5);
            assertEquals(1, server.recv(b, 5, T));
            assertEquals(7, b[0]);
            server.send(new byte[] {8}, 6);
            assertEquals(1, client.recv(b, 6, T));
            assertEquals(8, b[0], "the send that timed out in the queue was not posted later");
        });
    }

    /**
     * A short timeout is kept while a handler holds the progress thread: the wait for the worker's hand-over ends by
     * the call's deadline, not after the hand-over's own 20 ms bound, and a receive taken back from the queue at its
     * deadline returns at once (it used to nap 100 ms first); the best of five tries, so that a busy machine does not
     * decide it. (Before: ~120 ms each.)
     */
    @Test
    void aShortTimeoutIsNotStretchedToTheHandOversBound() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            java.util.concurrent.CountDownLatch inHandler = new java.util.concurrent.CountDownLatch(1);
            java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
            holdOnActiveMessage(server, inHandler, release);
            try {
                client.amSend(new byte[0], new byte[] {1});
                assertTrue(inHandler.await(10, TimeUnit.SECONDS));
                long best = Long.MAX_VALUE;
                for (int i = 0; i < 5; i++) {
                    long[] took = new long[1];
                    assertInstanceOf(UcxTimeoutException.class, outcome(() -> {
                        long t0 = System.nanoTime();
                        try {
                            server.recv(new byte[1], 5, Duration.ofMillis(1));
                        } finally {
                            took[0] = System.nanoTime() - t0;
                        }
                    }));
                    best = Math.min(best, took[0]);
                }
                assertTrue(best < TimeUnit.MILLISECONDS.toNanos(12), "a 1 ms receive took at best "
                        + TimeUnit.NANOSECONDS.toMicros(best) + " us: the 20 ms hand-over wait ignored its deadline");
            } finally {
                release.countDown();
            }
        });
    }

    @Test
    void aWorkerFlushKeepsItsTimeoutWhileThePeerDoesNotProgress() throws Exception {
        // UCX can neither cancel a worker flush nor end it by an abort
        putWhileTheTargetIsHeld(5, (a, client) -> {
            Throwable t = outcome(() -> a.flush(Duration.ofMillis(300)));
            assertInstanceOf(UcxTimeoutException.class, t);
            assertTrue(t.getMessage().contains("UCS_ERR_TIMED_OUT"), t.getMessage());
        }, (a, client) -> a.flush(T));
    }

    @Test
    void anEndpointFlushThatTimesOutOrIsCanceledLeavesTheEndpointAlive() throws Exception {
        // a flush holds none of the caller's memory, so a timeout or a cancel need not cost the connection
        putWhileTheTargetIsHeld(6, (a, client) -> {
            Throwable t = outcome(() -> client.flush(Duration.ofMillis(300)));
            assertInstanceOf(UcxTimeoutException.class, t);
            assertTrue(t.getMessage().contains("UCS_ERR_TIMED_OUT"), t.getMessage());
            CompletableFuture<Long> flushing = client.flushAsync();
            assertTrue(flushing.cancel(true));
            assertTrue(client.isAlive(), "a flush's timeout or cancel does not abort its endpoint");
        }, (a, client) -> {
            client.flush(T);
            assertTrue(client.isAlive());
        });
    }

    /** A step of {@link #putWhileTheTargetIsHeld}, given the initiator's {@code Ucx} and endpoint. */
    private interface HeldStep {
        void run(Ucx initiator, Endpoint client) throws Exception;
    }

    /**
     * Over TCP, where a put is carried by messages the target's worker must progress: a 64 KiB put (pattern
     * {@code seed}) to a target whose progress thread a handler holds, so it is never acknowledged. {@code whileHeld}
     * runs then; once the target is released the put must complete (not purged by an abort), {@code flushAfter} run,
     * and the data be there.
     */
    private static void putWhileTheTargetIsHeld(int seed, HeldStep whileHeld, HeldStep flushAfter) throws Exception {
        UcxOptions tcp = UcxOptions.defaults().with("TLS", "tcp");
        long size = 64 << 10;
        try (Ucx a = Ucx.open(tcp); Ucx b = Ucx.open(tcp); Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete); MemoryRegion region = b.allocateMemory(size)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                RemoteKey key = client.unpackRemoteKey(region.packRemoteKey());
                java.util.concurrent.CountDownLatch inHandler = new java.util.concurrent.CountDownLatch(1);
                java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
                holdOnActiveMessage(server, inHandler, release);
                CompletableFuture<Long> put;
                try {
                    client.amSend(new byte[0], new byte[] {1});
                    assertTrue(inHandler.await(10, TimeUnit.SECONDS));
                    put = client.putAsync(Data.pattern(arena, size, seed), key, 0);
                    whileHeld.run(a, client);
                    assertEquals(1, release.getCount(), "the handler still holds the target's progress thread");
                } finally {
                    release.countDown();
                }
                assertEquals(size, put.get(10, TimeUnit.SECONDS)); // not purged by an abort
                flushAfter.run(a, client); // once the target progresses again, the data is there
                Data.verify(region.segment(), size, seed);
                key.close();
            }
        }
    }

    /**
     * A handler that, at the first message, holds the thread driving {@code ep}'s worker (its progress thread) until
     * {@code release}, having counted down {@code inHandler}.
     */
    private static void holdOnActiveMessage(Endpoint ep, java.util.concurrent.CountDownLatch inHandler,
            java.util.concurrent.CountDownLatch release) {
        ep.onActiveMessage(m -> {
            m.close();
            inHandler.countDown();
            try {
                release.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
    }

    /** What a blocking call on another thread ends with (null: it returned), within 10 s. */
    private static Throwable outcome(org.junit.jupiter.api.function.Executable call) throws Exception {
        CompletableFuture<Throwable> outcome = new CompletableFuture<>();
        Thread.ofVirtual().start(() -> {
            try {
                call.execute();
                outcome.complete(null);
            } catch (Throwable t) {
                outcome.complete(t);
            }
        });
        return outcome.get(10, TimeUnit.SECONDS);
    }

    @Test
    void handlerTakesMessagesOnTheProgressThreadInOrder() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            try (Arena arena = Arena.ofShared()) {
                // one message arrives before the handler is set: it goes to the handler first
                client.amSend(header(1), Data.pattern(arena, 1, 3).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
                Data.eventually(() -> server.stats().messagesReceived() == 1);
                java.util.concurrent.LinkedBlockingQueue<Object> got = new java.util.concurrent.LinkedBlockingQueue<>();
                java.util.concurrent.atomic.AtomicInteger calls = new java.util.concurrent.atomic.AtomicInteger();
                server.onActiveMessage(m -> {
                    if (calls.incrementAndGet() == 2) {
                        throw new IllegalStateException("a handler failure is logged, not fatal");
                    }
                    got.add(Thread.currentThread().isVirtual() + " " + Thread.currentThread().getName());
                    got.add(m); // kept: closed later by the test thread
                    // an echo started from the handler itself
                    server.amSendAsync(MemorySegment.ofArray(m.headerBytes()), m.payload());
                });
                assertThrows(IllegalStateException.class, server::amRecv);
                assertThrows(IllegalStateException.class, () -> server.onActiveMessage(m -> { }));

                long[] sizes = {4, 1 << 20}; // the first one makes the handler throw; 1 MiB is rendezvous
                for (long size : sizes) {
                    client.amSend(header(size), Data.pattern(arena, size, 3).toArray(
                            java.lang.foreign.ValueLayout.JAVA_BYTE));
                }
                for (long size : new long[] {1, 1 << 20}) {
                    String thread = (String) got.poll(10, TimeUnit.SECONDS);
                    assertTrue(thread.startsWith("false ucx4j-progress-"), thread);
                    try (AmMessage m = (AmMessage) got.poll(10, TimeUnit.SECONDS)) {
                        assertArrayEquals(header(size), m.headerBytes());
                        Data.verify(m.payload(), size, 3);
                        // the echo the handler sent
                        try (AmMessage echo = client.amRecv(T)) {
                            assertArrayEquals(header(size), echo.headerBytes());
                            Data.verify(echo.payload(), size, 3);
                        }
                    }
                }
                assertEquals(3, calls.get());
                Data.eventually(() -> alloc.outstanding.get() == 0); // kept, thrown-on and echoed: all given back
            }
        });
    }

    /**
     * A handler runs on the thread that drives the worker, after the progress call: waiting there on a ucx4j
     * future drives the worker, as a blocking call does (it used to wait for a progress thread that was itself
     * the one waiting, until the timeout).
     */
    @Test
    void waitingOnAFutureInsideAHandlerDrivesTheWorker() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            CompletableFuture<Object> seen = new CompletableFuture<>();
            byte[] in = new byte[8];
            server.onActiveMessage(m -> {
                m.close();
                try {
                    seen.complete(server.recvAsync(in, 99).get(10, TimeUnit.SECONDS));
                } catch (Throwable t) {
                    seen.complete(t);
                }
            });
            client.amSend(new byte[0], new byte[8]);
            client.send(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, 99);
            assertEquals(8L, seen.get(20, TimeUnit.SECONDS));
            assertArrayEquals(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, in);
        });
    }

    @Test
    void settingAHandlerFailsReceivesStillWaiting() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            CompletableFuture<AmMessage> waiting = server.amRecvAsync();
            server.onActiveMessage(AmMessage::close);
            ExecutionException e = assertThrows(ExecutionException.class, () -> waiting.get(10, TimeUnit.SECONDS));
            assertInstanceOf(IllegalStateException.class, e.getCause());
            assertThrows(IllegalStateException.class, () -> server.amRecv(T));
            client.amSend(new byte[0], new byte[8]);
            Data.eventually(() -> server.stats().messagesReceived() == 1 && alloc.outstanding.get() == 0);
        });
    }

    @Test
    void checkedMessagesFailCleanlyOnAccessAfterClose() throws Exception {
        pair(UcxOptions.defaults().withCheckedMessages(true), (client, server, alloc) -> {
            client.amSend(new byte[0], new byte[] {1, 2, 3});
            client.sendFrames(List.of(MemorySegment.ofArray(new byte[] {4})));
            AmMessage m = server.amRecv(T);
            MemorySegment kept = m.payload();
            assertEquals(2, kept.get(ValueLayout.JAVA_BYTE, 1));
            m.close();
            assertThrows(IllegalStateException.class, () -> kept.get(ValueLayout.JAVA_BYTE, 1));
            Frames f = server.recvFrames(T);
            MemorySegment frame = f.get(0);
            f.close();
            assertThrows(IllegalStateException.class, () -> frame.get(ValueLayout.JAVA_BYTE, 0));
            assertThrows(IllegalStateException.class, () -> f.get(0));
            assertEquals(0, alloc.outstanding.get());
        });
    }

    /**
     * A checked message whose payload an I/O operation is using right now (a blocking write into a pipe nobody
     * reads yet) refuses to close, and stays open, instead of returning as if closed and keeping its memory until
     * the {@code Ucx} closes; closed again once the write ends, its memory goes back.
     */
    @Test
    void aCheckedMessageInUseByAnIoOperationRefusesToCloseAndStaysOpen() throws Exception {
        pair(UcxOptions.defaults().withCheckedMessages(true), (client, server, alloc) -> {
            int size = 256 << 10; // more than a pipe holds: the write blocks until the other end reads
            try (Arena arena = Arena.ofShared()) {
                client.amSend(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 5), T);
            }
            AmMessage m = server.amRecv(T);
            java.nio.channels.Pipe pipe = java.nio.channels.Pipe.open();
            try (var sink = pipe.sink(); var source = pipe.source()) {
                java.nio.ByteBuffer view = m.payload().asByteBuffer();
                CompletableFuture<Integer> write = CompletableFuture.supplyAsync(() -> {
                    try {
                        int n = 0;
                        while (view.hasRemaining()) {
                            n += sink.write(view);
                        }
                        return n;
                    } catch (java.io.IOException e) {
                        throw new java.io.UncheckedIOException(e);
                    }
                });
                java.nio.ByteBuffer got = java.nio.ByteBuffer.allocateDirect(size);
                while (got.position() == 0) { // one byte: the write is under way, and blocks for the rest
                    source.read(got.limit(1));
                }
                got.limit(size);
                IllegalStateException inUse = assertThrows(IllegalStateException.class, m::close);
                assertTrue(inUse.getMessage().contains("in use"), inUse.getMessage());
                assertEquals(1, alloc.outstanding.get(), "the message stays open while the write uses it");
                while (got.hasRemaining()) {
                    source.read(got);
                }
                assertEquals(size, write.get(10, TimeUnit.SECONDS));
                Data.verify(MemorySegment.ofBuffer(got.flip()), size, 5);
                m.close();
                assertEquals(0, alloc.outstanding.get(), "closed once the write ended");
                assertThrows(IllegalStateException.class, () -> m.payload().get(ValueLayout.JAVA_BYTE, 0));
            }
        });
    }

    @Test
    void activeMessageReceiveTimesOutAndCancelsCleanly() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            UcxTimeoutException e = assertThrows(UcxTimeoutException.class,
                    () -> server.amRecv(Duration.ofMillis(100)));
            assertTrue(e.getMessage().contains("UCS_ERR_TIMED_OUT"), e.getMessage());
            CompletableFuture<AmMessage> canceled = server.amRecvAsync();
            assertTrue(canceled.cancel(false));
            // the timed-out and canceled receives take nothing: the next message goes to the next receive
            client.amSend(new byte[] {1}, new byte[] {2});
            try (AmMessage m = server.amRecv(T)) {
                assertArrayEquals(new byte[] {2}, m.payloadBytes());
            }
        });
    }

    /**
     * A receive future the application completes itself ({@code orTimeout}, {@code completeOnTimeout},
     * {@code complete}) takes no message: each kind's next message goes to the next receive, whole.
     */
    @Test
    void aReceiveTheApplicationGivesUpOnTakesNoMessage() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            CompletableFuture<AmMessage> timed = server.amRecvAsync().orTimeout(50, TimeUnit.MILLISECONDS);
            ExecutionException e = assertThrows(ExecutionException.class, () -> timed.get(10, TimeUnit.SECONDS));
            assertInstanceOf(java.util.concurrent.TimeoutException.class, e.getCause());
            CompletableFuture<Frames> defaulted = server.recvFramesAsync().completeOnTimeout(null, 50,
                    TimeUnit.MILLISECONDS);
            assertNull(defaulted.get(10, TimeUnit.SECONDS));
            CompletableFuture<byte[]> object = server.recvObjectAsync();
            assertTrue(object.complete(new byte[] {9}));
            client.amSend(header(1), new byte[] {1});
            client.sendFrames(List.of(MemorySegment.ofArray(new byte[] {2, 2})));
            client.sendObject(new byte[] {3, 3, 3});
            try (AmMessage m = server.amRecv(T)) {
                assertArrayEquals(new byte[] {1}, m.payloadBytes());
            }
            try (Frames f = server.recvFrames(T)) {
                assertArrayEquals(new byte[] {2, 2}, f.get(0).toArray(ValueLayout.JAVA_BYTE));
            }
            assertArrayEquals(new byte[] {3, 3, 3}, server.recvObject(T));
            Data.eventually(() -> alloc.outstanding.get() == 0);
        });
    }

    /**
     * A header too large for an eager send and no payload goes by rendezvous with nothing to pull. UCX cannot pull 0
     * bytes: asked to, it answers the sender but never gives the announcement's receive buffer back, so a receiver
     * lost one shared-memory receive buffer per such message, and with their number capped ({@code
     * UCX_POSIX_RX_MAX_BUFS}) it stopped receiving after a few hundred. Taken as an eager message is, 3000 arrive.
     */
    @Test
    void headerOnlyRendezvousMessagesGiveUcxsReceiveBuffersBack() throws Exception {
        // each FIFO slot holds a receive buffer from the start (UCX 1.20's default FIFO has 256 slots, 1.13's 64)
        try (Peer p = Peer.start(Map.of("UCX_POSIX_RX_MAX_BUFS", "256", "UCX_SYSV_RX_MAX_BUFS", "256",
                "UCX_POSIX_FIFO_SIZE", "64", "UCX_SYSV_FIFO_SIZE", "64"), List.of(),
                "header-only-rendezvous", "3000")) {
            assertEquals("3000", p.await("DONE ").trim());
        }
    }

    /**
     * A message handed to a receive whose future was completed just before (the race of an application's timeout
     * with the message, forced here with {@code obtrude*}, which completes a future without withdrawing its
     * receive) goes back ahead of later messages, to the next receive: nothing lost, order kept.
     */
    @Test
    void aMessageHandedToAReceiveGivenUpMeanwhileGoesToTheNextInOrder() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            CompletableFuture<AmMessage> gone = server.amRecvAsync();
            CompletableFuture<byte[]> goneObject = server.recvObjectAsync();
            Data.eventually(() -> TestHooks.amReceivesWaiting(server.core()) == 1);
            gone.obtrudeException(new java.util.concurrent.TimeoutException("test"));
            goneObject.obtrudeValue(null);
            for (int i = 1; i <= 3; i++) {
                client.amSend(header(i), new byte[] {(byte) i});
                client.sendObject(new byte[] {(byte) (10 + i)});
            }
            for (int i = 1; i <= 3; i++) {
                try (AmMessage m = server.amRecv(T)) {
                    assertArrayEquals(new byte[] {(byte) i}, m.payloadBytes(), "message " + i);
                }
                assertArrayEquals(new byte[] {(byte) (10 + i)}, server.recvObject(T), "object " + i);
            }
            Data.eventually(() -> alloc.outstanding.get() == 0);
        });
    }

    /** A handler that throws has its message closed through the checked arena: a payload it kept fails cleanly. */
    @Test
    void aThrowingHandlersMessageIsClosedAsTheApplicationWouldCloseIt() throws Exception {
        pair(UcxOptions.defaults().withCheckedMessages(true), (client, server, alloc) -> {
            CompletableFuture<MemorySegment> kept = new CompletableFuture<>();
            server.onActiveMessage(m -> {
                kept.complete(m.payload());
                throw new IllegalStateException("test: a handler that fails");
            });
            client.amSend(new byte[0], new byte[] {1, 2, 3});
            MemorySegment payload = kept.get(10, TimeUnit.SECONDS);
            Data.eventually(() -> alloc.outstanding.get() == 0);
            assertThrows(IllegalStateException.class, () -> payload.get(ValueLayout.JAVA_BYTE, 1));
        });
    }

    /**
     * A handler that starts an I/O operation on a checked message's payload and then throws leaves the message open
     * (its arena refuses to close under the operation): its memory is not given back, to be reused for the next
     * message, while the operation still reads it. What the operation wrote is the payload, unchanged.
     */
    @Test
    void aThrowingHandlersMessageInUseByAnIoOperationIsNotGivenBack() throws Exception {
        pair(UcxOptions.defaults().withCheckedMessages(true), (client, server, alloc) -> {
            int size = 256 << 10; // more than a pipe holds: the write blocks until the other end reads
            java.nio.channels.Pipe pipe = java.nio.channels.Pipe.open();
            try (var sink = pipe.sink(); var source = pipe.source(); Arena arena = Arena.ofShared()) {
                CompletableFuture<AmMessage> kept = new CompletableFuture<>();
                CompletableFuture<Integer> write = new CompletableFuture<>();
                java.nio.ByteBuffer got = java.nio.ByteBuffer.allocateDirect(size);
                server.onActiveMessage(m -> {
                    if (!kept.complete(m)) {
                        m.close(); // the next message
                        return;
                    }
                    java.nio.ByteBuffer view = m.payload().asByteBuffer();
                    // a platform thread: one that blocks in the write keeps the arena acquired (a virtual thread
                    // parks between attempts, and releases it meanwhile)
                    Thread.ofPlatform().daemon().start(() -> {
                        try {
                            int n = 0;
                            while (view.hasRemaining()) {
                                n += sink.write(view);
                            }
                            write.complete(n);
                        } catch (Throwable e) {
                            write.completeExceptionally(e);
                        }
                    });
                    try {
                        while (got.position() == 0) { // one byte: the write is under way, and blocks for the rest
                            source.read(got.limit(1));
                        }
                    } catch (java.io.IOException e) {
                        throw new java.io.UncheckedIOException(e);
                    }
                    throw new IllegalStateException("test: a handler that fails while its write goes on");
                });
                client.amSend(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 5), T);
                AmMessage m = kept.get(10, TimeUnit.SECONDS);
                Thread.sleep(200); // the handler has thrown, and the engine dealt with its message
                assertEquals(1, alloc.outstanding.get(), "the message's memory went back while a write used it");
                client.amSend(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 9), T); // would reuse it
                got.limit(size);
                while (got.hasRemaining()) {
                    source.read(got);
                }
                assertEquals(size, write.get(10, TimeUnit.SECONDS));
                Data.verify(MemorySegment.ofBuffer(got.flip()), size, 5);
                m.close(); // by whoever kept it, once the write ended
                Data.eventually(() -> alloc.outstanding.get() == 0);
            }
        });
    }

    /**
     * UCX takes headers up to its worker's max_am_header, and older or unchecked builds abort the process or
     * overrun a buffer beyond it: the longest header allowed arrives intact, one byte more is refused before
     * anything is sent, and so is a frame list whose header would be too long.
     */
    @Test
    void headersUpToTheWorkersLimitArriveAndLongerOnesAreRefused() throws Exception {
        try (Ucx a = Ucx.open(UcxOptions.defaults().withMaxFrames(100_000)); Ucx b = Ucx.open()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete); Endpoint client = a.connect("127.0.0.1", l.port())) {
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                long max = a.maxActiveMessageHeader();
                assertTrue(max > 0, "limit " + max);
                byte[] longest = new byte[(int) max];
                new java.util.Random(3).nextBytes(longest);
                byte[] tooLong = new byte[(int) max + 1];
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> client.amSend(tooLong, new byte[] {1}));
                assertTrue(e.getMessage().contains("max_am_header"), e.getMessage());
                assertThrows(IllegalArgumentException.class, () -> client.amSendAsync(MemorySegment.ofArray(tooLong),
                        MemorySegment.ofArray(new byte[] {1})));
                int frames = (int) (max / AmWire.FRAME_ENTRY) + 1; // a frames header of 4 + 9 B a frame
                assertThrows(IllegalArgumentException.class, () -> client.sendFrames(
                        java.util.Collections.nCopies(frames, MemorySegment.ofArray(new byte[0]))));
                client.amSend(longest, new byte[] {2}, T);
                try (AmMessage m = server.amRecv(T)) { // the first to arrive: nothing refused was sent
                    assertArrayEquals(longest, m.headerBytes());
                    assertArrayEquals(new byte[] {2}, m.payloadBytes());
                }
            }
        }
    }

    /** A frames send resolves to its bytes, also when UCX finishes it later (rendezvous), and counts them. */
    @Test
    void aFramesSendCompletesWithItsBytes() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            try (Arena arena = Arena.ofShared()) {
                List<MemorySegment> frames = List.of(Data.pattern(arena, 1 << 20, 1), Data.pattern(arena, 1 << 20, 2),
                        Data.pattern(arena, 3, 3));
                long total = (2 << 20) + 3;
                long sentBefore = client.stats().bytesSent();
                CompletableFuture<Long> sent = client.sendFramesAsync(frames);
                try (Frames got = server.recvFrames(T)) {
                    assertEquals(total, got.totalBytes());
                    Data.verify(got.get(1), 1 << 20, 2);
                }
                assertEquals(total, sent.get(10, TimeUnit.SECONDS), "the payload's bytes, not the frame count");
                assertTrue(client.stats().bytesSent() - sentBefore >= total, "counted in the endpoint's statistics");
            }
        });
    }

    @Test
    void framesZeroOneAndHundred() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            try (Arena arena = Arena.ofShared()) {
                for (int n : new int[] {0, 1, 100}) {
                    List<MemorySegment> frames = new ArrayList<>();
                    for (int i = 0; i < n; i++) {
                        // 16 MiB first (rendezvous), an empty frame second, then eager and rendezvous sizes
                        long size = i == 0 ? 16L << 20 : i == 1 ? 0 : (i * 977L) % 70_000;
                        frames.add(i % 3 == 2 ? MemorySegment.ofArray(Data.pattern(arena, size, i).toArray(
                                ValueLayout.JAVA_BYTE)) : Data.pattern(arena, size, i)); // heap and native
                    }
                    CompletableFuture<Frames> r = server.recvFramesAsync();
                    client.sendFrames(frames, T);
                    try (Frames got = r.get(30, TimeUnit.SECONDS)) {
                        assertEquals(n, got.count());
                        long total = 0;
                        for (int i = 0; i < n; i++) {
                            Data.verify(got.get(i), frames.get(i).byteSize(), i);
                            total += frames.get(i).byteSize();
                        }
                        assertEquals(total, got.totalBytes());
                    }
                }
            }
            assertEquals(0, alloc.outstanding.get());
            assertThrows(IllegalArgumentException.class, () -> client.sendFrames(java.util.Collections.nCopies(
                    257, MemorySegment.ofArray(new byte[1]))));
        });
    }

    @Test
    void forgedFrameHeadersAreRefusedWithoutAllocating() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            // a header claiming 2^40 bytes in one frame, carrying 16
            MemorySegment huge = MemorySegment.ofArray(new byte[4 + AmWire.FRAME_ENTRY]);
            huge.set(ValueLayout.JAVA_INT_UNALIGNED, 0, 1);
            huge.set(ValueLayout.JAVA_LONG_UNALIGNED, 4, 1L << 40);
            // a header claiming 2^20 frames
            MemorySegment many = MemorySegment.ofArray(new byte[4 + AmWire.FRAME_ENTRY]);
            many.set(ValueLayout.JAVA_INT_UNALIGNED, 0, 1 << 20);
            // a truncated header
            MemorySegment truncated = MemorySegment.ofArray(new byte[2]);
            // a well-formed header of 257 empty frames, one over the default cap (256): refused by the cap alone
            MemorySegment overCap = MemorySegment.ofArray(new byte[4 + 257 * AmWire.FRAME_ENTRY]);
            overCap.set(ValueLayout.JAVA_INT_UNALIGNED, 0, 257);
            // one frame of 16 bytes in device memory (UCS_MEMORY_TYPE_CUDA, 2): this build receives host memory only
            MemorySegment device = MemorySegment.ofArray(new byte[4 + AmWire.FRAME_ENTRY]);
            device.set(ValueLayout.JAVA_INT_UNALIGNED, 0, 1);
            device.set(ValueLayout.JAVA_LONG_UNALIGNED, 4, 16);
            device.set(ValueLayout.JAVA_BYTE, 12, (byte) 2);
            long before = alloc.allocations.get();
            Map<MemorySegment, String> reasons = new java.util.LinkedHashMap<>();
            reasons.put(huge, "claims 1099511627776 bytes for frame 0, cap is 2147483648 bytes in all");
            reasons.put(many, "claims 1048576 frames, cap is 256");
            reasons.put(truncated, "frame header truncated (2 bytes)");
            reasons.put(overCap, "claims 257 frames, cap is 256");
            reasons.put(device, "frame 0 is of memory type 2 (UCS_MEMORY_TYPE_HOST, 0, is the only one");
            for (var r : reasons.entrySet()) {
                MemorySegment h = r.getKey();
                long payload = h == overCap ? 0 : 16;
                client.sendForged(AmWire.FRAMES, h, MemorySegment.ofArray(new byte[(int) payload]))
                        .get(10, TimeUnit.SECONDS);
                ExecutionException e = assertThrows(ExecutionException.class,
                        () -> server.recvFramesAsync().get(10, TimeUnit.SECONDS));
                assertInstanceOf(MessageRefusedException.class, e.getCause());
                assertTrue(e.getCause().getMessage().contains("UCS_ERR_EXCEEDS_LIMIT"), e.getCause().getMessage());
                assertTrue(e.getCause().getMessage().contains(r.getValue()), e.getCause().getMessage());
            }
            assertEquals(before, alloc.allocations.get(), "a refused header allocates nothing");
            // an object header that lies about its size
            MemorySegment lie = MemorySegment.ofArray(new byte[8]);
            lie.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, 1L << 40);
            client.sendForged(AmWire.OBJECT, lie, MemorySegment.ofArray(new byte[8])).get(10, TimeUnit.SECONDS);
            assertThrows(MessageRefusedException.class, () -> server.recvObject(T));
            assertEquals(before, alloc.allocations.get());
            // the connection still works
            client.sendFrames(List.of(MemorySegment.ofArray(new byte[] {5, 6})));
            try (Frames f = server.recvFrames(T)) {
                assertArrayEquals(new byte[] {5, 6}, f.get(0).toArray(ValueLayout.JAVA_BYTE));
            }
        });
    }

    /** A message whose memory cannot be allocated fails its receive, saying which message it was; others flow. */
    @Test
    void aMessageThatCannotBeAllocatedIsDroppedAloneAndNamed() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : new long[] {777, 3 << 20}) { // eager, rendezvous
                    alloc.failSize = size;
                    byte[] h = header(size);
                    client.amSendAsync(MemorySegment.ofArray(h), Data.pattern(arena, size, 1));
                    MessageDroppedException e = assertThrows(MessageDroppedException.class, () -> server.amRecv(T));
                    assertArrayEquals(h, e.header(), "the dropped message's header names it");
                    assertEquals("UCS_ERR_NO_MEMORY", e.statusName());
                    assertTrue(e.getMessage().contains("UCS_ERR_NO_MEMORY"), e.getMessage());
                    alloc.failSize = -1;
                    client.amSend(MemorySegment.ofArray(header(size + 1)), Data.pattern(arena, size + 1, 2), T);
                    try (AmMessage m = server.amRecv(T)) {
                        assertArrayEquals(header(size + 1), m.headerBytes());
                        Data.verify(m.payload(), size + 1, 2);
                    }
                }
            }
        });
    }

    /**
     * An allocator that hands out memory UCX cannot write (a heap segment, whose address is no pointer, a read-only
     * one, or one of an arena already closed, whose memory is freed) gets its segment back, and the message is
     * dropped with a clear error instead of UCX writing there (a crash) or the copy failing inside UCX's callback (a
     * receive that never ends).
     */
    @ParameterizedTest
    @ValueSource(strings = {"heap", "read-only", "closed"})
    void anAllocatorHandingOutUnwritableMemoryDropsTheMessageClearly(String broken) throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : new long[] {777, 3 << 20}) { // eager, rendezvous
                    alloc.broken = broken;
                    client.amSendAsync(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 1));
                    MessageDroppedException e = assertThrows(MessageDroppedException.class, () -> server.amRecv(T));
                    assertArrayEquals(header(size), e.header());
                    assertTrue(e.getMessage().contains(broken), e.getMessage());
                    assertEquals(0, alloc.outstanding.get(), "the bad segment went back to its allocator");
                    alloc.broken = null;
                    client.amSend(MemorySegment.ofArray(header(size + 1)), Data.pattern(arena, size + 1, 2), T);
                    try (AmMessage m = server.amRecv(T)) {
                        Data.verify(m.payload(), size + 1, 2);
                    }
                }
            }
        });
    }

    /**
     * Messages that arrived before the peer closed stay readable after the endpoint is ended by it, and what is
     * not read is freed when the application closes the endpoint, or else when the {@code Ucx} closes (before,
     * such messages were never freed).
     */
    @ParameterizedTest
    @ValueSource(strings = {"endpoint-close", "endpoint-abort", "ucx-close"})
    void messagesUnreadWhenThePeerClosedAreFreed(String how) throws Exception {
        CountingAllocator alloc = new CountingAllocator();
        try (Ucx a = Ucx.open(); Arena arena = Arena.ofShared()) {
            Ucx b = Ucx.open(UcxOptions.defaults().withAllocator(MemoryType.HOST, alloc));
            try {
                CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                try (Listener l = b.listen(0, accepted::complete)) {
                    Endpoint client = a.connect("127.0.0.1", l.port());
                    Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                    long[] sizes = {100, 3 << 20, 200, 300}; // eager, rendezvous, eager...
                    for (int i = 0; i < sizes.length; i++) {
                        client.amSend(MemorySegment.ofArray(header(i)), Data.pattern(arena, sizes[i], i), T);
                    }
                    client.close();
                    Data.eventually(server::isClosed);
                    try (AmMessage m = server.amRecv(T)) { // still readable after the peer went
                        assertArrayEquals(header(0), m.headerBytes());
                        Data.verify(m.payload(), sizes[0], 0);
                    }
                    assertEquals(sizes.length - 1, alloc.outstanding.get(), "the unread ones are still held");
                    switch (how) {
                        case "endpoint-close" -> server.close();
                        case "endpoint-abort" -> server.abort();
                        default -> b.close();
                    }
                    Data.eventually(() -> alloc.outstanding.get() == 0);
                    if (!how.equals("ucx-close")) {
                        assertThrows(UcxException.class, () -> server.amRecv(Duration.ofSeconds(5)),
                                "a closed endpoint's messages are gone");
                    }
                }
            } finally {
                b.close();
            }
            assertEquals(0, alloc.outstanding.get());
        }
    }

    /**
     * Receives given up on (canceled, timed out) leave the inbox when the next one comes, instead of piling up for
     * every message to walk past; the message then goes to the live receive.
     */
    @Test
    void receivesGivenUpOnDoNotPileUpInTheInbox() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            for (int i = 0; i < 1000; i++) {
                assertTrue(server.amRecvAsync().cancel(false));
            }
            assertThrows(UcxTimeoutException.class, () -> server.amRecv(Duration.ofMillis(20)));
            CompletableFuture<AmMessage> live = server.amRecvAsync();
            Data.eventually(() -> TestHooks.amReceivesWaiting(server.core()) == 1);
            client.amSend(header(5), new byte[] {1, 2, 3, 4, 5});
            try (AmMessage m = live.get(10, TimeUnit.SECONDS)) {
                assertArrayEquals(header(5), m.headerBytes());
                assertArrayEquals(new byte[] {1, 2, 3, 4, 5}, m.payload().toArray(ValueLayout.JAVA_BYTE));
            }
        });
    }

    /**
     * With a handler set, a message that could not be taken is logged and gone: nothing piles up in the inbox that
     * nobody receives from, and the handler goes on with the next message.
     */
    @Test
    void withAHandlerAMessageThatCannotBeTakenDoesNotPileUp() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            java.util.concurrent.LinkedBlockingQueue<byte[]> got = new java.util.concurrent.LinkedBlockingQueue<>();
            server.onActiveMessage(m -> {
                got.add(m.headerBytes());
                m.close();
            });
            alloc.failSize = 999;
            for (int i = 0; i < 20; i++) {
                client.amSend(header(999), new byte[999]);
            }
            client.amSend(header(5), new byte[5]);
            assertArrayEquals(header(5), got.poll(10, TimeUnit.SECONDS));
            assertEquals(0, TestHooks.amEntriesReady(server.core()), "nothing kept for a receive that never comes");
            assertTrue(got.isEmpty());
        });
    }

    /**
     * A connected ucx4j peer that puts a raw endpoint's connection id in its messages (the ids are sequential) reaches
     * nothing: a raw endpoint's inbox has no reader, so such a message is dropped, not kept there until it closes.
     */
    @Test
    void aMessageForgedForARawEndpointIsDropped() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Ucx c = Ucx.open()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete); Endpoint raw = b.connect(c.workerAddress(), T)) {
                Endpoint client = a.connect("127.0.0.1", l.port(), T);
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                int own = TestHooks.retarget(client.core(), TestHooks.connectionId(raw.core()));
                client.amSend(header(1), new byte[] {1}, T); // eager
                // announced for a pull: refused, and the sender told
                assertThrows(EndpointClosedException.class, () -> client.amSend(header(1 << 20), new byte[1 << 20], T));
                TestHooks.retarget(client.core(), own);
                client.amSend(header(2), new byte[] {2}, T);
                try (AmMessage m = server.amRecv(T)) { // after the two forged ones, on the same UCX endpoint
                    assertArrayEquals(header(2), m.headerBytes());
                }
                assertEquals(0, TestHooks.amEntriesReady(raw.core()), "a forged message was kept for the raw endpoint");
            }
        }
    }

    /** A raw endpoint's messages are received worker-wide: asking the endpoint is refused, not a wait forever. */
    @Test
    void aRawEndpointRefusesEndpointLevelActiveMessageReceives() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open()) {
            Endpoint raw = a.connect(b.workerAddress());
            assertThrows(IllegalStateException.class, () -> raw.amRecv(Duration.ofSeconds(1)));
            assertThrows(IllegalStateException.class, raw::amRecvAsync);
            assertThrows(IllegalStateException.class, () -> raw.recvFrames(Duration.ofSeconds(1)));
            assertThrows(IllegalStateException.class, () -> raw.recvObject(Duration.ofSeconds(1)));
            assertThrows(IllegalStateException.class, () -> raw.onActiveMessage(m -> { }));
            raw.amSend(new byte[] {7}, new byte[] {8, 9}, T);
            try (AmMessage m = b.amRecv(T)) { // the worker-level receive still gets it
                assertArrayEquals(new byte[] {7}, m.headerBytes());
            }
        }
    }

    /** Frame sizes that add up past 2^63 and wrap around to the payload's length are refused, not sliced. */
    @Test
    void frameSizesThatOverflowAreRefused() throws Exception {
        pair(UcxOptions.defaults().withMaxMessageBytes(Long.MAX_VALUE), (client, server, alloc) -> {
            MemorySegment h = MemorySegment.ofArray(new byte[4 + 3 * AmWire.FRAME_ENTRY]);
            h.set(ValueLayout.JAVA_INT_UNALIGNED, 0, 3);
            h.set(ValueLayout.JAVA_LONG_UNALIGNED, 4, Long.MAX_VALUE);
            h.set(ValueLayout.JAVA_LONG_UNALIGNED, 4 + AmWire.FRAME_ENTRY, Long.MAX_VALUE);
            h.set(ValueLayout.JAVA_LONG_UNALIGNED, 4 + 2 * AmWire.FRAME_ENTRY, 18); // 2^64 - 2 + 18 = 16
            client.sendForged(AmWire.FRAMES, h, MemorySegment.ofArray(new byte[16])).get(10, TimeUnit.SECONDS);
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> server.recvFramesAsync().get(10, TimeUnit.SECONDS));
            assertInstanceOf(MessageRefusedException.class, e.getCause(), String.valueOf(e.getCause()));
            assertEquals(0, alloc.outstanding.get());
        });
    }

    @Test
    void objectsAndTheReceiveCap() throws Exception {
        pair(UcxOptions.defaults().withMaxMessageBytes(4 << 20), (client, server, alloc) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : new long[] {0, 1, 1024, 1 << 20, 4 << 20}) {
                    byte[] obj = Data.pattern(arena, size, 8).toArray(ValueLayout.JAVA_BYTE);
                    CompletableFuture<byte[]> r = server.recvObjectAsync();
                    client.sendObject(obj);
                    assertArrayEquals(obj, r.get(30, TimeUnit.SECONDS));
                }
                // over the receiver's cap: refused before allocating, by eager and by rendezvous alike
                long before = alloc.allocations.get();
                client.sendObjectAsync(new byte[(4 << 20) + 1]);
                MessageRefusedException e = assertThrows(MessageRefusedException.class, () -> server.recvObject(T));
                assertTrue(e.getMessage().contains("exceeds the receive cap"), e.getMessage());
                client.amSendAsync(MemorySegment.ofArray(new byte[0]), arena.allocate((4 << 20) + 1));
                assertThrows(MessageRefusedException.class, () -> server.amRecv(T));
                assertEquals(before, alloc.allocations.get());
                client.sendObject(new byte[] {3});
                assertArrayEquals(new byte[] {3}, server.recvObject(T));
                client.sendObject(MemorySegment.ofArray(new byte[] {4, 5}).asReadOnly(), T);
                assertArrayEquals(new byte[] {4, 5}, server.recvObject(T));
                client.sendObject(new byte[] {6}, T);
                assertArrayEquals(new byte[] {6}, server.recvObject(T));
            }
        });
    }

    @Test
    void pendingReceivesFailWhenTheEndpointCloses() throws Exception {
        pair(UcxOptions.defaults(), (client, server, alloc) -> {
            CompletableFuture<AmMessage> am = server.amRecvAsync();
            CompletableFuture<Frames> frames = server.recvFramesAsync();
            CompletableFuture<byte[]> obj = server.recvObjectAsync();
            client.amSend(new byte[] {1}, new byte[] {1});
            client.amSend(new byte[] {2}, new byte[] {2}); // arrives, nobody takes it: freed at close
            try (AmMessage m = am.get(10, TimeUnit.SECONDS)) {
                assertArrayEquals(new byte[] {1}, m.payloadBytes());
            }
            Data.eventually(() -> alloc.allocations.get() == 2);
            CompletableFuture<AmMessage> am2 = server.amRecvAsync();
            am2.get(10, TimeUnit.SECONDS).close();
            CompletableFuture<AmMessage> am3 = server.amRecvAsync();
            server.close();
            for (CompletableFuture<?> f : List.of(frames, obj, am3)) {
                CompletionException e = assertThrows(CompletionException.class,
                        () -> f.orTimeout(5, TimeUnit.SECONDS).join());
                assertInstanceOf(EndpointClosedException.class, e.getCause());
            }
            assertThrows(EndpointClosedException.class, () -> server.amRecv(T));
            Data.eventually(() -> alloc.outstanding.get() == 0);
        });
    }

    @Test
    void rawPeersUseAmIdZeroWithTheHeaderAsGiven() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Arena arena = Arena.ofShared()) {
            Endpoint ab = a.connect(b.workerAddress());
            for (long size : new long[] {0, 100, 4 << 20}) {
                ab.amSend(MemorySegment.ofArray(new byte[] {1, 2, 3}), Data.pattern(arena, size, 6), T);
                try (AmMessage m = b.amRecv(T)) {
                    assertArrayEquals(new byte[] {1, 2, 3}, m.headerBytes());
                    Data.verify(m.payload(), size, 6);
                    assertNull(m.endpoint());
                }
            }
            assertThrows(IllegalStateException.class, () -> ab.sendObject(new byte[1]));
            ab.close();
        }
    }

    /** Counts like its parent, and records the most rendezvous payloads pulled at once that had not landed yet. */
    static final class PullWatchingAllocator extends CountingAllocator {
        final java.util.concurrent.atomic.AtomicReference<Endpoint> ep = new java.util.concurrent.atomic.AtomicReference<>();
        final AtomicLong mostAhead = new AtomicLong();
        /** Allocations and the endpoint's received messages when it was set: what came before does not count. */
        private volatile long allocated0, received0;

        /** Watches {@code e}'s pulls from now on. */
        void watch(Endpoint e) {
            allocated0 = allocations.get();
            received0 = e.stats().messagesReceived();
            ep.set(e);
        }

        @Override
        public MemorySegment allocate(long bytes) {
            MemorySegment s = super.allocate(bytes);
            Endpoint e = ep.get();
            if (e != null) { // allocation starts a pull; stats count the messages whose pull finished
                mostAhead.accumulateAndGet((allocations.get() - allocated0) - (e.stats().messagesReceived() - received0),
                        Math::max);
            }
            return s;
        }
    }

    /**
     * An eager message UCX assembles from fragments (above one 32 KiB shared-memory segment) is kept in UCX's own
     * buffer instead of copied into a pool block: no pool block is used, every kept payload stays intact while later
     * messages arrive, payloads closed on another thread go back to UCX and later messages still arrive intact, and
     * a payload kept past its {@code Ucx}'s close fails on access instead of reading memory UCX gave back, and goes
     * back to UCX at that close (never freed otherwise).
     */
    @Test
    void eagerPayloadsUcxAssembledAreKeptInItsBufferUntilClosed() throws Exception {
        try (PooledAllocator pool = new PooledAllocator(64L << 20); Arena arena = Arena.ofShared()) {
            Ucx b = Ucx.open(UcxOptions.defaults().withAllocator(MemoryType.HOST, pool));
            // the sender sends eagerly, whatever the transport's rendezvous threshold
            try (Ucx a = Ucx.open(UcxOptions.defaults().with("RNDV_THRESH", "inf")); b) {
                CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                try (Listener l = b.listen(0, accepted::complete)) {
                    Endpoint client = a.connect("127.0.0.1", l.port());
                    Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                    long size = 100_000;
                    List<AmMessage> kept = new ArrayList<>();
                    for (int i = 0; i < 40; i++) { // more than the first table of payloads out holds
                        client.amSend(header(i), Data.pattern(arena, size, i).toArray(ValueLayout.JAVA_BYTE));
                        kept.add(server.amRecv(T));
                    }
                    for (int i = 0; i < kept.size(); i++) { // UCX reuses none of the buffers it handed over
                        assertArrayEquals(header(i), kept.get(i).headerBytes());
                        Data.verify(kept.get(i).payload(), size, i);
                    }
                    Thread closer = Thread.ofVirtual().start(() -> kept.forEach(AmMessage::close));
                    closer.join();
                    assertEquals(0, pool.cachedBytes(), "no pool block was used for UCX-assembled payloads");
                    for (int i = 40; i < 72; i++) { // after the releases, on the owner's next turns
                        client.amSend(header(i), Data.pattern(arena, size, i).toArray(ValueLayout.JAVA_BYTE));
                        try (AmMessage m = server.amRecv(T)) {
                            assertArrayEquals(header(i), m.headerBytes());
                            Data.verify(m.payload(), size, i);
                        }
                    }
                    assertEquals(0, pool.cachedBytes());
                    List<AmMessage> late = new ArrayList<>();
                    for (int i = 0; i < 3; i++) {
                        client.amSend(header(99), Data.pattern(arena, size, 99).toArray(ValueLayout.JAVA_BYTE));
                        late.add(server.amRecv(T));
                    }
                    MemorySegment payload = late.get(0).payload();
                    b.close();
                    // the three still open went back to UCX, after their memory became unreadable
                    assertEquals(3, TestHooks.heldOpenAtClose());
                    assertThrows(IllegalStateException.class, () -> payload.get(ValueLayout.JAVA_BYTE, 0));
                    late.forEach(AmMessage::close); // nothing to give back any more: no crash, no error
                }
            }
        }
    }

    /**
     * Active messages find their endpoint by the connection id in their header: through a table slot per id (mod
     * 1024) and the map behind it. Two endpoints alive at once whose ids share a slot (the long-lived one opened
     * first, the other 1024 connections later) each get exactly their own messages.
     */
    @Test
    void messagesReachTheirEndpointWhenConnectionIdsShareATableSlot() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open()) {
            java.util.concurrent.BlockingQueue<Endpoint> accepted = new java.util.concurrent.LinkedBlockingQueue<>();
            try (Listener l = b.listen(0, accepted::add)) {
                Endpoint first = a.connect("127.0.0.1", l.port(), T);
                Endpoint firstServer = accepted.poll(10, TimeUnit.SECONDS);
                Endpoint late = null, lateServer = null;
                for (int i = 1; i <= 1024; i++) { // b's ids: first + i
                    Endpoint c = a.connect("127.0.0.1", l.port(), T);
                    Endpoint s = accepted.poll(10, TimeUnit.SECONDS);
                    if (i < 1024) {
                        c.close();
                        s.close();
                    } else {
                        late = c;
                        lateServer = s;
                    }
                }
                for (int round = 0; round < 3; round++) {
                    first.amSend(new byte[] {1, (byte) round}, new byte[] {11});
                    late.amSend(new byte[] {2, (byte) round}, new byte[] {22});
                    try (AmMessage m = lateServer.amRecv(T)) {
                        assertArrayEquals(new byte[] {2, (byte) round}, m.headerBytes());
                    }
                    try (AmMessage m = firstServer.amRecv(T)) {
                        assertArrayEquals(new byte[] {1, (byte) round}, m.headerBytes());
                    }
                }
                // and the one left alone in the slot after the other closes
                late.close();
                lateServer.closeFuture().get(10, TimeUnit.SECONDS);
                first.amSend(new byte[] {3}, new byte[] {33});
                try (AmMessage m = firstServer.amRecv(T)) {
                    assertArrayEquals(new byte[] {3}, m.headerBytes());
                }
            }
        }
    }

    /** Off by option, and with checked messages: such payloads are copied into the allocator's memory as before. */
    @Test
    void ucxAssembledPayloadsAreCopiedWhenUcxBuffersAreOffOrMessagesChecked() throws Exception {
        for (boolean checked : new boolean[] {false, true}) {
            try (PooledAllocator pool = new PooledAllocator(64L << 20); Arena arena = Arena.ofShared()) {
                UcxOptions server = UcxOptions.defaults().withAllocator(MemoryType.HOST, pool);
                server = checked ? server.withCheckedMessages(true) : server.withUcxBuffers(false);
                try (Ucx a = Ucx.open(UcxOptions.defaults().with("RNDV_THRESH", "inf")); Ucx b = Ucx.open(server)) {
                    CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                    try (Listener l = b.listen(0, accepted::complete)) {
                        Endpoint client = a.connect("127.0.0.1", l.port());
                        Endpoint srv = accepted.get(10, TimeUnit.SECONDS);
                        long size = 100_000;
                        client.amSend(header(1), Data.pattern(arena, size, 1).toArray(ValueLayout.JAVA_BYTE));
                        AmMessage m = srv.amRecv(T);
                        Data.verify(m.payload(), size, 1);
                        m.close();
                        assertEquals(128 << 10, pool.cachedBytes(), "checked=" + checked + ": a pool block");
                    }
                }
            }
        }
    }

    @Test
    void rendezvousPayloadsArePulledWithinTheBudgetInArrivalOrder() throws Exception {
        for (long budget : new long[] {0, 256 << 10, 1 << 20}) {
            PullWatchingAllocator alloc = new PullWatchingAllocator();
            // the sender's rendezvous threshold set low: where UCX switches to rendezvous differs by version and
            // transport (UCX 1.20 sends 256 KiB eagerly over shared memory), and this test is about pulls. The
            // receiver is in caller mode, so every announcement has arrived before it first looks (on a fast
            // machine a progress thread took each one, and pulled it, before the next came: never two at once)
            UcxOptions options = UcxOptions.defaults().with("RNDV_THRESH", "64k").withPullBudget(budget)
                    .withAllocator(MemoryType.HOST, alloc);
            CallerModeTest.withCallerClient(options, (receiver, receiving, sending) -> {
                try (Arena arena = Arena.ofShared()) {
                    alloc.watch(receiving); // the warm-up's tag messages came before
                    long before = alloc.allocations.get();
                    long size = 256 << 10; // rendezvous by the sender's threshold
                    int n = 24;
                    List<CompletableFuture<AmMessage>> early = new ArrayList<>();
                    for (int i = 0; i < 4; i++) {
                        early.add(receiving.amRecvAsync()); // some receives wait before anything arrives
                    }
                    List<CompletableFuture<Long>> sends = new ArrayList<>();
                    for (int i = 0; i < n; i++) { // all announced at once: most must wait for a pull slot
                        sends.add(sending.amSendAsync(MemorySegment.ofArray(header(i)), Data.pattern(arena, size, i)));
                    }
                    for (int i = 0; i < n; i++) { // the owner thread drives the receiver's worker as it waits
                        try (AmMessage m = i < early.size() ? CallerModeTest.drive(receiver, early.get(i))
                                : receiving.amRecv(T)) {
                            assertArrayEquals(header(i), m.headerBytes(), "message " + i + " in arrival order");
                            Data.verify(m.payload(), size, i);
                        }
                    }
                    for (CompletableFuture<Long> f : sends) {
                        CallerModeTest.drive(receiver, f);
                    }
                    assertEquals(n, alloc.allocations.get() - before);
                    assertEquals(0, alloc.outstanding.get());
                    long most = alloc.mostAhead.get();
                    // two pulls always (double-buffered), whatever the budget; more only within it
                    long allowed = Math.max(2, budget / size);
                    assertTrue(most >= 1 && most <= allowed,
                            "budget " + budget + ": " + most + " payloads of " + size + " B pulled at once");
                    if (budget <= size) { // 24 announced at once: the second pull starts with the first
                        assertEquals(2, most, "budget " + budget + ": every payload is double-buffered");
                    }
                }
            });
        }
    }

    /**
     * A peer that announced large messages and then stopped progressing (a stopped process, a long pause) holds
     * the pulls it was given until it goes on; another peer's messages must still be pulled meanwhile: an endpoint
     * with no pull in flight gets one even when the budget is spent.
     */
    @Test
    void aStalledSenderDoesNotHoldUpAnotherPeersMessages() throws Exception {
        long size = 1 << 20;
        // senders' rendezvous threshold low, so 1 MiB goes by rendezvous on every UCX version and transport
        UcxOptions sender = UcxOptions.defaults().with("RNDV_THRESH", "64k");
        CountingAllocator alloc = new CountingAllocator();
        try (Ucx r = Ucx.open(UcxOptions.defaults().withPullBudget(size).withAllocator(MemoryType.HOST, alloc));
                Ucx s1 = Ucx.open(sender.withProgressMode(ProgressMode.CALLER)); Ucx s2 = Ucx.open(sender);
                Arena arena = Arena.ofShared()) {
            java.util.concurrent.BlockingQueue<Endpoint> accepted = new java.util.concurrent.LinkedBlockingQueue<>();
            try (Listener l = r.listen(0, accepted::add)) {
                Endpoint[] pair = connectCallerMode(s1, l, accepted);
                Endpoint c1 = pair[0], e1 = pair[1];
                byte[] hello = new byte[1];
                c1.send(hello, 8, T);
                e1.recv(hello, 8, T);
                Endpoint c2 = s2.connect("127.0.0.1", l.port());
                Endpoint e2 = accepted.poll(10, TimeUnit.SECONDS);
                int n = 6; // more than the budget
                MemorySegment[] payloads = new MemorySegment[n];
                for (int i = 0; i < n; i++) {
                    payloads[i] = Data.pattern(arena, size, i);
                }
                List<CompletableFuture<Long>> stalled = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    stalled.add(c1.amSendAsync(MemorySegment.ofArray(header(i)), payloads[i]));
                }
                // s1 progresses until they are announced (one turn over shared memory; over TCP the first payloads
                // may come meanwhile), then no more: the budget's worth of them (two, double-buffered) are being
                // pulled, and wait for s1
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (alloc.allocations.get() < 2 && System.nanoTime() < until) {
                    s1.progress();
                }
                int read = 0;
                while (true) {
                    try (AmMessage m = e1.amRecv(Duration.ofMillis(300))) {
                        Data.verify(m.payload(), size, read++);
                    } catch (UcxTimeoutException e) {
                        break;
                    }
                }
                assertTrue(read <= n - 2, read + " of s1's " + n + " payloads arrived without s1 progressing");
                assertEquals(read + 2, alloc.allocations.get(), "two pulls wait for s1");
                CompletableFuture<Long> healthy = c2.amSendAsync(MemorySegment.ofArray(header(9)),
                        Data.pattern(arena, size, 9));
                try (AmMessage m = e2.amRecv(Duration.ofSeconds(5))) {
                    assertArrayEquals(header(9), m.headerBytes());
                    Data.verify(m.payload(), size, 9);
                }
                assertEquals(size, healthy.get(10, TimeUnit.SECONDS));
                for (CompletableFuture<Long> f : stalled) { // once s1 goes on, its messages arrive, in order
                    assertEquals(size, CallerModeTest.drive(s1, f));
                }
                for (int i = read; i < n; i++) {
                    try (AmMessage m = e1.amRecv(T)) {
                        assertArrayEquals(header(i), m.headerBytes(), "message " + i + " in arrival order");
                        Data.verify(m.payload(), size, i);
                    }
                }
                assertEquals(n + 1, alloc.allocations.get());
            }
        }
    }

    /**
     * Connects caller-mode {@code s1} to {@code l}; returns {client endpoint, accepted endpoint} once a message has
     * crossed. s1 progresses only when this thread drives it, and over TCP a connection completes while both sides
     * progress: the accepted side's send may wait for s1, which progresses only in the client's calls, so it must
     * not block this thread.
     */
    private static Endpoint[] connectCallerMode(Ucx s1, Listener l,
            java.util.concurrent.BlockingQueue<Endpoint> accepted) throws Exception {
        Endpoint c1 = s1.connect("127.0.0.1", l.port(), T);
        Endpoint e1 = accepted.poll(10, TimeUnit.SECONDS);
        byte[] hello = new byte[1];
        CompletableFuture<Long> hi = e1.sendAsync(new byte[1], 7);
        c1.recv(hello, 7, T);
        hi.get(10, TimeUnit.SECONDS);
        return new Endpoint[] {c1, e1};
    }

    /**
     * A handler's message that waits behind a stalled pull (its sender does not progress) when the sender's
     * endpoint goes and the receiving worker closes right after: whichever the receiver meets first, the endpoint's
     * failure or its own close, the message reaches the handler and every block goes back, the stalled pull's
     * too. (The close-first order, where such messages once stayed in the closing worker's deferred work, never
     * run, is not reproduced on demand: the receiver's progress thread usually hears of the abort first.)
     */
    @Test
    void aHandlersMessageQueuedBehindAStalledPullIsHandedOverAndFreedWhenItsSenderGoes() throws Exception {
        // s1 progresses until both messages have their memory, and a progress call of it that met the pull's request
        // can push all 64 MiB while the receiver drains them on the other CPU (1 CI run in ~20): then the pull did not
        // stall, which proves nothing either way, and the scenario is set up again with fresh instances
        for (int attempt = 1; !handlerGetsTheMessageBehindAStalledPull(attempt == 3); attempt++) {
            System.err.println("the sender finished the large message before it stopped; again");
        }
    }

    /** False when the pull was not stalled after all (its sender had pushed it all), unless {@code last}. */
    private static boolean handlerGetsTheMessageBehindAStalledPull(boolean last) throws Exception {
        UcxOptions sender = UcxOptions.defaults().with("RNDV_THRESH", "64k").withProgressMode(ProgressMode.CALLER);
        CountingAllocator alloc = new CountingAllocator();
        java.util.concurrent.atomic.AtomicInteger handled = new java.util.concurrent.atomic.AtomicInteger();
        try (Ucx s1 = Ucx.open(sender); Arena arena = Arena.ofShared()) {
            Ucx r = Ucx.open(UcxOptions.defaults().withAllocator(MemoryType.HOST, alloc));
            try {
                java.util.concurrent.BlockingQueue<Endpoint> accepted = new java.util.concurrent.LinkedBlockingQueue<>();
                Listener l = r.listen(0, accepted::add);
                Endpoint[] pair = connectCallerMode(s1, l, accepted);
                Endpoint c1 = pair[0], e1 = pair[1];
                e1.onActiveMessage(m -> {
                    try (m) {
                        handled.incrementAndGet();
                    }
                });
                long large = 64L << 20;
                c1.amSendAsync(MemorySegment.ofArray(header(0)), Data.pattern(arena, large, 0));
                c1.amSendAsync(MemorySegment.ofArray(header(1)), Data.pattern(arena, 8, 1));
                // s1 progresses until the large message's pull has its memory and the small one has landed; then
                // no more, so the pull waits for s1 and the small message waits behind it
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (alloc.allocations.get() < 2 && System.nanoTime() < until) {
                    s1.progress();
                }
                assertEquals(2, alloc.allocations.get(), "the pull's block and the small message's");
                Thread.sleep(200);
                if (handled.get() == 2 && !last) { // the large one arrived whole, then the small one: in order
                    c1.abort();
                    return false;
                }
                assertEquals(0, handled.get(), "the small message waits behind the pull");
                // the sender's endpoint goes at once, locally: s1, in this process, must write nothing more into
                // r's shared memory, which r's close unmaps; r closes before it hears of it
                c1.abort();
            } finally {
                r.close();
            }
            assertEquals(1, handled.get(), "the close failed the endpoint: its handler got the waiting message");
            assertEquals(0, alloc.outstanding.get(), "every block went back");
        }
        return true;
    }

    @Test
    void smallMessagesDoNotOvertakeLargeOnesStillBeingPulled() throws Exception {
        // budget 0: two pulls at a time, so each 4 MiB payload is still arriving when the 8 B messages after it do
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(UcxOptions.defaults().withPullBudget(0));
                Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete); Endpoint client = a.connect("127.0.0.1", l.port())) {
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                int n = 24;
                List<CompletableFuture<Long>> sends = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    long size = i % 3 == 0 ? 4 << 20 : 8;
                    sends.add(client.amSendAsync(MemorySegment.ofArray(header(i)), Data.pattern(arena, size, i)));
                }
                for (int i = 0; i < n; i++) {
                    try (AmMessage m = server.amRecv(T)) {
                        assertArrayEquals(header(i), m.headerBytes(), "message " + i + " in arrival order");
                        Data.verify(m.payload(), i % 3 == 0 ? 4 << 20 : 8, i);
                    }
                }
                for (CompletableFuture<Long> f : sends) {
                    f.get(20, TimeUnit.SECONDS);
                }
            }
        }
    }

    @Test
    void closingAnEndpointReleasesMessagesAnnouncedButNotPulled() throws Exception {
        // Over TCP only (CI's second pass), closing the receiving endpoint while 32 x 8 MiB rendezvous sends are in
        // flight can crash the sender's JVM inside UCX (SIGSEGV at pc 0 in uct_tcp_iface_progress, UCX 1.13.1, once
        // in CI): the use-after-free of docs/ucx-faults/README.md. What this test checks is the shared-memory path;
        // the TCP peer-failure tests cover TCP.
        org.junit.jupiter.api.Assumptions.assumeTrue(ConfigAndInfoTest.startupEnv("UCX_TLS") == null,
                "a UCX TCP defect makes this scenario crash the JVM; run over the default transports only");
        // UCX 1.16 and 1.17 (protocols v2) keep the aborted sends of that buffer after the sender's forced close, a
        // pull cut short holding up their memory handle's invalidation for good (fixed in UCX 1.18, 40c90834): they
        // end with the endpoint's release (docs/ucx-faults)
        PullWatchingAllocator alloc = new PullWatchingAllocator();
        try (Ucx a = Ucx.open();
                Ucx b = Ucx.open(UcxOptions.defaults().withPullBudget(0).withAllocator(MemoryType.HOST, alloc));
                Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                MemorySegment big = Data.pattern(arena, 8 << 20, 5);
                int n = 32;
                List<CompletableFuture<Long>> sends = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    sends.add(client.amSendAsync(MemorySegment.ofArray(header(i)), big));
                }
                try (AmMessage m = server.amRecv(T)) {
                    Data.verify(m.payload(), 8 << 20, 5);
                }
                server.close(); // the rest: some pulled and unread (freed), the others never pulled (released)
                assertTrue(alloc.allocations.get() < n, alloc.allocations.get() + " of " + n + " were pulled");
                for (CompletableFuture<Long> f : sends) { // UCX acknowledges a released message: no send hangs
                    try {
                        f.get(20, TimeUnit.SECONDS);
                    } catch (ExecutionException e) {
                        assertInstanceOf(UcxException.class, e.getCause());
                    }
                }
                Data.eventually(() -> alloc.outstanding.get() == 0);
                // the worker still serves: a new connection carries a rendezvous message
                CompletableFuture<Endpoint> again = new CompletableFuture<>();
                try (Listener l2 = b.listen(0, again::complete); Endpoint c2 = a.connect("127.0.0.1", l2.port())) {
                    Endpoint s2 = again.get(10, TimeUnit.SECONDS);
                    c2.amSend(MemorySegment.ofArray(header(1)), big, T);
                    try (AmMessage m = s2.amRecv(T)) {
                        Data.verify(m.payload(), 8 << 20, 5);
                    }
                }
            }
        }
    }

    /**
     * A sender's abort while the receiver has a pull in flight and stopped progressing (a caller-mode worker whose
     * thread does something else; the same holds for a receiver that died): the sends of that one buffer still
     * waiting to be pulled end typed. UCX (1.13-1.20) aborts them but keeps each waiting for its memory handle's
     * invalidation, which the pull cut short holds up until the receiver answers, if ever (docs/ucx-faults):
     * without ucx4j ending them at the endpoint's release they stayed open until the sender's worker closed.
     */
    @Test
    void anAbortWithAPullInFlightEndsEverySendOfThatBuffer() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(ConfigAndInfoTest.startupEnv("UCX_TLS") == null,
                "over shared memory (a UCX TCP defect makes aborts with queued data crash: docs/ucx-faults)");
        try (Ucx a = Ucx.open(UcxOptions.defaults().with("RNDV_THRESH", "64k"));
                Ucx b = Ucx.open(UcxOptions.defaults().with("RNDV_THRESH", "64k")
                        .withProgressMode(ProgressMode.CALLER));
                Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = a.listen(0, accepted::complete)) {
                Endpoint receiver = b.connect("127.0.0.1", l.port(), T);
                Endpoint sender = accepted.get(10, TimeUnit.SECONDS);
                MemorySegment big = Data.pattern(arena, 8 << 20, 7);
                int n = 16;
                List<CompletableFuture<Long>> sends = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    sends.add(sender.amSendAsync(MemorySegment.ofArray(header(i)), big));
                }
                try (AmMessage m = receiver.amRecv(T)) { // b progresses only in here: the next pull is left open
                    Data.verify(m.payload(), 8 << 20, 7);
                }
                Thread.sleep(200); // the sender fills the FIFO with what b no longer takes
                sender.abort();
                int failed = 0;
                for (CompletableFuture<Long> f : sends) {
                    try {
                        f.get(10, TimeUnit.SECONDS);
                    } catch (ExecutionException e) {
                        assertInstanceOf(UcxException.class, e.getCause());
                        failed++;
                    }
                }
                assertTrue(failed >= n - 3, failed + " of " + n + " sends failed");
                receiver.abort();
            }
        }
    }

    /**
     * Over TCP: the peer dies while it streams a payload, and over shared memory a process killed in the middle of
     * writing a FIFO element leaves that element unpublished, which stalls this worker's shared-memory receives
     * from every peer for good (a UCX limitation; see the README's failure model).
     */
    @Test
    void aPeerKilledWithMessagesAnnouncedButNotPulledFailsTheReceiverTyped() throws Exception {
        PullWatchingAllocator alloc = new PullWatchingAllocator();
        try (Ucx ucx = Ucx.open(UcxOptions.defaults().withPullBudget(0).withAllocator(MemoryType.HOST, alloc)
                .with("TLS", "tcp"))) {
            java.util.concurrent.BlockingQueue<Endpoint> accepted = new java.util.concurrent.LinkedBlockingQueue<>();
            try (Listener l = ucx.listen(0, accepted::add);
                    Peer p = Peer.start(Map.of("UCX_TLS", "tcp"), List.of(), "connect-am-flood",
                            String.valueOf(l.port()))) {
                Endpoint ep = accepted.poll(20, TimeUnit.SECONDS);
                p.await("SENT");
                ep.amRecv(T).close(); // pulls go two at a time: most of the 32 are still announced only
                long killedAt = System.nanoTime();
                p.kill();
                int read = 1;
                int lost = 0;
                UcxException failure = null;
                while (failure == null) {
                    try (AmMessage m = ep.amRecv(T)) {
                        assertArrayEquals(new byte[] {(byte) (read + lost)}, m.headerBytes(), "read in order");
                        read++; // pulled before the peer died: still readable
                    } catch (MessageDroppedException e) {
                        // announced (with UCX 1.20 all 31 were) but its payload never came: reported in its place,
                        // naming it by its header
                        assertEquals("UCS_ERR_CONNECTION_RESET", e.statusName(), e.toString());
                        assertArrayEquals(new byte[] {(byte) (read + lost)}, e.header(), "lost in order");
                        lost++;
                    } catch (UcxException e) {
                        failure = e;
                    }
                }
                assertInstanceOf(ConnectionResetException.class, failure, failure.toString());
                assertTrue(read + lost <= 32, read + " read and " + lost + " lost of 32 sent");
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedAt);
                assertTrue(ms < 5000, "failed after " + ms + " ms");
                assertTrue(read < 32, read + " of 32 read");
                ep.close();
                Data.eventually(() -> alloc.outstanding.get() == 0);
                // the worker goes on serving
                try (Arena arena = Arena.ofShared(); Ucx other = Ucx.open();
                        Endpoint c = other.connect("127.0.0.1", l.port())) {
                    c.amSend(MemorySegment.ofArray(header(2)), Data.pattern(arena, 1 << 20, 2), T);
                    try (AmMessage m = accepted.poll(10, TimeUnit.SECONDS).amRecv(T)) {
                        assertArrayEquals(header(2), m.headerBytes());
                        Data.verify(m.payload(), 1 << 20, 2);
                    }
                }
            }
        }
    }

    @Test
    void crossProcessEchoOfEveryKind() throws Exception {
        try (Peer p = Peer.start("serve-am-echo"); Ucx ucx = Ucx.open(); Arena arena = Arena.ofShared()) {
            int port = Integer.parseInt(p.await("PORT"));
            try (Endpoint ep = ucx.connect("127.0.0.1", port)) {
                for (long size : SIZES) {
                    ep.amSend(MemorySegment.ofArray(header(size)), Data.pattern(arena, size, 11), T);
                    try (AmMessage m = ep.amRecv(T)) {
                        assertArrayEquals(header(size), m.headerBytes());
                        Data.verify(m.payload(), size, 11);
                    }
                    byte[] obj = Data.pattern(arena, size, 12).toArray(ValueLayout.JAVA_BYTE);
                    ep.sendObject(obj);
                    assertArrayEquals(obj, ep.recvObject(T));
                }
                for (int n : new int[] {0, 1, 100}) {
                    List<MemorySegment> frames = new ArrayList<>();
                    for (int i = 0; i < n; i++) {
                        frames.add(Data.pattern(arena, i == 1 ? 1 << 20 : i * 13L, i));
                    }
                    ep.sendFrames(frames, T);
                    try (Frames got = ep.recvFrames(T)) {
                        assertEquals(n, got.count());
                        for (int i = 0; i < n; i++) {
                            Data.verify(got.get(i), frames.get(i).byteSize(), i);
                        }
                    }
                }
            }
        }
    }

    @Test
    void pendingActiveMessageAndStreamReceivesFailTypedWhenThePeerIsKilled() throws Exception {
        try (Peer p = Peer.start("serve-am-echo"); Ucx ucx = Ucx.open(); Arena streamBuf = Arena.ofShared()) {
            int port = Integer.parseInt(p.await("PORT"));
            Endpoint ep = ucx.connect("127.0.0.1", port);
            CompletableFuture<AmMessage> am = ep.amRecvAsync();
            CompletableFuture<Frames> frames = ep.recvFramesAsync();
            CompletableFuture<byte[]> obj = ep.recvObjectAsync();
            CompletableFuture<Long> stream = ep.streamRecvAsync(streamBuf.allocate(8));
            long killedAt = System.nanoTime();
            p.kill();
            for (CompletableFuture<?> f : List.of(am, frames, obj, stream)) {
                CompletionException e = assertThrows(CompletionException.class,
                        () -> f.orTimeout(10, TimeUnit.SECONDS).join());
                assertInstanceOf(ConnectionResetException.class, e.getCause(), e.getCause().toString());
            }
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedAt);
            assertTrue(ms < 5000, "failed after " + ms + " ms");
            assertFalse(ep.isAlive());
            assertThrows(ConnectionResetException.class, () -> ep.amSend(new byte[1], new byte[1]));
        }
    }
}
