package org.ucx4j.internal.engine;

import java.util.Arrays;

/**
 * Per-endpoint traffic counters and the bandwidth of recent large transfers (>= 1 MB). Written only by the worker's
 * owner thread without locks; readers get a possibly slightly stale snapshot.
 * <p>
 * Each large transfer adds one bandwidth figure: the bytes of the last {@value #SPAN} large transfers the same way
 * (itself included) over their service times, where a transfer's service time runs from its start, or from the
 * completion of the previous large transfer the same way if that came later, to its completion. With a window of
 * transfers outstanding, each one's time from its start mostly measures the wait behind the ones before it (32
 * outstanding 1 MiB sends on a 14 GB/s link each showed ~0.4-0.6 GB/s that way); service times measure the link,
 * and summing several absorbs completions that UCX reports together (one such service time alone is near zero).
 * A figure above 1 TB/s (more than {@value #SPAN} completions seen at once, by an owner that did not progress for a
 * while) is left out; the transfer still counts.
 */
public final class PeerStats {
    static final long LARGE = 1_000_000;
    private static final int KEEP = 1024;

    long bytesSent, bytesReceived, messagesSent, messagesReceived;
    private final double[] rates = new double[KEEP]; // MB/s figures of the last KEEP large transfers
    private long large; // large transfers
    private long figures; // figures in rates, ever: written with release, read with acquire
    private static final java.lang.invoke.VarHandle FIGURES;
    static {
        try {
            FIGURES = java.lang.invoke.MethodHandles.lookup().findVarHandle(PeerStats.class, "figures", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }
    /** A figure above this (1 TB/s) is no link's: it is left out. */
    static final double MAX_MB_PER_S = 1e6;
    /** Large transfers summed into one figure. */
    static final int SPAN = 8;
    final Direction out = new Direction(), in = new Direction();

    /** One direction's last {@link #SPAN} large transfers: bytes and service times. */
    static final class Direction {
        long lastDone; // nanoTime of the last large completion; 0: none yet
        final long[] bytes = new long[SPAN], service = new long[SPAN];
        long count, bytesSum, serviceSum;
    }

    void sent(long bytes, long startedAt) {
        bytesSent += bytes;
        messagesSent++;
        if (startedAt != 0 && bytes >= LARGE) {
            record(out, bytes, startedAt, System.nanoTime());
        }
    }

    void received(long bytes, long startedAt) {
        bytesReceived += bytes;
        messagesReceived++;
        if (startedAt != 0 && bytes >= LARGE) {
            record(in, bytes, startedAt, System.nanoTime());
        }
    }

    /** Records a large transfer of {@code bytes} {@code d}'s way, started at {@code startedAt}, done at {@code now}. */
    void record(Direction d, long bytes, long startedAt, long now) {
        long from = d.lastDone != 0 && d.lastDone - startedAt > 0 ? d.lastDone : startedAt;
        long service = Math.max(0, now - from);
        d.lastDone = now;
        large++;
        int k = (int) (d.count++ % SPAN);
        d.bytesSum += bytes - d.bytes[k];
        d.serviceSum += service - d.service[k];
        d.bytes[k] = bytes;
        d.service[k] = service;
        if (d.serviceSum * MAX_MB_PER_S < d.bytesSum * 1e3) {
            return; // faster than any link: completions seen together (a caller that did not progress, a pause)
        }
        long n = figures;
        rates[(int) (n % KEEP)] = d.bytesSum * 1e3 / d.serviceSum;
        FIGURES.setRelease(this, n + 1); // readers see the figure before the count that includes it
    }

    public long bytesSent() {
        return bytesSent;
    }

    public long bytesReceived() {
        return bytesReceived;
    }

    public long messagesSent() {
        return messagesSent;
    }

    public long messagesReceived() {
        return messagesReceived;
    }

    public long largeTransfers() {
        return large;
    }

    /** MB/s at the given quantiles (0..1) over the recent large transfers; NaN when there were none. */
    public double[] bandwidthQuantiles(double... q) {
        int n = (int) Math.min((long) FIGURES.getAcquire(this), KEEP);
        double[] out = new double[q.length];
        if (n == 0) {
            Arrays.fill(out, Double.NaN);
            return out;
        }
        double[] v = Arrays.copyOf(rates, n);
        Arrays.sort(v);
        for (int i = 0; i < q.length; i++) {
            out[i] = v[(int) Math.min(n - 1, Math.max(0, Math.round(q[i] * (n - 1))))];
        }
        return out;
    }
}
