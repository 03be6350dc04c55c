package org.ucx4j.internal.engine;

import java.util.Arrays;

/**
 * Per-endpoint traffic counters and the bandwidth of recent large transfers (>= 1 MB). Written only by the worker's
 * owner thread without locks; readers get a possibly slightly stale snapshot.
 */
public final class PeerStats {
    static final long LARGE = 1_000_000;
    private static final int KEEP = 1024;

    long bytesSent, bytesReceived, messagesSent, messagesReceived;
    private final double[] rates = new double[KEEP]; // MB/s of the last KEEP large transfers
    private long large;

    void sent(long bytes, long startedAt) {
        bytesSent += bytes;
        messagesSent++;
        rate(bytes, startedAt);
    }

    void received(long bytes, long startedAt) {
        bytesReceived += bytes;
        messagesReceived++;
        rate(bytes, startedAt);
    }

    private void rate(long bytes, long startedAt) {
        if (startedAt != 0 && bytes >= LARGE) {
            long ns = Math.max(1, System.nanoTime() - startedAt);
            rates[(int) (large++ % KEEP)] = bytes * 1e3 / ns;
        }
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
        int n = (int) Math.min(large, KEEP);
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
