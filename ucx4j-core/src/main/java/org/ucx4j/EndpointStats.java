package org.ucx4j;

/**
 * Traffic on one endpoint so far: bytes and messages each way (completed operations), and the bandwidth of recent
 * transfers of at least 1 MB (10^6 B) at the 25th, 50th and 75th percentile in MB/s — what the Dask authors wanted
 * to "learn bandwidth between peers". Bandwidth figures are NaN until such a transfer completed. The bytes of a get
 * count as received and those of a put as sent (they cross the link that way), though {@link
 * Endpoint#closeAfterReceives} counts neither; the quantiles mix both directions (one set per endpoint, as the seed's
 * per-peer table has).
 * <p>
 * Each transfer of at least 1 MB adds one figure: the bytes of the last 8 such transfers the same way (itself
 * included) over the sum of their service times. A transfer's service time runs from its start (a send or receive
 * posted, an active-message pull begun), or from the completion of the large transfer before it the same way if that
 * came later, to its completion: a transfer that found the link idle counts its whole time; one of a window of
 * outstanding transfers counts the gap since the one before it completed, not its wait behind the others (until the
 * tenth session each figure was one transfer's size over its time from its start: with 32 sends of 1 MiB
 * outstanding, about a 32nd of the link's bandwidth). A figure above 1 TB/s (completions seen together by an owner
 * that had not progressed for a while) is left out, though its transfer still counts in {@code largeTransfers}; the
 * quantiles are taken over the last 1024 figures.
 *
 * @param peer the peer, as {@link Endpoint#remoteAddress()} names it
 * @param bytesSent bytes sent (sends, puts)
 * @param bytesReceived bytes received (receives, active messages, gets)
 * @param messagesSent completed operations that sent
 * @param messagesReceived completed operations that received
 * @param largeTransfers transfers of at least 1 MB timed for the bandwidth figures, both ways
 * @param p25MBps the 25th percentile of the bandwidth figures in MB/s, or NaN
 * @param p50MBps the median of the bandwidth figures in MB/s, or NaN
 * @param p75MBps the 75th percentile of the bandwidth figures in MB/s, or NaN
 */
public record EndpointStats(String peer, long bytesSent, long bytesReceived, long messagesSent, long messagesReceived,
        long largeTransfers, double p25MBps, double p50MBps, double p75MBps) implements java.io.Serializable {

    /** {@return a one-line summary like the seed's per-peer table: {@code 25% 50% 75% (total bytes)}} */
    public String summary() {
        if (Double.isNaN(p50MBps)) {
            return "- - - (" + (bytesSent + bytesReceived) + " bytes; no transfer >= 1 MB)";
        }
        return String.format(java.util.Locale.ROOT, "%.0f MB/s %.0f MB/s %.0f MB/s (%d bytes)", p25MBps, p50MBps,
                p75MBps, bytesSent + bytesReceived);
    }
}
