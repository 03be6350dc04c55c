package org.ucx4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;

/** The other process in cross-process tests. Prints "PORT n" / "READY" lines on stdout for the test to read. */
public final class PeerMain {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        // the test JVM holds this process's stdin open and never writes to it: its end (the test JVM died, or
        // ran out of time) ends this process too, so no peer outlives its test holding ports and shared memory
        Thread.ofPlatform().daemon().name("parent-watch").start(() -> {
            try {
                while (System.in.read() >= 0) {
                    // nothing is ever written
                }
            } catch (java.io.IOException e) {
                // the same: the pipe is gone
            }
            Runtime.getRuntime().halt(3);
        });
        // UCX4J_TEST_PEER_ERRORS=off: endpoints without UCX peer error handling (the test's side must match)
        UcxOptions opts = UcxOptions.defaults()
                .withPeerErrorHandling(!"off".equals(System.getenv("UCX4J_TEST_PEER_ERRORS")));
        switch (mode) {
            case "availability" -> {
                System.out.println("AVAILABLE " + Ucx.isAvailable());
                System.out.println("CAUSE " + Ucx.unavailabilityCause());
            }
            case "hangup" -> { // UCX loaded and open, then wait for a signal: the JVM's own handling must run
                Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println("HOOK")));
                try (Ucx ucx = Ucx.open(opts)) {
                    System.out.println("READY " + ucx.version());
                    Thread.sleep(60_000);
                }
            }
            case "loaded-libraries" -> { // the UCX libraries this process mapped once UCX is loaded
                System.out.println("AVAILABLE " + Ucx.isAvailable());
                for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/maps"))) {
                    int slash = line.indexOf('/');
                    if (slash >= 0 && line.matches(".*/libuc[mpst]\\.so.*")) {
                        System.out.println("LIB " + line.substring(slash));
                    }
                }
                System.out.println("END");
            }
            case "close-wake-race" -> closeWakeRace(opts);
            case "header-only-rendezvous" -> headerOnlyRendezvous(opts, Integer.parseInt(args[1]));
            case "environment-defaults" -> { // [OPTION VALUE]: the defaults in effect once open, then an echo
                UcxOptions o = args.length > 2 ? opts.with(args[1], args[2]) : opts;
                try (Ucx ucx = Ucx.open(o); Listener l = ucx.listen(0, PeerMain::echo);
                        Endpoint ep = ucx.connect("127.0.0.1", l.port()); Arena a = Arena.ofShared()) {
                    System.out.println("DEFAULTS " + Ucx.environmentDefaults());
                    MemorySegment header = a.allocate(8);
                    MemorySegment out = Data.pattern(a, 1 << 20, 3);
                    MemorySegment in = a.allocate(1 << 20);
                    header.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, out.byteSize());
                    ep.send(header, 1);
                    ep.send(out, 2);
                    ep.recv(in, 2, Duration.ofSeconds(30));
                    Data.verify(in, 1 << 20, 3);
                    System.out.println("ECHOED " + ep.transports());
                }
            }
            case "serve-echo" -> {
                try (Ucx ucx = Ucx.open(opts); Listener l = ucx.listen(0, PeerMain::echo)) {
                    System.out.println("PORT " + l.port());
                    System.out.flush();
                    Thread.sleep(Duration.ofMinutes(10));
                }
            }
            case "connect-echo" -> {
                try (Ucx ucx = Ucx.open(opts); Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(args[1]))) {
                    System.out.println("CONNECTED");
                    System.out.flush();
                    echo(ep);
                }
            }
            case "connect-echo-sizes" -> { // echo of every size through serve-echo at HOST PORT, content checked
                try (Ucx ucx = Ucx.open(opts);
                        Endpoint ep = ucx.connect(args[1], Integer.parseInt(args[2]), Duration.ofSeconds(30));
                        Arena a = Arena.ofShared()) {
                    System.out.println("HOST " + java.net.InetAddress.getLocalHost().getHostName());
                    System.out.println("TRANSPORTS " + ep.transports());
                    StringBuilder echoed = new StringBuilder();
                    MemorySegment header = a.allocate(8);
                    for (long size : new long[] {0, 1, 8, 1 << 10, 64 << 10, 1 << 20, 16 << 20}) {
                        MemorySegment out = Data.pattern(a, size, 7);
                        MemorySegment in = a.allocate(Math.max(1, size)).asSlice(0, size);
                        header.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, size);
                        ep.send(header, 1);
                        ep.send(out, 2);
                        long n = ep.recv(in, 2, Duration.ofSeconds(60));
                        Data.verify(in.asSlice(0, n), size, 7);
                        echoed.append(echoed.isEmpty() ? "" : " ").append(size);
                    }
                    System.out.println("ECHOED " + echoed);
                    System.out.flush();
                }
            }
            case "connect-hold-recv" -> { // a receive pending at HOST PORT until it fails (or 60 s pass)
                try (Ucx ucx = Ucx.open(opts);
                        Endpoint ep = ucx.connect(args[1], Integer.parseInt(args[2]), Duration.ofSeconds(30))) {
                    System.out.println("READY");
                    System.out.flush();
                    try {
                        ep.recv(new byte[8], 1, Duration.ofSeconds(60));
                        System.out.println("RECEIVED");
                    } catch (UcxException e) {
                        System.out.println("FAILED " + e.getClass().getName() + " " + e.getMessage());
                    }
                    System.out.println("ALIVE " + ep.isAlive());
                    System.out.flush();
                }
            }
            case "connect-hold" -> {
                try (Ucx ucx = Ucx.open(opts); Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(args[1]))) {
                    ep.send(new byte[] {42}, 9);
                    System.out.println("READY");
                    System.out.flush();
                    Thread.sleep(Duration.ofMinutes(10));
                }
            }
            case "connect-send-close" -> { // PORT: tag 1 (100 B), tag 2 (30000 B), 100000 stream bytes, then close
                try (Ucx ucx = Ucx.open(opts); Arena arena = Arena.ofShared()) {
                    Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(args[1]), Duration.ofSeconds(30));
                    ep.send(Data.pattern(arena, 100, 1), 1, Duration.ofSeconds(30));
                    ep.send(Data.pattern(arena, 30_000, 2), 2, Duration.ofSeconds(30));
                    ep.streamSend(Data.pattern(arena, 100_000, 3), Duration.ofSeconds(30));
                    ep.close(Duration.ofSeconds(10));
                    System.out.println("CLOSED");
                    System.out.flush();
                }
            }
            case "connect-am-flood" -> { // 32 announced 8 MiB active messages, then wait to be killed
                try (Ucx ucx = Ucx.open(opts); Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(args[1]));
                        Arena arena = Arena.ofShared()) {
                    MemorySegment big = arena.allocate(8 << 20);
                    for (int i = 0; i < 32; i++) {
                        ep.amSendAsync(MemorySegment.ofArray(new byte[] {(byte) i}), big);
                    }
                    System.out.println("SENT");
                    System.out.flush();
                    Thread.sleep(Duration.ofMinutes(10));
                }
            }
            case "serve-am-echo" -> {
                try (Ucx ucx = Ucx.open(); Listener l = ucx.listen(0, PeerMain::amEcho)) {
                    System.out.println("PORT " + l.port());
                    System.out.flush();
                    Thread.sleep(Duration.ofMinutes(10));
                }
            }
            case "serve-rma", "serve-rma-registered" -> { // registered: the process's own memory, not UCX's
                boolean registered = mode.equals("serve-rma-registered");
                try (Ucx ucx = Ucx.open(); Listener l = ucx.listen(0, ep -> rmaServe(ucx, ep, registered))) {
                    System.out.println("PORT " + l.port());
                    System.out.flush();
                    Thread.sleep(Duration.ofMinutes(10));
                }
            }
            case "serve-stream-echo" -> { // each connection: 8-byte length, then that many bytes; both echoed
                try (Ucx ucx = Ucx.open(opts); Listener l = ucx.listen(0, PeerMain::streamEcho)) {
                    System.out.println("PORT " + l.port());
                    System.out.flush();
                    Thread.sleep(Duration.ofMinutes(10));
                }
            }
            case "serve-secret-echo" -> { // SECRET: tag echo (as serve-echo) for peers that prove the secret
                byte[] secret = args[1].getBytes(java.nio.charset.StandardCharsets.UTF_8);
                try (Ucx ucx = Ucx.open(opts.withSecret(secret)); Listener l = ucx.listen(0, PeerMain::echo)) {
                    System.out.println("PORT " + l.port());
                    System.out.flush();
                    Thread.sleep(Duration.ofMinutes(10));
                }
            }
            case "effective-option" -> { // KEY VALUE ENV_WINS: the option UCX uses once open with KEY=VALUE given
                UcxOptions o = opts.with(args[1], args[2]).withEnvironmentWins(Boolean.parseBoolean(args[3]));
                try (Ucx ucx = Ucx.open(o)) {
                    System.out.println("EFFECTIVE " + ucx.config().get(args[1]));
                }
            }
            case "serve-address-echo" -> addressEcho(opts);
            default -> throw new IllegalArgumentException(mode);
        }
    }

    /** Stream echo: reads an 8-byte length and that many bytes (exactly), sends both back; until the peer goes. */
    static void streamEcho(Endpoint ep) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment header = arena.allocate(8);
            while (true) {
                ep.streamRecv(header);
                long size = header.get(ValueLayout.JAVA_LONG_UNALIGNED, 0);
                ep.streamSend(header);
                if (size > 0) {
                    try (Arena a = Arena.ofConfined()) {
                        MemorySegment payload = a.allocate(size);
                        ep.streamRecv(payload);
                        ep.streamSend(payload);
                    }
                }
            }
        } catch (UcxException e) {
            // peer went away: done
        }
    }

    /**
     * Raw worker-address peer (no listener, no handshake): prints its address, takes the client's address as a
     * worker-level tag-100 message, connects back to it, then echoes: an 8-byte length (tag 1) and that many bytes
     * (tag 2), received at worker level, sent back with tag 2; until the client's address comes again or 10 min.
     */
    private static void addressEcho(UcxOptions opts) throws Exception {
        try (Ucx ucx = Ucx.open(opts); Arena arena = Arena.ofShared()) {
            System.out.println("ADDRESS " + ucx.workerAddress().toHex());
            System.out.flush();
            MemorySegment addr = arena.allocate(1 << 16);
            TagMessage a = ucx.recvTagged(addr, 100, -1L, Duration.ofSeconds(60));
            try (Endpoint back = ucx.connect(WorkerAddress.of(addr.asSlice(0, a.length()).toArray(
                    ValueLayout.JAVA_BYTE)))) {
                MemorySegment header = arena.allocate(8);
                MemorySegment payload = arena.allocate(32 << 20);
                while (true) {
                    ucx.recvTagged(header, 1, -1L, Duration.ofMinutes(10));
                    long size = header.get(ValueLayout.JAVA_LONG_UNALIGNED, 0);
                    TagMessage m = ucx.recvTagged(payload.asSlice(0, size), 2, -1L, Duration.ofSeconds(60));
                    back.send(payload.asSlice(0, m.length()), 2, Duration.ofSeconds(60));
                }
            }
        }
    }

    /** Echoes active messages, frames and objects back on the same endpoint, one virtual thread per kind. */
    static void amEcho(Endpoint ep) {
        Thread.ofVirtual().start(() -> {
            try {
                while (true) {
                    try (AmMessage m = ep.amRecv()) {
                        ep.amSend(m.header(), m.payload());
                    }
                }
            } catch (UcxException e) {
                // peer went away
            }
        });
        Thread.ofVirtual().start(() -> {
            try {
                while (true) {
                    try (Frames f = ep.recvFrames()) {
                        ep.sendFrames(f.list());
                    }
                }
            } catch (UcxException e) {
                // peer went away
            }
        });
        try {
            while (true) {
                ep.sendObject(ep.recvObject());
            }
        } catch (UcxException e) {
            // peer went away
        }
    }

    /**
     * RMA target: sends the key of a 32 MiB region holding pattern 21, then answers each 16-byte object
     * (offset, length) with 1 if that range holds pattern 22 relative to the offset (the client put it), else 0.
     */
    static void rmaServe(Ucx ucx, Endpoint ep, boolean registered) {
        try (Arena own = Arena.ofShared(); MemoryRegion region = registered
                ? ucx.registerMemory(own.allocate(32 << 20, 4096)) : ucx.allocateMemory(32 << 20)) {
            MemorySegment m = region.segment();
            for (long i = 0; i < m.byteSize(); i++) {
                m.set(ValueLayout.JAVA_BYTE, i, Data.at(i, 21));
            }
            ep.sendObject(region.packRemoteKey());
            while (true) {
                MemorySegment q = MemorySegment.ofArray(ep.recvObject());
                long off = q.get(ValueLayout.JAVA_LONG_UNALIGNED, 0), len = q.get(ValueLayout.JAVA_LONG_UNALIGNED, 8);
                boolean ok = true;
                for (long i = 0; i < len && ok; i++) {
                    ok = m.get(ValueLayout.JAVA_BYTE, off + i) == Data.at(i, 22);
                }
                ep.sendObject(new byte[] {(byte) (ok ? 1 : 0)});
            }
        } catch (UcxException e) {
            // peer went away
        }
    }

    /**
     * Closes a {@code Ucx} whose worker's thread destroys the worker while the closing thread is about to wake it,
     * then opens files, which take the lowest free descriptors (the worker's closed ones among them). Prints how
     * many bytes landed in them: a wake of the destroyed worker writes to its old event descriptor.
     */
    private static void closeWakeRace(UcxOptions opts) throws Exception {
        java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("ucx4j-wake-race");
        java.util.List<java.nio.channels.FileChannel> files = new java.util.ArrayList<>();
        org.ucx4j.internal.engine.TestHooks.beforeShutdownWake(destroyed -> {
            try {
                destroyed.get(10, java.util.concurrent.TimeUnit.SECONDS);
                for (int i = 0; i < 64; i++) {
                    files.add(java.nio.channels.FileChannel.open(dir.resolve("f" + i),
                            java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.WRITE));
                }
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        Ucx ucx = Ucx.open(opts.withProgressMode(ProgressMode.POLLING));
        ucx.close();
        long written = 0;
        for (java.nio.channels.FileChannel f : files) {
            written += f.size();
            f.close();
        }
        for (int i = 0; i < files.size(); i++) {
            java.nio.file.Files.deleteIfExists(dir.resolve("f" + i));
        }
        java.nio.file.Files.deleteIfExists(dir);
        System.out.println("WRITTEN " + written);
        System.out.flush();
    }

    /** Echo protocol: an 8-byte length with tag 1, then the payload with tag 2, which is sent back with tag 2. */
    static void echo(Endpoint ep) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment header = arena.allocate(8);
            while (true) {
                ep.recv(header, 1);
                long size = header.get(ValueLayout.JAVA_LONG_UNALIGNED, 0);
                try (Arena a = Arena.ofConfined()) {
                    MemorySegment payload = a.allocate(Math.max(1, size));
                    long n = ep.recv(payload.asSlice(0, size), 2);
                    ep.send(payload.asSlice(0, n), 2);
                }
            }
        } catch (UcxException e) {
            // peer went away: done
        }
    }

    /**
     * {@code n} active messages with a 2 KiB header and no payload, sent by rendezvous ({@code RNDV_THRESH} 1 KiB),
     * between two instances in this process; each received and checked. Prints "RECEIVED i" every 500 and "DONE n".
     */
    private static void headerOnlyRendezvous(UcxOptions opts, int n) throws Exception {
        CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
        try (Ucx rx = Ucx.open(opts); Ucx tx = Ucx.open(opts.with("RNDV_THRESH", "1k"));
                Listener l = rx.listen(0, accepted::complete);
                Endpoint client = tx.connect("127.0.0.1", l.port())) {
            Endpoint server = accepted.get(10, java.util.concurrent.TimeUnit.SECONDS);
            byte[] header = new byte[2048];
            for (int i = 0; i < n; i++) {
                header[0] = (byte) i;
                header[2047] = (byte) (i >> 8);
                client.amSend(header, new byte[0], Duration.ofSeconds(10));
                try (AmMessage m = server.amRecv(Duration.ofSeconds(10))) {
                    byte[] got = m.headerBytes();
                    if (got.length != 2048 || got[0] != (byte) i || got[2047] != (byte) (i >> 8)
                            || m.payloadLength() != 0) {
                        throw new AssertionError("message " + i + ": " + got.length + " B header, "
                                + m.payloadLength() + " B payload");
                    }
                }
                if (i % 500 == 0) {
                    System.out.println("RECEIVED " + i);
                }
            }
            System.out.println("DONE " + n);
        }
    }
}
