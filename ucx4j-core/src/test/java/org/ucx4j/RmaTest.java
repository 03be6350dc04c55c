package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** One-sided RMA: registration, remote keys (and their validation), put/get with offsets and bounds, flush, fence. */
class RmaTest {
    static final Duration T = Duration.ofSeconds(20);
    static final long[] SIZES = {0, 1, 8, 1024, 64 * 1024, 1 << 20, 16 << 20};
    static final long REGION = 32 << 20;

    static void fill(MemorySegment m, long from, long size, int seed) {
        for (long i = 0; i < size; i++) {
            m.set(ValueLayout.JAVA_BYTE, from + i, Data.at(i, seed));
        }
    }

    /**
     * A remote key closed while its endpoint is being closed is released only after the endpoint is (puts and gets
     * still in flight there may use it until then), not at once.
     */
    @Test
    void aRemoteKeyClosedDuringItsEndpointsCloseWaitsForTheRelease() throws Exception {
        boolean caught = false;
        for (int round = 0; round < 5 && !caught; round++) {
            caught = keyClosedWhileClosing(); // false: the close was quicker than this thread: try again
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(caught, "no round caught the endpoint while it closed");
    }

    /** True when the key was closed while the endpoint was still closing (the case this checks). */
    private static boolean keyClosedWhileClosing() throws Exception {
        java.util.concurrent.atomic.AtomicBoolean caught = new java.util.concurrent.atomic.AtomicBoolean();
        FailureTest.pair((a, b, client, server) -> {
            try (MemoryRegion region = b.allocateMemory(4096); Arena arena = Arena.ofShared()) {
                RemoteKey key = client.unpackRemoteKey(region.packRemoteKey());
                // a rendezvous send nobody receives keeps the graceful close flushing until its bound
                CompletableFuture<Long> stuck = client.sendAsync(arena.allocate(8 << 20), 77);
                CompletableFuture<Void> closing = CompletableFuture.runAsync(() -> client.close(Duration.ofSeconds(2)));
                Data.eventually(() -> !client.isAlive());
                if (client.isClosed()) {
                    closing.get(10, TimeUnit.SECONDS);
                    return; // the close was quicker than this thread: nothing to show
                }
                caught.set(true);
                key.close();
                assertTrue(client.isClosed(), "the key outlived the endpoint's close");
                closing.get(10, TimeUnit.SECONDS);
                Data.eventually(stuck::isDone); // purged by the close (a polled send is seen at the next full test)
            }
        });
        return caught.get();
    }

    /**
     * Memory UCX allocated is not freed while an I/O call writes into its segment: the region's close refuses and
     * the region stays usable; once the call has ended, the close goes through and the segment is gone.
     */
    /**
     * Over TCP a put completes remotely only when the peer progresses: closing its key while that peer sits idle
     * (caller mode, no call) returns after its bound and leaves the endpoint alive (it used to abort it).
     */
    @Test
    void closingAKeyWhoseFlushIsSlowLeavesTheEndpointAlive() throws Exception {
        CallerModeTest.withCallerClient(UcxOptions.defaults().with("TLS", "tcp"), (a, client, server) -> {
            try (MemoryRegion region = a.allocateMemory(1 << 20); Arena arena = Arena.ofShared()) {
                RemoteKey key = server.unpackRemoteKey(region.packRemoteKey());
                CompletableFuture<Long> put = server.putAsync(Data.pattern(arena, 1 << 20, 3), key, 0);
                long t0 = System.nanoTime();
                key.close();
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(ms < 8000, "close took " + ms + " ms");
                assertTrue(server.isAlive(), "closing a key aborted its endpoint");
                assertTrue(key.isClosed());
                // the idle side progresses again: the put lands and the endpoint carries on
                CallerModeTest.drive(a, put);
                CallerModeTest.drive(a, server.flushAsync()); // done at the target, not only at the source
                Data.verify(region.segment(), 1 << 20, 3);
                byte[] one = new byte[1];
                CompletableFuture<Long> r = server.recvAsync(one, 9);
                client.send(new byte[] {5}, 9, T);
                assertEquals(1, CallerModeTest.drive(a, r));
                assertEquals(5, one[0]);
            }
        });
    }

    @Test
    void aRegionInUseByAnIoCallIsNotFreedUnderIt() throws Exception {
        try (Ucx ucx = Ucx.open()) {
            MemoryRegion region = ucx.allocateMemory(4096);
            java.nio.channels.Pipe pipe = java.nio.channels.Pipe.open();
            try (var source = pipe.source(); var sink = pipe.sink()) {
                CompletableFuture<Integer> read = new CompletableFuture<>();
                Thread reader = Thread.ofPlatform().start(() -> {
                    try {
                        read.complete(source.read(region.segment().asSlice(0, 3).asByteBuffer())); // blocks
                    } catch (Throwable e) {
                        read.completeExceptionally(e);
                    }
                });
                Data.eventually(() -> java.util.Arrays.stream(reader.getStackTrace())
                        .anyMatch(f -> f.getMethodName().startsWith("read0"))); // inside the native read now
                IllegalStateException refused = assertThrows(IllegalStateException.class, region::close);
                assertTrue(refused.getMessage().contains("in use"), refused.getMessage());
                assertTrue(!region.isClosed() && region.segment().scope().isAlive());
                sink.write(java.nio.ByteBuffer.wrap(new byte[] {4, 5, 6}));
                assertEquals(3, read.get(10, TimeUnit.SECONDS));
                assertArrayEquals(new byte[] {4, 5, 6}, region.segment().asSlice(0, 3).toArray(ValueLayout.JAVA_BYTE));
                region.close();
                assertTrue(region.isClosed());
                assertTrue(!region.segment().scope().isAlive());
            }
        }
    }

    @Test
    void putAndGetWithOffsetsInProcess() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (MemoryRegion region = b.allocateMemory(REGION); Arena arena = Arena.ofShared()) {
                MemorySegment target = region.segment();
                RemoteKey key = client.unpackRemoteKey(region.packRemoteKey());
                assertEquals(REGION, key.size());
                long offset = 12345;
                for (long size : SIZES) {
                    fill(target, offset, size, 1);
                    MemorySegment dst = arena.allocate(Math.max(1, size)).asSlice(0, size);
                    assertEquals(size, client.get(dst, key, offset, T));
                    Data.verify(dst, size, 1);
                    client.put(Data.pattern(arena, size, 2), key, offset, T);
                    client.flush(T);
                    Data.verify(target.asSlice(offset, size), size, 2);
                    offset = (offset * 7 + size) % (REGION - (16 << 20));
                }
                // async forms, the last byte of the region, worker flush and fence
                MemorySegment one = arena.allocate(1);
                one.set(ValueLayout.JAVA_BYTE, 0, (byte) 77);
                client.putAsync(one, key, REGION - 1).get(10, TimeUnit.SECONDS);
                a.fence();
                a.flush(T);
                assertEquals(77, target.get(ValueLayout.JAVA_BYTE, REGION - 1));
                MemorySegment back = arena.allocate(1);
                assertEquals(1L, client.getAsync(back, key, REGION - 1).get(10, TimeUnit.SECONDS));
                assertEquals(77, back.get(ValueLayout.JAVA_BYTE, 0));
                key.close();
                key.close();
                assertThrows(IllegalStateException.class, () -> client.get(one, key, 0));
            }
        });
    }

    /**
     * An instance opened without RMA (so UCX installs no software put/get handlers, which would write or read any
     * address a peer names) refuses remote keys both ways, and its messages, rendezvous ones too, still arrive whole.
     */
    @Test
    void withoutRmaRemoteKeysAreRefusedAndMessagesStillFlow() throws Exception {
        try (Ucx a = Ucx.open(UcxOptions.defaults().withRma(false)); Ucx b = Ucx.open();
                Arena arena = Arena.ofShared()) {
            assertFalse(UcxOptions.defaults().withRma(false).rma());
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen(0, accepted::complete)) {
                Endpoint client = a.connect("127.0.0.1", l.port());
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                for (long size : new long[] {8, 1 << 20}) { // eager and rendezvous
                    MemorySegment in = arena.allocate(size);
                    CompletableFuture<Long> r = client.recvAsync(in, 3);
                    server.send(Data.pattern(arena, size, 5), 3, T);
                    assertEquals(size, r.get(10, TimeUnit.SECONDS));
                    Data.verify(in, size, 5);
                    client.amSend(MemorySegment.ofArray(new byte[0]), Data.pattern(arena, size, 6), T);
                    try (AmMessage m = server.amRecv(T)) {
                        Data.verify(m.payload(), size, 6);
                    }
                }
                try (MemoryRegion mine = a.allocateMemory(4096); MemoryRegion theirs = b.allocateMemory(4096)) {
                    IllegalStateException pack = assertThrows(IllegalStateException.class, mine::packRemoteKey);
                    assertTrue(pack.getMessage().contains("withRma(false)"), pack.getMessage());
                    byte[] key = theirs.packRemoteKey();
                    IllegalStateException unpack = assertThrows(IllegalStateException.class,
                            () -> client.unpackRemoteKey(key));
                    assertTrue(unpack.getMessage().contains("withRma(false)"), unpack.getMessage());
                }
                assertTrue(client.isAlive());
            }
        }
    }

    @Test
    void outOfBoundsAndMisuseAreRefused() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment mine = arena.allocate(4096);
                try (MemoryRegion region = b.registerMemory(mine)) {
                    RemoteKey key = client.unpackRemoteKey(region.packRemoteKey());
                    MemorySegment two = arena.allocate(2);
                    assertThrows(IndexOutOfBoundsException.class, () -> client.get(two, key, 4095));
                    assertThrows(IndexOutOfBoundsException.class, () -> client.put(two, key, -1));
                    assertThrows(IndexOutOfBoundsException.class, () -> client.get(arena.allocate(4097), key, 0));
                    assertThrows(IndexOutOfBoundsException.class, () -> client.put(two, key, Long.MAX_VALUE));
                    // a key works on the endpoint it was unpacked on only
                    assertThrows(IllegalArgumentException.class, () -> server.get(two, key, 0));
                    assertThrows(IllegalArgumentException.class,
                            () -> client.get(MemorySegment.ofArray(new byte[2]), key, 0));
                    assertThrows(IllegalArgumentException.class, () -> b.registerMemory(MemorySegment.ofArray(
                            new byte[8])));
                    // nothing was written by the refused calls
                    assertArrayEquals(new byte[4096], mine.toArray(ValueLayout.JAVA_BYTE));
                    mine.set(ValueLayout.JAVA_BYTE, 4094, (byte) 5);
                    mine.set(ValueLayout.JAVA_BYTE, 4095, (byte) 6);
                    assertEquals(2, client.get(two, key, 4094, T));
                    assertArrayEquals(new byte[] {5, 6}, two.toArray(ValueLayout.JAVA_BYTE));
                }
            }
        });
    }

    /**
     * A region whose registration is gone (its worker closed, on the caller-mode thread that owned it, or in any
     * mode) refuses to pack a key: UCX's context and the registration are freed, and packing crashed the JVM.
     */
    @ParameterizedTest
    @EnumSource(value = ProgressMode.class, names = {"CALLER", "BACKOFF"})
    void aRegionOfAClosedWorkerRefusesToPackAKey(ProgressMode mode) {
        MemoryRegion region;
        try (Arena arena = Arena.ofShared()) {
            try (Ucx ucx = Ucx.open(UcxOptions.defaults().withProgressMode(mode))) {
                region = ucx.registerMemory(arena.allocate(4096));
                assertTrue(region.packRemoteKey().length > 0);
            }
            assertFalse(region.isClosed());
            RuntimeException e = assertThrows(RuntimeException.class, region::packRemoteKey);
            assertTrue(e instanceof IllegalStateException || e instanceof EndpointClosedException, e.toString());
            region.close(); // idempotent and quiet after its worker's close
            assertThrows(IllegalStateException.class, region::packRemoteKey);
        }
    }

    @Test
    void allocatedMemoryIsZeroedAndUnreachableOnceFreed() {
        MemorySegment byRegion, byWorker;
        try (Ucx ucx = Ucx.open()) {
            MemoryRegion region = ucx.allocateMemory(100_000);
            byRegion = region.segment();
            assertEquals(100_000, byRegion.byteSize());
            for (long i = 0; i < byRegion.byteSize(); i += 4096) {
                assertEquals(0, byRegion.get(ValueLayout.JAVA_BYTE, i), "byte " + i);
            }
            byRegion.set(ValueLayout.JAVA_BYTE, 99_999, (byte) 1);
            region.close();
            region.close(); // idempotent
            assertTrue(region.isClosed());
            assertThrows(IllegalStateException.class, region::packRemoteKey);
            // UCX freed it: the segment refuses access instead of touching freed memory
            assertThrows(IllegalStateException.class, () -> byRegion.get(ValueLayout.JAVA_BYTE, 0));
            MemoryRegion left = ucx.allocateMemory(4096);
            byWorker = left.segment();
            byWorker.set(ValueLayout.JAVA_BYTE, 0, (byte) 2);
            assertThrows(IllegalArgumentException.class, () -> ucx.allocateMemory(0));
        }
        // the worker's close freed the region nobody closed, and its segment with it
        assertThrows(IllegalStateException.class, () -> byWorker.get(ValueLayout.JAVA_BYTE, 0));
    }

    @Test
    void corruptedOrTruncatedKeysAreRefusedNeverACrash() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (MemoryRegion region = b.allocateMemory(4096)) {
                byte[] good = region.packRemoteKey();
                List<byte[]> bad = new ArrayList<>();
                for (int i = 0; i < good.length; i += Math.max(1, good.length / 40)) {
                    byte[] flipped = good.clone();
                    flipped[i] ^= 0x5a;
                    bad.add(flipped);
                }
                for (int len : new int[] {0, 1, 16, good.length / 2, good.length - 1}) {
                    bad.add(java.util.Arrays.copyOf(good, len));
                }
                bad.add(new byte[good.length]);
                java.util.Random r = new java.util.Random(7);
                for (int i = 0; i < 20; i++) {
                    byte[] junk = new byte[good.length];
                    r.nextBytes(junk);
                    bad.add(junk);
                }
                // well-formed envelopes (checksum right) around keys too short to be UCX's: UCX's parser takes
                // no length, so these must never reach it
                bad.add(RemoteKey.envelope(0x1000, 4096, new byte[0]));
                bad.add(RemoteKey.envelope(0x1000, 4096, new byte[] {1, 2, 3, 4}));
                for (byte[] k : bad) {
                    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                            () -> client.unpackRemoteKey(k));
                    assertTrue(e.getMessage().startsWith("remote key refused"), e.getMessage());
                }
                assertThrows(NullPointerException.class, () -> client.unpackRemoteKey(null));
                // the good key still works
                try (RemoteKey key = client.unpackRemoteKey(good); Arena arena = Arena.ofConfined()) {
                    region.segment().set(ValueLayout.JAVA_BYTE, 10, (byte) 3);
                    MemorySegment one = arena.allocate(1);
                    client.get(one, key, 10, T);
                    assertEquals(3, one.get(ValueLayout.JAVA_BYTE, 0));
                }
            }
        });
    }

    @Test
    void crossProcessPutAndGet() throws Exception {
        try (Peer p = Peer.start("serve-rma"); Ucx ucx = Ucx.open(); Arena arena = Arena.ofShared()) {
            int port = Integer.parseInt(p.await("PORT"));
            try (Endpoint ep = ucx.connect("127.0.0.1", port)) {
                RemoteKey key = ep.unpackRemoteKey(ep.recvObject(T));
                long offset = 777;
                for (long size : SIZES) {
                    MemorySegment dst = arena.allocate(Math.max(1, size)).asSlice(0, size);
                    ep.get(dst, key, offset, T);
                    for (long i = 0; i < size; i++) { // the server's pattern 21 is relative to the region start
                        if (dst.get(ValueLayout.JAVA_BYTE, i) != Data.at(offset + i, 21)) {
                            throw new AssertionError("byte " + i + " of get " + size + " at " + offset);
                        }
                    }
                    ep.put(Data.pattern(arena, size, 22), key, offset, T);
                    ep.flush(T);
                    MemorySegment q = MemorySegment.ofArray(new byte[16]);
                    q.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, offset);
                    q.set(ValueLayout.JAVA_LONG_UNALIGNED, 8, size);
                    ep.sendObject(q);
                    assertArrayEquals(new byte[] {1}, ep.recvObject(T), "peer saw the put of " + size);
                    offset = offset + size + 1;
                }
                key.close();
            }
        }
    }

    /**
     * Gets issued right before the peer dies end with their data or typed, and new ones fail typed within 5 s.
     * (On shared memory a get from UCX's memory needs no peer, so none need be pending here: operations certainly
     * pending at the death are PendingOnPeerDeathTest's.)
     */
    @Test
    void rmaFailsTypedOnceThePeerIsKilled() throws Exception {
        try (Peer p = Peer.start("serve-rma"); Ucx ucx = Ucx.open(); Arena arena = Arena.ofShared()) {
            int port = Integer.parseInt(p.await("PORT"));
            Endpoint ep = ucx.connect("127.0.0.1", port);
            RemoteKey key = ep.unpackRemoteKey(ep.recvObject(T));
            MemorySegment dst = arena.allocate(16 << 20);
            List<CompletableFuture<Long>> pending = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                pending.add(ep.getAsync(dst, key, (i % 2) * (16 << 20)));
            }
            long killedAt = System.nanoTime();
            p.kill();
            for (CompletableFuture<Long> f : pending) {
                try {
                    assertEquals(16 << 20, f.get(10, TimeUnit.SECONDS)); // done before the kill
                } catch (java.util.concurrent.ExecutionException e) {
                    assertInstanceOf(ConnectionResetException.class, e.getCause(), e.getCause().toString());
                }
            }
            CompletionException e = assertThrows(CompletionException.class, () -> {
                // new operations fail typed once the death is noticed (well within 5 s)
                while (true) {
                    ep.getAsync(dst.asSlice(0, 8), key, 0).orTimeout(5, TimeUnit.SECONDS).join();
                    Thread.sleep(10);
                }
            });
            assertInstanceOf(ConnectionResetException.class, e.getCause(), e.getCause().toString());
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedAt);
            assertTrue(ms < 5000, "failed after " + ms + " ms");
        }
    }
}
