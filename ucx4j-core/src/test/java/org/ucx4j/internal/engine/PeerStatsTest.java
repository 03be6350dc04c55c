package org.ucx4j.internal.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * The per-peer bandwidth of a large transfer is its size over the time it had its direction to itself: a window of
 * transfers posted together measures the link (the gaps between completions), not each one's wait behind the others.
 */
class PeerStatsTest {
    private static final long MS = 1_000_000;

    @Test
    void aWindowPostedAtOnceMeasuresTheGapsBetweenCompletions() {
        PeerStats s = new PeerStats();
        long t0 = 1_000 * MS;
        // four 1 MB sends posted at t0 on a 1000 MB/s link: done 1, 2, 3, 4 ms later
        for (int i = 1; i <= 4; i++) {
            s.record(s.out, 1_000_000, t0, t0 + i * MS);
        }
        assertEquals(4, s.largeTransfers());
        assertArrayEquals(new double[] {1000, 1000, 1000}, s.bandwidthQuantiles(0.25, 0.5, 0.75), 1e-6,
                "from post to completion they would have read 1000, 500, 333 and 250 MB/s");
    }

    @Test
    void aTransferAfterAnIdleGapCountsItsWholeTime() {
        PeerStats s = new PeerStats();
        long t0 = 1_000 * MS;
        s.record(s.in, 2_000_000, t0, t0 + 2 * MS); // 1000 MB/s
        // posted 5 s after the first completed, took 6 ms: the two together 4 MB in 8 ms, not over 5 s
        long start = t0 + 2 * MS + 5_000 * MS;
        s.record(s.in, 2_000_000, start, start + 6 * MS);
        assertArrayEquals(new double[] {500, 1000}, s.bandwidthQuantiles(0, 1), 1e-6);
    }

    @Test
    void completionsReportedTogetherAreAveragedNotCountedAsInfinitelyFast() {
        PeerStats s = new PeerStats();
        long t0 = 1_000 * MS;
        // eight 1 MB receives posted at t0 on a 1000 MB/s link, reported in pairs: done at 2, 2, 4, 4, 6, 6, 8, 8 ms
        for (int i = 0; i < 8; i++) {
            s.record(s.in, 1_000_000, t0, t0 + (i / 2 + 1) * 2 * MS);
        }
        double[] q = s.bandwidthQuantiles(0, 0.5, 1);
        assertEquals(1000, q[2], 1e-6, "the span of eight: 8 MB in 8 ms");
        assertTrue(q[2] < 1_100 && q[0] >= 500, java.util.Arrays.toString(q));
    }

    @Test
    void aBurstOfCompletionsSeenAtOnceGivesNoFigureFasterThanAnyLink() {
        PeerStats s = new PeerStats();
        long t0 = 1_000 * MS;
        // twenty 1 MB transfers posted at t0, all seen done at t0 + 20 ms (an owner that did not progress meanwhile):
        // after the first, each has no service time of its own, and eight of those would read ~1e12 MB/s
        for (int i = 0; i < 20; i++) {
            s.record(s.in, 1_000_000, t0, t0 + 20 * MS);
        }
        assertEquals(20, s.largeTransfers(), "every transfer counts");
        double[] q = s.bandwidthQuantiles(0, 1);
        assertTrue(q[1] <= PeerStats.MAX_MB_PER_S, java.util.Arrays.toString(q));
        assertTrue(q[0] >= 50, "the first eight: 8 MB over 20 ms and more " + java.util.Arrays.toString(q));
    }

    @Test
    void eachDirectionHasItsOwnCompletions() {
        PeerStats s = new PeerStats();
        long t0 = 1_000 * MS;
        s.record(s.out, 1_000_000, t0, t0 + MS); // 1000 MB/s out
        s.record(s.in, 1_000_000, t0, t0 + 4 * MS); // 250 MB/s in: the send's completion is not its start
        assertArrayEquals(new double[] {250, 1000}, s.bandwidthQuantiles(0, 1), 1e-6);
    }
}
