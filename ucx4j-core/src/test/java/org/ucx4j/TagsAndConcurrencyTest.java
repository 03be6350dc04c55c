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
                ep.sendTagged(new byte[] {4, 5}, 0xAB42L);
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
                List<Thread> senders = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    int id = t;
                    senders.add(Thread.ofVirtual().start(() -> {
                        byte[] msg = new byte[8];
                        for (int i = 0; i < perThread; i++) {
                            int v = id * perThread + i;
                            msg[0] = (byte) v;
                            msg[1] = (byte) (v >>> 8);
                            ep.send(msg, 3, T);
                        }
                    }));
                }
                BitSet seen = new BitSet();
                byte[] in = new byte[8];
                for (int i = 0; i < threads * perThread; i++) {
                    assertEquals(8, s.recv(in, 3, T));
                    int v = (in[0] & 0xff) | ((in[1] & 0xff) << 8);
                    assertFalse(seen.get(v), "duplicate " + v);
                    seen.set(v);
                }
                for (Thread t : senders) {
                    t.join(20_000);
                }
                assertEquals(threads * perThread, seen.cardinality());
            }
        }
    }

    /**
     * Canceling an async receive races with messages matching it: either the cancel wins (the future is canceled
     * and the message goes to the next receive) or the message does (cancel returns false and the future has it).
     * Every message is accounted for, with its bytes, whichever wins.
     */
    @Test
    void cancelingAReceiveNeverLosesAMessage() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
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
