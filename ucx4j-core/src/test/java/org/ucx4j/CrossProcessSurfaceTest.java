package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The messaging surface between two processes (a second JVM running {@link PeerMain}), at every size from 0 B to
 * 16 MiB with content checked: stream (exact and "whatever is available" receives), probe (remove and peek),
 * worker-address endpoints with no listener, the shared-secret handshake, and close-after-n. Active messages,
 * frames, objects and RMA across processes: {@code ActiveMessageTest}, {@code RmaTest}.
 */
@org.junit.jupiter.api.Timeout(300)
class CrossProcessSurfaceTest {
    static final Duration T = Duration.ofSeconds(30);
    static final long[] SIZES = {0, 1, 8, 1 << 10, 64 << 10, 1 << 20, 16 << 20};

    private static MemorySegment length(Arena arena, long size) {
        MemorySegment h = arena.allocate(8);
        h.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, size);
        return h;
    }

    /**
     * A peer process sends tag messages (one of them in fragments) and stream bytes, closes gracefully and exits;
     * everything it sent is read here afterwards, content checked, over shared memory and over TCP (whose goodbye
     * travels on another socket than the data). Then the tags and the stream are at their end.
     */
    @ParameterizedTest
    @ValueSource(strings = {"default", "tcp"})
    void whatAPeerSentBeforeItsGracefulCloseIsReadAfterItExited(String transport) throws Exception {
        boolean tcp = transport.equals("tcp");
        Map<String, String> env = tcp ? Map.of("UCX_TLS", "tcp,rdmacm,sockcm") : Map.of();
        UcxOptions opts = tcp ? UcxOptions.defaults().with("TLS", "tcp,rdmacm,sockcm") : UcxOptions.defaults();
        try (Ucx ucx = Ucx.open(opts); Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = ucx.listen(0, accepted::complete);
                    Peer p = Peer.start(env, List.of(), "connect-send-close", String.valueOf(l.port()))) {
                p.await("CLOSED");
                Endpoint ep = accepted.get(30, TimeUnit.SECONDS);
                Data.eventually(() -> !ep.isAlive());
                MemorySegment in = arena.allocate(100_000);
                assertEquals(30_000, ep.recv(in, 2, T));
                Data.verify(in.asSlice(0, 30_000), 30_000, 2);
                assertEquals(100, ep.recv(in, 1, T));
                Data.verify(in.asSlice(0, 100), 100, 1);
                assertEquals(100_000, ep.streamRecv(in, T));
                Data.verify(in, 100_000, 3);
                assertThrows(ConnectionResetException.class, () -> ep.recv(in, 1, T));
                assertThrows(ConnectionResetException.class, () -> ep.streamRecvSome(in, T));
                ep.close();
            }
        }
    }

    @Test
    void streamEchoOfEverySize() throws Exception {
        try (Peer p = Peer.start("serve-stream-echo"); Arena arena = Arena.ofShared(); Ucx ucx = Ucx.open()) {
            Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
            for (long size : SIZES) {
                MemorySegment out = Data.pattern(arena, size, 11);
                ep.streamSend(length(arena, size), T);
                if (size > 0) {
                    ep.streamSend(out, T);
                }
                MemorySegment h = arena.allocate(8);
                assertEquals(8, ep.streamRecv(h, T)); // exact
                assertEquals(size, h.get(ValueLayout.JAVA_LONG_UNALIGNED, 0));
                MemorySegment in = arena.allocate(Math.max(1, size)).asSlice(0, size);
                long got = 0;
                int pieces = 0;
                while (got < size) { // whatever is available, until the whole echo is in
                    long n = ep.streamRecvSome(in.asSlice(got), T);
                    assertTrue(n > 0 && n <= size - got, "a partial receive of " + n + " at " + got);
                    got += n;
                    pieces++;
                }
                Data.verify(in, size, 11);
                assertTrue(pieces >= (size > 0 ? 1 : 0));
            }
        }
    }

    @Test
    void probedMessagesOfEverySizeAreReceivedExactlyOnce() throws Exception {
        try (Peer p = Peer.start("serve-echo"); Arena arena = Arena.ofShared(); Ucx ucx = Ucx.open()) {
            Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
            boolean remove = true;
            for (long size : SIZES) {
                ep.send(length(arena, size), 1, T);
                ep.send(Data.pattern(arena, size, 12), 2, T);
                ProbedMessage m = null;
                long deadline = System.nanoTime() + T.toNanos();
                while (m == null && System.nanoTime() < deadline) {
                    m = ep.probe(2, remove);
                    if (m == null) {
                        Thread.sleep(1);
                    }
                }
                assertNotNull(m, "the echo of " + size + " B was never probed");
                assertEquals(size, m.length());
                MemorySegment in = arena.allocate(Math.max(1, size)).asSlice(0, size);
                if (remove) { // taken out of UCX's queue: received by its handle, and by nothing else
                    assertEquals(size, ep.recv(m, in, T));
                    assertEquals(null, ep.probe(2, false), "a removed message is gone from the queue");
                } else { // peeked: still there for an ordinary receive
                    assertEquals(size, ep.recv(in, 2, T));
                }
                Data.verify(in, size, 12);
                remove = !remove;
            }
        }
    }

    @Test
    void workerAddressEndpointsEchoEverySizeWithoutAListener() throws Exception {
        try (Peer p = Peer.start("serve-address-echo"); Arena arena = Arena.ofShared(); Ucx ucx = Ucx.open()) {
            Endpoint ep = ucx.connect(WorkerAddress.fromHex(p.await("ADDRESS")));
            ep.send(ucx.workerAddress().toBytes(), 100, T); // the peer connects back to this worker
            for (long size : SIZES) {
                ep.send(length(arena, size), 1, T);
                ep.send(Data.pattern(arena, size, 13), 2, T);
                MemorySegment in = arena.allocate(Math.max(1, size)).asSlice(0, size);
                TagMessage m = ucx.recvTagged(in, 2, -1L, T);
                assertEquals(size, m.length());
                assertEquals(2, m.tag());
                Data.verify(in, size, 13);
            }
        }
    }

    @Test
    void aPeerWithoutTheSecretIsRefusedAndOneWithItIsServed() throws Exception {
        String secret = "cross-process secret";
        try (Peer p = Peer.start("serve-secret-echo", secret)) {
            int port = Integer.parseInt(p.await("PORT"));
            try (Ucx wrong = Ucx.open(UcxOptions.defaults().withSecret("not it".getBytes(StandardCharsets.UTF_8)))) {
                UcxException e = assertThrows(UcxException.class, () -> wrong.connect("127.0.0.1", port, T));
                assertTrue(e.getMessage().contains("UCS_ERR_REJECTED"), e.getMessage());
            }
            try (Ucx none = Ucx.open()) {
                UcxException e = assertThrows(UcxException.class, () -> none.connect("127.0.0.1", port, T));
                assertTrue(e.getMessage().contains("shared secret"), e.getMessage());
            }
            try (Ucx right = Ucx.open(UcxOptions.defaults().withSecret(secret.getBytes(StandardCharsets.UTF_8)));
                    Endpoint ep = right.connect("127.0.0.1", port, T)) {
                for (long size : SIZES) {
                    FailureTest.echoOnce(ep, size);
                }
                assertEquals(p.process.pid(), ep.peerPid(), "the handshake names the peer's process");
                assertEquals(java.net.InetAddress.getLocalHost().getHostName(), ep.peerHost(),
                        "the handshake names the peer's host");
            }
        }
    }

    @Test
    void anEndpointClosesItselfAfterItsNthReceive() throws Exception {
        try (Peer p = Peer.start("serve-echo"); Ucx ucx = Ucx.open()) {
            Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT")), T);
            ep.closeAfterReceives(2);
            FailureTest.echoOnce(ep, 8);
            assertTrue(ep.isAlive(), "open after the first receive");
            FailureTest.echoOnce(ep, 1 << 20);
            ep.closeFuture().get(10, TimeUnit.SECONDS);
            assertTrue(ep.isClosed());
            assertFalse(ep.isAlive());
            assertThrows(UcxException.class, () -> ep.send(new byte[1], 1, T));
        }
    }
}
