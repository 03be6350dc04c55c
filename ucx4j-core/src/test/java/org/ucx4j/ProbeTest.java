package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Probing for a tag message (peek vs remove), then receiving exactly that message by its handle. */
class ProbeTest {
    static final Duration T = Duration.ofSeconds(10);

    static ProbedMessage await(java.util.function.Supplier<ProbedMessage> probe) throws InterruptedException {
        ProbedMessage[] got = new ProbedMessage[1];
        Data.eventually(() -> (got[0] = probe.get()) != null);
        return got[0];
    }

    @Test
    void workerLevelPeekThenRemoveThenReceiveByHandle() throws Exception {
        FailureTest.pair(Data.rendezvous(), (a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                assertNull(b.probe(0x50, 0xF0, false), "nothing sent yet");
                for (long size : new long[] {0, 100, 1 << 20}) { // eager and rendezvous
                    client.sendTaggedAsync(Data.pattern(arena, size, 9), 0x55);
                    ProbedMessage peek = await(() -> b.probe(0x50, 0xF0, false));
                    assertEquals(0x55, peek.tag());
                    assertEquals(size, peek.length());
                    assertFalse(peek.isRemoved());
                    assertThrows(IllegalStateException.class, () -> b.recv(peek, arena.allocate(1)));
                    assertNotNull(b.probe(0x55, -1L, false), "a peek leaves the message queued");
                    assertNull(b.probe(0x56, -1L, false), "the mask is honoured");
                    ProbedMessage taken = b.probe(0x55, -1L, true);
                    assertTrue(taken.isRemoved());
                    assertNull(b.probe(0x55, -1L, false), "a removed message is no longer queued");
                    // UCX's handle belongs to b's worker: another instance may not receive it (it would hand b's
                    // descriptor to a's worker), and the refusal leaves it to b
                    MemorySegment elsewhere = arena.allocate(Math.max(1, taken.length()));
                    assertThrows(IllegalArgumentException.class, () -> a.recv(taken, elsewhere));
                    assertThrows(IllegalArgumentException.class, () -> a.recvAsync(taken, elsewhere));
                    // allocate exactly what the probe reported, then receive that very message
                    MemorySegment buf = arena.allocate(Math.max(1, taken.length())).asSlice(0, taken.length());
                    assertEquals(size, b.recvAsync(taken, buf).get(10, TimeUnit.SECONDS));
                    Data.verify(buf, size, 9);
                    assertThrows(IllegalStateException.class, () -> b.recv(taken, buf), "received once only");
                }
            }
        });
    }

    /**
     * A blocking receive of a probed message from code running inside UCX progress (a plain future's dependent, run
     * where a receive completes) is refused before it claims the message, which then still arrives whole.
     */
    @Test
    void aBlockingReceiveOfAProbedMessageRefusedInsideProgressLeavesTheMessage() throws Exception {
        FailureTest.pair(Data.rendezvous(), (a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                client.send(Data.pattern(arena, 100, 4), 7);
                client.sendTagged(Data.pattern(arena, 100, 5), 0x77);
                ProbedMessage m = await(() -> server.probe(7, true));
                ProbedMessage w = await(() -> b.probe(0x77, -1L, true));
                MemorySegment buf = arena.allocate(100), wbuf = arena.allocate(100);
                // a rendezvous message: its receive completes in UCX's progress however early it is posted (by its
                // callback: the receive on tag 10 takes the turn of the receives polled without one)
                MemorySegment first = arena.allocate(8);
                CompletableFuture<Long> polled = server.recvAsync(first, 10);
                CompletableFuture<Long> trigger = server.recvAsync(arena.allocate(1 << 20), 9);
                CompletableFuture<Void> inside = CompletableFuture.allOf(trigger).handle((v, e) -> {
                    RuntimeException ep = assertThrows(IllegalStateException.class, () -> server.recv(m, buf));
                    RuntimeException wk = assertThrows(IllegalStateException.class, () -> b.recv(w, wbuf));
                    assertTrue(ep.getMessage().contains("inside UCX progress"), ep.getMessage());
                    assertTrue(wk.getMessage().contains("inside UCX progress"), wk.getMessage());
                    return null;
                });
                CompletableFuture<Long> sent = client.sendAsync(arena.allocate(1 << 20), 9);
                inside.get(10, TimeUnit.SECONDS);
                sent.get(10, TimeUnit.SECONDS);
                assertEquals(100, server.recv(m, buf, T), "the refused receive left the message to this one");
                Data.verify(buf, 100, 4);
                assertEquals(100, b.recv(w, wbuf, T));
                Data.verify(wbuf, 100, 5);
                client.send(Data.pattern(arena, 8, 6), 10);
                assertEquals(8, polled.get(10, TimeUnit.SECONDS));
                Data.verify(first, 8, 6);
            }
        });
    }

    @Test
    void endpointProbeSeesOnlyItsOwnTagSpace() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                client.send(new byte[] {1, 2, 3}, 7);
                ProbedMessage m = await(() -> server.probe(7, true));
                assertEquals(7, m.tag());
                assertEquals(3, m.length());
                assertNull(b.probe(0, 0, false), "endpoint-private messages are invisible to worker probes");
                assertThrows(IllegalArgumentException.class, () -> b.recv(m, arena.allocate(3)),
                        "probed on the endpoint, not on the worker");
                MemorySegment buf = arena.allocate(3);
                assertThrows(IllegalArgumentException.class, () -> server.recv(m, buf, Duration.ofMillis(-1)));
                assertEquals(3, server.recv(m, buf, Duration.ofSeconds(10)));
                assertEquals(2, buf.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 1));
                // a removed message larger than the buffer: truncation error, never silent
                client.send(new byte[64], 8);
                ProbedMessage big = await(() -> server.probe(8, true));
                assertThrows(MessageTruncatedException.class, () -> server.recv(big, arena.allocate(16)));
                // refused before UCX consumed it: it stays, and a large enough buffer gets it whole
                MemorySegment whole = arena.allocate(64).fill((byte) 1);
                assertEquals(64, server.recv(big, whole, Duration.ofSeconds(10)));
                assertEquals(0, whole.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 63));
                assertThrows(IllegalStateException.class, () -> server.recv(big, whole), "received once only");
            }
        });
    }

    /**
     * A removed message's receive that times out before UCX saw it (caller mode: the owner was not progressing)
     * gives the handle back: the next receive by that handle gets the message, intact, instead of it being lost.
     */
    @Test
    void aProbedReceiveWithdrawnBeforeItStartedLeavesTheMessageForTheNextTry() throws Exception {
        CallerModeTest.withCallerClient((caller, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                ProbedMessage m = probedOnCallerOwner(caller, client, server, arena, 4);
                MemorySegment in = arena.allocate(64);
                java.util.concurrent.CompletableFuture<Throwable> other = new java.util.concurrent.CompletableFuture<>();
                Thread.ofPlatform().start(() -> { // the owner (this thread) does not progress meanwhile
                    try {
                        client.recv(m, in, Duration.ofMillis(300));
                        other.complete(null);
                    } catch (Throwable t) {
                        other.complete(t);
                    }
                });
                Throwable t = other.get(10, TimeUnit.SECONDS);
                assertTrue(t instanceof UcxTimeoutException, "got " + t);
                assertEquals(64, client.recv(m, in, T), "the message waited for the next try");
                Data.verify(in, 64, 4);
                assertThrows(IllegalStateException.class, () -> client.recv(m, in, T), "received once only");
            }
        });
    }
    /**
     * A thread's pooled blocking op, reused after receiving a probed message, must not keep that receive's give-back:
     * a later call on the thread withdrawn before it started would hand the message back as if never received, and
     * a second receive by its handle would reach UCX with a handle UCX already freed.
     */
    @Test
    void aWithdrawnCallAfterAProbedReceiveDoesNotHandTheMessageBack() throws Exception {
        CallerModeTest.withCallerClient((caller, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                ProbedMessage m = probedOnCallerOwner(caller, client, server, arena, 5);
                MemorySegment in = arena.allocate(64);
                java.util.concurrent.CompletableFuture<Long> first = new java.util.concurrent.CompletableFuture<>();
                java.util.concurrent.CountDownLatch secondMay = new java.util.concurrent.CountDownLatch(1);
                java.util.concurrent.CompletableFuture<Throwable> second = new java.util.concurrent.CompletableFuture<>();
                Thread.ofPlatform().start(() -> {
                    try {
                        first.complete(client.recv(m, in, Duration.ofSeconds(10)));
                        secondMay.await();
                        client.recv(arena.allocate(8), 99, Duration.ofMillis(50)); // the owner is not progressing
                        second.complete(null);
                    } catch (Throwable t) {
                        first.completeExceptionally(t);
                        second.complete(t);
                    }
                });
                assertEquals(64, CallerModeTest.drive(caller, first));
                Data.verify(in, 64, 5);
                secondMay.countDown();
                Throwable t = second.get(10, TimeUnit.SECONDS);
                assertTrue(t instanceof UcxTimeoutException, "got " + t);
                assertThrows(IllegalStateException.class, () -> client.recv(m, in, T), "received once only");
            }
        });
    }

    /** A 64-byte message (pattern {@code seed}) sent to a caller-mode client, taken by a removing probe there. */
    private static ProbedMessage probedOnCallerOwner(Ucx caller, Endpoint client, Endpoint server, Arena arena,
            int seed) throws Exception {
        server.sendAsync(Data.pattern(arena, 64, seed), 3);
        return await(() -> {
            caller.progress();
            return client.probe(3, true);
        });
    }
}
