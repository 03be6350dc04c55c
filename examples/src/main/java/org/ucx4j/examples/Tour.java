package org.ucx4j.examples;

import java.io.PrintStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.ucx4j.AmMessage;
import org.ucx4j.ConnectionResetException;
import org.ucx4j.Endpoint;
import org.ucx4j.EndpointClosedException;
import org.ucx4j.Frames;
import org.ucx4j.Listener;
import org.ucx4j.MemoryRegion;
import org.ucx4j.MessageTruncatedException;
import org.ucx4j.ProbedMessage;
import org.ucx4j.RemoteKey;
import org.ucx4j.TagMessage;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;
import org.ucx4j.UcxTimeoutException;

/**
 * A guided tour of the API in one process: two workers ({@code alice} serves, {@code bob} connects) go through
 * every way ucx4j moves bytes, and every step checks what arrived. docs/guide.md walks through it step by step.
 *
 * <pre>
 * ./scripts/example Tour
 * </pre>
 */
public final class Tour {
    private Tour() {}

    private static final Duration WAIT = Duration.ofSeconds(10);

    public static void main(String[] args) throws Exception {
        int steps = run(UcxOptions.defaults(), System.out);
        System.out.println("tour complete: " + steps + " steps, every result checked");
    }

    /** Runs the tour with these options for both workers, printing one line per step; returns the steps run. */
    public static int run(UcxOptions options, PrintStream out) throws Exception {
        int steps = 0;
        // 1. Open: a UCX context, a worker and its progress thread, with failure detection on by default
        try (Ucx alice = Ucx.open(options.withName("alice"));
                Ucx bob = Ucx.open(options.withName("bob"));
                Arena arena = Arena.ofShared()) {
            out.println("1. UCX " + Ucx.version() + ", transports " + alice.transports());
            steps++;

            // 2. Connect: alice listens, bob connects; each accepted connection runs a handler on a virtual thread
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener listener = alice.listen("127.0.0.1", 0, accepted::complete);
                    Endpoint toAlice = bob.connect("127.0.0.1", listener.port());
                    Endpoint toBob = accepted.get(10, TimeUnit.SECONDS)) {
                out.println("2. connected: " + toAlice + " <-> " + toBob);
                steps++;

                steps += tags(toAlice, toBob, out);
                steps += asyncAndVirtualThreads(toAlice, toBob, out);
                steps += workerLevelTagsAndProbe(alice, toAlice, toBob, arena, out);
                steps += receiverAllocated(toAlice, toBob, out);
                steps += stream(toAlice, toBob, arena, out);
                steps += rma(alice, toAlice, toBob, arena, out);
                steps += errors(toAlice, toBob, out);
                steps += peerGone(toAlice, toBob, out);
            }
            steps += workerAddress(alice, options, arena, out);
        }
        return steps;
    }

    /** 3. Tagged messages: blocking calls, the tag chooses which receive a message goes to. */
    private static int tags(Endpoint toAlice, Endpoint toBob, PrintStream out) {
        toAlice.send(bytes("first"), 1); // small: sent eagerly, so this returns before alice receives
        toAlice.send(bytes("second"), 2);
        byte[] two = new byte[6];
        byte[] one = new byte[5];
        long n2 = toBob.recv(two, 2); // tag 2 first: tags, not arrival order, pick the message
        long n1 = toBob.recv(one, 1);
        check(n1 == 5 && n2 == 6 && text(one).equals("first") && text(two).equals("second"), "tags");
        out.println("3. tags: tag 2 -> '" + text(two) + "', tag 1 -> '" + text(one) + "'");
        return 1;
    }

    /** 4. Futures and virtual threads: the same engine, two styles. */
    private static int asyncAndVirtualThreads(Endpoint toAlice, Endpoint toBob, PrintStream out) throws Exception {
        byte[] big = new byte[4 << 20]; // 4 MiB: rendezvous, so the receive must be posted for the send to finish
        Arrays.fill(big, (byte) 7);
        byte[] into = new byte[big.length];
        CompletableFuture<Long> received = toBob.recvAsync(into, 3);
        toAlice.sendAsync(big, 3).get(10, TimeUnit.SECONDS);
        check(received.get(10, TimeUnit.SECONDS) == big.length && Arrays.equals(big, into), "4 MiB async");

        // many virtual threads share one endpoint: every call is safe from any thread, and cheap to block in
        int threads = 64;
        ConcurrentHashMap<Integer, String> got = new ConcurrentHashMap<>();
        try (var pool = Executors.newVirtualThreadPerTaskExecutor()) {
            for (int i = 0; i < threads; i++) {
                int tag = 100 + i;
                pool.submit(() -> {
                    byte[] b = new byte[16];
                    long n = toBob.recv(b, tag, WAIT);
                    got.put(tag, new String(b, 0, (int) n, StandardCharsets.UTF_8));
                    return null;
                });
                pool.submit(() -> {
                    toAlice.send(bytes("from " + tag), tag, WAIT);
                    return null;
                });
            }
        }
        for (int i = 0; i < threads; i++) {
            check(("from " + (100 + i)).equals(got.get(100 + i)), "virtual thread " + i);
        }
        out.println("4. async 4 MiB + " + threads + " virtual threads on one endpoint: all delivered");
        return 1;
    }

    /** 5. Worker-level tags with masks (any endpoint, or raw peers), and probing before receiving. */
    private static int workerLevelTagsAndProbe(Ucx alice, Endpoint toAlice, Endpoint toBob, Arena arena,
            PrintStream out) throws Exception {
        long job = 0x0500_0000L;
        toAlice.sendTagged(bytes("part 9"), job | 9);
        MemorySegment buf = arena.allocate(64);
        TagMessage m = alice.recvTagged(buf, job, 0xFF00_0000L, WAIT); // any tag of this job
        check(m.tag() == (job | 9) && text(buf, m.length()).equals("part 9"), "worker tag");

        toAlice.send(bytes("sized by the sender"), 5);
        ProbedMessage probed = null;
        for (long deadline = System.nanoTime() + WAIT.toNanos(); probed == null && System.nanoTime() < deadline; ) {
            probed = toBob.probe(5, true); // true: take it out of the queue, to receive by this handle
            Thread.onSpinWait();
        }
        check(probed != null, "probe");
        MemorySegment exact = arena.allocate(probed.length()); // allocate exactly what the sender sent
        toBob.recv(probed, exact);
        check(text(exact, exact.byteSize()).equals("sized by the sender"), "probed receive");
        out.println("5. worker tag 0x" + Long.toHexString(m.tag()) + " matched by mask; probed " + probed.length()
                + " B, then received it");
        return 1;
    }

    /** 6. The receiver allocates: active messages (header + payload), frames and objects. */
    private static int receiverAllocated(Endpoint toAlice, Endpoint toBob, PrintStream out) throws Exception {
        byte[] payload = new byte[1 << 20];
        Arrays.fill(payload, (byte) 3);
        toAlice.amSend(bytes("blob-17"), payload); // no receive posted: it waits at alice in its inbox
        try (AmMessage am = toBob.amRecv(WAIT)) { // close gives the memory back
            check(text(am.headerBytes()).equals("blob-17") && Arrays.equals(am.payloadBytes(), payload), "am");
        }

        try (Arena a = Arena.ofShared()) {
            List<MemorySegment> frames = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                frames.add(a.allocate(10L * (i + 1)).fill((byte) i));
            }
            toAlice.sendFrames(frames); // one message, one header with every frame's size
            try (Frames f = toBob.recvFrames(WAIT)) {
                check(f.count() == 3 && f.get(2).byteSize() == 30 && f.get(2).get(ValueLayout.JAVA_BYTE, 0) == 2,
                        "frames");
            }
        }

        toAlice.sendObject(bytes("an object of any size"));
        check(text(toBob.recvObject(WAIT)).equals("an object of any size"), "object");
        out.println("6. receiver-allocated: 1 MiB active message, 3 frames, an object");
        return 1;
    }

    /** 7. Stream: bytes in order, no message boundaries. */
    private static int stream(Endpoint toAlice, Endpoint toBob, Arena arena, PrintStream out) {
        toAlice.streamSend(bytes("hello, "));
        toAlice.streamSend(bytes("stream"));
        MemorySegment all = arena.allocate(13);
        toBob.streamRecv(all, WAIT); // exactly 13 bytes, whatever pieces they came in
        check(text(all, 13).equals("hello, stream"), "stream");
        out.println("7. stream: '" + text(all, 13) + "'");
        return 1;
    }

    /** 8. RMA: alice exposes memory, bob reads and writes it without alice doing anything. */
    private static int rma(Ucx alice, Endpoint toAlice, Endpoint toBob, Arena arena, PrintStream out)
            throws Exception {
        try (MemoryRegion region = alice.allocateMemory(1 << 16)) {
            region.segment().fill((byte) 42);
            toBob.sendObject(region.packRemoteKey()); // the key travels as bytes, by any means
            try (RemoteKey key = toAlice.unpackRemoteKey(toAlice.recvObject(WAIT))) {
                MemorySegment local = arena.allocate(1024);
                toAlice.get(local, key, 4096); // 1 KiB from offset 4096 of alice's region
                check(local.get(ValueLayout.JAVA_BYTE, 1023) == 42, "get");
                toAlice.put(arena.allocate(8).fill((byte) 9), key, 0);
                toAlice.flush(WAIT); // the put is complete at alice once flush returns
                check(region.segment().get(ValueLayout.JAVA_BYTE, 7) == 9, "put");
            }
        }
        out.println("8. RMA: got 1 KiB of alice's memory, put 8 B into it");
        return 1;
    }

    /** 9. Typed errors: a message larger than the buffer, a timeout, a closed object. */
    private static int errors(Endpoint toAlice, Endpoint toBob, PrintStream out) {
        toAlice.send(bytes("too long for the buffer"), 6);
        String truncated = expect(MessageTruncatedException.class, () -> toBob.recv(new byte[4], 6, WAIT));
        String timedOut = expect(UcxTimeoutException.class, () -> toBob.recv(new byte[4], 7,
                Duration.ofMillis(50)));
        out.println("9. errors: " + truncated + "; " + timedOut);
        return 1;
    }

    /** 10. The peer goes: what is pending fails with a typed exception, and the endpoint is closed. */
    private static int peerGone(Endpoint toAlice, Endpoint toBob, PrintStream out) throws Exception {
        CompletableFuture<Throwable> closed = new CompletableFuture<>();
        toBob.onClose(closed::complete); // null cause: closed here; else why it failed
        CompletableFuture<Long> pending = toBob.recvAsync(new byte[8], 8);
        toAlice.close(); // graceful: bob's side learns it at once (a killed process: within seconds)
        String why = expect(ConnectionResetException.class, () -> pending.join());
        check(closed.get(10, TimeUnit.SECONDS) instanceof ConnectionResetException && !toBob.isAlive(), "peer gone");
        String afterClose = expect(EndpointClosedException.class, () -> toAlice.send(new byte[1], 1));
        out.println("10. peer gone: " + why + "; then " + afterClose);
        return 1;
    }

    /** 11. Worker addresses: a raw endpoint, no listener and no handshake, as any C UCX program would use. */
    private static int workerAddress(Ucx alice, UcxOptions options, Arena arena, PrintStream out) {
        try (Ucx carol = Ucx.open(options.withName("carol"));
                Endpoint raw = carol.connect(alice.workerAddress())) {
            raw.sendTagged(bytes("by address"), 42);
            MemorySegment buf = arena.allocate(32);
            TagMessage m = alice.recvTagged(buf, 42, -1L, WAIT);
            check(text(buf, m.length()).equals("by address"), "raw endpoint");
            out.println("11. worker address (" + alice.workerAddress().toBytes().length + " B): '"
                    + text(buf, m.length()) + "' with tag " + m.tag());
        }
        return 1;
    }

    private interface Call {
        void run() throws Exception;
    }

    /** Runs {@code call}, which must fail with {@code type} (directly, or as the cause of a future's failure). */
    private static String expect(Class<? extends Exception> type, Call call) {
        try {
            call.run();
        } catch (Exception e) {
            Throwable t = e instanceof java.util.concurrent.CompletionException && e.getCause() != null
                    ? e.getCause() : e;
            check(type.isInstance(t), "expected " + type.getSimpleName() + ", got " + t);
            return type.getSimpleName() + " (" + t.getMessage() + ")";
        }
        throw new IllegalStateException("expected " + type.getSimpleName() + ", but the call succeeded");
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException("tour step failed: " + what);
        }
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }

    private static String text(MemorySegment s, long length) {
        return new String(s.asSlice(0, length).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8);
    }
}
