package org.ucx4j.cli;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import org.HdrHistogram.Histogram;
import org.ucx4j.Endpoint;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;

/**
 * The ucx4j side of the sweep: the client sends a command (mode, size, total, window) with tag {@link #CTRL}, the
 * server runs it. In caller progress mode both sides drive their worker themselves, as ucx_perftest does.
 */
final class UcxRuns {
    static final int CTRL = 100, DATA = 1, ACK = 2;
    static final long QUIT = 0, PING_PONG = 1, STREAM = 2;

    private UcxRuns() {}

    /** Serves commands on {@code ep} until QUIT or the peer goes away. */
    static void serve(Ucx ucx, Endpoint ep) {
        try (Arena arena = Arena.ofShared()) {
            MemorySegment cmd = arena.allocate(32);
            MemorySegment ack = arena.allocate(8);
            MemorySegment buf = arena.allocate(64L << 20, 4096);
            while (true) {
                ep.recv(cmd, CTRL, Duration.ofHours(1));
                long mode = cmd.getAtIndex(ValueLayout.JAVA_LONG, 0);
                long size = cmd.getAtIndex(ValueLayout.JAVA_LONG, 1);
                long total = cmd.getAtIndex(ValueLayout.JAVA_LONG, 2);
                int window = (int) cmd.getAtIndex(ValueLayout.JAVA_LONG, 3);
                MemorySegment b = buf.asSlice(0, size);
                if (mode == QUIT) {
                    return;
                } else if (mode == PING_PONG) {
                    for (long i = 0; i < total; i++) {
                        ep.recv(b, DATA);
                        ep.send(b, DATA);
                    }
                } else {
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
                    ep.send(ack, ACK);
                }
            }
        }
    }

    static void quit(Endpoint ep) {
        try (Arena a = Arena.ofConfined()) {
            ep.send(a.allocate(32), CTRL);
        }
    }

    /** Ping-pong: one-way latency is half the round trip. */
    static Measurement latency(Endpoint ep, long size, long iters, long warmup) {
        try (Arena arena = Arena.ofShared()) {
            MemorySegment b = arena.allocate(Math.max(1, size), 4096).asSlice(0, size);
            command(ep, arena, PING_PONG, size, iters + warmup, 1);
            for (long i = 0; i < warmup; i++) {
                ep.send(b, DATA);
                ep.recv(b, DATA);
            }
            Histogram h = new Histogram(3_600_000_000_000L, 3);
            long start = System.nanoTime();
            for (long i = 0; i < iters; i++) {
                long t0 = System.nanoTime();
                ep.send(b, DATA);
                ep.recv(b, DATA);
                h.recordValue((System.nanoTime() - t0) / 2);
            }
            long elapsed = System.nanoTime() - start;
            double meanUs = elapsed / 2.0 / iters / 1e3;
            return new Measurement("ucx4j", Measurement.LATENCY, size, iters, h.getValueAtPercentile(50) / 1e3,
                    h.getValueAtPercentile(99) / 1e3, meanUs, size / meanUs, 1e6 / meanUs);
        }
    }

    /** One direction with {@code window} sends outstanding; timed until the receiver acknowledges the last. */
    static Measurement stream(Ucx ucx, Endpoint ep, String mode, long size, long iters, int window) {
        try (Arena arena = Arena.ofShared()) {
            MemorySegment b = arena.allocate(Math.max(1, size), 4096).asSlice(0, size);
            MemorySegment ack = arena.allocate(8);
            command(ep, arena, STREAM, size, iters, window);
            @SuppressWarnings("unchecked")
            CompletableFuture<Long>[] ring = new CompletableFuture[window];
            long start = System.nanoTime();
            for (long i = 0; i < iters; i++) {
                int k = (int) (i % window);
                CompletableFuture<Long> prev = ring[k];
                if (prev != null) {
                    await(ucx, prev);
                }
                ring[k] = ep.sendAsync(b, DATA);
            }
            ep.recv(ack, ACK, Duration.ofMinutes(5));
            long elapsed = System.nanoTime() - start;
            double perMsgUs = elapsed / 1e3 / iters;
            return new Measurement("ucx4j", mode, size, iters, Double.NaN, Double.NaN, perMsgUs,
                    size * (double) iters / elapsed * 1e3, iters / (elapsed / 1e9));
        }
    }

    /** Waits for {@code f}: drives the worker in caller-progress mode, otherwise spins while its thread does. */
    private static void await(Ucx ucx, CompletableFuture<Long> f) {
        boolean caller = ucx.options().progressMode() == ProgressMode.CALLER;
        while (!f.isDone()) {
            if (caller) {
                ucx.progress();
            } else {
                Thread.onSpinWait();
            }
        }
        f.join();
    }

    private static void command(Endpoint ep, Arena arena, long mode, long size, long total, int window) {
        MemorySegment cmd = arena.allocate(32);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 0, mode);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 1, size);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 2, total);
        cmd.setAtIndex(ValueLayout.JAVA_LONG, 3, window);
        ep.send(cmd, CTRL);
    }
}
