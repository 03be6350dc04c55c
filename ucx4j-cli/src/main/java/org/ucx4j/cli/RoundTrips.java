package org.ucx4j.cli;

import org.HdrHistogram.Histogram;

/**
 * A ping-pong's per-iteration times, kept as {@code ucx_perftest} keeps its own: between two round trips only the
 * clock is read and the difference stored in an array; the histogram is filled after the loop (or when the array is
 * full, outside any timed iteration), so a Java stack pays no histogram work inside its timed iterations.
 */
final class RoundTrips {
    private static final int BATCH = 1 << 16;

    private final Histogram histogram = new Histogram(3_600_000_000_000L, 3);
    private final long[] times;
    private final int divisor;
    private int held;
    private long count;
    private long total;

    /** {@code divisor}: 2 when a round trip is two one-way trips, 1 when it is the operation timed (a get). */
    RoundTrips(long iters, int divisor) {
        this.times = new long[(int) Math.max(1, Math.min(iters, BATCH))];
        this.divisor = divisor;
    }

    /**
     * Keeps one iteration's time; true when the array is full, and the caller should {@link #fold()} before it
     * reads the clock for the next iteration.
     */
    boolean add(long nanos) {
        times[held++] = nanos;
        return held == times.length;
    }

    /** Moves the kept times into the histogram. */
    void fold() {
        for (int i = 0; i < held; i++) {
            histogram.recordValue(times[i]);
            total += times[i];
        }
        count += held;
        held = 0;
    }

    /** The figures of every iteration added, one-way (each round trip over the divisor). */
    Measurement measurement(String stack, long size) {
        fold();
        double meanUs = total / (double) divisor / Math.max(1, count) / 1e3;
        return new Measurement(stack, Measurement.LATENCY, size, count,
                histogram.getValueAtPercentile(50) / (double) divisor / 1e3,
                histogram.getValueAtPercentile(99) / (double) divisor / 1e3, meanUs, size / meanUs, 1e6 / meanUs);
    }
}
