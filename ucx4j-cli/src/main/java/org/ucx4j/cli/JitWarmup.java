package org.ucx4j.cli;

import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;
import java.util.concurrent.TimeUnit;

/**
 * Warm-up until the JIT has gone quiet: repeats a pass for at least a minimum time and until no compilation finished
 * in this JVM for {@link #QUIET_NANOS} ({@link CompilationMXBean}), at most for a maximum time. With two busy
 * processes on two cores the compiler threads get little CPU, and a fixed warm-up (200 ms, or 10000 ping-pongs)
 * left the hot paths, and the timed loop itself, interpreted or in C1 code when measuring began: the first
 * measurement ran 10-30 % slow (8 B ping-pong 0.29-0.31 us where later rounds gave 0.25 us; the first bandwidth
 * point at about half the rate of later ones). A peer process running the same traffic settles alongside.
 */
final class JitWarmup {
    static final long QUIET_NANOS = TimeUnit.MILLISECONDS.toNanos(150);
    static final long MAX_NANOS = TimeUnit.SECONDS.toNanos(2);

    private JitWarmup() {}

    interface Pass {
        void run() throws Exception;
    }

    /** Runs {@code pass} at least once and for at least {@code minNanos}, then until quiet or {@code maxNanos}. */
    static void run(Pass pass, long minNanos, long maxNanos) throws Exception {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        boolean watch = jit != null && jit.isCompilationTimeMonitoringSupported();
        long start = System.nanoTime(), quietSince = start;
        long compiled = watch ? jit.getTotalCompilationTime() : 0;
        long now;
        do {
            pass.run();
            now = System.nanoTime();
            long c = watch ? jit.getTotalCompilationTime() : 0;
            if (c != compiled) {
                compiled = c;
                quietSince = now;
            }
        } while (now - start < maxNanos && (now - start < minNanos || (watch && now - quietSince < QUIET_NANOS)));
    }
}
