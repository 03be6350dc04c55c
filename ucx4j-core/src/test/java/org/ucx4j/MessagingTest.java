package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.DataOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Stream API, worker-address (raw) endpoints, interop with a plain C UCX program, and the handshake's checks. */
class MessagingTest {
    static final Duration T = Duration.ofSeconds(10);

    /**
     * A stream receive that completes at once from the bytes of two sends succeeds whatever the request UCX took for
     * it held: UCX 1.16 to 1.20 built without assertions returns that recycled request's old status instead, here
     * a canceled tag receive's, with the bytes already in the buffer (docs/ucx-faults). It cannot fail on Debian's
     * 1.13.1 or on 1.14-1.15, whose stream receive returns its own status.
     */
    @Test
    void aStreamReceiveCompletedAtOnceSucceedsWhateverItsRecycledRequestHeld() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment in = arena.allocate(200);
                for (int round = 0; round < 20; round++) {
                    client.streamSend(Data.pattern(arena, 100, 2 * round), T);
                    client.streamSend(Data.pattern(arena, 100, 2 * round + 1), T);
                    // a receive that ends canceled: its request goes back to UCX's pool, for the next to take
                    CompletableFuture<Long> canceled = server.recvAsync(new byte[8], 10);
                    client.send(new byte[1], 9, T); // sent after the stream bytes, so it arrives after them
                    server.recv(new byte[1], 9, T); // and the receive above is in UCX by now
                    assertTrue(canceled.cancel(true));
                    // the first piece is shorter than asked for: UCX takes a request and fills it from both at once
                    assertEquals(200, server.streamRecv(in, T));
                    Data.verify(in.asSlice(0, 100), 100, 2 * round);
                    Data.verify(in.asSlice(100, 100), 100, 2 * round + 1);
                }
            }
        });
    }

    @Test
    void streamExactAndWhateverIsAvailable() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : new long[] {1, 8, 64 * 1024, 1 << 20, 16 << 20}) {
                    MemorySegment out = Data.pattern(arena, size, 5);
                    MemorySegment in = arena.allocate(size);
                    CompletableFuture<Long> r = server.streamRecvAsync(in);
                    client.streamSend(out, T);
                    assertEquals(size, r.get(30, TimeUnit.SECONDS));
                    Data.verify(in, size, 5);
                }
                // no message boundaries: two sends, read in pieces of whatever is there
                client.streamSend(new byte[] {1, 2, 3});
                client.streamSend(new byte[] {4, 5}, T);
                MemorySegment got = arena.allocate(5);
                long n = 0;
                while (n < 5) {
                    long k = server.streamRecvSome(got.asSlice(n), T);
                    assertTrue(k >= 1 && k <= 5 - n, "got " + k);
                    n += k;
                }
                assertArrayEquals(new byte[] {1, 2, 3, 4, 5}, got.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
                client.streamSend(new byte[] {6, 7}, T);
                byte[] two = new byte[2];
                assertEquals(2, server.streamRecv(two, T));
                assertArrayEquals(new byte[] {6, 7}, two);
                assertThrows(IllegalArgumentException.class, () -> server.streamRecv(arena.allocate(0)));
            }
        });
    }

    @Test
    void workerAddressEndpointsBothWays() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Arena arena = Arena.ofShared()) {
            WorkerAddress addrB = WorkerAddress.fromHex(b.workerAddress().toHex());
            assertEquals(b.workerAddress(), addrB);
            Endpoint ab = a.connect(addrB, Duration.ofSeconds(5));
            Endpoint ba = b.connectAsync(a.workerAddress()).get(10, TimeUnit.SECONDS);
            for (long size : new long[] {0, 8, 1 << 20}) {
                MemorySegment in = arena.allocate(Math.max(1, size)).asSlice(0, size);
                CompletableFuture<Long> r = ba.recvAsync(in, 5);
                ab.send(Data.pattern(arena, size, 2), 5, T);
                assertEquals(size, r.get(10, TimeUnit.SECONDS));
                Data.verify(in, size, 2);
            }
            byte[] back = new byte[2];
            CompletableFuture<Long> r = ab.recvAsync(back, 6);
            ba.send(new byte[] {7, 9}, 6);
            assertEquals(2, r.get(10, TimeUnit.SECONDS));
            assertArrayEquals(new byte[] {7, 9}, back);
            assertEquals(0, ab.peerPid(), "a raw endpoint has no handshake to name its peer");
            assertEquals(null, ab.peerHost(), "a raw endpoint has no handshake to name its peer");
            a.flush(); // the worker's untimed flush
            ab.close();
            ba.close();
            assertThrows(IllegalArgumentException.class, () -> WorkerAddress.of(new byte[0]));
            assertThrows(NullPointerException.class, () -> a.connectAsync(null));
        }
    }

    /** Builds the plain C UCX peer ({@code raw_peer.c}) with gcc against the installed headers. */
    private static Path buildCPeer(Path dir) throws Exception {
        return buildC(dir, "raw_peer");
    }

    /** Builds {@code /native/<name>.c} (a plain C UCX program) with gcc against the UCX under test. */
    static Path buildC(Path dir, String name) throws Exception {
        return NativeBuild.build(dir, name, "-lucp", "-lucs");
    }

    @Test
    void aSameHostPeerWhoseAddressHidesItsSegmentSizeIsRefusedBeforeAnythingIsSent(@TempDir Path dir)
            throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(ConfigAndInfoTest.startupEnv("UCX_POSIX_SEG_SIZE") == null
                && ConfigAndInfoTest.startupEnv("UCX_TLS") == null,
                "ucx4j's own segment size and UCX's default transports (shared memory) must be in effect");
        // UCX's default environment: v1 address, 8 KiB shared-memory segments (ucx4j sends 32 KiB ones)
        ProcessBuilder pb = new ProcessBuilder(buildCPeer(dir).toString())
                .redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("UCX_POSIX_ERROR_HANDLING", "y");
        pb.environment().remove("UCX_ADDRESS_VERSION");
        pb.environment().remove("UCX_POSIX_SEG_SIZE");
        Process c = pb.start();
        try (Ucx ucx = Ucx.open()) {
            BufferedReader out = new BufferedReader(new InputStreamReader(c.getInputStream(), StandardCharsets.UTF_8));
            String line = NativeBuild.nextLine(out);
            assertTrue(line != null && line.startsWith("ADDRESS "), "C peer said: " + line);
            UcxException e = assertThrows(UcxException.class,
                    () -> ucx.connect(WorkerAddress.fromHex(line.substring(8))));
            assertTrue(e.getMessage().contains("UCS_ERR_UNSUPPORTED") && e.getMessage().contains("posix")
                    && e.getMessage().contains("UCX_ADDRESS_VERSION=v2"),
                    e.getMessage());
            assertTrue(c.isAlive(), "the C peer was sent nothing it could not take");
        } finally {
            c.destroyForcibly();
        }
    }

    @Test
    void rawInteropWithPlainCProgram(@TempDir Path dir) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(buildCPeer(dir).toString())
                .redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("UCX_POSIX_ERROR_HANDLING", "y");
        // a v2 address carries the C peer's segment size (UCX's 8 KiB), so ucx4j's UCX sends it fragments that fit
        pb.environment().put("UCX_ADDRESS_VERSION", "v2");
        pb.environment().remove("UCX_POSIX_SEG_SIZE");
        Process c = pb.start();
        try (Ucx ucx = Ucx.open(); Arena arena = Arena.ofShared()) {
            BufferedReader out = new BufferedReader(new InputStreamReader(c.getInputStream(), StandardCharsets.UTF_8));
            String line = NativeBuild.nextLine(out);
            assertTrue(line != null && line.startsWith("ADDRESS "), "C peer said: " + line);
            Endpoint ep = ucx.connect(WorkerAddress.fromHex(line.substring(8)));
            assertTrue(ep.isAlive());
            Writer w = new OutputStreamWriter(c.getOutputStream(), StandardCharsets.US_ASCII);
            w.write(ucx.workerAddress().toHex() + "\n");
            w.flush();
            // Java -> C (tag 7), C echoes with tag 8
            byte[] echo = new byte[32];
            CompletableFuture<Long> r8 = ep.recvAsync(echo, 8);
            byte[] ping = "ping from Java".getBytes(StandardCharsets.US_ASCII);
            ep.send(ping, 7, T);
            assertEquals(ping.length, r8.get(20, TimeUnit.SECONDS));
            assertEquals("ping from Java", new String(echo, 0, ping.length, StandardCharsets.US_ASCII));
            // C -> Java (tag 9)
            byte[] hello = new byte[64];
            long n = ep.recv(hello, 9, T);
            assertEquals("hello from C", new String(hello, 0, (int) n, StandardCharsets.US_ASCII));
            // tag messages of 0 B to 16 MiB (eager, fragmented, rendezvous) to C and back, bytes checked
            long[] sweep = {0, 1, 8, 4096, 20000, 65536, 1 << 20, 16 << 20};
            ep.send(java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.nativeOrder()).putLong(0, sweep.length)
                    .array(), 11, T);
            MemorySegment back = arena.allocate(16 << 20);
            for (int i = 0; i < sweep.length; i++) {
                CompletableFuture<Long> r13 = ep.recvAsync(back, 13);
                ep.send(Data.pattern(arena, sweep[i], 20 + i), 12, T);
                assertEquals(sweep[i], r13.get(20, TimeUnit.SECONDS));
                Data.verify(back.asSlice(0, sweep[i]), sweep[i], 20 + i);
            }
            // active messages (AM id 0, header exactly as given) both ways: eager, then rendezvous; the C peer echoes
            // (20000 B: eager in fragments, larger than the C peer's 8 KiB receive buffers and smaller than ucx4j's)
            for (long size : new long[] {100, 20000, 4 << 20}) {
                ep.amSend("Jhdr".getBytes(StandardCharsets.US_ASCII), Data.pattern(arena, size, 5).toArray(
                        java.lang.foreign.ValueLayout.JAVA_BYTE));
                try (AmMessage m = ucx.amRecv(T)) {
                    assertEquals("Chdr", new String(m.headerBytes(), StandardCharsets.US_ASCII));
                    Data.verify(m.payload(), size, 5);
                    assertTrue(m.endpoint() == null, "a raw peer's message comes to the worker");
                }
            }
            // stream bytes both ways
            MemorySegment stream = Data.pattern(arena, 16, 6);
            ep.streamSend(stream);
            MemorySegment streamBack = arena.allocate(16);
            assertEquals(16, ep.streamRecv(streamBack, T));
            Data.verify(streamBack, 16, 6);
            ep.send(new byte[] {1}, 10, T);
            assertEquals("DONE", NativeBuild.nextLine(out));
            assertEquals(0, c.waitFor(20, TimeUnit.SECONDS) ? c.exitValue() : -1);
            ep.abort();
        } finally {
            c.destroyForcibly();
        }
    }

    @Test
    void sharedSecretGatesConnections() throws Exception {
        byte[] secret = "correct horse battery staple".getBytes(StandardCharsets.UTF_8);
        AtomicInteger handled = new AtomicInteger();
        try (Ucx server = Ucx.open(UcxOptions.defaults().withSecret(secret));
                Listener l = server.listen(0, ep -> {
                    handled.incrementAndGet();
                    byte[] b = new byte[1];
                    ep.recv(b, 1, T);
                    ep.send(b, 1, T);
                })) {
            // the listener logs each peer it rejects (slf4j-simple writes to the System.err of the moment)
            java.io.ByteArrayOutputStream log = new java.io.ByteArrayOutputStream();
            java.io.PrintStream err = System.err;
            System.setErr(new java.io.PrintStream(log, true, StandardCharsets.UTF_8));
            try (Ucx wrong = Ucx.open(UcxOptions.defaults().withSecret("wrong".getBytes()))) {
                UcxException e = assertThrows(UnreachableException.class, () -> wrong.connect("127.0.0.1", l.port(),
                        T));
                assertEquals("UCS_ERR_REJECTED", e.statusName(), e.getMessage());
                assertTrue(e.getMessage().contains("UCS_ERR_REJECTED"), e.getMessage());
                Data.eventually(() -> log.toString(StandardCharsets.UTF_8).contains("could not prove the shared secret"));
            } finally {
                System.setErr(err);
            }
            String logged = log.toString(StandardCharsets.UTF_8);
            assertTrue(logged.contains("WARN") && logged.contains("rejected incoming connection from"), logged);
            try (Ucx none = Ucx.open()) {
                UcxException e = assertThrows(UnreachableException.class, () -> none.connect("127.0.0.1", l.port(),
                        T));
                assertTrue(e.getMessage().contains("shared secret"), e.getMessage());
            }
            try (Ucx right = Ucx.open(UcxOptions.defaults().withSecret(secret));
                    Endpoint ep = right.connect("127.0.0.1", l.port(), T)) {
                byte[] b = {42};
                ep.send(b, 1, T);
                byte[] got = new byte[1];
                ep.recv(got, 1, T);
                assertEquals(42, got[0]);
            }
            assertEquals(1, handled.get(), "rejected peers never reach the handler");
        }
    }

    /**
     * A relay between two ends that both have the secret passes on their hellos and proofs, which then check out,
     * and puts a third worker's address in place of theirs: each end refuses the address (it is not sealed with the
     * secret), so neither makes a UCX endpoint to the relay's choice, and no handler runs.
     */
    @Test
    void aRelayCannotSwapInItsOwnWorkerAddress() throws Exception {
        byte[] secret = "correct horse battery staple".getBytes(StandardCharsets.UTF_8);
        AtomicInteger handled = new AtomicInteger();
        java.util.concurrent.atomic.AtomicBoolean swapped = new java.util.concurrent.atomic.AtomicBoolean();
        try (Ucx server = Ucx.open(UcxOptions.defaults().withSecret(secret));
                Listener l = server.listen(0, ep -> handled.incrementAndGet());
                Ucx client = Ucx.open(UcxOptions.defaults().withSecret(secret)); Ucx third = Ucx.open();
                java.net.ServerSocket relay = new java.net.ServerSocket(0)) {
            byte[] thirds = third.workerAddress().toBytes();
            Thread.ofVirtual().start(() -> {
                try (Socket c = relay.accept(); Socket s = new Socket("127.0.0.1", l.port())) {
                    var ci = new java.io.DataInputStream(c.getInputStream());
                    var co = new java.io.DataOutputStream(c.getOutputStream());
                    var si = new java.io.DataInputStream(s.getInputStream());
                    var so = new java.io.DataOutputStream(s.getOutputStream());
                    copyHello(ci, so);
                    copyHello(si, co);
                    so.write(ci.readNBytes(32)); // the client's proof
                    co.write(si.readNBytes(32)); // the server's
                    so.write(ci.readNBytes(1)); // verdicts: both OK
                    co.write(si.readNBytes(1));
                    swapAddress(ci, so, thirds);
                    swapAddress(si, co, thirds);
                    swapped.set(true);
                    c.getInputStream().transferTo(s.getOutputStream());
                } catch (java.io.IOException e) {
                    // an end hung up: the relay is done
                }
            });
            UcxException e = assertThrows(UcxException.class,
                    () -> client.connect("127.0.0.1", relay.getLocalPort(), T));
            // both ends write their address before reading the other's, so the client always reads the swapped one:
            // refused for its MAC, not cut off by a relay that lost step with the protocol
            assertTrue(e.getMessage().contains("is not sealed with the shared secret"), e.getMessage());
            assertTrue(swapped.get(), "the relay swapped both addresses");
            Thread.sleep(300);
            assertEquals(0, handled.get(), "the server's handler never saw the relayed connection");
        }
    }

    private static void copyHello(java.io.DataInputStream in, java.io.DataOutputStream out) throws java.io.IOException {
        out.writeInt(in.readInt()); // magic
        out.writeShort(in.readUnsignedShort()); // version
        out.writeShort(in.readUnsignedShort()); // flags
        out.writeInt(in.readInt()); // connection id
        out.writeLong(in.readLong()); // pid
        out.writeUTF(in.readUTF()); // host
        out.writeUTF(in.readUTF()); // shared-memory settings
        out.write(in.readNBytes(16)); // nonce
        out.flush();
    }

    private static void swapAddress(java.io.DataInputStream in, java.io.DataOutputStream out, byte[] replacement)
            throws java.io.IOException {
        in.readNBytes(in.readInt());
        byte[] tag = in.readNBytes(16); // the sealed address's tag, passed on unchanged
        out.writeInt(replacement.length);
        out.write(replacement);
        out.write(tag);
        out.flush();
    }

    /**
     * A relay that passes on every byte between two ends with the secret (a plain TCP forwarder, or an eavesdropper on
     * the handshake's socket) lets them connect, but never sees either worker address: with a secret they go sealed.
     */
    @Test
    void aRelayPassingEverythingOnSeesNoWorkerAddress() throws Exception {
        byte[] secret = "correct horse battery staple".getBytes(StandardCharsets.UTF_8);
        try (Ucx server = Ucx.open(UcxOptions.defaults().withSecret(secret));
                Listener l = server.listen(0, ep -> {
                    byte[] b = new byte[1];
                    ep.recv(b, 1, T);
                    ep.send(b, 1, T);
                });
                Ucx client = Ucx.open(UcxOptions.defaults().withSecret(secret));
                Relay relay = new Relay(l.port())) {
            try (Endpoint ep = client.connect("127.0.0.1", relay.port(), T)) {
                ep.send(new byte[] {9}, 1, T);
                byte[] got = new byte[1];
                ep.recv(got, 1, T);
                assertEquals(9, got[0], "the relayed connection works");
            }
            byte[] seen = relay.seen();
            assertTrue(seen.length > 0);
            assertFalse(contains(seen, server.workerAddress().toBytes()), "the relay read the server's address");
            assertFalse(contains(seen, client.workerAddress().toBytes()), "the relay read the client's address");
        }
    }

    /**
     * A relay that passes a process's connect back to that process's own listener (a reflection: both hellos, so both
     * proofs, come from the one process, which holds the secret) is refused: the connect fails, no handler runs, and
     * the relay never sees the worker address.
     */
    @Test
    void aReflectedConnectIsRefused() throws Exception {
        byte[] secret = "correct horse battery staple".getBytes(StandardCharsets.UTF_8);
        AtomicInteger handled = new AtomicInteger();
        try (Ucx server = Ucx.open(UcxOptions.defaults().withSecret(secret));
                Listener l = server.listen(0, ep -> handled.incrementAndGet()); Relay relay = new Relay(l.port())) {
            java.io.ByteArrayOutputStream log = new java.io.ByteArrayOutputStream();
            java.io.PrintStream err = System.err;
            System.setErr(new java.io.PrintStream(log, true, StandardCharsets.UTF_8));
            try {
                // the listener hangs up on it; its connect sees the handshake cut short
                assertThrows(UnreachableException.class, () -> server.connect("127.0.0.1", relay.port(), T));
                Data.eventually(() -> log.toString(StandardCharsets.UTF_8).contains("reflecting one of its connects"));
            } finally {
                System.setErr(err);
            }
            assertFalse(contains(relay.seen(), server.workerAddress().toBytes()), "the relay read the address");
            try (Endpoint self = server.connect("127.0.0.1", l.port(), T)) { // straight to itself: no reflection
                assertTrue(self.isAlive());
            }
            Data.eventually(() -> handled.get() == 1);
            Thread.sleep(300);
            assertEquals(1, handled.get(), "only the direct connect reached the handler");
        }
    }

    private static boolean contains(byte[] haystack, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= haystack.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (haystack[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return true;
        }
        return false;
    }

    /** A TCP forwarder to {@code 127.0.0.1:target} for one connection, keeping a copy of what passes either way. */
    private static final class Relay implements AutoCloseable {
        private final java.net.ServerSocket listening = new java.net.ServerSocket(0);
        private final java.io.ByteArrayOutputStream seen = new java.io.ByteArrayOutputStream();
        private final java.util.List<Socket> sockets = new java.util.concurrent.CopyOnWriteArrayList<>();

        Relay(int target) throws java.io.IOException {
            Thread.ofVirtual().start(() -> {
                try {
                    Socket c = listening.accept();
                    sockets.add(c);
                    Socket s = new Socket("127.0.0.1", target);
                    sockets.add(s);
                    Thread.ofVirtual().start(() -> pipe(c, s));
                    pipe(s, c);
                } catch (java.io.IOException e) {
                    // closed
                }
            });
        }

        int port() {
            return listening.getLocalPort();
        }

        byte[] seen() {
            synchronized (seen) {
                return seen.toByteArray();
            }
        }

        private void pipe(Socket from, Socket to) {
            byte[] b = new byte[4096];
            try {
                for (int n; (n = from.getInputStream().read(b)) > 0; ) {
                    synchronized (seen) {
                        seen.write(b, 0, n);
                    }
                    to.getOutputStream().write(b, 0, n);
                }
                to.shutdownOutput();
            } catch (java.io.IOException e) {
                // an end hung up
            }
        }

        @Override
        public void close() throws java.io.IOException {
            listening.close();
            for (Socket s : sockets) {
                s.close();
            }
        }
    }

    /**
     * Connections that never speak hold a listener's handshake slots until their deadline; past the cap the listener
     * accepts nothing more (the kernel queues the peer), and a slot that frees lets the next one in.
     */
    @Test
    void aListenerRunsAtMostItsCapOfHandshakesAtOnce() throws Exception {
        try (Ucx server = Ucx.open(UcxOptions.defaults().withMaxHandshakes(2)
                .withConnectTimeout(Duration.ofSeconds(60)));
                Listener l = server.listen(0, ep -> { }); Socket silent1 = new Socket("127.0.0.1", l.port());
                Socket silent2 = new Socket("127.0.0.1", l.port()); Socket third = new Socket("127.0.0.1", l.port())) {
            for (Socket s : new Socket[] {silent1, silent2}) { // accepted: the listener's hello comes first
                s.setSoTimeout(10_000);
                assertTrue(s.getInputStream().read() >= 0, "an accepted connection gets the listener's hello");
            }
            third.setSoTimeout(500);
            assertThrows(java.net.SocketTimeoutException.class, () -> third.getInputStream().read(),
                    "a third connection was accepted while two handshakes held both slots");
            silent1.close(); // its handshake ends (EOF), and with it its slot
            third.setSoTimeout(10_000);
            assertTrue(third.getInputStream().read() >= 0, "the freed slot went to the waiting connection");
            third.close();
            silent2.close();
            try (Ucx client = Ucx.open(); Endpoint ep = client.connect("127.0.0.1", l.port(), T)) {
                ep.send(new byte[] {7}, 1, T); // a real peer still gets in once the silent ones are gone
                assertTrue(ep.isAlive());
            }
        }
    }

    @Test
    void aPeerThatTricklesItsHandshakeIsCutOffAtTheDeadline() throws Exception {
        // each byte within the socket timeout, but the whole handshake far past the listener's 1 s budget: the
        // listener closes the connection by that budget, not one budget per read
        try (Ucx ucx = Ucx.open(UcxOptions.defaults().withConnectTimeout(Duration.ofSeconds(1)));
                Listener l = ucx.listen(0, ep -> { }); Socket s = new Socket("127.0.0.1", l.port())) {
            java.io.ByteArrayOutputStream hello = new java.io.ByteArrayOutputStream();
            DataOutputStream d = new DataOutputStream(hello);
            d.writeInt(0x55435834); // magic
            d.writeShort(org.ucx4j.internal.engine.TestHooks.handshakeVersion()); // this build's: read on
            d.writeShort(0); // flags
            d.writeInt(1); // connection id
            d.writeLong(ProcessHandle.current().pid());
            d.writeUTF("a-host-name-that-takes-a-while-to-arrive");
            byte[] bytes = hello.toByteArray();
            java.util.concurrent.atomic.AtomicInteger sent = new java.util.concurrent.atomic.AtomicInteger();
            Thread trickle = Thread.ofVirtual().start(() -> {
                try {
                    for (int i = 0; i < bytes.length; i++) {
                        s.getOutputStream().write(bytes[i]);
                        s.getOutputStream().flush();
                        sent.incrementAndGet();
                        if (i >= 7) { // magic, version and flags at once, then a byte every 100 ms
                            Thread.sleep(100);
                        }
                    }
                } catch (Exception e) {
                    // cut off
                }
            });
            s.setSoTimeout(30_000);
            java.io.InputStream in = s.getInputStream();
            try {
                while (in.read() >= 0) {
                    // the listener's half of the handshake, then the end of the connection
                }
            } catch (java.io.IOException reset) {
                // the listener closed it: a reset is an end too
            }
            int atEnd = sent.get();
            assertTrue(atEnd < bytes.length, "the listener waited for all " + bytes.length + " bytes (one "
                    + "every 100 ms) instead of ending the handshake at its 1 s deadline");
            // the listener read on past the version for a while (a version or flags it refused would have ended
            // the connection at once, after 8 or 9 bytes, the test then proving nothing about the deadline)
            assertTrue(atEnd >= 10, "the handshake ended after " + atEnd + " bytes, before its deadline");
            trickle.interrupt();
        }
    }

    @Test
    void versionMismatchNamesBothVersions() throws Exception {
        try (ServerSocket fake = new ServerSocket(0); Ucx ucx = Ucx.open()) {
            Thread t = Thread.ofVirtual().start(() -> {
                try (Socket s = fake.accept()) {
                    DataOutputStream out = new DataOutputStream(s.getOutputStream());
                    out.writeInt(0x55435834);
                    out.writeShort(99);
                    out.flush();
                    s.getInputStream().readNBytes(64);
                } catch (Exception e) {
                    // test ends
                }
            });
            UcxException e = assertThrows(UcxException.class, () -> ucx.connect("127.0.0.1", fake.getLocalPort(), T));
            assertTrue(e.getMessage().contains("99") && e.getMessage().contains("ours is"), e.getMessage());
            assertTrue(e.getMessage().contains("UCS_ERR_UNSUPPORTED"), e.getMessage());
            t.join(5000);
            // not ucx4j at all
            try (ServerSocket junk = new ServerSocket(0)) {
                Thread.ofVirtual().start(() -> {
                    try (Socket s = junk.accept()) {
                        s.getOutputStream().write("HTTP/1.1 400 Bad Request\r\n\r\n".getBytes());
                        s.getInputStream().readNBytes(64);
                    } catch (Exception x) {
                        // test ends
                    }
                });
                UcxException j = assertThrows(UcxException.class,
                        () -> ucx.connect("127.0.0.1", junk.getLocalPort(), T));
                assertTrue(j.getMessage().contains("not a ucx4j endpoint"), j.getMessage());
            }
        }
    }

    @Test
    void peerGracefulCloseFailsPendingStreamReceive() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            CompletableFuture<Long> pending = server.streamRecvAsync(Arena.global().allocate(8));
            client.close();
            Exception e = assertThrows(Exception.class, () -> pending.get(10, TimeUnit.SECONDS));
            assertInstanceOf(ConnectionResetException.class, e.getCause());
            assertFalse(server.isAlive());
        });
    }

    @Test
    void closeAfterReceivesClosesOnTheNth() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            server.closeAfterReceives(4);
            CompletableFuture<Long> peerSide = client.recvAsync(new byte[1], 9);
            for (int i = 0; i < 2; i++) {
                assertTrue(server.isAlive(), "still open before receive " + i);
                CompletableFuture<Long> r = server.recvAsync(new byte[4], 1);
                client.send(new byte[] {1, 2, 3, (byte) i}, 1, T);
                assertEquals(4, r.get(10, TimeUnit.SECONDS));
            }
            // gets are this side's own reads, not receives: they do not count
            try (MemoryRegion region = a.allocateMemory(64);
                    java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined();
                    RemoteKey key = server.unpackRemoteKey(region.packRemoteKey())) {
                for (int i = 0; i < 3; i++) {
                    server.get(arena.allocate(8), key, 8L * i, T);
                }
            }
            assertTrue(server.isAlive(), "gets do not count as receives");
            // an active message does (3), and a stream receive (4) closes it
            client.amSend(new byte[0], new byte[] {7});
            try (AmMessage m = server.amRecv(T)) {
                assertEquals(1, m.payload().byteSize());
            }
            assertTrue(server.isAlive(), "still open before the fourth receive");
            client.streamSend(new byte[] {8});
            server.streamRecv(new byte[1]);
            server.closeFuture().get(10, TimeUnit.SECONDS);
            assertTrue(server.isClosed());
            Exception e = assertThrows(Exception.class, () -> peerSide.get(10, TimeUnit.SECONDS));
            assertInstanceOf(ConnectionResetException.class, e.getCause());
            assertThrows(IllegalArgumentException.class, () -> client.closeAfterReceives(-1));
        });
    }

    @Test
    void anObjectFromNativeMemoryIsSentWithoutBlocking() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                for (long size : new long[] {0, 3000, 16 << 20}) {
                    CompletableFuture<Long> sent = client.sendObjectAsync(Data.pattern(arena, size, 4));
                    MemorySegment got = MemorySegment.ofArray(server.recvObject(T));
                    assertEquals(size, sent.get(10, TimeUnit.SECONDS));
                    Data.verify(got, size, 4);
                }
            }
        });
    }

    @Test
    void perPeerStatsCountBytesMessagesAndLargeTransferBandwidth() throws Exception {
        FailureTest.pair((a, b, client, server) -> {
            try (Arena arena = Arena.ofShared()) {
                long big = 2_000_000;
                MemorySegment in = arena.allocate(big);
                for (int i = 0; i < 4; i++) {
                    CompletableFuture<Long> r = server.recvAsync(in, 1);
                    client.send(Data.pattern(arena, big, i), 1, T);
                    assertEquals(big, r.get(10, TimeUnit.SECONDS));
                }
                byte[] small = new byte[10];
                CompletableFuture<Long> r = server.recvAsync(small, 2);
                client.send(small, 2, T);
                r.get(10, TimeUnit.SECONDS);
                EndpointStats c = client.stats(), s = server.stats();
                assertEquals(4 * big + 10, c.bytesSent());
                assertEquals(5, c.messagesSent());
                assertEquals(4 * big + 10, s.bytesReceived());
                assertEquals(5, s.messagesReceived());
                assertEquals(0, c.bytesReceived());
                assertEquals(4, s.largeTransfers());
                assertTrue(s.p25MBps() > 0 && s.p25MBps() <= s.p50MBps() && s.p50MBps() <= s.p75MBps(), s.toString());
                assertTrue(s.summary().endsWith("(" + (4 * big + 10) + " bytes)"), s.summary());
            }
        });
    }
}
