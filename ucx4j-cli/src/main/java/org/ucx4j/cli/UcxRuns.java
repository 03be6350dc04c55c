package org.ucx4j.cli;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import org.ucx4j.AmMessage;
import org.ucx4j.Endpoint;
import org.ucx4j.MemoryRegion;
import org.ucx4j.RemoteKey;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;

/**
 * The ucx4j side of the sweep: the client sends a command (API and mode, size, total, window) with tag
 * {@link #CTRL}, the server runs it (for RMA it registers memory and sends the key; the client gets from it). In caller progress mode both sides drive their worker themselves, as ucx_perftest does.
 */
final class UcxRuns {
    static final int CTRL = 100, DATA = 1, ACK = 2;
    static final long QUIT = 0, PING_PONG = 1, STREAM = 2;

    /**
     * The ucx4j API a run measures; ucx_perftest's matching tests are in {@link PerftestRuns}. {@code AM_HANDLER}
     * ({@code --api am-handler}): active messages that the server takes in a handler on its worker's thread
     * ({@link Endpoint#onActiveMessage}), as {@code ucp_am_lat}/{@code ucp_am_bw} take theirs in a C callback,
     * instead of receiving them on its own thread ({@code am}); the client's side is the same for both.
     */
    enum Api {
        TAG, AM, STREAM, RMA, AM_HANDLER;

        static Api parse(String s) {
            try {
                return valueOf(s.trim().toUpperCase(java.util.Locale.ROOT).replace('-', '_'));
            } catch (IllegalArgumentException e) {
                throw new UsageException("--api must be tag, am, am-handler, stream or rma, got " + s);
            }
        }

        /** Refuses a message size this API cannot measure: a stream has no empty messages. */
        void checkSize(long size) {
            if (this == STREAM && size == 0) {
                throw new UsageException("--api stream needs a size of at least 1 byte (a stream carries no empty "
                        + "messages)");
            }
        }

        /** As {@code --api} spells it. */
        String cli() {
            return name().toLowerCase(java.util.Locale.ROOT).replace('_', '-');
        }
    }

    private UcxRuns() {}

    /** Serves commands on {@code ep} until QUIT or the peer goes away. */
    static void serve(Ucx ucx, Endpoint ep) {
        try (Arena arena = Arena.ofShared()) {
            MemorySegment cmd = arena.allocate(32);
            MemorySegment ack = arena.allocate(8);
            MemorySegment buf = arena.allocate(64L << 20, 4096);
            // a ping-pong answers from a buffer of its own, as ucx_perftest's does (one buffer for both would keep
            // large messages in cache that perftest's must fetch)
            MemorySegment outBuf = arena.allocate(64L << 20, 4096);
            AmSink sink = null;
            long prepost = prepostFrom(ep);
            while (true) {
                ep.recv(cmd, CTRL, Duration.ofHours(1));
                long word = cmd.getAtIndex(ValueLayout.JAVA_LONG, 0);
                long mode = word & 15;
                Api api = Api.values()[(int) (word >>> 4)];
                long size = cmd.getAtIndex(ValueLayout.JAVA_LONG, 1);
                long total = cmd.getAtIndex(ValueLayout.JAVA_LONG, 2);
                int window = (int) cmd.getAtIndex(ValueLayout.JAVA_LONG, 3);
                MemorySegment b = buf.asSlice(0, size);
                MemorySegment out = outBuf.asSlice(0, size);
                if (mode == QUIT) {
                    return;
                }
                switch (api) {
                    case TAG -> serveTag(ucx, ep, mode, b, out, total, window, prepost);
                    case AM -> {
                        for (long i = 0; i < total; i++) {
                            try (AmMessage m = ep.amRecv()) {
                                if (mode == PING_PONG) {
                                    ep.amSend(EMPTY, out); // from a buffer of its own, as ucp_am_lat's
                                }
                            }
                        }
                    }
                    case AM_HANDLER -> {
                        if (sink == null) {
                            sink = new AmSink(ep);
                            ep.onActiveMessage(sink);
                        }
                        sink.serve(ucx, mode == PING_PONG ? out : null, total, ack);
                    }
                    case STREAM -> {
                        for (long i = 0; i < total; i++) {
                            ep.streamRecv(b);
                            if (mode == PING_PONG) {
                                ep.streamSend(out);
                            }
                        }
                    }
                    case RMA -> {
                        // UCX-allocated (shared) memory, as ucx_perftest's: same-host gets become plain copies
                        try (MemoryRegion region = ucx.allocateMemory(Math.max(size, 1))) {
                            ep.sendObject(region.packRemoteKey());
                            ep.recv(ack, ACK, Duration.ofHours(1)); // the client is done reading
                        }
                        continue;
                    }
                }
                if (mode != PING_PONG) {
                    ep.send(ack, ACK);
                }
            }
        }
    }

    private static final MemorySegment EMPTY = MemorySegment.ofArray(new byte[0]);

    /**
     * The server's active-message handler for {@link Api#AM_HANDLER}: closes each message as it lands (its receive
     * block goes back to the pool before the worker starts its next pull) and answers a ping at once from the
     * worker's thread. Armed per command before the client is told to start, so every message is counted.
     */
    private static final class AmSink implements java.util.function.Consumer<AmMessage> {
        private final Endpoint ep;
        private volatile MemorySegment pong; // null: one direction
        private volatile long left;
        private volatile java.util.concurrent.CountDownLatch done;

        AmSink(Endpoint ep) {
            this.ep = ep;
        }

        /** Takes {@code total} messages, answering each from {@code pong} unless null; returns when all landed. */
        void serve(Ucx ucx, MemorySegment pong, long total, MemorySegment ack) {
            java.util.concurrent.CountDownLatch latch = new java.util.concurrent.CountDownLatch(total == 0 ? 0 : 1);
            this.pong = pong;
            this.left = total;
            this.done = latch;
            ep.send(ack, ACK); // armed: the client may start
            long seen = total, since = System.nanoTime();
            try {
                boolean caller = ucx.options().progressMode() == ProgressMode.CALLER;
                for (int turns = 0; latch.getCount() > 0; turns++) {
                    // caller mode: this thread drives the worker, and the handler runs in it
                    boolean idle = caller ? ucx.progress() == 0
                            : !latch.await(100, java.util.concurrent.TimeUnit.MILLISECONDS);
                    if (idle && !ep.isAlive()) {
                        throw new IllegalStateException("the client went away in the middle of a run");
                    }
                    if (!caller || (turns & 0xffff) == 0) {
                        long now = System.nanoTime(), l = left;
                        if (l != seen) {
                            seen = l;
                            since = now;
                        } else if (now - since > STALL_NANOS) {
                            throw stalled();
                        }
                    }
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted", e);
            }
        }

        @Override
        public void accept(AmMessage m) {
            m.close();
            MemorySegment out = pong;
            if (out != null) {
                ep.amSendAsync(EMPTY, out); // its failure shows as the client's missing answer
            }
            long l = left - 1; // only the worker's thread counts
            left = l;
            if (l == 0) {
                done.countDown();
            }
        }
    }

    private static void serveTag(Ucx ucx, Endpoint ep, long mode, MemorySegment b, MemorySegment out, long total,
            int window, long prepostFrom) {
        if (mode == PING_PONG || b.byteSize() < prepostFrom) {
            // one receive at a time (ucx_perftest keeps 32 posted, but a window of async receives costs ucx4j an
            // op, an upcall and a queued request per message: 8-15 % of the rate at 16 KiB); messages sent eagerly
            // are taken from UCX's unexpected queue by their probe handle, without a request or an upcall
            for (long i = 0; i < total; i++) {
                ep.recv(b, DATA);
                if (mode == PING_PONG) {
                    ep.send(out, DATA);
                }
            }
            return;
        }
        // larger messages: a window of receives posted ahead, so each rendezvous starts as soon as it is announced
        @SuppressWarnings("unchecked")
        CompletableFuture<Long>[] ring = new CompletableFuture[window];
        long posted = 0;
        for (; posted < Math.min(window, total); posted++) {
            ring[(int) (posted % window)] = ep.recvAsync(b, DATA);
        }
        for (long done = 0; done < total; done++) {
            CompletableFuture<Long> f = ring[(int) (done % window)];
            await(ucx, f);
            if (posted < total) {
                ring[(int) (posted % window)] = ep.recvAsync(b, DATA);
                posted++;
            }
        }
    }

    /**
     * From this size on the server posts its receives ahead: a rendezvous starts only once its receive is posted,
     * where an eager message is taken faster by a blocking receive when it has arrived. UCX's rendezvous threshold
     * for tag sends, as {@code ucp_ep_print_info} gives it ({@link #rendezvousFrom}), or {@link #PREPOST_MIN} where
     * that says nothing this can read.
     */
    static long prepostFrom(Endpoint ep) {
        long t = rendezvousFrom(ep.info());
        return t > 0 ? t : PREPOST_MIN;
    }

    /** Where the threshold is not known: the rendezvous threshold of shared memory with UCX's default segments. */
    static final long PREPOST_MIN = 16 * 1024;

    private static final java.util.regex.Pattern TAG_SEND_RNDV =
            java.util.regex.Pattern.compile("(?m)^#\\s*tag_send:\\s.*?\\.\\.(\\d+)\\.\\.<rndv>");
    private static final java.util.regex.Pattern TAG_SEND_NBR_RNDV =
            java.util.regex.Pattern.compile("(?m)^#\\s*tag_send_nbr:\\s.*?\\.\\.(\\d+)\\.\\.<rndv>");

    /**
     * The smallest tag message UCX sends by rendezvous, from {@code ucp_ep_print_info}. UCX before 1.16 prints one
     * row per operation: the {@code tag_send:} row ({@code 0..<egr/short>..93..<egr/bcopy>..32832..<rndv>..(inf)}
     * gives 32832), or the {@code tag_send_nbr:} row where ucx4j's own last line says its tag sends take those
     * thresholds (eager sends over shared memory: 262144). UCX 1.16 and later print a table per selection, titled
     * {@code tagged message by ucp_tag_send* from host memory} (or {@code ucp_tag_send*(fast-completion)} for the
     * {@code tag_send_nbr} case), whose first rendezvous row starts at the threshold ({@code 553109..inf},
     * {@code 520K..inf}). -1 if the text has none of these. The server reads its own endpoint's: both sides of a
     * benchmark run with the same options.
     */
    static long rendezvousFrom(String epInfo) {
        boolean fast = epInfo.contains("# ucx4j eager sends: tag_send takes the tag_send_nbr thresholds");
        java.util.regex.Matcher m = (fast ? TAG_SEND_NBR_RNDV : TAG_SEND_RNDV).matcher(epInfo);
        if (m.find()) {
            return Long.parseLong(m.group(1));
        }
        return rendezvousFromTable(epInfo, fast ? "ucp_tag_send*(fast-completion) from host"
                : "ucp_tag_send* from host");
    }

    /** A table row of UCX 1.16+: {@code # |  553109..inf | (?) rendezvous fragmented copy-in copy-out | posix/memory |}. */
    private static final java.util.regex.Pattern TABLE_ROW = java.util.regex.Pattern
            .compile("^#\\s*\\|\\s*(\\d+[KMGT]?)\\.\\.\\S+\\s*\\|([^|]*)\\|");

    private static long rendezvousFromTable(String epInfo, String selection) {
        boolean inTable = false;
        for (String line : epInfo.split("\n")) {
            if (line.contains("|") && line.contains(" by ucp_")) { // a table's title row
                inTable = line.contains("tagged message by " + selection);
                continue;
            }
            java.util.regex.Matcher row = inTable ? TABLE_ROW.matcher(line) : null;
            if (row != null && row.find() && row.group(2).contains("rendezvous")) {
                return units(row.group(1));
            }
        }
        return -1;
    }

    /** UCX's memory units: {@code 553109}, {@code 520K}, {@code 2M}. */
    private static long units(String s) {
        int shift = switch (s.charAt(s.length() - 1)) {
            case 'K' -> 10;
            case 'M' -> 20;
            case 'G' -> 30;
            case 'T' -> 40;
            default -> 0;
        };
        return Long.parseLong(shift == 0 ? s : s.substring(0, s.length() - 1)) << shift;
    }

    static void quit(Endpoint ep) {
        try (Arena a = Arena.ofConfined()) {
            ep.send(a.allocate(32), CTRL);
        }
    }

    /** Ping-pong: one-way latency is half the round trip. For RMA, the latency of one blocking get. */
    static Measurement latency(Api api, Endpoint ep, long size, long iters, long warmup) {
        try (Arena arena = Arena.ofShared()) {
            MemorySegment b = arena.allocate(Math.max(1, size), 4096).asSlice(0, size);
            MemorySegment out = arena.allocate(Math.max(1, size), 4096).asSlice(0, size); // sent from, as perftest
            RemoteKey key = null;
            if (api == Api.RMA) {
                command(ep, arena, api, PING_PONG, size, 0, 1);
                key = ep.unpackRemoteKey(ep.recvObject(Duration.ofMinutes(1)));
            } else {
                command(ep, arena, api, PING_PONG, size, iters + warmup, 1);
            }
            for (long i = 0; i < warmup; i++) {
                roundTrip(api, ep, b, out, key);
            }
            RoundTrips times = new RoundTrips(iters, api == Api.RMA ? 1 : 2);
            // like ucx_perftest: one clock read per iteration, each iteration timed from the end of the one before
            long t0 = System.nanoTime();
            for (long i = 0; i < iters; i++) {
                roundTrip(api, ep, b, out, key);
                long t1 = System.nanoTime();
                if (times.add(t1 - t0)) {
                    times.fold();
                    t1 = System.nanoTime();
                }
                t0 = t1;
            }
            if (key != null) {
                key.close();
                ep.send(arena.allocate(8), ACK);
            }
            return times.measurement("ucx4j", size);
        }
    }

    private static void roundTrip(Api api, Endpoint ep, MemorySegment b, MemorySegment out, RemoteKey key) {
        switch (api) {
            case TAG -> {
                ep.send(out, DATA);
                ep.recv(b, DATA);
            }
            case AM, AM_HANDLER -> {
                ep.amSend(EMPTY, out);
                ep.amRecv().close();
            }
            case STREAM -> {
                ep.streamSend(out);
                ep.streamRecv(b);
            }
            case RMA -> ep.get(b, key, 0);
        }
    }

    /** One direction with {@code window} operations outstanding; timed until the receiver acknowledges the last. */
    static Measurement stream(Api api, Ucx ucx, Endpoint ep, String mode, long size, long iters, int window) {
        try (Arena arena = Arena.ofShared();
                MemoryRegion local = api == Api.RMA ? ucx.allocateMemory(Math.max(1, size)) : null) {
            // gets land in UCX-allocated memory, as ucx_perftest's do
            MemorySegment b = (local != null ? local.segment() : arena.allocate(Math.max(1, size), 4096))
                    .asSlice(0, size);
            MemorySegment ack = arena.allocate(8);
            command(ep, arena, api, STREAM, size, iters, window);
            RemoteKey key = api == Api.RMA ? ep.unpackRemoteKey(ep.recvObject(Duration.ofMinutes(1))) : null;
            if (key != null) {
                // untimed: the first touch of both regions' pages (fresh for each pass), as ucx_perftest's warm-up
                // touches its buffers before it measures
                ep.get(b, key, 0);
            }
            @SuppressWarnings("unchecked")
            CompletableFuture<Long>[] ring = new CompletableFuture[window];
            long start = System.nanoTime();
            for (long i = 0; i < iters; i++) {
                int k = (int) (i % window);
                CompletableFuture<Long> prev = ring[k];
                if (prev != null) {
                    await(ucx, prev);
                }
                ring[k] = switch (api) {
                    case TAG -> ep.sendAsync(b, DATA);
                    case AM, AM_HANDLER -> ep.amSendAsync(EMPTY, b);
                    case STREAM -> ep.streamSendAsync(b);
                    case RMA -> ep.getAsync(b, key, 0);
                };
            }
            if (api == Api.RMA) {
                for (CompletableFuture<Long> f : ring) {
                    if (f != null) {
                        await(ucx, f);
                    }
                }
            } else {
                ep.recv(ack, ACK, Duration.ofMinutes(5));
            }
            long elapsed = System.nanoTime() - start;
            if (key != null) {
                key.close();
                ep.send(ack, ACK);
            }
            double perMsgUs = elapsed / 1e3 / iters;
            return new Measurement("ucx4j", mode, size, iters, Double.NaN, Double.NaN, perMsgUs,
                    size * (double) iters / elapsed * 1e3, iters / (elapsed / 1e9));
        }
    }

    /** A transfer that has not completed after this long has stalled (a benchmark never waits forever). */
    static final long STALL_NANOS = java.util.concurrent.TimeUnit.MINUTES.toNanos(2);

    /**
     * Waits for {@code f}: drives the worker in caller-progress mode, otherwise parks while the worker's thread
     * does (spinning here too would put two busy threads in each process on a 2-core machine).
     */
    private static void await(Ucx ucx, CompletableFuture<Long> f) {
        if (f.isDone()) { // most small sends: no clock read (~25 % of an 8 B sender's CPU on a VM's clock source)
            f.join();
            return;
        }
        if (ucx.options().progressMode() != ProgressMode.CALLER) {
            try {
                f.get(STALL_NANOS, java.util.concurrent.TimeUnit.NANOSECONDS);
                return;
            } catch (java.util.concurrent.TimeoutException e) {
                throw stalled();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted", e);
            } catch (java.util.concurrent.ExecutionException e) {
                throw new java.util.concurrent.CompletionException(e.getCause());
            }
        }
        long start = System.nanoTime();
        for (int turns = 0; !f.isDone(); turns++) {
            ucx.progress();
            if ((turns & 0xffff) == 0 && System.nanoTime() - start > STALL_NANOS) {
                throw stalled();
            }
        }
        f.join();
    }

    private static IllegalStateException stalled() {
        return new IllegalStateException("a transfer made no progress for 2 minutes: stalled (UCX settings such as "
                + "a shared-memory segment of 64 KiB or more can do that)");
    }

    private static void command(Endpoint ep, Arena arena, Api api, long mode, long size, long total, int window) {
        MemorySegment cmd = arena.allocate(32);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 0, ((long) api.ordinal() << 4) | mode);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 1, size);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 2, total);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 3, window);
        ep.send(cmd, CTRL);
        if (api == Api.AM_HANDLER && mode != QUIT) {
            ep.recv(arena.allocate(8), ACK, Duration.ofMinutes(1)); // the server's handler is armed for it
        }
    }
}
