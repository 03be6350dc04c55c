package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Virtual threads connect, exchange tag, active-message and stream echoes of random sizes (every byte checked),
 * close, abort and get interrupted at random, all at once on one client worker, until both workers are closed under
 * them: every exchange either completes intact or fails with a typed exception, nothing hangs, and the process
 * survives. It found connections pairing the wrong UCX endpoints (UCX aborted the JVM) and an operation both taken
 * back by its interrupted caller and posted by the worker's thread (its staging freed twice: glibc aborted the JVM).
 */
@org.junit.jupiter.api.Timeout(180)
class StressTest {
    private static final int THREADS = 8;
    private static final int MAX = 256 * 1024;
    private static final Duration T = Duration.ofSeconds(10);
    /** Tag (0), active-message (1) and stream (2) echoes. */
    private static final int[] APIS = {0, 1, 2};

    @ParameterizedTest
    @EnumSource(value = ProgressMode.class, names = {"BACKOFF", "BLOCKING"})
    void randomTrafficClosesAbortsAndInterruptsLoseNothingAndNeverHang(ProgressMode mode) throws Exception {
        // UCX's TCP transport aborts or crashes the process when a peer hangs up with data still queued for it
        // (README, Known limits): this test does that on purpose, so it runs where UCX picks shared memory
        org.junit.jupiter.api.Assumptions.assumeTrue(ConfigAndInfoTest.startupEnv("UCX_TLS") == null,
                "UCX_TLS is set: " + ConfigAndInfoTest.startupEnv("UCX_TLS"));
        List<Throwable> bugs = Collections.synchronizedList(new ArrayList<>());
        AtomicLong exchanges = new AtomicLong();
        AtomicBoolean stop = new AtomicBoolean();
        Ucx server = Ucx.open(UcxOptions.defaults().withProgressMode(mode));
        Ucx client = Ucx.open(UcxOptions.defaults().withProgressMode(mode));
        Listener tag = server.listen(0, StressTest::tagEcho);
        Listener am = server.listen(0, StressTest::amEcho);
        Listener stream = server.listen(0, StressTest::streamEcho);
        int[] ports = {tag.port(), am.port(), stream.port()};
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < THREADS; i++) {
            long seed = i;
            workers.add(Thread.ofVirtual().start(() -> work(client, ports, seed, stop, exchanges, bugs)));
        }
        Random r = new Random(42);
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(4);
        while (System.nanoTime() < until) {
            Thread.sleep(5 + r.nextInt(20));
            workers.get(r.nextInt(THREADS)).interrupt();
        }
        // close both workers under the running traffic
        long t0 = System.nanoTime();
        client.close();
        long t1 = System.nanoTime();
        server.close();
        long t2 = System.nanoTime();
        stop.set(true);
        System.out.printf("StressTest %s: %d exchanges; closing took %d ms (client), %d ms (server); %d closes so"
                + " far waited for a flush%n", mode, exchanges.get(), (t1 - t0) / 1_000_000, (t2 - t1) / 1_000_000,
                org.ucx4j.internal.engine.TestHooks.closesAfterFlushes());
        for (Thread w : workers) {
            assertTrue(w.join(Duration.ofSeconds(30)), "a worker thread hung after close: "
                    + java.util.Arrays.toString(w.getStackTrace()));
        }
        tag.close();
        am.close();
        stream.close();
        if (!bugs.isEmpty()) {
            AssertionError e = new AssertionError(bugs.size() + " exchanges went wrong; the first: " + bugs.get(0));
            bugs.forEach(e::addSuppressed);
            throw e;
        }
        assertTrue(exchanges.get() > 100, "traffic flowed: " + exchanges.get() + " exchanges");
    }

    private static void work(Ucx client, int[] ports, long seed, AtomicBoolean stop, AtomicLong exchanges,
            List<Throwable> bugs) {
        Random rnd = new Random(seed);
        try (Arena arena = Arena.ofShared()) {
            MemorySegment out = arena.allocate(MAX);
            MemorySegment in = arena.allocate(MAX);
            Endpoint ep = null;
            int api = 0;
            for (int round = 0; !stop.get() && !client.isClosed(); round++) {
                try {
                    if (ep == null) {
                        api = APIS[rnd.nextInt(APIS.length)];
                        ep = client.connect("127.0.0.1", ports[api], T);
                    }
                    int n = switch (rnd.nextInt(4)) {
                        case 0 -> rnd.nextInt(16);
                        case 1 -> rnd.nextInt(1024);
                        case 2 -> rnd.nextInt(64 * 1024);
                        default -> rnd.nextInt(MAX);
                    };
                    int action = rnd.nextInt(100);
                    if (action < 88) {
                        exchange(ep, api, out, in, n, round, rnd.nextBoolean());
                        exchanges.incrementAndGet();
                    } else if (action < 95) {
                        ep.close();
                        ep = null;
                    } else {
                        ep.abort();
                        ep = null;
                    }
                } catch (Throwable t) {
                    Throwable c = t;
                    while ((c instanceof CompletionException || c instanceof ExecutionException)
                            && c.getCause() != null) {
                        c = c.getCause();
                    }
                    boolean expected = c instanceof CanceledException || c instanceof EndpointClosedException
                            || c instanceof CancellationException || c instanceof InterruptedException
                            || (stop.get() || client.isClosed()) && (c instanceof UcxException
                                    || c instanceof TimeoutException);
                    if (!expected) {
                        bugs.add(t);
                    }
                    if (ep != null) { // an interrupted exchange leaves the echo's state unknown: start over
                        ep.abort();
                        ep = null;
                    }
                    Thread.interrupted();
                }
            }
            if (ep != null) {
                ep.abort();
            }
        }
    }

    /** One echo through the server, checked byte by byte; {@code async} takes the future forms where there are. */
    private static void exchange(Endpoint ep, int api, MemorySegment out, MemorySegment in, int n, int round,
            boolean async) throws Exception {
        Data.fill(out, n, round);
        switch (api) {
            case 0 -> {
                long got;
                if (async) {
                    CompletableFuture<Long> r = ep.recvAsync(in, 2);
                    ep.sendAsync(out.asSlice(0, n), 1).get(10, TimeUnit.SECONDS);
                    got = r.get(10, TimeUnit.SECONDS);
                } else {
                    ep.send(out.asSlice(0, n), 1, T);
                    got = ep.recv(in, 2, T);
                }
                assertEquals(n, got, "echoed length");
                Data.verify(in.asSlice(0, n), n, round);
            }
            case 1 -> {
                ep.amSend(MemorySegment.ofArray(new byte[] {(byte) round}), out.asSlice(0, n), T);
                try (AmMessage m = ep.amRecv(T)) {
                    assertEquals(round & 0xff, m.headerBytes()[0] & 0xff, "echoed header");
                    Data.verify(m.payload(), n, round);
                }
            }
            default -> {
                int k = Math.max(1, Math.min(n, 64 * 1024));
                Data.fill(out, k, round);
                ep.streamSend(out.asSlice(0, k), T);
                assertEquals(k, ep.streamRecv(in.asSlice(0, k), T), "echoed length");
                Data.verify(in.asSlice(0, k), k, round);
            }
        }
    }

    private static void tagEcho(Endpoint ep) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment b = a.allocate(MAX);
            while (true) {
                long n = ep.recv(b, 1);
                ep.send(b.asSlice(0, n), 2);
            }
        } catch (UcxException e) {
            // the connection ended
        }
    }

    private static void amEcho(Endpoint ep) {
        try {
            while (true) {
                try (AmMessage m = ep.amRecv()) {
                    ep.amSend(m.header(), m.payload());
                }
            }
        } catch (UcxException e) {
            // the connection ended
        }
    }

    private static void streamEcho(Endpoint ep) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment b = a.allocate(64 * 1024);
            while (true) {
                long n = ep.streamRecvSome(b);
                ep.streamSend(b.asSlice(0, n));
            }
        } catch (UcxException e) {
            // the connection ended
        }
    }
}
