package org.ucx4j;

import static org.junit.jupiter.api.Assertions.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Tag send/receive with content checks, in-process (two workers) and cross-process (a second JVM). */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SendRecvTest {
    static final Duration T = Duration.ofSeconds(30);
    Ucx server, client;
    Listener listener;
    final CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
    Endpoint local; // client side, in-process
    Endpoint remote; // server side, in-process
    Peer peer;
    Endpoint toPeer;

    @BeforeAll
    void setUp() throws Exception {
        server = Ucx.open(UcxOptions.defaults().withName("server"));
        client = Ucx.open(UcxOptions.defaults().withName("client"));
        listener = server.listen(0, accepted::complete);
        local = client.connect("127.0.0.1", listener.port());
        remote = accepted.get(10, TimeUnit.SECONDS);
        peer = Peer.start("serve-echo");
        int port = Integer.parseInt(peer.await("PORT"));
        toPeer = client.connect("127.0.0.1", port);
    }

    @AfterAll
    void tearDown() throws Exception {
        try { // the peer first, and whatever setUp got to: a failed setUp still ends the second JVM
            if (peer != null) {
                peer.close();
            }
        } finally {
            if (client != null) {
                client.close();
            }
            if (server != null) {
                server.close();
            }
        }
    }

    @ParameterizedTest
    @ValueSource(longs = {0, 1, 8, 1024, 65536, 1 << 20, 16 << 20})
    void inProcessSegments(long size) {
        try (Arena a = Arena.ofShared()) {
            MemorySegment out = Data.pattern(a, size, 7);
            MemorySegment in = a.allocate(Math.max(1, size) + 16).asSlice(0, size + 16);
            CompletableFuture<Long> r = remote.recvAsync(in, 3);
            local.send(out, 3, T);
            assertEquals(size, r.join());
            Data.verify(in.asSlice(0, size), size, 7);
            // and back, blocking on both sides
            MemorySegment back = Data.pattern(a, size, 11);
            CompletableFuture<Long> s = remote.sendAsync(back, 4);
            MemorySegment in2 = a.allocate(Math.max(1, size)).asSlice(0, size);
            assertEquals(size, local.recv(in2, 4, T));
            s.join();
            Data.verify(in2, size, 11);
        }
    }

    @ParameterizedTest
    @ValueSource(longs = {0, 1, 8, 1024, 65536, 1 << 20, 16 << 20})
    void crossProcessEcho(long size) {
        try (Arena a = Arena.ofShared()) {
            MemorySegment header = a.allocate(8);
            header.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, size);
            MemorySegment out = Data.pattern(a, size, 5);
            MemorySegment in = a.allocate(Math.max(1, size)).asSlice(0, size);
            CompletableFuture<Long> r = toPeer.recvAsync(in, 2);
            toPeer.send(header, 1, T);
            toPeer.send(out, 2, T);
            assertEquals(size, r.orTimeout(60, TimeUnit.SECONDS).join());
            Data.verify(in, size, 5);
        }
    }

    @Test
    void byteArraysAreCopiedBothWays() {
        byte[] msg = "ucx4j says hello".getBytes();
        byte[] got = new byte[64];
        CompletableFuture<Long> r = remote.recvAsync(got, 5);
        local.send(msg, 5);
        assertEquals(msg.length, r.join());
        assertArrayEquals(msg, java.util.Arrays.copyOf(got, msg.length));
    }

    @Test
    void directByteBufferRespectsPositionAndLimit() {
        ByteBuffer out = ByteBuffer.allocateDirect(32);
        for (int i = 0; i < 32; i++) {
            out.put(i, (byte) i);
        }
        out.position(4).limit(12); // sends bytes 4..11
        ByteBuffer in = ByteBuffer.allocateDirect(32);
        in.position(16); // receives at 16..
        CompletableFuture<Long> r = remote.recvAsync(in, 6);
        local.send(out, 6);
        assertEquals(8, r.join());
        for (int i = 0; i < 8; i++) {
            assertEquals(4 + i, in.get(16 + i));
        }
        assertEquals(0, in.get(15));
        assertEquals(4, out.position(), "position untouched");
    }

    @Test
    void orderIsPreservedPerTag() {
        try (Arena a = Arena.ofShared()) {
            MemorySegment buf = a.allocate(8);
            for (int i = 0; i < 100; i++) {
                buf.set(ValueLayout.JAVA_INT, 0, i);
                local.sendAsync(buf, 7).join();
            }
            MemorySegment in = a.allocate(8);
            for (int i = 0; i < 100; i++) {
                assertEquals(8, remote.recv(in, 7, T));
                assertEquals(i, in.get(ValueLayout.JAVA_INT, 0));
            }
        }
    }
}
