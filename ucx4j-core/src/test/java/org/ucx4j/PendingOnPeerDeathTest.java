package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

/**
 * Operations this side started, still in flight when the peer process dies, fail with a typed exception within 5 s:
 * the peer is stopped (SIGSTOP) first, so that they are certainly pending, then killed (SIGKILL). Tag, stream and
 * active-message sends too large to finish without the peer, on shared memory; RMA gets on TCP (on shared memory
 * a get from the peer's UCX-allocated memory is a copy that needs no peer at all). Pending receives: FailureTest.
 */
@org.junit.jupiter.api.Timeout(180)
class PendingOnPeerDeathTest {
    static final Duration T = Duration.ofSeconds(20);

    private static void signal(Peer p, String sig) throws Exception {
        Process k = new ProcessBuilder("kill", "-" + sig, String.valueOf(p.process.pid())).inheritIO().start();
        assertTrue(k.waitFor(10, TimeUnit.SECONDS) && k.exitValue() == 0, "kill -" + sig);
    }

    /** Skips a test that needs the default transports (shared memory between processes): not with UCX_TLS set. */
    private static void assumeSharedMemory() throws java.io.IOException {
        org.junit.jupiter.api.Assumptions.assumeTrue(ConfigAndInfoTest.startupEnv("UCX_TLS") == null,
                "shared memory only (UCX_TLS is set)");
    }

    private static Map<String, String> env(String transport) {
        return transport.equals("tcp") ? Map.of("UCX_TLS", "tcp") : Map.of();
    }

    private static UcxOptions options(String transport) {
        return transport.equals("tcp") ? UcxOptions.defaults().with("TLS", "tcp") : UcxOptions.defaults();
    }

    /**
     * Kills the stopped peer and checks that every operation not done by then fails with
     * {@link ConnectionResetException} (UCX's status name in the message) within 5 s; at least one of each kind
     * must have been pending.
     */
    private static void killAndCheck(Peer p, Map<String, List<CompletableFuture<Long>>> ops) throws Exception {
        String none = noneOfSomeKindPending(ops);
        assertTrue(none == null, none);
        checkFailTypedOnKill(p, ops);
    }

    /**
     * Waits for whatever can finish without the peer; then null if at least one operation of each kind is still
     * pending, else which kind has none, and how its operations ended.
     */
    private static String noneOfSomeKindPending(Map<String, List<CompletableFuture<Long>>> ops) throws Exception {
        Thread.sleep(300);
        for (var e : ops.entrySet()) {
            if (e.getValue().stream().allMatch(CompletableFuture::isDone)) {
                return e.getKey() + ": none pending with the peer stopped; "
                        + e.getValue().stream().map(PendingOnPeerDeathTest::outcome).toList();
            }
        }
        return null;
    }

    private static void checkFailTypedOnKill(Peer p, Map<String, List<CompletableFuture<Long>>> ops)
            throws Exception {
        Map<String, List<CompletableFuture<Long>>> pending = new java.util.LinkedHashMap<>();
        ops.forEach((kind, fs) -> pending.put(kind, fs.stream().filter(f -> !f.isDone()).toList()));
        long killedAt = System.nanoTime();
        p.kill();
        for (var e : pending.entrySet()) {
            for (CompletableFuture<Long> f : e.getValue()) {
                long left = Math.max(1, TimeUnit.SECONDS.toNanos(5) - (System.nanoTime() - killedAt));
                ExecutionException x = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                        () -> f.get(left, TimeUnit.NANOSECONDS), e.getKey() + " completed after the peer died");
                assertInstanceOf(ConnectionResetException.class, x.getCause(), e.getKey() + ": " + x.getCause());
                assertTrue(x.getCause().getMessage().contains("UCS_ERR_"), x.getCause().getMessage());
            }
        }
    }

    /** How a finished operation ended: its value or its exception. */
    private static String outcome(CompletableFuture<Long> f) {
        try {
            return "value " + f.getNow(null);
        } catch (java.util.concurrent.CompletionException | java.util.concurrent.CancellationException e) {
            return String.valueOf(e.getCause() != null ? e.getCause() : e);
        }
    }

    /**
     * On shared memory only: over TCP, a peer that dies while this side still has bytes to write to it can crash
     * UCX's TCP transport (docs/internals.md, "UCX TCP transport crash"; no binding can guard against it), and CI's
     * TCP pass must not gamble on it.
     */
    @org.junit.jupiter.api.Test
    void pendingSendsOfEveryKindFailTypedWhenTheStoppedPeerIsKilled() throws Exception {
        assumeSharedMemory();
        String transport = "shm";
        try (Peer p = Peer.start(env(transport), List.of(), "serve-am-echo"); Arena arena = Arena.ofShared();
                Ucx ucx = Ucx.open(options(transport))) {
            Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
            ep.amSend(new byte[] {1}, new byte[] {2}, T); // the connection works both ways first
            ep.amRecv(T).close();
            signal(p, "STOP");
            MemorySegment big = Data.pattern(arena, 8 << 20, 1);
            Map<String, List<CompletableFuture<Long>>> ops = new java.util.LinkedHashMap<>();
            for (int i = 0; i < 4; i++) {
                ops.computeIfAbsent("tag send", k -> new ArrayList<>()).add(ep.sendAsync(big, 5));
                ops.computeIfAbsent("stream send", k -> new ArrayList<>()).add(ep.streamSendAsync(big));
                ops.computeIfAbsent("active message", k -> new ArrayList<>())
                        .add(ep.amSendAsync(MemorySegment.ofArray(new byte[] {(byte) i}), big));
            }
            killAndCheck(p, ops);
        }
    }

    /**
     * Many rendezvous active messages from one buffer to a peer that pulls (receives) them; the peer is stopped
     * while it pulls, then killed: every send still pending fails typed. UCX's forced close aborts such sends but
     * completes them only once the buffer's registration is let go, which a pull cut short holds for good when its
     * receiver is dead (UCX 1.13-1.20, docs/ucx-faults, the two-process reproducer); ucx4j ends them itself.
     */
    @org.junit.jupiter.api.Test
    void activeMessagesOfOneBufferFailTypedWhenThePeerIsKilledWhilePulling() throws Exception {
        assumeSharedMemory();
        try (Peer p = Peer.start(env("shm"), List.of(), "serve-am-echo"); Arena arena = Arena.ofShared();
                Ucx ucx = Ucx.open(options("shm"))) {
            Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
            ep.onActiveMessage(AmMessage::close); // the echoes
            MemorySegment big = Data.pattern(arena, 8 << 20, 3);
            List<CompletableFuture<Long>> sends = new ArrayList<>();
            for (int i = 0; i < 32; i++) {
                sends.add(ep.amSendAsync(MemorySegment.ofArray(new byte[] {(byte) i}), big));
            }
            Data.eventually(() -> sends.stream().filter(CompletableFuture::isDone).count() >= 2); // it pulls
            List<CompletableFuture<Long>> pulled = sends.stream().filter(CompletableFuture::isDone).toList();
            signal(p, "STOP");
            for (CompletableFuture<Long> s : pulled) {
                assertEquals(8 << 20, s.getNow(-1L)); // those the peer took went through whole
            }
            killAndCheck(p, Map.of("active message", sends));
        }
    }

    /**
     * Puts on shared memory into memory the peer registered (its own, not UCX's: a put into UCX-allocated shared
     * memory is a copy that needs no peer), which UCX with peer error handling carries as messages through the
     * peer's FIFO: with the peer stopped the FIFO fills and later puts wait in UCX; killing the peer fails them typed.
     */
    @org.junit.jupiter.api.Test
    void pendingPutsFailTypedWhenTheStoppedPeerIsKilled() throws Exception {
        assumeSharedMemory();
        try (Peer p = Peer.start(env("shm"), List.of(), "serve-rma-registered"); Arena arena = Arena.ofShared();
                Ucx ucx = Ucx.open(options("shm"))) {
            Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
            RemoteKey key = ep.unpackRemoteKey(ep.recvObject(T));
            MemorySegment src = Data.pattern(arena, 8 << 20, 22);
            ep.put(src.asSlice(0, 4096), key, 0, T); // puts work first
            ep.flush(T);
            signal(p, "STOP");
            List<CompletableFuture<Long>> puts = new ArrayList<>();
            for (int i = 0; i < 8; i++) {
                puts.add(ep.putAsync(src, key, (long) (i % 4) << 23));
            }
            killAndCheck(p, Map.of("put", puts));
        }
    }

    /**
     * Without peer error handling UCX has no forced close, so nothing purges a send to a peer that stopped, and a
     * graceful close's flush would wait for it as long as the peer stays stopped; the close still returns within
     * its bound (and 2 s), and the endpoint is closed. (The send stays with UCX, which cannot let go of its buffer,
     * until the peer dies or the {@code Ucx} closes.)
     */
    @org.junit.jupiter.api.Test
    void aGracefulCloseKeepsItsBoundWithoutPeerErrorHandlingWhenThePeerStopped() throws Exception {
        try (Ucx ucx = Ucx.open(UcxOptions.defaults().withPeerErrorHandling(false)); Arena arena = Arena.ofShared();
                Peer p = Peer.start(Map.of("UCX4J_TEST_PEER_ERRORS", "off"), List.of(), "serve-echo")) {
            Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
            signal(p, "STOP");
            CompletableFuture<Long> pending = ep.sendAsync(Data.pattern(arena, 8 << 20, 1), 5);
            Thread.sleep(200);
            assertTrue(!pending.isDone(), "a rendezvous send to a stopped peer stays pending: " + pending);
            long start = System.nanoTime();
            CompletableFuture<Void> closed = CompletableFuture.runAsync(() -> ep.close(Duration.ofSeconds(1)));
            closed.get(20, TimeUnit.SECONDS); // TimeoutException: the close waited past its bound
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(ms < 3000, "close(1 s) took " + ms + " ms");
            assertTrue(ep.isClosed() || !ep.isAlive(), "closed: " + ep);
        }
    }

    /**
     * Over TCP, where a get needs the peer to answer. Once, in a CI TCP pass, every get had ended within 300 ms of
     * the stop; as UCX's TCP transport is known to fail on its own here (docs/internals.md, "UCX TCP transport
     * crash"), such a try is reported and run once more with a fresh peer; twice in a row fails.
     */
    @org.junit.jupiter.api.Test
    void pendingGetsFailTypedWhenTheStoppedPeerIsKilled() throws Exception {
        for (int attempt = 1;; attempt++) {
            try (Peer p = Peer.start(env("tcp"), List.of(), "serve-rma"); Arena arena = Arena.ofShared();
                    Ucx ucx = Ucx.open(options("tcp"))) {
                Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
                RemoteKey key = ep.unpackRemoteKey(ep.recvObject(T));
                MemorySegment dst = arena.allocate(1 << 20);
                ep.get(dst, key, 0, T); // gets work first
                Data.verify(dst, 1 << 20, 21);
                signal(p, "STOP");
                List<CompletableFuture<Long>> gets = new ArrayList<>();
                for (int i = 0; i < 8; i++) {
                    gets.add(ep.getAsync(dst, key, (long) i << 20));
                }
                Map<String, List<CompletableFuture<Long>>> ops = Map.of("get", gets);
                String none = noneOfSomeKindPending(ops);
                if (none != null && attempt == 1) {
                    System.err.println("PendingOnPeerDeathTest: trying once more: " + none);
                    continue;
                }
                assertTrue(none == null, none);
                checkFailTypedOnKill(p, ops);
                return;
            }
        }
    }
}
